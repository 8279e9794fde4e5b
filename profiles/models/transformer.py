"""Transformer decoder, encoder and encoder-decoder models, built on the meta device.

One implementation covers the catalog's Llama, Mistral, Mixtral, Qwen2, Gemma 2, Phi-3,
Falcon, GPT-2, BERT, T5, Whisper and ViT-style stacks through :class:`TransformerSpec`.
Layers are written the way the reference implementations write them, so that parameter
counts are exact and the ops (and the tensors saved for backward) are the real ones.
Mixture-of-experts layers route tokens evenly over experts (a stated assumption: on the
meta device there is no data to route by).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

ACTIVATIONS = {
    "gelu": F.gelu,
    "gelu_tanh": lambda x: F.gelu(x, approximate="tanh"),
    "silu": F.silu,
    "relu": F.relu,
}


@dataclass(frozen=True)
class TransformerSpec:
    """Shape of a transformer; field meanings follow Hugging Face configs where they exist."""

    arch: str  # decoder | encoder | encoder-decoder
    layers: int
    hidden: int
    heads: int
    ffn: int
    vocab: int
    kv_heads: int | None = None
    head_dim: int | None = None
    decoder_layers: int | None = None  # encoder-decoder: decoder depth (default: layers)
    norm: str = "rmsnorm"  # rmsnorm | layernorm
    norm_bias: bool = False  # LayerNorm with a bias
    activation: str = "silu"
    gated: bool = True  # SwiGLU / GeGLU MLP (gate, up, down)
    position: str = "rope"  # rope | learned | relative | none
    max_positions: int = 0  # for learned positions
    type_vocab: int = 0  # BERT token types
    embedding_norm: bool = False  # BERT: LayerNorm after the embeddings
    bias: bool = False  # biases on every linear layer
    qkv_bias: bool = False  # biases on q, k, v only (Qwen2)
    k_bias: bool = True  # with bias=True, whether k has one (Whisper has none)
    parallel_block: bool = False  # attention and MLP side by side from one norm (Falcon)
    norms_per_layer: int = 2  # Gemma 2 adds post-attention and post-MLP norms: 4
    final_norm: bool = True
    tie_embeddings: bool = False
    head: str = "lm"  # lm | pooler | classifier | none
    num_classes: int = 0
    moe_experts: int = 0
    moe_top_k: int = 0
    relative_buckets: int = 32  # T5 relative attention bias buckets
    audio_frontend: int = 0  # Whisper: mel bins into two conv1d layers (0: none)
    encoder_positions: int = 0  # Whisper: encoder learned positions
    # adaptive input and softmax (Transformer-XL; see profiles.models.adaptive): cluster
    # boundaries, the width divisor per cluster, the share of target tokens per tail cluster
    adaptive_cutoffs: tuple[int, ...] = ()
    adaptive_div_val: int = 1
    adaptive_tail_shares: tuple[float, ...] = ()
    extra: dict[str, Any] = field(default_factory=dict)

    @property
    def n_kv_heads(self) -> int:
        return self.kv_heads or self.heads

    @property
    def d_head(self) -> int:
        return self.head_dim or self.hidden // self.heads

    @property
    def n_decoder_layers(self) -> int:
        return self.decoder_layers or self.layers

    @property
    def causal(self) -> bool:
        return self.arch == "decoder"


class _FusedRMSNorm(torch.autograd.Function):
    """RMS norm that keeps what fused kernels keep for backward: the input and one fp32
    reciprocal RMS per row (PyTorch's CUDA ``_fused_rms_norm``, Apex, Liger). The meta and
    CPU devices decompose ``F.rms_norm`` instead, keeping an fp32 copy of the input and
    the normalised tensor too (an H200 step of a TinyLlama-shaped model held 2.2 GB less
    than that decomposition counts); so the profiler's module runs this everywhere."""

    @staticmethod
    def forward(ctx: Any, x: torch.Tensor, weight: torch.Tensor, eps: float) -> torch.Tensor:
        rstd = torch.rsqrt(x.float().pow(2).mean(-1, keepdim=True) + eps)
        ctx.save_for_backward(x, rstd, weight)
        return (x.float() * rstd).to(x.dtype) * weight

    @staticmethod
    def backward(ctx: Any, grad: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, None]:
        x, rstd, weight = ctx.saved_tensors
        normed = x.float() * rstd
        g = grad.float() * weight.float()
        grad_x = rstd * (g - normed * (g * normed).mean(-1, keepdim=True))
        grad_w = (grad.float() * normed).reshape(-1, x.shape[-1]).sum(0)
        return grad_x.to(x.dtype), grad_w.to(weight.dtype), None


class RMSNorm(nn.Module):
    def __init__(self, dim: int, device: torch.device, dtype: torch.dtype) -> None:
        super().__init__()
        self.weight = nn.Parameter(torch.empty(dim, device=device, dtype=dtype))
        self.eps = torch.finfo(torch.float32).eps  # F.rms_norm's default

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out: torch.Tensor = _FusedRMSNorm.apply(x, self.weight, self.eps)
        return out


def _norm(spec: TransformerSpec, dim: int, factory: dict[str, Any]) -> nn.Module:
    if spec.norm == "rmsnorm":
        return RMSNorm(dim, **factory)
    return nn.LayerNorm(dim, bias=spec.norm_bias, **factory)


def _rotate(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    half = x.shape[-1] // 2
    rotated = torch.cat((-x[..., half:], x[..., :half]), dim=-1)
    return x * cos + rotated * sin


class Attention(nn.Module):
    """Multi-head / grouped-query attention; flash (fused) or materialized scores."""

    def __init__(
        self, spec: TransformerSpec, factory: dict[str, Any], causal: bool, cross: bool = False
    ) -> None:
        super().__init__()
        self.spec, self.causal, self.cross = spec, causal, cross
        h, kv, d = spec.heads, spec.n_kv_heads, spec.d_head
        qkv_bias = spec.bias or spec.qkv_bias
        self.q = nn.Linear(spec.hidden, h * d, bias=qkv_bias, **factory)
        self.k = nn.Linear(spec.hidden, kv * d, bias=qkv_bias and spec.k_bias, **factory)
        self.v = nn.Linear(spec.hidden, kv * d, bias=qkv_bias, **factory)
        self.o = nn.Linear(h * d, spec.hidden, bias=spec.bias, **factory)

    def forward(
        self,
        x: torch.Tensor,
        ctx: StepContext,
        memory: torch.Tensor | None = None,
        bias: torch.Tensor | None = None,
    ) -> torch.Tensor:
        spec = self.spec
        b, s, _ = x.shape
        q = self.q(x).view(b, s, spec.heads, spec.d_head).transpose(1, 2)
        cached = ctx.kv_cache.get(id(self)) if self.cross and ctx.use_cache else None
        if cached is not None:  # cross-attention keys and values are computed once
            k, v = cached
        else:
            source = memory if self.cross and memory is not None else x
            n = source.shape[1]
            k = self.k(source).view(b, n, spec.n_kv_heads, spec.d_head).transpose(1, 2)
            v = self.v(source).view(b, n, spec.n_kv_heads, spec.d_head).transpose(1, 2)
            if spec.position == "rope":
                cos, sin = ctx.rope(s, spec.d_head, x)
                q, k = _rotate(q, cos, sin), _rotate(k, cos, sin)
            if self.causal or self.cross:  # an encoder's self-attention runs once: no cache
                k, v = ctx.cache_kv(self, k, v, append=not self.cross)
        out = ctx.attend(q, k, v, causal=self.causal, bias=bias)
        return self.o(out.transpose(1, 2).reshape(b, s, spec.heads * spec.d_head))


class Mlp(nn.Module):
    def __init__(self, spec: TransformerSpec, factory: dict[str, Any]) -> None:
        super().__init__()
        self.act = ACTIVATIONS[spec.activation]
        self.gated = spec.gated
        if spec.gated:
            self.gate = nn.Linear(spec.hidden, spec.ffn, bias=spec.bias, **factory)
        self.up = nn.Linear(spec.hidden, spec.ffn, bias=spec.bias, **factory)
        self.down = nn.Linear(spec.ffn, spec.hidden, bias=spec.bias, **factory)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.gated:
            return self.down(self.act(self.gate(x)) * self.up(x))
        return self.down(self.act(self.up(x)))


class MoE(nn.Module):
    """Top-k routed experts; tokens are spread evenly over the experts."""

    def __init__(self, spec: TransformerSpec, factory: dict[str, Any]) -> None:
        super().__init__()
        self.top_k = spec.moe_top_k
        self.router = nn.Linear(spec.hidden, spec.moe_experts, bias=False, **factory)
        self.experts = nn.ModuleList(Mlp(spec, factory) for _ in range(spec.moe_experts))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        shape = x.shape
        tokens = x.reshape(-1, shape[-1])
        weights = F.softmax(self.router(tokens), dim=-1, dtype=torch.float32)
        weights, _ = torch.topk(weights, self.top_k, dim=-1)
        per_expert = math.ceil(tokens.shape[0] * self.top_k / len(self.experts))
        index = torch.arange(per_expert, device=x.device) % tokens.shape[0]
        scale = weights.reshape(-1)[:per_expert].to(x.dtype).unsqueeze(-1)
        out = torch.zeros_like(tokens)
        for expert in self.experts:
            routed = expert(tokens.index_select(0, index)) * scale
            out = out.index_add(0, index, routed)
        return out.view(shape)


class Block(nn.Module):
    def __init__(
        self, spec: TransformerSpec, factory: dict[str, Any], causal: bool, cross: bool = False
    ) -> None:
        super().__init__()
        self.spec = spec
        self.norm1 = _norm(spec, spec.hidden, factory)
        self.attn = Attention(spec, factory, causal)
        if cross:
            self.norm_cross = _norm(spec, spec.hidden, factory)
            self.cross = Attention(spec, factory, causal=False, cross=True)
        if not spec.parallel_block:
            self.norm2 = _norm(spec, spec.hidden, factory)
        if spec.norms_per_layer == 4:
            self.post_attn_norm = _norm(spec, spec.hidden, factory)
            self.post_mlp_norm = _norm(spec, spec.hidden, factory)
        self.mlp: nn.Module = MoE(spec, factory) if spec.moe_experts else Mlp(spec, factory)

    def forward(
        self,
        x: torch.Tensor,
        ctx: StepContext,
        memory: torch.Tensor | None = None,
        bias: torch.Tensor | None = None,
    ) -> torch.Tensor:
        if self.spec.parallel_block:
            h = self.norm1(x)
            return x + ctx.checkpoint_attention(self.attn, h, bias) + self.mlp(h)
        a = ctx.checkpoint_attention(self.attn, self.norm1(x), bias)
        if self.spec.norms_per_layer == 4:
            a = self.post_attn_norm(a)
        x = x + a
        if hasattr(self, "cross"):
            x = x + self.cross(self.norm_cross(x), ctx, memory=memory)
        m = self.mlp(self.norm2(x))
        if self.spec.norms_per_layer == 4:
            m = self.post_mlp_norm(m)
        return x + m


class StepContext:
    """Per-run choices the layers ask about: attention kernel, checkpointing, KV cache."""

    def __init__(self, attention: str = "flash", checkpointing: str = "none") -> None:
        self.attention = attention
        self.checkpointing = checkpointing
        self.kv_cache: dict[int, Any] = {}
        self.use_cache = False
        self.capacity = 0
        self.position_offset = 0
        self._rope: dict[tuple[int, int], tuple[torch.Tensor, torch.Tensor]] = {}
        # told of recurrences run side by side (time steps x layers x directions)
        self.on_recurrence: Callable[[int], None] = lambda steps: None

    def rope(self, s: int, d: int, like: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        key = (self.position_offset + s, d)
        if key not in self._rope:
            shape = (1, 1, s, d)
            self._rope[key] = (like.new_empty(shape), like.new_empty(shape))
        return self._rope[key]

    def cache_kv(
        self, layer: nn.Module, k: torch.Tensor, v: torch.Tensor, append: bool = True
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """With a KV cache: write the new keys and values into the layer's preallocated
        buffer (``capacity`` positions) and attend over everything written so far."""
        if not self.use_cache:
            return k, v
        entry = self.kv_cache.get(id(layer))
        if not append:  # cross-attention: the encoder's keys and values, computed once
            if entry is None:
                entry = self.kv_cache[id(layer)] = (k, v)
            return entry
        if entry is None:
            shape = (k.shape[0], k.shape[1], self.capacity, k.shape[3])
            entry = self.kv_cache[id(layer)] = (k.new_empty(shape), v.new_empty(shape))
        start, end = self.position_offset, self.position_offset + k.shape[2]
        entry[0][:, :, start:end].copy_(k)
        entry[1][:, :, start:end].copy_(v)
        return entry[0][:, :, :end], entry[1][:, :, :end]

    def cache_bytes(self) -> int:
        """Bytes of the KV cache buffers (each storage once)."""
        storages = {}
        for entry in self.kv_cache.values():
            for t in entry if isinstance(entry, tuple) else (entry,):
                storages[t.untyped_storage()._cdata] = t.untyped_storage().nbytes()
        return sum(storages.values())

    def release(self) -> None:
        """Drop the context's own references (autograd keeps what backward needs)."""
        self._rope.clear()

    def attend(
        self,
        q: torch.Tensor,
        k: torch.Tensor,
        v: torch.Tensor,
        causal: bool,
        bias: torch.Tensor | None,
    ) -> torch.Tensor:
        scale = 1.0 / math.sqrt(q.shape[-1])
        causal = causal and q.shape[2] > 1
        if self.attention == "flash" and bias is None:
            if q.device.type == "cpu":  # a real check on the CPU: the CPU's flash kernel
                return torch.ops.aten._scaled_dot_product_flash_attention_for_cpu(
                    q, k, v, 0.0, causal, scale=scale
                )[0]
            return torch.ops.aten._scaled_dot_product_flash_attention(
                q, k, v, 0.0, causal, False, scale=scale
            )[0]
        groups = q.shape[1] // k.shape[1]
        if groups > 1:
            k = k.repeat_interleave(groups, dim=1)
            v = v.repeat_interleave(groups, dim=1)
        scores = torch.matmul(q, k.transpose(-1, -2)) * scale
        if bias is not None:
            scores = scores + bias
        if causal:
            mask = torch.ones(q.shape[2], k.shape[2], dtype=torch.bool, device=q.device).triu(1)
            scores = scores.masked_fill(mask, float("-inf"))
        return torch.matmul(F.softmax(scores, dim=-1, dtype=torch.float32).to(q.dtype), v)

    def checkpoint_attention(
        self, attn: Attention, x: torch.Tensor, bias: torch.Tensor | None
    ) -> torch.Tensor:
        if self.checkpointing == "selective" and torch.is_grad_enabled():
            return torch.utils.checkpoint.checkpoint(attn, x, self, None, bias, use_reentrant=False)
        return attn(x, self, bias=bias)

    def checkpoint_block(
        self, block: Block, x: torch.Tensor, memory: torch.Tensor | None, bias: torch.Tensor | None
    ) -> torch.Tensor:
        if self.checkpointing == "full" and torch.is_grad_enabled():
            return torch.utils.checkpoint.checkpoint(
                block, x, self, memory, bias, use_reentrant=False
            )
        return block(x, self, memory, bias)
