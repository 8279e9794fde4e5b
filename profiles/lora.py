"""LoRA and QLoRA: freeze the base weights and add trainable low-rank adapters.

Adapters go on every linear layer inside the blocks (attention and MLP projections, as
QLoRA's paper recommends), not on embeddings or output heads. The adapter path
``x @ A.T @ B.T * (alpha / r)`` is run for real, so its FLOPs and saved tensors are counted.
"""

from __future__ import annotations

from typing import Any

import torch
from torch import nn

# QLoRA's NF4 storage with double quantisation: 4 bits plus 0.127 bits per parameter of
# quantisation constants (Dettmers et al. 2023, "QLoRA", section 3).
NF4_BYTES_PER_PARAMETER = (4 + 0.127) / 8
SKIP = ("lm_head", "classifier", "fc", "head", "pooler")


class LoRALinear(nn.Module):
    def __init__(self, base: nn.Linear, rank: int) -> None:
        super().__init__()
        self.base = base
        factory: dict[str, Any] = {"device": base.weight.device, "dtype": base.weight.dtype}
        self.lora_a = nn.Parameter(torch.empty(rank, base.in_features, **factory))
        self.lora_b = nn.Parameter(torch.empty(base.out_features, rank, **factory))
        self.scale = 2.0  # alpha = 2 r, a common default; it only scales values

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        adapter = nn.functional.linear(nn.functional.linear(x, self.lora_a), self.lora_b)
        return self.base(x) + adapter * self.scale


def apply_lora(module: nn.Module, rank: int) -> int:
    """Freeze ``module`` and wrap its block linears with adapters; return adapter count."""
    for p in module.parameters():
        p.requires_grad_(False)
    targets = [
        (parent, name, child)
        for parent in module.modules()
        for name, child in parent.named_children()
        if isinstance(child, nn.Linear) and name not in SKIP
    ]
    for parent, name, child in targets:
        setattr(parent, name, LoRALinear(child, rank))
    return len(targets)
