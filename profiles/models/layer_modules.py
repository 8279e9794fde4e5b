"""The modules a layer list is built from (see :mod:`profiles.models.layers`).

Tensors carry a leading batch dimension that descriptions never mention. Plain torch
modules do the leaf work; :class:`Node` subclasses are the layers that need the step
context (attention kernel, checkpointing) or the run state (side outputs of ``branch``
and ``heads``, tensors named by ``branch``).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn
from torch.utils.checkpoint import checkpoint

from profiles.models.transformer import StepContext


@dataclass
class RunState:
    """What one forward pass collects besides its main output."""

    outputs: list[torch.Tensor] = field(default_factory=list)
    taps: dict[str, torch.Tensor] = field(default_factory=dict)
    inside_checkpoint: bool = False


class Node(nn.Module):
    """A layer called as ``node(x, ctx, state)``."""

    def forward(self, x: torch.Tensor, ctx: StepContext, state: RunState) -> torch.Tensor:
        raise NotImplementedError


def call(module: nn.Module, x: torch.Tensor, ctx: StepContext, state: RunState) -> torch.Tensor:
    out: torch.Tensor = module(x, ctx, state) if isinstance(module, Node) else module(x)
    return out


class Sequence(Node):
    def __init__(self, layers: list[nn.Module]) -> None:
        super().__init__()
        self.layers = nn.ModuleList(layers)

    def forward(self, x: torch.Tensor, ctx: StepContext, state: RunState) -> torch.Tensor:
        for layer in self.layers:
            x = call(layer, x, ctx, state)
        return x


class Region(Node):
    """A nested list run as one unit: ``plain`` (a repeat iteration), ``residual``
    (input or shortcut plus body) or ``concat`` (input and body joined along ``dim``).

    With full activation checkpointing the outermost regions that have no side outputs
    are recomputed in backward, as block-level checkpointing does.
    """

    def __init__(
        self,
        body: Sequence,
        combine: str,
        shortcut: Sequence | None = None,
        dim: int = 0,
        checkpointable: bool = True,
    ) -> None:
        super().__init__()
        self.body, self.combine, self.shortcut = body, combine, shortcut
        self.dim = dim + 1 if dim >= 0 else dim
        self.checkpointable = checkpointable

    def run(self, x: torch.Tensor, ctx: StepContext, state: RunState) -> torch.Tensor:
        y = self.body(x, ctx, state)
        if self.combine == "residual":
            return y + (x if self.shortcut is None else self.shortcut(x, ctx, state))
        if self.combine == "concat":
            return torch.cat([x, y], dim=self.dim)
        return y

    def forward(self, x: torch.Tensor, ctx: StepContext, state: RunState) -> torch.Tensor:
        if (
            self.checkpointable
            and ctx.checkpointing == "full"
            and not state.inside_checkpoint
            and torch.is_grad_enabled()
        ):

            def inner(t: torch.Tensor) -> torch.Tensor:
                state.inside_checkpoint = True
                try:
                    return self.run(t, ctx, state)
                finally:
                    state.inside_checkpoint = False

            out: torch.Tensor = checkpoint(inner, x, use_reentrant=False)
            return out
        return self.run(x, ctx, state)


class Branch(Node):
    """Runs its body on the current tensor and passes the tensor on unchanged; the body's
    output joins the loss (held until the loss is taken, unless ``held`` is false) and,
    when named, can feed a later ``heads`` layer."""

    def __init__(self, body: Sequence, name: str | None, held: bool = True) -> None:
        super().__init__()
        self.body, self.name, self.held = body, name, held

    def forward(self, x: torch.Tensor, ctx: StepContext, state: RunState) -> torch.Tensor:
        y = self.body(x, ctx, state)
        # not held: reduced at once, so the output is freed as the reference frees it
        state.outputs.append(y if self.held else y.float().mean())
        if self.name:
            state.taps[self.name] = y
        return x


class Heads(Node):
    """One body, with one set of weights, applied to each named tensor (shared detection
    heads over pyramid levels); the outputs join the loss."""

    def __init__(self, body: Sequence, sources: tuple[str, ...]) -> None:
        super().__init__()
        self.body, self.sources = body, sources

    def forward(self, x: torch.Tensor, ctx: StepContext, state: RunState) -> torch.Tensor:
        for name in self.sources:
            state.outputs.append(self.body(state.taps[name], ctx, state))
        return x


class SelfAttention(Node):
    """Multi-head self-attention over the sequence of a ``[L, D]`` input (q/k/v/o of width
    D); the flash or materialized kernel as the workload chooses, via ``ctx.attend``."""

    def __init__(self, dim: int, heads: int, causal: bool, bias: bool, f: dict[str, Any]) -> None:
        super().__init__()
        self.heads, self.causal = heads, causal
        self.q = nn.Linear(dim, dim, bias=bias, **f)
        self.k = nn.Linear(dim, dim, bias=bias, **f)
        self.v = nn.Linear(dim, dim, bias=bias, **f)
        self.o = nn.Linear(dim, dim, bias=bias, **f)

    def attend(self, x: torch.Tensor, ctx: StepContext) -> torch.Tensor:
        b, n, d = x.shape
        h = self.heads
        q, k, v = (p(x).view(b, n, h, d // h).transpose(1, 2) for p in (self.q, self.k, self.v))
        out = ctx.attend(q, k, v, causal=self.causal, bias=None)
        return self.o(out.transpose(1, 2).reshape(b, n, d))

    def forward(self, x: torch.Tensor, ctx: StepContext, state: RunState) -> torch.Tensor:
        if ctx.checkpointing == "selective" and torch.is_grad_enabled():
            out: torch.Tensor = checkpoint(self.attend, x, ctx, use_reentrant=False)
            return out
        return self.attend(x, ctx)


def _shifted(t: torch.Tensor) -> torch.Tensor:
    """``t`` one step later in time (zeros first): the previous step's value."""
    return F.pad(t[:, :-1], (0, 0, 1, 0))


