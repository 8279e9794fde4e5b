"""The workload's fixed field names, defaults and contradictions."""

from __future__ import annotations

from typing import Any

import pytest
from marshmallow import ValidationError

from profiles.workload import WorkloadSchema


def load(**data: Any) -> Any:
    return WorkloadSchema().load(data)


class TestWorkload:
    def test_defaults_are_filled_in(self) -> None:
        w = load(task="training", batch_size=4, seq_len=128)
        assert (w.precision, w.optimizer, w.activation_checkpointing, w.attention) == (
            "bf16",
            "adamw",
            "none",
            "flash",
        )
        lora = load(task="fine-tuning", method="lora", batch_size=1, seq_len=16)
        assert lora.lora_rank == 16

    @pytest.mark.parametrize(
        ("data", "field"),
        [
            pytest.param(
                {"task": "training", "batch_size": 1, "seqlen": 5}, "seqlen", id="unknown"
            ),
            pytest.param({"task": "training"}, "batch_size", id="missing-batch"),
            pytest.param(
                {"task": "inference", "batch_size": 1, "seq_len": 5},
                "seq_len",
                id="seq-len-for-inference",
            ),
            pytest.param(
                {"task": "training", "batch_size": 1, "prompt_tokens": 5},
                "prompt_tokens",
                id="prompt-for-training",
            ),
            pytest.param(
                {"task": "training", "batch_size": 1, "lora_rank": 8},
                "lora_rank",
                id="rank-without-lora",
            ),
            pytest.param(
                {"task": "training", "batch_size": 1, "precision": "int4"},
                "precision",
                id="int4-training",
            ),
            pytest.param({"task": "training", "batch_size": 0}, "batch_size", id="zero-batch"),
            pytest.param(
                {"task": "training", "batch_size": 1, "optimizer": "lion"},
                "optimizer",
                id="unknown-optimizer",
            ),
            pytest.param(
                {"task": "training", "batch_size": 1, "dataset_samples": 5, "dataset_tokens": 5},
                "dataset_tokens",
                id="both-dataset-sizes",
            ),
        ],
    )
    def test_bad_field_is_named(self, data: dict[str, Any], field: str) -> None:
        with pytest.raises(ValidationError) as info:
            WorkloadSchema().load(data)
        assert field in info.value.messages


class TestBatchSize:
    def test_recommender_batches_are_admitted_and_profile_fast(self, run: Any) -> None:
        """Lambda's NCF rows ran 10^7 samples per GPU; the meta device does not care."""
        p = run("ncf", task="training", batch_size=10_000_000, precision="fp16")
        assert p.samples_per_step == 10_000_000
        assert p.seconds < 10

    def test_past_the_bound_the_message_names_both_ends(self) -> None:
        with pytest.raises(ValidationError) as caught:
            load(task="training", batch_size=100_000_001)
        assert caught.value.messages == {"batch_size": ["must be between 1 and 100000000"]}
