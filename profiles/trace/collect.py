"""One pass over a trace's events, keeping only what the analysis needs, in compact arrays.

GPU activities (kernels, memcpys, memsets) and runtime launch calls are kept as columns of
``array('d')`` / ``array('q')`` (a few tens of bytes per event), so a trace of millions of
events stays small in memory; CPU spans are kept only for step markers, data-loader work
and synchronisation calls.
"""

from __future__ import annotations

import re
from array import array
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from profiles.trace.kinds import KINDS, classify_copy, classify_kernel

KIND_INDEX = {k: i for i, k in enumerate(KINDS)}
PRECISIONS = ("tf32", "16-bit", "fp8", "int8", "fp32")
GPU_CATEGORIES = {"kernel", "gpu_memcpy", "gpu_memset", "Kernel", "Memcpy", "Memset"}
RUNTIME_CATEGORIES = {"cuda_runtime", "cuda_driver", "Runtime", "hip_runtime"}
SYNC = re.compile(r"(Device|Stream|Event)Synchronize|^cudaMemcpy$|cudaMemcpy(2D)?$|hipDeviceSync")
LOADER = re.compile(
    r"DataLoader|dataloader|_MultiProcessingDataLoaderIter|__next__|data_loader", re.IGNORECASE
)
STEP = re.compile(r"^ProfilerStep#(\d+)$")


@dataclass
class Collected:
    """The raw material of the analysis, in compact columns."""

    gpu_start: array[float] = field(default_factory=lambda: array("d"))
    gpu_end: array[float] = field(default_factory=lambda: array("d"))
    gpu_kind: array[int] = field(default_factory=lambda: array("b"))
    gpu_precision: array[int] = field(default_factory=lambda: array("b"))
    gpu_correlation: array[int] = field(default_factory=lambda: array("q"))
    gpu_device: array[int] = field(default_factory=lambda: array("q"))
    gpu_bytes: array[float] = field(default_factory=lambda: array("d"))
    gpu_external: array[int] = field(default_factory=lambda: array("q"))
    launch_start: array[float] = field(default_factory=lambda: array("d"))
    launch_correlation: array[int] = field(default_factory=lambda: array("q"))
    steps: list[tuple[str, float, float]] = field(default_factory=list)
    markers: list[tuple[str, float, float]] = field(default_factory=list)
    loader: list[tuple[float, float]] = field(default_factory=list)
    sync: list[tuple[float, float]] = field(default_factory=list)
    flops_by_external: dict[int, float] = field(default_factory=dict)
    memory_peak: dict[int, float] = field(default_factory=dict)
    kernel_names: dict[str, int] = field(default_factory=dict)
    cpu_ops: int = 0
    events: int = 0


class Collector:
    """Feed events with :meth:`add`; ``collected`` holds the columns."""

    def __init__(self, marker: str | None = None, max_flop_ops: int = 1_000_000) -> None:
        self.collected = Collected()
        self.marker = marker
        self.max_flop_ops = max_flop_ops
        self._cpu_names: dict[str, int] = {}  # name -> 0 other, 1 step, 2 marker, 3 loader
        self._sync_names: dict[str, bool] = {}

    def add_all(self, events: Iterable[dict[str, Any]]) -> Collected:
        """Take every event (the hot loop of trace reading: locals bound once)."""
        c = self.collected
        gpu, runtime = GPU_CATEGORIES, RUNTIME_CATEGORIES
        sync_names, sync_search = self._sync_names, SYNC.search
        launch_start, launch_correlation = c.launch_start.append, c.launch_correlation.append
        count = 0
        for event in events:
            count += 1
            get = event.get
            if get("ph") != "X":
                if get("name") == "[memory]":
                    self._memory(event)
                continue
            category = get("cat")
            try:
                start, duration = float(event["ts"]), float(get("dur", 0.0))
            except (KeyError, TypeError, ValueError):
                continue
            if category in runtime:
                args = get("args")
                correlation = args.get("correlation") if args else None
                if correlation.__class__ is int:
                    launch_start(start)
                    launch_correlation(correlation)
                name = get("name", "")
                is_sync = sync_names.get(name)
                if is_sync is None:
                    is_sync = sync_names[name] = bool(sync_search(str(name)))
                if is_sync:
                    c.sync.append((start, start + duration))
            elif category in gpu:
                self._gpu(event, category, start, duration)
            else:
                self._cpu(event, str(get("name", "")), start, duration)
        c.events += count
        return c

    def add(self, event: dict[str, Any]) -> None:
        self.add_all((event,))

    def _gpu(self, event: dict[str, Any], category: str, start: float, duration: float) -> None:
        c = self.collected
        name = str(event.get("name", ""))
        args = event.get("args") or {}
        if category in ("kernel", "Kernel"):
            kind, precision = classify_kernel(name)
            c.kernel_names[name] = c.kernel_names.get(name, 0) + 1
        else:
            kind, precision = (
                classify_copy("gpu_memset" if "set" in category.lower() else "gpu_memcpy", name),
                None,
            )
        c.gpu_start.append(start)
        c.gpu_end.append(start + duration)
        c.gpu_kind.append(KIND_INDEX[kind])
        c.gpu_precision.append(PRECISIONS.index(precision) if precision else -1)
        c.gpu_correlation.append(_int(args.get("correlation")))
        c.gpu_device.append(_int(args.get("device")))
        c.gpu_bytes.append(float(args.get("bytes") or 0.0))
        c.gpu_external.append(_int(args.get("External id")))

    def _cpu(self, event: dict[str, Any], name: str, start: float, duration: float) -> None:
        c = self.collected
        if event.get("cat") == "cpu_op":
            c.cpu_ops += 1
        code = self._cpu_names.get(name)
        if code is None:
            code = self._cpu_names[name] = self._cpu_code(name)
        if code == 1:
            c.steps.append((name, start, start + duration))
        elif code == 2:
            c.markers.append((name, start, start + duration))
        elif code == 3:
            c.loader.append((start, start + duration))
        args = event.get("args")
        if args and "flops" in args and len(c.flops_by_external) < self.max_flop_ops:
            external = _int(args.get("External id"))
            if external >= 0:
                c.flops_by_external[external] = float(args["flops"])

    def _cpu_code(self, name: str) -> int:
        if STEP.match(name):
            return 1
        if self.marker is not None and name.startswith(self.marker):
            return 2
        return 3 if LOADER.search(name) else 0

    def _memory(self, event: dict[str, Any]) -> None:
        args = event.get("args") or {}
        device = _int(args.get("Device Id"))
        total = args.get("Total Allocated")
        on_gpu = args.get("Device Type") not in (0, None)  # 0 is the CPU
        if on_gpu and device >= 0 and isinstance(total, (int, float)):
            peaks = self.collected.memory_peak
            peaks[device] = max(peaks.get(device, 0.0), float(total))


def _int(value: Any) -> int:
    return value if isinstance(value, int) and not isinstance(value, bool) else -1
