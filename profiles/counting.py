"""Count what one step does, op by op: FLOPs, bytes read and written, live memory.

:class:`StepCounter` is a ``TorchDispatchMode``: every aten op that reaches it (on the
meta device, so nothing is computed) is classified into a kind and charged its FLOPs and
the bytes of its inputs and outputs. It also follows every tensor storage from creation to
release (weak references: meta tensors die exactly when real ones would), so the peak of
live bytes within the step is measured, not guessed. One known difference: under a Python
dispatch mode autograd no longer sums several gradients of one tensor in place, so where a
weight gets many (slices of one tied table) the count can hold a buffer or two of that
weight's size more than a real run does (+6 % in the adaptive-softmax real-step test).
"""

from __future__ import annotations

import gc
import time
import weakref
from collections import defaultdict
from dataclasses import dataclass
from typing import Any

import torch
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_flatten
from torch.utils.flop_counter import flop_registry

from profiles import interrupt

aten = torch.ops.aten

KINDS = (
    "matmul",
    "attention",
    "convolution",
    "elementwise",
    "normalisation",
    "reduction",
    "embedding",
    "communication",
)

# Ops that only re-describe memory: no FLOPs, no traffic.
_VIEWS = {
    aten.view,
    aten._unsafe_view,
    aten.t,
    aten.transpose,
    aten.permute,
    aten.expand,
    aten.as_strided,
    aten.slice,
    aten.select,
    aten.unsqueeze,
    aten.squeeze,
    aten.detach,
    aten.alias,
    aten.split,
    aten.split_with_sizes,
    aten.unbind,
    aten.chunk,
    aten.reshape,
    aten.lift_fresh,
    aten.view_as_real,
    aten.view_as_complex,
    aten.diagonal,
    aten.unfold,
    aten._reshape_alias,
    aten.narrow,
}
_MATMUL = {aten.mm, aten.addmm, aten.bmm, aten.baddbmm, aten._scaled_mm}
_ATTENTION = {
    aten._scaled_dot_product_flash_attention,
    aten._scaled_dot_product_flash_attention_backward,
    aten._scaled_dot_product_efficient_attention,
    aten._scaled_dot_product_efficient_attention_backward,
    aten._scaled_dot_product_flash_attention_for_cpu,
    aten._scaled_dot_product_flash_attention_for_cpu_backward,
}
_CAUSAL_FLASH = {
    aten._scaled_dot_product_flash_attention: 4,  # position of is_causal in the schema
    aten._scaled_dot_product_flash_attention_backward: 11,
}
_CONV = {aten.convolution, aten.convolution_backward, aten._convolution}
_NORM = {
    aten.native_layer_norm,
    aten.native_layer_norm_backward,
    aten.native_batch_norm,
    aten.native_batch_norm_backward,
    aten._native_batch_norm_legit,
    aten._native_batch_norm_legit_no_training,
    aten._native_batch_norm_legit_functional,
    aten.native_group_norm,
    aten.native_group_norm_backward,
    aten._fused_rms_norm,
    aten._fused_rms_norm_backward,
    aten.cudnn_batch_norm,
    aten.cudnn_batch_norm_backward,
}
_REDUCTION = {
    aten.sum,
    aten.mean,
    aten.amax,
    aten.amin,
    aten.max,
    aten.min,
    aten._softmax,
    aten._softmax_backward_data,
    aten._log_softmax,
    aten._log_softmax_backward_data,
    aten.nll_loss_forward,
    aten.nll_loss_backward,
    aten.argmax,
    aten.topk,
    aten.var_mean,
    aten.norm,
    aten.linalg_vector_norm,
    aten.cumsum,
    aten.sort,
}
_EMBEDDING = {
    aten.embedding,
    aten.embedding_dense_backward,
    aten.index_select,
    aten.gather,
    aten.scatter_add,
    aten.index_add,
    aten.index,
    aten.index_put,
    aten._embedding_bag,
    aten._embedding_bag_backward,
    aten._embedding_bag_dense_backward,
}
# Kernels a real recurrence launches per time step, layer and direction, in forward and
# again in backward: cuDNN's LSTM/GRU runs a recurrent GEMM and a fused gate kernel per step
# (the input projections of all steps are one GEMM, counted as dispatched).
KERNELS_PER_TIME_STEP = 2
# Per-element FLOPs charged to ops that FLOP formulas do not cover (a stated approximation).
_PER_ELEMENT = {"normalisation": 5.0, "reduction": 2.0, "elementwise": 1.0, "embedding": 0.0}
_NO_WORK = {aten.empty, aten.empty_like, aten.empty_strided, aten.new_empty, aten.zeros_like}