class Recurrent(Node):
    """An ``nn.LSTM`` / ``nn.GRU`` (its weights, batch first) over ``[T, F]``.

    Run step by step on the meta device, torch's recurrence dispatches some 30 ops per
    time step and layer, which is too slow to count for hundreds of steps. The steps are
    run side by side instead: the recurrent input of step t is a stand-in for step t-1's
    output that is made from the same layer's input projection. Every matmul (input and
    recurrent, forward and backward), every gate activation and the tensors saved for
    backward have the sizes of the real recurrence (backward also charges one step's
    gradient into the zero initial state, which torch skips); only the dependence of step
    t on step t-1 is cut, and no count depends on it but the kernel launches: a real run
    launches kernels per time step, which ``ctx.on_recurrence`` is told of.
    """

    def __init__(self, rnn: nn.LSTM | nn.GRU) -> None:
        super().__init__()
        self.rnn = rnn

    def _direction(self, x: torch.Tensor, layer: int, suffix: str) -> torch.Tensor:
        p = {
            n: getattr(self.rnn, f"{n}_l{layer}{suffix}")
            for n in ("weight_ih", "weight_hh", "bias_ih", "bias_hh")
        }
        h = self.rnn.hidden_size
        gi = F.linear(x, p["weight_ih"], p["bias_ih"])
        h_prev = _shifted(gi[..., -h:])
        gh = F.linear(h_prev, p["weight_hh"], p["bias_hh"])
        if isinstance(self.rnn, nn.LSTM):
            i, f, g, o = (gi + gh).chunk(4, dim=-1)
            ig = torch.sigmoid(i) * torch.tanh(g)
            c = torch.sigmoid(f) * _shifted(ig) + ig
            return torch.sigmoid(o) * torch.tanh(c)
        ri, zi, ni = gi.chunk(3, dim=-1)
        rh, zh, nh = gh.chunk(3, dim=-1)
        z = torch.sigmoid(zi + zh)
        n = torch.tanh(ni + torch.sigmoid(ri + rh) * nh)
        return n + z * (h_prev - n)

    def forward(self, x: torch.Tensor, ctx: StepContext, state: RunState) -> torch.Tensor:
        suffixes = ("", "_reverse") if self.rnn.bidirectional else ("",)
        ctx.on_recurrence(x.shape[1] * self.rnn.num_layers * len(suffixes))
        for layer in range(self.rnn.num_layers):
            outs = [self._direction(x, layer, s) for s in suffixes]
            x = outs[0] if len(outs) == 1 else torch.cat(outs, dim=-1)
        return x


