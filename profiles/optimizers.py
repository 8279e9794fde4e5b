"""The optimizer update, per parameter, as fused kernels run it.

Production trainers update weights with fused kernels (apex/DeepSpeed FusedAdam, PyTorch's
``fused=True``): one pass that reads the weight, its gradient and the states and writes
them back. Counting PyTorch's unfused per-parameter path on the meta device would charge
temporaries that no such kernel has, so the update is accounted here by formula, from the
shape of every trainable parameter. State sizes are PyTorch's (fp32 states; Adafactor
factors the second moment of every matrix into row and column vectors, and keeps no first
moment by default) and bitsandbytes' 8-bit Adam (one byte per state, plus an fp32 absmax
per block of 2,048 values).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

import torch

# per element: (FLOPs, state bytes, state bytes read and written per update)
_PER_ELEMENT = {
    "adamw": (12.0, 8.0),
    "adam": (11.0, 8.0),
    "sgd": (2.0, 0.0),
    "sgd+momentum": (4.0, 4.0),
    "adafactor": (15.0, 0.0),  # factored state added per matrix below
    "8-bit adam": (20.0, 2.0),
}
BLOCK = 2048  # bitsandbytes block size for 8-bit states


@dataclass(frozen=True)
class OptimizerCost:
    flops: float
    bytes_read: float
    bytes_written: float
    state_bytes: float
    master_bytes: float


def _factored_state(shape: torch.Size) -> float:
    if len(shape) < 2:
        return 4.0 * shape.numel()
    rows = shape[:-1].numel()
    return 4.0 * (rows + shape[-1])


def update_cost(params: Iterable[torch.Tensor], name: str, mixed: bool) -> OptimizerCost:
    """FLOPs, traffic and memory of one update of ``params`` with optimizer ``name``.

    ``mixed``: the weights are bf16/fp16 with fp32 master copies (4 bytes per parameter)
    that the optimizer updates and casts back.
    """
    flops_per, state_per = _PER_ELEMENT[name]
    flops = read = written = state = master = 0.0
    for p in params:
        n = p.numel()
        weight = p.element_size()
        param_state = state_per * n
        if name == "adafactor":
            param_state += _factored_state(p.shape)
        if name == "8-bit adam":
            param_state += 2 * 4.0 * -(-n // BLOCK)
        flops += flops_per * n
        state += param_state
        # read: gradient, states, weight (the fp32 master when mixed); write: states, weight
        weight_rw = 4.0 * n if mixed else weight * n
        read += weight * n + param_state + weight_rw
        written += param_state + weight_rw + (weight * n if mixed else 0.0)
        if mixed:
            master += 4.0 * n
    return OptimizerCost(flops, read, written, state, master)