def classify(func: Any) -> str:
    """The kind of an aten op (by overload packet)."""
    packet = func._overloadpacket
    for kind, ops in (
        ("matmul", _MATMUL),
        ("attention", _ATTENTION),
        ("convolution", _CONV),
        ("normalisation", _NORM),
        ("reduction", _REDUCTION),
        ("embedding", _EMBEDDING),
    ):
        if packet in ops:
            return kind
    return "elementwise"


@dataclass
class Totals:
    """What ops of one (phase, kind) did, summed. ``weight_bytes_read`` is the part of
    ``bytes_read`` that read parameters (so a quantised width can be applied later)."""

    flops: float = 0.0
    bytes_read: float = 0.0
    bytes_written: float = 0.0
    weight_bytes_read: float = 0.0
    ops: int = 0

    @property
    def bytes(self) -> float:
        return self.bytes_read + self.bytes_written


def _tensors(tree: Any) -> list[torch.Tensor]:
    leaves, _ = tree_flatten(tree)
    return [t for t in leaves if isinstance(t, torch.Tensor)]


def _nbytes(t: torch.Tensor) -> int:
    return t.numel() * t.element_size()


class ProfileTimeout(RuntimeError):
    """The step ran past its deadline; raised from inside the counted op."""


class StepCounter(TorchDispatchMode):
    """Charge each op to ``(phase, kind)``; log each storage's birth and death.

    Set ``phase`` between the parts of a step. ``weights`` holds the storage keys of the
    parameters: they are not followed (they are accounted for separately) and reading
    them is tallied apart. ``deadline`` (a ``time.monotonic()`` value) stops a run that
    takes too long.
    """

    def __init__(self, weights: set[int] | None = None, deadline: float | None = None) -> None:
        super().__init__()
        self.phase = "forward"
        self.totals: dict[tuple[str, str], Totals] = defaultdict(Totals)  # (phase, kind)
        self.by_op: dict[tuple[str, str], Totals] = defaultdict(Totals)  # (phase, aten op)
        self.weights = weights or set()
        self.deadline = deadline
        self.stepped: dict[str, int] = defaultdict(int)  # phase -> per-time-step kernels
        self.events: list[tuple[int, int]] = []  # (serial, +bytes at birth / -bytes at death)
        self.marks: dict[str, int] = {}
        self._live: dict[int, list[int]] = {}  # storage address -> [serial, tensors alive]

    def recurrence(self, steps: int) -> None:
        """A recurrence run side by side that a real run steps through: ``steps`` time
        steps (times layers and directions), each launching its own kernels, in this phase
        and, when it will be differentiated, again in backward."""
        self.stepped[self.phase] += KERNELS_PER_TIME_STEP * steps
        if self.phase == "forward" and torch.is_grad_enabled():
            self.stepped["backward"] += KERNELS_PER_TIME_STEP * steps

    def launches(self) -> dict[str, int]:
        """Kernels launched per phase: every dispatched op that does work (views and empty
        allocations launch none) plus the per-time-step kernels of recurrences."""
        out: dict[str, int] = defaultdict(int)
        for (phase, _), total in self.totals.items():
            out[phase] += total.ops
        for phase, n in self.stepped.items():
            out[phase] += n
        return dict(out)

    def mark(self, name: str) -> None:
        """Remember the current point of the event log (e.g. ``end-of-forward``).

        Garbage in reference cycles is collected first, so that what is alive at a mark
        does not depend on when the cyclic collector last ran. Only what was made since the
        counter started is scanned (the rest is frozen): in a service whose heap holds the
        knowledge base, a full collection was half the time of a profile.
        """
        gc.collect()
        self.marks[name] = len(self.events)

    def __enter__(self) -> StepCounter:
        self._gc_was_enabled = gc.isenabled()
        gc.disable()  # collect only at marks: the log must not depend on GC timing
        gc.freeze()  # and then scan only the objects the step makes
        super().__enter__()
        return self

    def __exit__(self, *exc: object) -> None:
        super().__exit__(*exc)
        gc.unfreeze()
        if self._gc_was_enabled:
            gc.enable()

    def __torch_dispatch__(self, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
        kwargs = kwargs or {}
        if self.deadline is not None and (
            time.monotonic() > self.deadline or interrupt.requested()
        ):
            raise ProfileTimeout("the profile ran past its time limit")
        out = func(*args, **kwargs)
        packet = func._overloadpacket
        outputs = _tensors(out)
        if packet not in _VIEWS and packet not in _NO_WORK:
            self._charge(func, packet, args, kwargs, out, outputs)
        self._follow(outputs)
        return out

    def _charge(
        self, func: Any, packet: Any, args: Any, kwargs: Any, out: Any, outputs: list[torch.Tensor]
    ) -> None:
        kind = classify(func)
        read = weight_read = 0
        for t in _tensors((args, kwargs)):
            n = _nbytes(t)
            read += n
            if t.untyped_storage()._cdata in self.weights:
                weight_read += n
        written = sum(_nbytes(t) for t in outputs)
        formula = flop_registry.get(packet)
        if formula is None:
            flops = _PER_ELEMENT.get(kind, 1.0) * (outputs[0].numel() if outputs else 0)
        else:
            flops = float(formula(*args, **kwargs, out_val=out))
            causal_at = _CAUSAL_FLASH.get(packet)
            if causal_at is not None and _arg(args, kwargs, causal_at, "is_causal"):
                flops /= 2  # flash kernels skip the blocks a causal mask removes
        for total in (self.totals[(self.phase, kind)], self.by_op[(self.phase, str(packet))]):
            total.ops += 1
            total.flops += flops
            total.bytes_read += read
            total.weight_bytes_read += weight_read
            total.bytes_written += written

    def _follow(self, outputs: list[torch.Tensor]) -> None:
        for t in outputs:
            storage = t.untyped_storage()
            key = storage._cdata
            if key in self.weights:
                continue
            entry = self._live.get(key)
            if entry is None:  # a new storage: give it a serial (addresses get reused)
                entry = self._live[key] = [len(self.events), 0]
                self.events.append((entry[0], storage.nbytes()))
            entry[1] += 1
            weakref.finalize(t, self._release, key, storage.nbytes())

    def _release(self, key: int, nbytes: int) -> None:
        entry = self._live[key]
        entry[1] -= 1
        if entry[1] == 0:
            del self._live[key]
            self.events.append((entry[0], -nbytes))

    def serial(self, t: torch.Tensor) -> int | None:
        """The serial of the live storage behind ``t`` (None if not followed)."""
        entry = self._live.get(t.untyped_storage()._cdata)
        return entry[0] if entry else None

    def live_curve(
        self, exclude: set[int], start: str | None = None, end: str | None = None
    ) -> tuple[int, int]:
        """(live bytes at ``end``, peak live bytes between ``start`` and ``end``), leaving
        out the storages whose serials are in ``exclude`` (e.g. gradients)."""
        first = self.marks[start] if start else 0
        last = self.marks[end] if end else len(self.events)
        live = peak = 0
        for i, (serial, delta) in enumerate(self.events[:last]):
            if serial in exclude:
                continue
            live += delta
            if i >= first:
                peak = max(peak, live)
        return live, peak


def _arg(args: Any, kwargs: Any, index: int, name: str) -> Any:
    if name in kwargs:
        return kwargs[name]
    return args[index] if len(args) > index else False
