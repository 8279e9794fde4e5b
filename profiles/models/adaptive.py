"""Adaptive input and adaptive softmax with tied weights, as Transformer-XL trains them.

The vocabulary is split at ``adaptive_cutoffs`` into a head (the most frequent tokens) and
tail clusters; cluster ``i`` embeds in ``hidden // div_val**i`` dimensions, projected to
``hidden`` (Baevski & Auli 2019; NVIDIA DeepLearningExamples' ``AdaptiveEmbedding`` and
``ProjectedAdaptiveLogSoftmax``, tied embeddings and projections). In training the softmax
never forms the logits of the whole vocabulary: every token gets the head's logits (its
tokens plus one per tail cluster), and the tokens whose target falls in a tail cluster get
that cluster's logits too. On the meta device there are no targets, so each cluster takes
``adaptive_tail_shares`` of the tokens (a stated property of the data set).
"""

from __future__ import annotations

import itertools
import math
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

from profiles.models.transformer import TransformerSpec


class AdaptiveEmbedding(nn.Module):
    """The clusters' embedding tables (tied to the softmax), projections and output biases."""

    def __init__(self, spec: TransformerSpec, factory: dict[str, Any]) -> None:
        super().__init__()
        d, div = spec.hidden, spec.adaptive_div_val
        self.hidden = d
        self.bounds = (0, *spec.adaptive_cutoffs, spec.vocab)
        tails = spec.adaptive_tail_shares
        self.shares = (1.0 - sum(tails), *tails)
        sizes = [hi - lo for lo, hi in itertools.pairwise(self.bounds)]
        if div == 1:  # one table for the whole vocabulary, sliced per cluster
            self.tables = nn.ModuleList([nn.Embedding(spec.vocab, d, **factory)])
            widths = [d] * len(sizes)
        else:
            widths = [d // div**i for i in range(len(sizes))]
            self.tables = nn.ModuleList(
                nn.Embedding(n, w, **factory) for n, w in zip(sizes, widths, strict=True)
            )
        self.widths = widths
        self.projections = nn.ParameterList(
            nn.Parameter(torch.empty(d, w, **factory)) for w in widths[1:] if w != d
        )
        self.bias = nn.Parameter(torch.empty(spec.vocab, **factory))
        self.cluster_weight = nn.Parameter(torch.empty(len(sizes) - 1, d, **factory))
        self.cluster_bias = nn.Parameter(torch.empty(len(sizes) - 1, **factory))

    def _table(self, i: int) -> torch.Tensor:
        table = self.tables[i]
        assert isinstance(table, nn.Embedding)
        return table.weight

    @property
    def weight(self) -> torch.Tensor:
        return self._table(0)

    def _cluster(self, i: int) -> tuple[torch.Tensor, torch.Tensor | None]:
        """(embedding rows of cluster ``i``, its projection or None)."""
        lo, hi = self.bounds[i], self.bounds[i + 1]
        if len(self.tables) == 1:
            return self._table(0)[lo:hi], None
        proj = self.projections[i - 1] if self.widths[i] != self.hidden else None
        return self._table(i), proj

    def _count(self, i: int, tokens: int) -> int:
        return min(tokens, math.ceil(self.shares[i] * tokens))

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        if len(self.tables) == 1:
            return F.embedding(tokens, self._table(0)) * self.hidden**0.5
        flat = tokens.reshape(-1)
        out = torch.zeros(flat.shape[0], self.hidden, device=tokens.device, dtype=self.bias.dtype)
        for i in range(len(self.tables)):
            n = self._count(i, flat.shape[0])
            weight, proj = self._cluster(i)
            emb = F.embedding(flat[:n], weight)
            if proj is not None:
                emb = F.linear(emb, proj)
            out = out.index_copy(0, torch.arange(n, device=tokens.device), emb)
        return out.view(*tokens.shape, self.hidden) * self.hidden**0.5

    def _logits(self, h: torch.Tensor, i: int) -> torch.Tensor:
        lo, hi = self.bounds[i], self.bounds[i + 1]
        weight, proj = self._cluster(i)
        if proj is not None:
            h = F.linear(h, proj.t())
        return F.linear(h, weight, self.bias[lo:hi])

    def logits(self, h: torch.Tensor) -> torch.Tensor:
        """Every token's logits over the whole vocabulary (inference)."""
        return torch.cat([self._logits(h, i) for i in range(len(self.shares))], dim=-1)

    def loss(self, h: torch.Tensor) -> torch.Tensor:
        """Training: the head's log-softmax for every token, a tail's for its share."""
        flat = h.reshape(-1, h.shape[-1])
        head_weight, _ = self._cluster(0)
        weight = torch.cat([head_weight, self.cluster_weight])
        bias = torch.cat([self.bias[: self.bounds[1]], self.cluster_bias])
        head = F.linear(flat, weight, bias).float()
        target = torch.zeros(flat.shape[0], dtype=torch.long, device=h.device)
        loss = F.cross_entropy(head, target)
        for i in range(1, len(self.shares)):
            n = self._count(i, flat.shape[0])
            rows = flat.index_select(0, torch.arange(n, device=h.device))
            loss = loss + F.cross_entropy(self._logits(rows, i).float(), target[:n])
        return loss
