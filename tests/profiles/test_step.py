"""What the counted step measures: checkpointing, attention kernels, LoRA, inference."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from profiles.closed_form import attention_flops, kv_cache_bytes, matmul_flops_per_token
from profiles.errors import ProfileTooSlow
from profiles.lora import NF4_BYTES_PER_PARAMETER
from profiles.profile import Profile

Run = Callable[..., Profile]
TRAIN = {"task": "training", "batch_size": 1, "seq_len": 1024}


class TestActivations:
    def test_checkpointing_orders_memory_and_costs_recompute(self, run: Run) -> None:
        none = run("llama-2-7b", **TRAIN)
        selective = run("llama-2-7b", **TRAIN, activation_checkpointing="selective")
        full = run("llama-2-7b", **TRAIN, activation_checkpointing="full")
        assert full.memory.activations_bytes < selective.memory.activations_bytes
        assert selective.memory.activations_bytes < none.memory.activations_bytes
        # full checkpointing keeps little more than each layer's input
        layer_inputs = 32 * 1024 * 4096 * 2
        assert full.memory.activations_bytes < 3 * layer_inputs + 1024 * 32000 * 10
        # recomputation shows as extra forward work (of the blocks, not the head) in backward
        assert full.flops["backward"] > none.flops["backward"] * 1.3

    def test_materialized_attention_saves_the_score_matrix(self, run: Run) -> None:
        flash = run("llama-2-7b", **TRAIN)
        naive = run("llama-2-7b", **TRAIN, attention="materialized")
        scores = 32 * 32 * 1024 * 1024  # layers x heads x s^2, one batch
        extra = naive.memory.activations_bytes - flash.memory.activations_bytes
        assert extra >= 2 * scores  # at least one bf16 copy of the scores per layer

    def test_parameters_are_not_activations(self, run: Run) -> None:
        p = run("gpt2", task="training", batch_size=1, seq_len=1)
        assert p.memory.activations_bytes < p.memory.parameters_bytes / 10

    def test_activations_scale_with_batch(self, run: Run) -> None:
        one = run("gpt2", task="training", batch_size=1, seq_len=256)
        four = run("gpt2", task="training", batch_size=4, seq_len=256)
        assert four.memory.activations_bytes == pytest.approx(
            4 * one.memory.activations_bytes, rel=0.02
        )


class TestFineTuning:
    def test_lora_trains_only_the_adapters(self, run: Run) -> None:
        p = run(
            "llama-2-7b", task="fine-tuning", method="lora", lora_rank=8, batch_size=1, seq_len=512
        )
        spec = p.model["spec"]
        d, f, kv = spec["hidden"], spec["ffn"], spec["kv_heads"] * spec["head_dim"]
        per_layer = 8 * ((d + d) * 2 + (d + kv) * 2 + 2 * (d + f) + (f + d))
        assert p.model["trainable_parameters"] == spec["layers"] * per_layer
        assert p.memory.gradients_bytes == 2 * p.model["trainable_parameters"]
        assert p.memory.optimizer_states_bytes == 8 * p.model["trainable_parameters"]

    def test_qlora_stores_the_base_in_nf4(self, run: Run) -> None:
        p = run("llama-2-7b", task="fine-tuning", method="qlora", batch_size=1, seq_len=512)
        base = p.model["parameters"] - p.model["trainable_parameters"]
        expected = base * NF4_BYTES_PER_PARAMETER + 2 * p.model["trainable_parameters"]
        assert p.memory.parameters_bytes == pytest.approx(expected)


class TestInference:
    def test_decode_reads_the_weights_and_the_cache(self, run: Run) -> None:
        p = run(
            "llama-2-7b",
            task="inference",
            batch_size=1,
            prompt_tokens=1024,
            output_tokens=128,
            precision="fp16",
        )
        first, last = p.phases["decode-first"], p.phases["decode-last"]
        weights = p.memory.parameters_bytes
        assert first.bytes_read > weights
        assert last.bytes_read > first.bytes_read  # the cache grew by 127 tokens
        assert p.memory.kv_cache_bytes == 2 * 32 * 32 * 128 * (1024 + 128) * 2

    def test_decode_flops_match_the_closed_form(self, run: Run, catalog) -> None:  # type: ignore[no-untyped-def]
        model = catalog.resolve("llama-3-8b")
        p = run(
            "llama-3-8b",
            task="inference",
            batch_size=2,
            prompt_tokens=512,
            output_tokens=64,
            precision="bf16",
        )
        counted = sum(
            k.flops
            for k in p.by_kind
            if k.phase == "decode-first" and k.kind in ("matmul", "attention")
        )
        expected = 2 * matmul_flops_per_token(model.spec) + attention_flops(
            model.spec, 2, 1, 513, True
        )
        assert counted == pytest.approx(expected, rel=1e-9)
        assert p.memory.kv_cache_bytes == kv_cache_bytes(model.spec, 2, 512 + 64, 2)

    def test_int8_weights_take_one_byte(self, run: Run) -> None:
        p = run(
            "llama-2-7b",
            task="inference",
            batch_size=1,
            prompt_tokens=16,
            output_tokens=4,
            precision="int8",
        )
        assert p.memory.parameters_bytes == p.model["parameters"]
        assert p.phases["decode-first"].bytes_read < 1.3 * p.model["parameters"]

    def test_encoder_only_models_cannot_generate(self, run: Run) -> None:
        from profiles.errors import InvalidDescription

        with pytest.raises(InvalidDescription, match="output_tokens"):
            run("bert-base", task="inference", batch_size=1, prompt_tokens=16, output_tokens=4)

    def test_encoder_decoder_models_generate(self, run: Run) -> None:
        """T5 caches the decoder's own keys and values (its start token and each generated
        one), the cross-attention keys and values of the encoder output (once), and the
        encoder output itself; the encoder's self-attention runs once and caches nothing.
        (A regression: the encoder's keys were written into the decoder-sized buffer.)"""
        p = run("t5-base", task="inference", batch_size=1, prompt_tokens=128, output_tokens=16)
        layers, hidden, two_bytes = 12, 768, 2
        own = layers * 2 * (1 + 16) * hidden * two_bytes
        cross = layers * 2 * 128 * hidden * two_bytes
        encoder_output = 128 * hidden * two_bytes
        assert p.memory.kv_cache_bytes == own + cross + encoder_output
        assert p.phases["decode-first"].flops > 0
        whisper = run("whisper-small", task="inference", batch_size=1, prompt_tokens=8,
                      output_tokens=4)  # fmt: skip
        assert whisper.phases["decode-last"].flops > 0


class TestLimits:
    def test_a_slow_profile_is_stopped(self, catalog) -> None:  # type: ignore[no-untyped-def]
        from profiles.profile import profile
        from profiles.workload import WorkloadSchema

        workload = WorkloadSchema().load({"task": "training", "batch_size": 1, "seq_len": 64})
        with pytest.raises(ProfileTooSlow, match="stopped after"):
            profile(catalog.resolve("llama-3.1-405b"), workload, time_limit_s=0.05)

    def test_learned_positions_bound_the_sequence(self, run: Run) -> None:
        from profiles.errors import InvalidDescription

        with pytest.raises(InvalidDescription, match="1024 learned positions"):
            run("gpt2", task="training", batch_size=1, seq_len=2048)


class TestOperatorBreakdown:
    def test_ops_add_up_to_the_kinds(self, run: Run) -> None:
        p = run("gpt2", task="training", batch_size=2, seq_len=128)
        for phase in ("forward", "backward"):
            ops = [o for o in p.by_op if o.phase == phase]
            kinds = [k for k in p.by_kind if k.phase == phase]
            assert sum(o.flops for o in ops) == pytest.approx(sum(k.flops for k in kinds))
            assert sum(o.bytes_read for o in ops) == pytest.approx(sum(k.bytes_read for k in kinds))
            assert "aten.mm" in {o.op for o in ops} or "aten.addmm" in {o.op for o in ops}
        total = sum(c.flops for c in p.phases.values())
        moved = sum(c.bytes_read + c.bytes_written for c in p.phases.values())
        assert p.arithmetic_intensity == pytest.approx(total / moved)
