"""Stable Diffusion's U-Net (diffusers' ``UNet2DConditionModel``), built on the meta device.

The blocks follow diffusers' definitions (ResnetBlock2D, Transformer2DModel with one
BasicTransformerBlock, GEGLU feed-forward, nearest-neighbour upsampling), with the SD 1.x /
2.x block layout: cross-attention down blocks on every level but the deepest, a plain
deepest level, a cross-attention mid block, and the mirror image going up. Parameter counts
are therefore exact: SD 1.5 859,520,964 and SD 2 865,910,724.

Training computes the U-Net alone: the frozen VAE encoder and text encoder that make its
inputs are not included. The loss is ``output.float().mean()``; the real objective, the mean
squared error against the added noise, costs one more elementwise pass over the latent.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, cast

import torch
import torch.nn.functional as F
from marshmallow import ValidationError, fields, validate, validates_schema
from torch import nn
from torch.utils.checkpoint import checkpoint

from profiles.errors import InvalidDescription
from profiles.models.runnable import Runnable
from profiles.models.spec_fields import IntOrList, Strict, load_fields
from profiles.models.transformer import StepContext
from profiles.workload import Workload

META = torch.device("meta")
NORM_GROUPS = 32  # GroupNorm groups everywhere in the SD U-Net


@dataclass(frozen=True)
class UNetSpec:
    """Shape of a Stable Diffusion style U-Net; ``attention_heads`` per block, resolved."""

    block_out_channels: tuple[int, ...]
    layers_per_block: int
    cross_attention_dim: int
    attention_heads: tuple[int, ...]
    linear_projection: bool = False
    in_channels: int = 4
    out_channels: int = 4
    sample_size: int = 64  # latent height and width (pixels / 8)
    text_tokens: int = 77


class UNetFields(Strict):
    """``attention_heads`` is the number of heads; ``attention_head_dim`` the width of one
    head (channels per head). diffusers' config field ``attention_head_dim`` holds head
    *counts* for SD 1.x/2.x (a known misnomer): transcribe it as ``attention_heads``."""

    family = fields.String(required=True)
    block_out_channels = fields.List(
        fields.Integer(strict=True, validate=validate.Range(NORM_GROUPS, 100_000)),
        required=True,
        validate=validate.Length(1, 8),
    )
    layers_per_block = fields.Integer(strict=True, required=True, validate=validate.Range(1, 64))
    cross_attention_dim = fields.Integer(
        strict=True, required=True, validate=validate.Range(1, 100_000)
    )
    attention_heads = IntOrList(high=4096)
    attention_head_dim = IntOrList(high=100_000)
    linear_projection = fields.Boolean()
    in_channels = fields.Integer(strict=True, validate=validate.Range(1, 1024))
    out_channels = fields.Integer(strict=True, validate=validate.Range(1, 1024))
    sample_size = fields.Integer(strict=True, required=True, validate=validate.Range(1, 4096))
    text_tokens = fields.Integer(strict=True, validate=validate.Range(1, 100_000))

    @validates_schema
    def _shapes(self, data: dict[str, Any], **_: Any) -> None:
        channels = data["block_out_channels"]
        for c in channels:
            if c % NORM_GROUPS:
                raise ValidationError(
                    f"{c} is not a multiple of the {NORM_GROUPS} norm groups", "block_out_channels"
                )
        given = [k for k in ("attention_heads", "attention_head_dim") if k in data]
        if len(given) != 1:
            raise ValidationError(
                "give attention_heads or attention_head_dim (one of them)", "attention_heads"
            )
        per_block = _per_block(data[given[0]], len(channels), given[0])
        for c, v in zip(channels, per_block, strict=True):
            if c % v:
                raise ValidationError(
                    f"{c} channels do not split into heads of {v}"
                    if given[0] == "attention_head_dim"
                    else f"{c} channels do not split into {v} heads",
                    given[0],
                )
        down = 2 ** (len(channels) - 1)
        if data["sample_size"] % down:
            raise ValidationError(
                f"must be a multiple of {down} (one halving per level)", "sample_size"
            )


def _per_block(value: int | tuple[int, ...], blocks: int, name: str) -> tuple[int, ...]:
    if isinstance(value, int):
        return (value,) * blocks
    if len(value) != blocks:
        raise ValidationError(f"needs one entry per block ({blocks})", name)
    return value


def unet_spec(data: dict[str, Any]) -> UNetSpec:
    """A ``family: unet`` description → :class:`UNetSpec` (errors name ``model.<field>``)."""
    loaded = load_fields(UNetFields(), data)
    channels = tuple(loaded.pop("block_out_channels"))
    loaded.pop("family")
    if "attention_head_dim" in loaded:
        dims = _per_block(loaded.pop("attention_head_dim"), len(channels), "attention_head_dim")
        heads = tuple(c // d for c, d in zip(channels, dims, strict=True))
    else:
        heads = _per_block(loaded.pop("attention_heads"), len(channels), "attention_heads")
    return UNetSpec(block_out_channels=channels, attention_heads=heads, **loaded)


def _maybe_checkpoint(ctx: StepContext, level: str, fn: Any, *args: Any) -> Any:
    """Run ``fn`` under activation checkpointing when the workload asks for ``level``."""
    if ctx.checkpointing == level and torch.is_grad_enabled():
        return checkpoint(fn, *args, use_reentrant=False)
    return fn(*args)


class ResnetBlock(nn.Module):
    """diffusers ``ResnetBlock2D`` (GroupNorm, SiLU, 3x3 convs, time-embedding shift)."""

    def __init__(self, cin: int, cout: int, temb: int, f: dict[str, Any]) -> None:
        super().__init__()
        self.norm1 = nn.GroupNorm(NORM_GROUPS, cin, eps=1e-5, **f)
        self.conv1 = nn.Conv2d(cin, cout, 3, padding=1, **f)
        self.time_emb_proj = nn.Linear(temb, cout, **f)
        self.norm2 = nn.GroupNorm(NORM_GROUPS, cout, eps=1e-5, **f)
        self.conv2 = nn.Conv2d(cout, cout, 3, padding=1, **f)
        self.conv_shortcut = nn.Conv2d(cin, cout, 1, **f) if cin != cout else None

    def forward(self, x: torch.Tensor, temb: torch.Tensor) -> torch.Tensor:
        h = self.conv1(F.silu(self.norm1(x)))
        h = h + self.time_emb_proj(F.silu(temb))[:, :, None, None]
        h = self.conv2(F.silu(self.norm2(h)))
        return (x if self.conv_shortcut is None else self.conv_shortcut(x)) + h


class CrossAttention(nn.Module):
    """diffusers ``Attention``: bias-free q/k/v, biased output; kernel from the StepContext."""

    def __init__(self, dim: int, heads: int, context_dim: int, f: dict[str, Any]) -> None:
        super().__init__()
        self.heads = heads
        self.to_q = nn.Linear(dim, dim, bias=False, **f)
        self.to_k = nn.Linear(context_dim, dim, bias=False, **f)
        self.to_v = nn.Linear(context_dim, dim, bias=False, **f)
        self.to_out = nn.Linear(dim, dim, **f)

    def forward(
        self, x: torch.Tensor, ctx: StepContext, context: torch.Tensor | None = None
    ) -> torch.Tensor:
        source = x if context is None else context
        b, n, d = x.shape
        m, h = source.shape[1], self.heads
        q = self.to_q(x).view(b, n, h, d // h).transpose(1, 2)
        k = self.to_k(source).view(b, m, h, d // h).transpose(1, 2)
        v = self.to_v(source).view(b, m, h, d // h).transpose(1, 2)
        out = ctx.attend(q, k, v, causal=False, bias=None)
        return self.to_out(out.transpose(1, 2).reshape(b, n, d))


class TransformerBlock(nn.Module):
    """``BasicTransformerBlock``: self-attention, cross-attention, GEGLU feed-forward."""

    def __init__(self, dim: int, heads: int, context_dim: int, f: dict[str, Any]) -> None:
        super().__init__()
        self.norm1 = nn.LayerNorm(dim, **f)
        self.attn1 = CrossAttention(dim, heads, dim, f)
        self.norm2 = nn.LayerNorm(dim, **f)
        self.attn2 = CrossAttention(dim, heads, context_dim, f)
        self.norm3 = nn.LayerNorm(dim, **f)
        self.ff_proj = nn.Linear(dim, 8 * dim, **f)  # GEGLU: value and gate, 4 * dim each
        self.ff_out = nn.Linear(4 * dim, dim, **f)

    def forward(self, x: torch.Tensor, ctx: StepContext, context: torch.Tensor) -> torch.Tensor:
        x = x + _maybe_checkpoint(ctx, "selective", self.attn1, self.norm1(x), ctx)
        x = x + _maybe_checkpoint(ctx, "selective", self.attn2, self.norm2(x), ctx, context)
        value, gate = self.ff_proj(self.norm3(x)).chunk(2, dim=-1)
        return x + self.ff_out(value * F.gelu(gate))


class SpatialTransformer(nn.Module):
    """``Transformer2DModel``: GroupNorm, 1x1-conv or linear projections around one block."""

    def __init__(
        self, dim: int, heads: int, context_dim: int, linear: bool, f: dict[str, Any]
    ) -> None:
        super().__init__()
        self.linear = linear
        self.norm = nn.GroupNorm(NORM_GROUPS, dim, eps=1e-6, **f)
        self.proj_in: nn.Module = (
            nn.Linear(dim, dim, **f) if linear else nn.Conv2d(dim, dim, 1, **f)
        )
        self.block = TransformerBlock(dim, heads, context_dim, f)
        self.proj_out: nn.Module = (
            nn.Linear(dim, dim, **f) if linear else nn.Conv2d(dim, dim, 1, **f)
        )

    def forward(self, x: torch.Tensor, ctx: StepContext, context: torch.Tensor) -> torch.Tensor:
        b, c, hh, ww = x.shape
        h = self.norm(x)
        if not self.linear:
            h = self.proj_in(h)
        h = h.permute(0, 2, 3, 1).reshape(b, hh * ww, c)
        if self.linear:
            h = self.proj_in(h)
        h = self.block(h, ctx, context)
        if self.linear:
            h = self.proj_out(h)
        h = h.reshape(b, hh, ww, c).permute(0, 3, 1, 2).contiguous()
        if not self.linear:
            h = self.proj_out(h)
        return h + x


class _Level(nn.Module):
    """One down or up block: resnets, optional transformers, optional resampling conv."""

    def __init__(
        self,
        resnets: list[ResnetBlock],
        attentions: list[SpatialTransformer],
        resample: nn.Module | None,
    ) -> None:
        super().__init__()
        self.resnets = nn.ModuleList(resnets)
        self.attentions = nn.ModuleList(attentions)
        self.resample = resample

    def pair(
        self, i: int, x: torch.Tensor, temb: torch.Tensor, ctx: StepContext, context: torch.Tensor
    ) -> torch.Tensor:
        x = _maybe_checkpoint(ctx, "full", self.resnets[i], x, temb)
        if len(self.attentions):
            x = _maybe_checkpoint(ctx, "full", self.attentions[i], x, ctx, context)
        return x


class UNet2DCondition(nn.Module):
    """The whole U-Net: noisy latents, timesteps and text states in, predicted noise out."""

    def __init__(self, spec: UNetSpec, dtype: torch.dtype) -> None:
        super().__init__()
        f: dict[str, Any] = {"device": META, "dtype": dtype}
        ch, heads, ctx_dim = spec.block_out_channels, spec.attention_heads, spec.cross_attention_dim
        temb, n, lin = 4 * ch[0], len(ch), spec.linear_projection
        self.spec = spec
        self.conv_in = nn.Conv2d(spec.in_channels, ch[0], 3, padding=1, **f)
        self.time_linear_1 = nn.Linear(ch[0], temb, **f)
        self.time_linear_2 = nn.Linear(temb, temb, **f)
        down, cin = [], ch[0]
        for i, cout in enumerate(ch):
            last = i == n - 1
            resnets = [
                ResnetBlock(cin if j == 0 else cout, cout, temb, f)
                for j in range(spec.layers_per_block)
            ]
            attns = (
                []
                if last
                else [
                    SpatialTransformer(cout, heads[i], ctx_dim, lin, f)
                    for _ in range(spec.layers_per_block)
                ]
            )
            sample = None if last else nn.Conv2d(cout, cout, 3, stride=2, padding=1, **f)
            down.append(_Level(resnets, attns, sample))
            cin = cout
        self.down = nn.ModuleList(down)
        self.mid = _Level(
            [ResnetBlock(ch[-1], ch[-1], temb, f) for _ in range(2)],
            [SpatialTransformer(ch[-1], heads[-1], ctx_dim, lin, f)],
            None,
        )
        rev, rev_heads, prev, up = ch[::-1], heads[::-1], ch[-1], []
        for i, cout in enumerate(rev):
            skip_in, count = rev[min(i + 1, n - 1)], spec.layers_per_block + 1
            resnets = [
                ResnetBlock(
                    (prev if j == 0 else cout) + (skip_in if j == count - 1 else cout),
                    cout,
                    temb,
                    f,
                )
                for j in range(count)
            ]
            attns = (
                []
                if i == 0
                else [SpatialTransformer(cout, rev_heads[i], ctx_dim, lin, f) for _ in range(count)]
            )
            sample = None if i == n - 1 else nn.Conv2d(cout, cout, 3, padding=1, **f)
            up.append(_Level(resnets, attns, sample))
            prev = cout
        self.up = nn.ModuleList(up)
        self.conv_norm_out = nn.GroupNorm(NORM_GROUPS, ch[0], eps=1e-5, **f)
        self.conv_out = nn.Conv2d(ch[0], spec.out_channels, 3, padding=1, **f)

    def time_embedding(self, timesteps: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
        """Sinusoidal features (cos first, diffusers' ``flip_sin_to_cos``), then the MLP."""
        half = self.conv_in.out_channels // 2
        exponent = (
            -math.log(10000.0)
            * torch.arange(half, dtype=torch.float32, device=timesteps.device)
            / half
        )
        angles = timesteps[:, None].float() * torch.exp(exponent)[None, :]
        emb = torch.cat([torch.cos(angles), torch.sin(angles)], dim=-1).to(dtype)
        return self.time_linear_2(F.silu(self.time_linear_1(emb)))

    def forward(
        self, sample: torch.Tensor, timesteps: torch.Tensor, context: torch.Tensor, ctx: StepContext
    ) -> torch.Tensor:
        temb = self.time_embedding(timesteps, sample.dtype)
        x = self.conv_in(sample)
        skips = [x]
        for level in cast(list[_Level], list(self.down)):
            for i in range(len(level.resnets)):
                x = level.pair(i, x, temb, ctx, context)
                skips.append(x)
            if level.resample is not None:
                x = level.resample(x)
                skips.append(x)
        x = _maybe_checkpoint(ctx, "full", self.mid.resnets[0], x, temb)
        x = _maybe_checkpoint(ctx, "full", self.mid.attentions[0], x, ctx, context)
        x = _maybe_checkpoint(ctx, "full", self.mid.resnets[1], x, temb)
        for level in cast(list[_Level], list(self.up)):
            for i in range(len(level.resnets)):
                x = level.pair(i, torch.cat([x, skips.pop()], dim=1), temb, ctx, context)
            if level.resample is not None:
                x = level.resample(F.interpolate(x, scale_factor=2.0, mode="nearest"))
        return self.conv_out(F.silu(self.conv_norm_out(x)))


class UNetRunnable(Runnable):
    """Inputs: latents [B, C, S, S], one timestep per sample, text states [B, 77, D]."""

    module: UNet2DCondition

    def __init__(self, module: UNet2DCondition) -> None:
        super().__init__(
            module, image_size=module.spec.sample_size * 8, channels=module.spec.in_channels
        )

    def latent_size(self, workload: Workload) -> int:
        spec = self.module.spec
        if workload.image_size is None:
            return spec.sample_size
        multiple = 8 * 2 ** (len(spec.block_out_channels) - 1)
        if workload.image_size % multiple:
            raise InvalidDescription(
                "workload.image_size",
                f"must be a multiple of {multiple} px for this U-Net "
                "(latents are 1/8 of the pixels, halved per level)",
                workload.image_size,
            )
        return workload.image_size // 8

    def inputs(self, workload: Workload) -> tuple[Any, ...]:
        spec, batch = self.module.spec, workload.batch_size
        dtype = self.module.conv_in.weight.dtype
        size = self.latent_size(workload)
        device = self.device
        latents = torch.empty(batch, spec.in_channels, size, size, device=device, dtype=dtype)
        timesteps = torch.zeros(batch, dtype=torch.long, device=device)
        text = torch.empty(
            batch, spec.text_tokens, spec.cross_attention_dim, device=device, dtype=dtype
        )
        return latents, timesteps, text

    def forward(self, inputs: tuple[Any, ...], ctx: StepContext) -> torch.Tensor:
        return self.module(*inputs, ctx)

    def loss(self, inputs: tuple[Any, ...], ctx: StepContext) -> torch.Tensor:
        """``output.float().mean()``: stands in for the MSE against the noise (same cost
        but one elementwise pass)."""
        return self.forward(inputs, ctx).float().mean()


def build_unet(spec: UNetSpec, dtype: torch.dtype) -> Runnable:
    return UNetRunnable(UNet2DCondition(spec, dtype))
