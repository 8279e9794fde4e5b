"""Uniform handles on the built models: make inputs, compute a loss, prefill, decode."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

from profiles.models.blocks import TransformerModel
from profiles.models.transformer import StepContext
from profiles.workload import Workload


@dataclass
class Runnable:
    """A model plus how to feed it. ``generative`` models can decode with a KV cache."""

    module: nn.Module
    generative: bool = False
    image_size: int | None = None
    channels: int = 3

    @property
    def device(self) -> torch.device:
        """Where the module lives: meta when counting, the CPU for a real check."""
        return next(self.module.parameters()).device

    def tokens_per_sample(self, workload: Workload) -> int:
        return 1

    def inputs(self, workload: Workload) -> tuple[Any, ...]:
        size = workload.image_size or self.image_size or 224
        return (
            torch.empty(
                workload.batch_size,
                self.channels,
                size,
                size,
                device=self.device,
                dtype=next(self.module.parameters()).dtype,
            ),
        )

    def loss(self, inputs: tuple[Any, ...], ctx: StepContext) -> torch.Tensor:
        """Cross-entropy of the class logits (one label per sample)."""
        logits = self.forward(inputs, ctx)
        target = torch.zeros(logits.shape[0], dtype=torch.long, device=logits.device)
        return F.cross_entropy(logits.float(), target)

    def forward(self, inputs: tuple[Any, ...], ctx: StepContext) -> torch.Tensor:
        if getattr(self.module, "wants_context", False):
            out: torch.Tensor = self.module(*inputs, ctx=ctx)
        else:
            out = self.module(*inputs)
        return out

    def decode(self, batch: int, ctx: StepContext) -> torch.Tensor:
        raise NotImplementedError

    def decoder_prompt(self, inputs: tuple[Any, ...]) -> int:
        """Positions the decoder has filled after the prefill (its KV cache length)."""
        return 0


class TransformerRunnable(Runnable):
    """Token models. Encoder-decoders get ``seq_len`` tokens on both sides (Whisper: 30 s
    of audio into the encoder, ``seq_len`` tokens into the decoder)."""

    module: TransformerModel

    def __init__(self, module: TransformerModel) -> None:
        super().__init__(module, generative=module.spec.head == "lm")

    def _tokens(self, batch: int, length: int) -> torch.Tensor:
        return torch.zeros(batch, length, dtype=torch.long, device=self.device)

    def tokens_per_sample(self, workload: Workload) -> int:
        if workload.trains:
            return workload.seq_len or 0
        return workload.prompt_tokens or 0

    def inputs(self, workload: Workload) -> tuple[Any, ...]:
        spec = self.module.spec
        length = workload.seq_len if workload.trains else workload.prompt_tokens
        assert length is not None
        batch = workload.batch_size
        if spec.audio_frontend:
            dtype = self.module.embed.weight.dtype
            mel = torch.empty(
                batch,
                spec.audio_frontend,
                2 * spec.encoder_positions,
                device=self.device,
                dtype=dtype,
            )
            return mel, self._tokens(batch, length)
        if spec.arch == "encoder-decoder":
            # training: as many target tokens as source tokens; generation starts from one
            return self._tokens(batch, length), self._tokens(
                batch, length if workload.trains else 1
            )
        return (self._tokens(batch, length),)

    def decoder_prompt(self, inputs: tuple[Any, ...]) -> int:
        return int(inputs[-1].shape[1])

    def forward(self, inputs: tuple[Any, ...], ctx: StepContext) -> torch.Tensor:
        decoder = inputs[1] if len(inputs) > 1 else None
        return self.module.logits(self.module.hidden_states(inputs[0], ctx, decoder))

    def loss(self, inputs: tuple[Any, ...], ctx: StepContext) -> torch.Tensor:
        decoder = inputs[1] if len(inputs) > 1 else None
        return self.module.training_loss(self.module.hidden_states(inputs[0], ctx, decoder))

    def decode(self, batch: int, ctx: StepContext) -> torch.Tensor:
        """One generated token per sequence, attending to everything cached so far."""
        token = self._tokens(batch, 1)
        if self.module.spec.arch == "encoder-decoder":
            return self.module.logits(self.module.hidden_states(None, ctx, token))  # type: ignore[arg-type]
        return self.module.logits(self.module.hidden_states(token, ctx))
