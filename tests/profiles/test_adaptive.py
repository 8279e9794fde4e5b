"""Adaptive input and adaptive softmax (Transformer-XL): weights, logits, validation."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from profiles.description import resolve_family
from profiles.errors import InvalidDescription
from profiles.profile import Profile

Run = Callable[..., Profile]
TRAIN = {"task": "training", "batch_size": 2, "seq_len": 64, "precision": "fp32"}
BASE: dict[str, Any] = {
    "family": "transformer",
    "layers": 1,
    "hidden": 64,
    "heads": 2,
    "ffn": 128,
    "vocab": 10000,
    "position": "none",
    "tie_embeddings": True,
}
ADAPTIVE = {**BASE, "adaptive_cutoffs": [1000, 4000], "adaptive_tail_shares": [0.1, 0.05]}


def _logits(p: Profile) -> float:
    """Bytes written by the forward matmuls (the output layers dominate)."""
    return sum(c.bytes_written for c in p.by_kind if c.phase == "forward" and c.kind == "matmul")


class TestWeights:
    def test_div_val_one_keeps_one_tied_table(self, run: Run) -> None:
        plain = run(BASE, **TRAIN).model["parameters"]
        adaptive = run(ADAPTIVE, **TRAIN).model["parameters"]
        assert adaptive - plain == 10000 + 2 * 64 + 2  # output bias, cluster weight and bias

    def test_div_val_shrinks_the_tail_tables(self, run: Run) -> None:
        p = run({**ADAPTIVE, "adaptive_div_val": 4}, **TRAIN)
        tables = 1000 * 64 + 3000 * 16 + 6000 * 4
        projections = 64 * 16 + 64 * 4
        blocks = run(BASE, **TRAIN).model["parameters"] - 10000 * 64
        expected = blocks + tables + projections + 10000 + 2 * 64 + 2
        assert p.model["parameters"] == expected


class TestTrainingLogits:
    def test_only_the_head_and_the_tail_shares_get_logits(self, run: Run) -> None:
        tokens = 2 * 64
        head = tokens * (1000 + 2)
        tails = round(0.1 * tokens) * 3000 + round(0.05 * tokens) * 6000
        full = run(BASE, **TRAIN)
        adaptive = run(ADAPTIVE, **TRAIN)
        saved = _logits(full) - _logits(adaptive)
        assert saved == pytest.approx(4 * (tokens * 10000 - head - tails), rel=0.02)

    def test_inference_still_scores_the_whole_vocabulary(self, run: Run) -> None:
        p = run(ADAPTIVE, task="inference", batch_size=1, prompt_tokens=8, output_tokens=2)
        assert p.flops["decode_per_step"] == pytest.approx(
            run(BASE, task="inference", batch_size=1, prompt_tokens=8, output_tokens=2).flops[
                "decode_per_step"
            ],
            rel=0.05,
        )


class TestValidation:
    @pytest.mark.parametrize(
        ("fields", "field"),
        [
            pytest.param({"adaptive_cutoffs": [4000, 1000]}, "adaptive_cutoffs", id="falling"),
            pytest.param({"adaptive_cutoffs": [1000, 10000]}, "adaptive_cutoffs", id="at-vocab"),
            pytest.param({"adaptive_tail_shares": [0.1]}, "adaptive_tail_shares", id="one-share"),
            pytest.param(
                {"adaptive_tail_shares": [0.6, 0.5]}, "adaptive_tail_shares", id="shares-over-1"
            ),
            pytest.param({"tie_embeddings": False}, "tie_embeddings", id="untied"),
        ],
    )
    def test_errors_name_the_field(self, fields: dict[str, Any], field: str) -> None:
        with pytest.raises(InvalidDescription) as caught:
            resolve_family({**ADAPTIVE, **fields})
        assert caught.value.field == f"model.{field}"

    def test_shares_need_cutoffs(self) -> None:
        with pytest.raises(InvalidDescription) as caught:
            resolve_family({**BASE, "adaptive_tail_shares": [0.1]})
        assert caught.value.field == "model.adaptive_cutoffs"
