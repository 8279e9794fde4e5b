"""The closed-form path agrees with the counted path."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from profiles.closed_form import parameters, training_flops
from profiles.model_catalog import Catalog
from profiles.profile import Profile

Run = Callable[..., Profile]


def _stacks(catalog: Catalog) -> list[str]:
    return [
        name
        for name, e in catalog.entries.items()
        if e.model.family == "transformer"
        and e.model.spec.arch != "encoder-decoder"
        and not e.model.spec.audio_frontend
    ]


class TestClosedForm:
    @pytest.mark.slow  # every catalog model built
    def test_parameters_equal_the_built_model(self, catalog: Catalog, run: Run) -> None:
        for name in _stacks(catalog):
            counted = run(name, task="inference", batch_size=1, prompt_tokens=4)
            assert parameters(catalog.resolve(name).spec) == counted.model["parameters"], name

    @pytest.mark.parametrize(
        ("name", "attention"),
        [
            ("llama-2-7b", "flash"),
            ("mixtral-8x7b", "flash"),
            ("bert-base", "flash"),
            ("gpt2", "materialized"),
            ("falcon-7b", "flash"),
            ("gemma-2-9b", "flash"),
        ],
    )
    def test_training_flops_equal_the_counted_matmuls_and_attention(
        self, catalog: Catalog, run: Run, name: str, attention: str
    ) -> None:
        p = run(name, task="training", batch_size=2, seq_len=256, attention=attention)
        counted = sum(
            k.flops
            for k in p.by_kind
            if k.kind in ("matmul", "attention") and k.phase != "optimizer"
        )
        expected = training_flops(catalog.resolve(name).spec, 2, 256, attention == "flash")
        assert counted == pytest.approx(expected, rel=1e-9)
