"""Counted figures against published ones (the issue's acceptance figures)."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from profiles.model_catalog import Catalog
from profiles.profile import Profile

Run = Callable[..., Profile]
GIB = 2**30


class TestParameterCounts:
    @pytest.mark.parametrize(
        ("name", "published"),
        [
            pytest.param("bert-base", 109_482_240, id="BERT-base (HF BertModel)"),
            pytest.param("gpt2", 124_439_808, id="GPT-2 small (HF GPT2Model)"),
            pytest.param("llama-2-7b", 6_738_415_616, id="Llama 2 7B"),
            pytest.param("llama-3-8b", 8_030_261_248, id="Llama 3 8B"),
            pytest.param("mixtral-8x7b", 46_702_792_704, id="Mixtral 8x7B total"),
        ],
    )
    def test_exact(self, run: Run, name: str, published: int) -> None:
        assert (
            run(name, task="inference", batch_size=1, prompt_tokens=8).model["parameters"]
            == published
        )

    def test_mixtral_active_parameters(self, run: Run) -> None:
        # 2 of 8 experts per token: 46.70 B - 32 layers x 6 idle experts x 3 x 4096 x 14336
        profile = run("mixtral-8x7b", task="inference", batch_size=1, prompt_tokens=8)
        assert profile.model["active_parameters"] == 12_879_925_248

    @pytest.mark.slow  # every catalog model built
    def test_every_catalog_count_is_exact(self, catalog: Catalog) -> None:
        from profiles.build import build

        for entry in catalog.entries.values():
            if entry.parameters is None:
                continue
            module = build(entry.model, __import__("torch").bfloat16).module
            assert sum(p.numel() for p in module.parameters()) == entry.parameters, entry.name


class TestTrainingFlops:
    @pytest.mark.parametrize(
        ("name", "seq"),
        [("llama-2-7b", 4096), ("llama-3-8b", 2048), ("mistral-7b", 2048), ("gpt2-xl", 1024)],
    )
    def test_dense_decoder_within_3_percent_of_6nt_plus_attention(
        self, run: Run, name: str, seq: int
    ) -> None:
        batch = 2
        p = run(name, task="training", batch_size=batch, seq_len=seq)
        spec = p.model["spec"]
        embedding = spec["vocab"] * spec["hidden"]
        n = p.model["parameters"] - (0 if spec["tie_embeddings"] else embedding)
        if spec["position"] == "learned":
            n -= spec["max_positions"] * spec["hidden"]
        tokens = batch * seq
        d_attn = spec["heads"] * (spec["head_dim"] or spec["hidden"] // spec["heads"])
        expected = 6 * n * tokens + 6 * spec["layers"] * seq * d_attn * tokens  # Kaplan et al.
        assert p.flops["total"] == pytest.approx(expected, rel=0.03)

    def test_resnet50_forward_is_4_1_gmacs(self, run: Run) -> None:
        p = run("resnet-50", task="training", batch_size=1, image_size=224)
        forward = sum(
            k.flops
            for k in p.by_kind
            if k.phase == "forward" and k.kind in ("convolution", "matmul")
        )
        assert forward == pytest.approx(8.2e9, rel=0.01)  # 4.1 G multiply-accumulates


class TestMemory:
    @pytest.mark.parametrize("name", ["llama-2-7b", "gpt2", "bert-base"])
    def test_adamw_mixed_precision_is_16_bytes_per_parameter(self, run: Run, name: str) -> None:
        p = run(
            name, task="training", batch_size=1, seq_len=128, precision="bf16", optimizer="adamw"
        )
        m = p.memory
        state = m.parameters_bytes + m.gradients_bytes + m.optimizer_states_bytes
        assert (state + m.master_weights_bytes) / p.model["parameters"] == 16

    def test_llama2_7b_kv_cache_at_4096_tokens_is_2_gib(self, run: Run) -> None:
        p = run(
            "llama-2-7b",
            task="inference",
            batch_size=1,
            prompt_tokens=4000,
            output_tokens=96,
            precision="fp16",
        )
        assert p.memory.kv_cache_bytes == 2 * GIB

    def test_fp32_training_has_no_master_copy(self, run: Run) -> None:
        p = run("gpt2", task="training", batch_size=1, seq_len=128, precision="fp32")
        assert p.memory.master_weights_bytes == 0
        assert p.memory.parameters_bytes == 4 * p.model["parameters"]