class BatchNorm(nn.BatchNorm1d):
    """Batch norm over the channels (dim 1) of an input of any rank.

    In training it normalises with the batch statistics and leaves the running ones alone
    (their update is a per-channel elementwise op): with one value per channel, as a
    batch-of-one profile of a 1x1 feature map has, torch's update would divide by zero.
    """

    def _check_input_dim(self, input: torch.Tensor) -> None:
        return None

    def forward(self, input: torch.Tensor) -> torch.Tensor:
        if self.training:
            return torch.batch_norm(
                input, self.weight, self.bias, None, None, True, 0.0, self.eps, False
            )
        return torch.batch_norm(
            input,
            self.weight,
            self.bias,
            self.running_mean,
            self.running_var,
            False,
            0.0,
            self.eps,
            False,
        )


class FrozenBatchNorm(nn.Module):
    """Batch norm with fixed statistics and affine weights (detectors' ``FrozenBatchNorm2d``):
    a per-channel scale and shift held as buffers, so no weights to train and only the
    (per-channel) scale saved for backward."""

    scale: torch.Tensor
    shift: torch.Tensor

    def __init__(self, channels: int, device: torch.device, dtype: torch.dtype) -> None:
        super().__init__()
        self.register_buffer("scale", torch.empty(channels, device=device, dtype=dtype))
        self.register_buffer("shift", torch.empty(channels, device=device, dtype=dtype))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        shape = (1, -1) + (1,) * (x.dim() - 2)
        return x * self.scale.view(shape) + self.shift.view(shape)


class GlobalAvgPool(nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x.mean(dim=tuple(range(2, x.dim())))


class Flatten(nn.Module):
    def __init__(self, start: int) -> None:
        super().__init__()
        self.start = start + 1

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.flatten(x, self.start)


class Reshape(nn.Module):
    def __init__(self, shape: tuple[int, ...]) -> None:
        super().__init__()
        self.shape = shape

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x.reshape(x.shape[0], *self.shape)


class Transpose(nn.Module):
    def __init__(self, a: int, b: int) -> None:
        super().__init__()
        self.a, self.b = (d + 1 if d >= 0 else d for d in (a, b))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x.transpose(self.a, self.b)


class Upsample(nn.Module):
    """Nearest-neighbour upsampling by an integer factor per spatial dimension."""

    def __init__(self, scale: tuple[int, ...]) -> None:
        super().__init__()
        self.scale = tuple(float(s) for s in scale)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return F.interpolate(x, scale_factor=self.scale, mode="nearest")


class RoIAlign(nn.Module):
    """``[C, H, W]`` → ``rois`` regions of ``[C, S, S]``, which become extra samples.

    The bilinear sampling of RoIAlign is approximated by adaptive average pooling; the
    pooled regions are materialized as RoIAlign's output is, so what follows is exact.
    """

    def __init__(self, rois: int, size: int) -> None:
        super().__init__()
        self.rois, self.size = rois, size

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        pooled = F.adaptive_avg_pool2d(x, self.size)
        b, c, s, _ = pooled.shape
        return pooled.unsqueeze(1).expand(b, self.rois, c, s, s).reshape(b * self.rois, c, s, s)


class LayerModel(nn.Module):
    """A whole layer list: main output plus the side outputs of branches and heads."""

    def __init__(self, body: Sequence) -> None:
        super().__init__()
        self.body = body

    def forward(self, x: torch.Tensor, ctx: StepContext) -> tuple[torch.Tensor, list[torch.Tensor]]:
        state = RunState()
        out = self.body(x, ctx, state)
        return out, state.outputs
