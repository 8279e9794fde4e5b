"""A model and workload's step at any batch size, from three batch sizes counted.

A step's counts grow with its batch the way they grow with depth: the activations, the
FLOPs and the bytes of every operator by the same amount per sample, the weights read, the
optimizer's update and the kernel launches by nothing. A process keeps the three largest
batch sizes it has counted for one model and workload (all else the same); once it has
three, and they lie on one line (:func:`profiles.line.carried`) and the memory peak they
show cannot move (:func:`profiles.line.peaks_stay`), a batch size from the smallest of them
up is carried along that line instead of counted. Anything else is counted as before.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from dataclasses import replace

from profiles.line import carried
from profiles.resolved import ResolvedModel
from profiles.step import Measured
from profiles.workload import Workload

KEPT = 3  # batch sizes counted and kept per line
LINES = 64  # models and workloads a process keeps the counts of (least recently used out)


def line_key(model: ResolvedModel, workload: Workload) -> tuple[str, str, str] | None:
    """What the step depends on but the batch size (and the dataset, which only scales the
    job): steps with the same key lie on one line. None for a model whose counts can bend
    beyond three batch sizes on a line: anything but a dense transformer (a mixture of
    experts touches min(experts, top-k x tokens) of them; a detector's peak moves by a few
    kilobytes between batch sizes)."""
    if model.family != "transformer" or model.spec.moe_experts:
        return None
    same = replace(workload, batch_size=1, dataset_samples=None, dataset_tokens=None, epochs=1.0)
    return (model.family, repr(model.spec), repr(same))


class Lines:
    """The counted steps of the most recently used models and workloads, by batch size."""

    def __init__(self, size: int = LINES) -> None:
        self._size = size
        self._lines: OrderedDict[tuple[str, str, str], dict[int, Measured]] = OrderedDict()
        self._lock = threading.Lock()

    def at(self, key: tuple[str, str, str], batch: int) -> Measured | None:
        """The step at ``batch`` carried along the line, or None where it must be counted."""
        with self._lock:
            points = self._lines.get(key)
            if points is None:
                return None
            self._lines.move_to_end(key)
            sizes = sorted(points)
            found = [points[b] for b in sizes]
        if len(found) < KEPT or batch < sizes[0]:
            return None
        return carried(found, sizes, batch)

    def add(self, key: tuple[str, str, str], batch: int, measured: Measured) -> None:
        """Keep a counted step: the :data:`KEPT` largest batch sizes counted of a line (the
        smallest can differ, as a batch of one where a reduction over it drops out)."""
        with self._lock:
            points = self._lines.setdefault(key, {})
            self._lines.move_to_end(key)
            points[batch] = measured
            while len(points) > KEPT:
                del points[min(points)]
            while len(self._lines) > self._size:
                self._lines.popitem(last=False)

    def clear(self) -> None:
        with self._lock:
            self._lines.clear()
