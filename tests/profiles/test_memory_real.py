"""The meta-device memory of a training step against one real step on the CPU.

For each model the profiler builds its module on the meta device and counts a step; the
same module is then materialised on the CPU and trained for one real step (same inputs,
loss and context, the workload's optimizer in fp32), its peak taken from the allocator's
running total in torch.profiler's memory events (:mod:`profiles.measure`). The profile's
memory without the stated runtime overhead (the CUDA context and fragmentation, which a
CPU run has not) must agree with that peak within 10 %.
"""

from __future__ import annotations

from typing import Any

import pytest
import torch

from profiles.build import build
from profiles.description import resolve
from profiles.measure import real_step_peak
from profiles.model_catalog import Catalog
from profiles.profile import DTYPES, Memory, profile
from profiles.workload import Workload, WorkloadSchema

pytestmark = pytest.mark.slow  # real training steps on the CPU

TOLERANCE = 0.10
SMALL_ADAPTIVE = {
    "family": "transformer",
    "layers": 2,
    "hidden": 256,
    "heads": 4,
    "ffn": 1024,
    "vocab": 50000,
    "norm": "layernorm",
    "activation": "relu",
    "gated": False,
    "position": "none",
    "tie_embeddings": True,
    "adaptive_cutoffs": [5000, 10000, 40000],
    "adaptive_tail_shares": [0.05, 0.12, 0.02],
}
FROZEN_BACKBONE = {
    "input_shape": [3, 128, 128],
    "layers": [
        {
            "type": "group",
            "frozen": True,
            "layers": [
                {"type": "conv2d", "out_channels": 32, "kernel": 7, "stride": 2, "bias": False},
                {"type": "frozen_batchnorm"},
                {"type": "relu"},
            ],
        },
        {
            "type": "branch",
            "name": "p2",
            "layers": [{"type": "conv2d", "out_channels": 64, "kernel": 1}],
        },
        {"type": "conv2d", "out_channels": 64, "kernel": 3, "stride": 2, "bias": False},
        {"type": "frozen_batchnorm"},
        {"type": "relu"},
        {
            "type": "heads",
            "from": ["p2"],
            "layers": [
                {"type": "roi_align", "rois": 16, "output_size": 7},
                {"type": "flatten"},
                {"type": "linear", "out_features": 256},
            ],
        },
    ],
}
SMALL_LLAMA = {
    "model_type": "llama",
    "num_hidden_layers": 4,
    "hidden_size": 512,
    "intermediate_size": 1376,
    "num_attention_heads": 8,
    "num_key_value_heads": 2,
    "vocab_size": 32000,
}


def counted_and_real(
    catalog: Catalog, description: dict[str, Any], **fields: Any
) -> tuple[Memory, int]:
    """(the profile's memory, the real step's allocator peak) for one fp32 training step."""
    model = resolve(description, catalog)
    workload: Workload = WorkloadSchema().load({"task": "training", "precision": "fp32", **fields})
    counted = profile(model, workload, 60).memory
    runnable = build(model, DTYPES[workload.precision])
    return counted, real_step_peak(runnable, workload).peak_bytes


def step_bytes(memory: Memory) -> float:
    """The step's own memory: everything but the stated runtime overhead."""
    return memory.total_bytes - memory.runtime_overhead_bytes


class TestMeasurement:
    def test_the_allocator_sees_the_weights_states_and_step(self, catalog: Catalog) -> None:
        model = resolve({"family": "cnn", "channels": [8], "blocks": [1]}, catalog)
        workload = WorkloadSchema().load(
            {"task": "training", "batch_size": 1, "precision": "fp32", "optimizer": "adam"}
        )
        runnable = build(model, torch.float32)
        weights = sum(p.numel() * 4 for p in runnable.module.parameters())
        peak = real_step_peak(runnable, workload)
        assert peak.start_bytes >= 3 * weights  # weights and Adam's two states
        assert peak.peak_bytes > peak.start_bytes + weights  # + gradients and activations


class TestConvolutionNetworks:
    @pytest.mark.parametrize(
        ("description", "fields"),
        [
            pytest.param(
                {"family": "resnet", "depth": 18},
                {"batch_size": 2, "image_size": 224, "optimizer": "sgd+momentum"},
                id="resnet-18-b2-224",
            ),
            pytest.param(
                {"name": "resnet-50"},
                {"batch_size": 2, "image_size": 224, "optimizer": "sgd+momentum"},
                id="resnet-50-b2-224",
            ),
        ],
    )
    def test_counted_peak_matches_a_real_step(
        self, catalog: Catalog, description: dict[str, Any], fields: dict[str, Any]
    ) -> None:
        counted, real = counted_and_real(catalog, description, **fields)
        assert step_bytes(counted) == pytest.approx(real, rel=TOLERANCE)


class TestLayerLists:
    def test_frozen_layers_save_nothing_for_backward(self, catalog: Catalog) -> None:
        counted, real = counted_and_real(
            catalog, FROZEN_BACKBONE, batch_size=2, optimizer="sgd+momentum"
        )
        assert step_bytes(counted) == pytest.approx(real, rel=TOLERANCE)


class TestTransformers:
    @pytest.mark.parametrize(
        ("description", "fields"),
        [
            pytest.param(
                {"name": "bert-base"},
                {"batch_size": 2, "seq_len": 128, "optimizer": "adamw"},
                id="bert-base-b2-s128",
            ),
            pytest.param(
                {"name": "gpt2"},
                {"batch_size": 2, "seq_len": 128, "optimizer": "adamw"},
                id="gpt2-b2-s128",
            ),
            pytest.param(
                SMALL_ADAPTIVE,
                {"batch_size": 2, "seq_len": 128, "optimizer": "adam"},
                id="adaptive-softmax-div1-b2-s128",
            ),
            pytest.param(
                {**SMALL_ADAPTIVE, "adaptive_div_val": 4},
                {"batch_size": 2, "seq_len": 128, "optimizer": "adam"},
                id="adaptive-softmax-div4-b2-s128",
            ),
            pytest.param(
                {"hf_config": SMALL_LLAMA},
                {"batch_size": 2, "seq_len": 128, "optimizer": "adamw"},
                id="llama-4-layers-b2-s128",
            ),
        ],
    )
    def test_counted_peak_matches_a_real_step(
        self, catalog: Catalog, description: dict[str, Any], fields: dict[str, Any]
    ) -> None:
        counted, real = counted_and_real(catalog, description, **fields)
        assert step_bytes(counted) == pytest.approx(real, rel=TOLERANCE)


class TestGradientsAndActivationsOverlap:
    def test_the_peak_is_below_the_sum_of_the_lines(self, catalog: Catalog) -> None:
        """Backward frees activations as it writes gradients: both never peak together."""
        counted, real = counted_and_real(
            catalog, {"name": "bert-base"}, batch_size=1, seq_len=64, optimizer="sgd"
        )
        lines = counted.parameters_bytes + counted.gradients_bytes + counted.activations_bytes
        assert counted.freed_before_peak_bytes > 0
        assert step_bytes(counted) < lines + counted.temporary_peak_bytes
        assert step_bytes(counted) == pytest.approx(real, rel=TOLERANCE)
