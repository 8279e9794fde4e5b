"""Run one real training step of the profiler's own module and measure its peak memory.

The check on :mod:`profiles.step`'s counting: the module the profiler builds for a
description is materialised on a real device (``to_empty``, then random weights), given
the workload's optimizer, and trained for one step with the same inputs, loss and context.
The peak is read from the allocator, not from tensors: torch.profiler's memory events
record every block the allocator hands out and takes back, and the profile starts before
the weights exist, so their running total is every byte the step holds.

The optimizer's states are created first (one update from zero gradients), so the measured
step is a steady one: states alive from the start, gradients written during backward and
freed by ``zero_grad(set_to_none=True)`` after the update, as from a run's second step on.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from typing import Any

import torch
from torch._C._profiler import _EventType
from torch.profiler import ProfilerActivity, record_function
from torch.profiler import profile as allocator_profile

from profiles.models.runnable import Runnable
from profiles.models.transformer import StepContext
from profiles.workload import Workload

_STEP = "rightsize-measured-step"


@dataclass(frozen=True)
class MeasuredPeak:
    """Allocator bytes: at the measured step's start (weights, states) and at its peak."""

    start_bytes: int
    peak_bytes: int


def optimizer_for(name: str, params: Iterable[torch.Tensor]) -> torch.optim.Optimizer:
    """The workload's optimizer as fused kernels run it (what :mod:`profiles.optimizers`
    accounts: no temporaries beside the states)."""
    params = list(params)
    if name == "adamw":
        return torch.optim.AdamW(params, lr=1e-4, fused=True)
    if name == "adam":
        return torch.optim.Adam(params, lr=1e-4, fused=True)
    if name == "sgd":
        return torch.optim.SGD(params, lr=1e-2, fused=True)
    if name == "sgd+momentum":
        return torch.optim.SGD(params, lr=1e-2, momentum=0.9, fused=True)
    raise ValueError(f"no real-step check for optimizer {name!r}")


def _walk(nodes: Iterable[Any]) -> Iterator[Any]:
    for node in nodes:
        yield node
        yield from _walk(node.children)


def _materialise(runnable: Runnable, workload: Workload, device: str) -> torch.optim.Optimizer:
    """Weights on ``device``, and the optimizer with its states already made."""
    module = runnable.module.to_empty(device=device)
    with torch.no_grad():
        for p in module.parameters():
            p.uniform_(-0.02, 0.02)
    params = [p for p in module.parameters() if p.requires_grad]
    optimizer = optimizer_for(workload.optimizer or "adamw", params)
    for p in params:
        p.grad = torch.zeros_like(p)
    optimizer.step()  # creates the states
    optimizer.zero_grad(set_to_none=True)
    return optimizer


def _step(runnable: Runnable, workload: Workload, optimizer: torch.optim.Optimizer) -> None:
    ctx = StepContext(workload.attention, workload.activation_checkpointing)
    loss = runnable.loss(runnable.inputs(workload), ctx)
    ctx.release()
    loss.backward()
    del loss
    optimizer.step()
    optimizer.zero_grad(set_to_none=True)


def allocator_peak(run: Callable[[], Any], device: str = "cpu") -> MeasuredPeak:
    """The CPU allocator's bytes alive before ``run`` and at its peak (torch.profiler's
    memory events, as :func:`real_step_peak` reads them), for checks of what a piece of
    code holds."""
    with (
        allocator_profile(activities=[ProfilerActivity.CPU], profile_memory=True) as prof,
        record_function(_STEP),
    ):
        run()
    return _peak(prof, device)


def _peak(prof: Any, device: str) -> MeasuredPeak:
    nodes = list(_walk(prof.profiler.kineto_results.experimental_event_tree()))
    step = next(n for n in nodes if n.name == _STEP)
    events = sorted(
        (n.start_time_ns, n.extra_fields.ptr, n.extra_fields.alloc_size)
        for n in nodes
        if n.tag == _EventType.Allocation and str(n.extra_fields.device).startswith(device)
    )
    # The running total of the blocks allocated since the profile began (the allocator's
    # own "Total Allocated" also carries blocks of earlier profiles freed in between).
    live, start, peak = 0, 0, 0
    sizes: dict[int, int] = {}
    for t, ptr, size in events:
        if t > step.end_time_ns:
            break
        if size > 0:
            sizes[ptr] = size
            live += size
        elif ptr in sizes:
            live -= sizes.pop(ptr)
        if t < step.start_time_ns:
            start = live
        else:
            peak = max(peak, live)
    return MeasuredPeak(start_bytes=start, peak_bytes=max(start, peak))


def real_step_peak(runnable: Runnable, workload: Workload, device: str = "cpu") -> MeasuredPeak:
    """Materialise ``runnable`` (built on the meta device) on ``device`` and train one step.

    On the CPU the peak comes from torch.profiler's memory events; on a CUDA device from
    the caching allocator's own statistics (``torch.cuda.max_memory_allocated``). The
    module is moved in place: the runnable cannot be counted on the meta device again.
    """
    if device.startswith("cuda"):
        optimizer = _materialise(runnable, workload, device)
        torch.cuda.synchronize(device)
        start = torch.cuda.memory_allocated(device)
        torch.cuda.reset_peak_memory_stats(device)
        _step(runnable, workload, optimizer)
        torch.cuda.synchronize(device)
        return MeasuredPeak(start, torch.cuda.max_memory_allocated(device))
    with allocator_profile(activities=[ProfilerActivity.CPU], profile_memory=True) as prof:
        optimizer = _materialise(runnable, workload, device)
        with record_function(_STEP):
            _step(runnable, workload, optimizer)
    return _peak(prof, device)
