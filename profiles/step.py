"""Run one counted step on the meta device: training (forward, backward, optimizer) or
inference (prefill, then a decode step at the first and at the last generated position).
The optimizer update is accounted by :mod:`profiles.optimizers` (one fused kernel per
parameter). Kernel launches are the dispatched ops that do work plus the per-time-step
kernels of recurrences (see :meth:`~profiles.counting.StepCounter.recurrence`).

Memory is read off the storage log of :class:`~profiles.counting.StepCounter`:
activations are the bytes still alive when the forward pass ends (what autograd holds for
backward, deduplicated by storage, parameters excluded); the temporary peak is how far
live memory rises above that (or above nothing, in the optimizer phase), leaving out
gradients and optimizer states, which are reported on their own lines. Backward writes the
gradients while it frees the activations, so the lines overlap in time: what is already
freed when live memory (gradients included) peaks is reported as the amount by which their
sum exceeds the step's peak.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import torch

from profiles.counting import StepCounter, Totals
from profiles.models.runnable import Runnable
from profiles.models.transformer import StepContext
from profiles.optimizers import update_cost
from profiles.workload import Workload


@dataclass
class Measured:
    totals: dict[tuple[str, str], Totals]
    by_op: dict[tuple[str, str], Totals] = field(default_factory=dict)
    activations_bytes: int = 0
    temporary_peak_bytes: int = 0
    freed_before_peak_bytes: int = 0
    optimizer_state_bytes: int = 0
    master_weight_bytes: int = 0
    gradient_bytes: int = 0
    kv_cache_bytes: int = 0
    launches: dict[str, int] = field(default_factory=dict)  # kernels per phase
    notes: list[str] = field(default_factory=list)


def _key(t: torch.Tensor) -> int:
    return int(t.untyped_storage()._cdata)


def _nbytes(t: torch.Tensor) -> int:
    return int(t.untyped_storage().nbytes())


def train_step(
    runnable: Runnable, workload: Workload, mixed: bool, deadline: float | None
) -> Measured:
    """Forward and backward of one step, counted; the optimizer update by formula."""
    module = runnable.module
    params = [p for p in module.parameters() if p.requires_grad]
    counter = StepCounter({_key(p) for p in module.parameters()}, deadline)
    ctx = StepContext(workload.attention, workload.activation_checkpointing)
    ctx.on_recurrence = counter.recurrence
    with counter:
        counter.phase = "forward"
        loss = runnable.loss(runnable.inputs(workload), ctx)
        ctx.release()
        counter.mark("end-of-forward")
        counter.phase = "backward"
        loss.backward()
        del loss
        counter.mark("end")
    grads = [p.grad for p in params if p.grad is not None]
    gradient_bytes = sum(_nbytes(g) for g in grads)
    exclude = {s for s in (counter.serial(g) for g in grads) if s is not None}
    activations, peak_forward = counter.live_curve(exclude, end="end-of-forward")
    _, peak_backward = counter.live_curve(exclude, start="end-of-forward", end="end")
    temporary = max(peak_forward, peak_backward) - activations
    # Gradients are written as backward frees activations (zero_grad(set_to_none=True),
    # PyTorch's default): the step's peak, gradients included, is below the sum of the lines.
    _, peak = counter.live_curve(set(), end="end")
    update = update_cost(params, workload.optimizer or "adamw", mixed)
    totals = dict(counter.totals)
    totals[("optimizer", "elementwise")] = Totals(
        flops=update.flops,
        bytes_read=update.bytes_read,
        bytes_written=update.bytes_written,
        ops=len(params),
    )
    return Measured(
        totals=totals,
        by_op=dict(counter.by_op),
        activations_bytes=activations,
        temporary_peak_bytes=temporary,
        freed_before_peak_bytes=max(gradient_bytes + activations + temporary - peak, 0),
        optimizer_state_bytes=round(update.state_bytes),
        master_weight_bytes=round(update.master_bytes),
        gradient_bytes=gradient_bytes,
        launches={**counter.launches(), "optimizer": len(params)},
    )


def inference(runnable: Runnable, workload: Workload, deadline: float | None) -> Measured:
    """Prefill the prompt; decode one token at the first and at the last output position.

    The KV cache is a buffer for prompt + output tokens, allocated at prefill; the cost of
    a decode step is affine in the context length, so the first and last steps bound it
    and their mean is the average step.
    """
    module = runnable.module
    counter = StepCounter({_key(p) for p in module.parameters()}, deadline)
    output = workload.output_tokens or 0
    with torch.no_grad(), counter:
        ctx = StepContext(workload.attention)
        ctx.on_recurrence = counter.recurrence
        ctx.use_cache = runnable.generative and output > 0
        inputs = runnable.inputs(workload)
        decoder_prompt = runnable.decoder_prompt(inputs)
        ctx.capacity = decoder_prompt + output
        counter.phase = "prefill"
        out = runnable.forward(inputs, ctx)
        del out, inputs
        counter.mark("end-of-prefill")
        if ctx.use_cache:
            for phase, position in (
                ("decode-first", decoder_prompt),
                ("decode-last", decoder_prompt + output - 1),
            ):
                counter.phase = phase
                ctx.position_offset = position
                del_out = runnable.decode(workload.batch_size, ctx)
                del del_out
        kv_bytes = ctx.cache_bytes()
        counter.mark("end")
    _, peak = counter.live_curve(set())
    return Measured(
        totals=dict(counter.totals),
        by_op=dict(counter.by_op),
        temporary_peak_bytes=max(peak - kv_bytes, 0),
        kv_cache_bytes=kv_bytes,
        launches=counter.launches(),
    )
