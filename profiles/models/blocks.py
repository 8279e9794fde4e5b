"""Whole transformer models from :class:`TransformerSpec`: embeddings, stacks, heads, loss."""

from __future__ import annotations

from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

from profiles.models.adaptive import AdaptiveEmbedding
from profiles.models.transformer import Block, StepContext, TransformerSpec, _norm


class TransformerModel(nn.Module):
    """Decoder-only, encoder-only or encoder-decoder transformer with its task head."""

    def __init__(
        self,
        spec: TransformerSpec,
        dtype: torch.dtype,
        layers: int | None = None,
        decoder_layers: int | None = None,
    ) -> None:
        """``layers``/``decoder_layers`` override the depth (the counter builds short copies)."""
        super().__init__()
        self.spec = spec
        factory: dict[str, Any] = {"device": torch.device("meta"), "dtype": dtype}
        n_enc = spec.layers if layers is None else layers
        n_dec = spec.n_decoder_layers if decoder_layers is None else decoder_layers
        self.embed: nn.Embedding | AdaptiveEmbedding = (
            AdaptiveEmbedding(spec, factory)
            if spec.adaptive_cutoffs
            else nn.Embedding(spec.vocab, spec.hidden, **factory)
        )
        if spec.position == "learned":
            self.positions = nn.Embedding(spec.max_positions, spec.hidden, **factory)
        if spec.type_vocab:
            self.token_types = nn.Embedding(spec.type_vocab, spec.hidden, **factory)
        if spec.embedding_norm:
            self.embed_norm = _norm(spec, spec.hidden, factory)
        if spec.audio_frontend:
            self.conv1 = nn.Conv1d(spec.audio_frontend, spec.hidden, 3, padding=1, **factory)
            self.conv2 = nn.Conv1d(spec.hidden, spec.hidden, 3, stride=2, padding=1, **factory)
            self.encoder_positions = nn.Embedding(spec.encoder_positions, spec.hidden, **factory)
        if spec.position == "relative":
            self.relative_bias = nn.Embedding(spec.relative_buckets, spec.heads, **factory)
        encoder_causal = spec.arch == "decoder"
        self.blocks = nn.ModuleList(Block(spec, factory, encoder_causal) for _ in range(n_enc))
        if spec.final_norm:
            self.final_norm = _norm(spec, spec.hidden, factory)
        if spec.arch == "encoder-decoder":
            if spec.position == "relative":
                self.decoder_relative_bias = nn.Embedding(
                    spec.relative_buckets, spec.heads, **factory
                )
            self.decoder_blocks = nn.ModuleList(
                Block(spec, factory, causal=True, cross=True) for _ in range(n_dec)
            )
            self.decoder_norm = _norm(spec, spec.hidden, factory)
        self._head(spec, factory)

    def _head(self, spec: TransformerSpec, factory: dict[str, Any]) -> None:
        if spec.head == "lm" and not spec.tie_embeddings:
            self.lm_head = nn.Linear(spec.hidden, spec.vocab, bias=False, **factory)
        elif spec.head == "pooler":
            self.pooler = nn.Linear(spec.hidden, spec.hidden, **factory)
        elif spec.head == "classifier":
            self.classifier = nn.Linear(spec.hidden, spec.num_classes, **factory)

    def _relative(self, table: nn.Embedding, q_len: int, k_len: int) -> torch.Tensor:
        """T5's bias: a learned scalar per (bucket, head), looked up for every position pair."""
        buckets = torch.zeros(q_len, k_len, dtype=torch.long, device=table.weight.device)
        return table(buckets).permute(2, 0, 1).unsqueeze(0)

    def _embed(self, tokens: torch.Tensor, ctx: StepContext) -> torch.Tensor:
        x = self.embed(tokens)
        if self.spec.position == "learned":
            s = tokens.shape[1]
            positions = torch.arange(
                ctx.position_offset, ctx.position_offset + s, device=tokens.device
            ).unsqueeze(0)
            x = x + self.positions(positions)
        if self.spec.type_vocab:
            x = x + self.token_types(torch.zeros_like(tokens))
        if self.spec.embedding_norm:
            x = self.embed_norm(x)
        return x

    def _encode(self, inputs: torch.Tensor, ctx: StepContext) -> torch.Tensor:
        if self.spec.audio_frontend:
            x = F.gelu(self.conv2(F.gelu(self.conv1(inputs)))).transpose(1, 2)
            pos = torch.arange(x.shape[1], device=x.device).unsqueeze(0)
            x = x + self.encoder_positions(pos)
        else:
            x = self._embed(inputs, ctx)
        bias = None
        if self.spec.position == "relative":
            bias = self._relative(self.relative_bias, x.shape[1], x.shape[1])
        for block in self.blocks:
            x = ctx.checkpoint_block(block, x, None, bias)  # type: ignore[arg-type]
        return self.final_norm(x) if self.spec.final_norm else x

    def _decode(self, tokens: torch.Tensor, memory: torch.Tensor, ctx: StepContext) -> torch.Tensor:
        x = self._embed(tokens, ctx)
        bias = None
        if self.spec.position == "relative":
            k_len = ctx.position_offset + tokens.shape[1]
            bias = self._relative(self.decoder_relative_bias, tokens.shape[1], k_len)
        for block in self.decoder_blocks:
            x = ctx.checkpoint_block(block, x, memory, bias)  # type: ignore[arg-type]
        return self.decoder_norm(x)

    def hidden_states(
        self, inputs: torch.Tensor, ctx: StepContext, decoder_tokens: torch.Tensor | None = None
    ) -> torch.Tensor:
        if self.spec.arch != "encoder-decoder":
            return self._encode(inputs, ctx)
        memory = ctx.kv_cache.get(id(self))
        if memory is None:
            memory = self._encode(inputs, ctx)
            if ctx.use_cache:
                ctx.kv_cache[id(self)] = memory
        assert decoder_tokens is not None
        return self._decode(decoder_tokens, memory, ctx)

    def logits(self, h: torch.Tensor) -> torch.Tensor:
        spec = self.spec
        if isinstance(self.embed, AdaptiveEmbedding):
            return self.embed.logits(h)
        if spec.head == "lm":
            weight = self.embed.weight if spec.tie_embeddings else self.lm_head.weight
            return F.linear(h, weight)
        if spec.head == "pooler":
            return torch.tanh(self.pooler(h[:, 0]))
        if spec.head == "classifier":
            return self.classifier(h[:, 0])
        return h

    def training_loss(self, h: torch.Tensor) -> torch.Tensor:
        """The training objective from the final hidden states."""
        if isinstance(self.embed, AdaptiveEmbedding):
            return self.embed.loss(h)
        return self.loss(self.logits(h))

    def loss(self, logits: torch.Tensor) -> torch.Tensor:
        """Cross-entropy over the vocabulary for LM heads (in fp32, as HF does); else a sum."""
        if self.spec.head == "lm":
            flat = logits.reshape(-1, logits.shape[-1]).float()
            target = torch.zeros(flat.shape[0], dtype=torch.long, device=flat.device)
            return F.cross_entropy(flat, target)
        return logits.float().sum()
