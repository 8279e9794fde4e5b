"""Closed-form figures for transformer stacks: parameters, matmul and attention FLOPs, KV cache.

These answer in microseconds what counting answers in seconds, and they must agree with
the counted path (a test checks both on the catalog): they are written from the same
layer definitions (:mod:`profiles.models.transformer`), not from rules of thumb. Covered:
decoder-only and encoder-only stacks without an audio front end.
"""

from __future__ import annotations

from profiles.models.transformer import TransformerSpec


def _linear(fan_in: int, fan_out: int, bias: bool) -> int:
    return fan_in * fan_out + (fan_out if bias else 0)


def _norm(spec: TransformerSpec) -> int:
    return spec.hidden * (2 if spec.norm == "layernorm" and spec.norm_bias else 1)


def _mlp(spec: TransformerSpec) -> int:
    d, f, b = spec.hidden, spec.ffn, spec.bias
    return (2 if spec.gated else 1) * _linear(d, f, b) + _linear(f, d, b)


def layer_parameters(spec: TransformerSpec) -> int:
    d, hd = spec.hidden, spec.d_head
    qkv_bias = spec.bias or spec.qkv_bias
    attn = (
        _linear(d, spec.heads * hd, qkv_bias)
        + _linear(d, spec.n_kv_heads * hd, qkv_bias and spec.k_bias)
        + _linear(d, spec.n_kv_heads * hd, qkv_bias)
        + _linear(spec.heads * hd, d, spec.bias)
    )
    mlp = spec.moe_experts * _mlp(spec) + d * spec.moe_experts if spec.moe_experts else _mlp(spec)
    norms = (1 if spec.parallel_block else 2) + (2 if spec.norms_per_layer == 4 else 0)
    return attn + mlp + norms * _norm(spec)


def _adaptive_tables(spec: TransformerSpec) -> tuple[int, int]:
    """(embedding weights, tail projection weights) of an adaptive input (tied softmax)."""
    d, bounds = spec.hidden, (0, *spec.adaptive_cutoffs, spec.vocab)
    if spec.adaptive_div_val == 1:
        return spec.vocab * d, 0
    widths = [d // spec.adaptive_div_val**i for i in range(len(bounds) - 1)]
    tables = sum((hi - lo) * w for lo, hi, w in zip(bounds, bounds[1:], widths, strict=False))
    return tables, sum(d * w for w in widths[1:] if w != d)


def _embedding(spec: TransformerSpec) -> int:
    if not spec.adaptive_cutoffs:
        return spec.vocab * spec.hidden
    tables, projections = _adaptive_tables(spec)
    clusters = len(spec.adaptive_cutoffs)
    return tables + projections + spec.vocab + clusters * (spec.hidden + 1)


def parameters(spec: TransformerSpec) -> int:
    """Exact parameter count of :class:`~profiles.models.blocks.TransformerModel`."""
    _covered(spec)
    d = spec.hidden
    total = _embedding(spec) + spec.layers * layer_parameters(spec)
    if spec.position == "learned":
        total += spec.max_positions * d
    total += spec.type_vocab * d
    total += _norm(spec) * (int(spec.embedding_norm) + int(spec.final_norm))
    if spec.position == "relative":
        total += spec.relative_buckets * spec.heads
    if spec.head == "lm" and not spec.tie_embeddings:
        total += spec.vocab * d
    elif spec.head == "pooler":
        total += _linear(d, d, True)
    elif spec.head == "classifier":
        total += _linear(d, spec.num_classes, True)
    return total


def matmul_flops_per_token(spec: TransformerSpec) -> float:
    """Forward FLOPs of the linear layers for one token (2 per multiply-add), the LM head
    included (over the whole vocabulary, also for an adaptive softmax, which in training
    scores only the head and a share of the tails); MoE layers count the router and the
    top-k experts a token visits."""
    _covered(spec)
    d, hd = spec.hidden, spec.d_head
    attn = d * hd * (2 * spec.heads + 2 * spec.n_kv_heads)
    mlp = (3 if spec.gated else 2) * d * spec.ffn
    if spec.moe_experts:
        mlp = mlp * spec.moe_top_k + d * spec.moe_experts
    head = spec.vocab * d if spec.head == "lm" else 0
    if spec.adaptive_cutoffs:  # the whole vocabulary, as inference scores it
        head = sum(_adaptive_tables(spec))
    return 2.0 * (spec.layers * (attn + mlp) + head)


def attention_flops(
    spec: TransformerSpec, batch: int, q_len: int, k_len: int, flash: bool
) -> float:
    """Forward FLOPs of the score and value products over all layers (causal flash: half)."""
    full = 4.0 * batch * spec.heads * spec.d_head * q_len * k_len * spec.layers
    return full / 2 if (flash and spec.causal and q_len > 1) else full


def training_flops(spec: TransformerSpec, batch: int, seq_len: int, flash: bool = True) -> float:
    """Forward + backward matmul and attention FLOPs of one training step.

    Backward doubles the matmuls; flash attention's backward costs 2.5x its forward
    (PyTorch's FLOP formula for the fused kernel: five products instead of two).
    """
    tokens = batch * seq_len
    matmul = matmul_flops_per_token(spec) * tokens
    if spec.head == "pooler":
        matmul += 2.0 * batch * spec.hidden**2
    attn = attention_flops(spec, batch, seq_len, seq_len, flash)
    return 3 * matmul + (3.5 if flash else 3.0) * attn


def kv_cache_bytes(spec: TransformerSpec, batch: int, tokens: int, bytes_per_value: float) -> float:
    """2 (keys and values) x layers x kv heads x head dim x tokens x batch x bytes."""
    return 2.0 * spec.layers * spec.n_kv_heads * spec.d_head * tokens * batch * bytes_per_value


def _covered(spec: TransformerSpec) -> None:
    if spec.arch == "encoder-decoder" or spec.audio_frontend:
        raise ValueError("closed form covers decoder-only and encoder-only stacks")
