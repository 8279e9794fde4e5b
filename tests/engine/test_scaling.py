"""Data-parallel scaling: which link a ring crosses, the all-reduce, what backward hides."""

from __future__ import annotations

import math

import pytest

from knowledge import Knowledge
from service.engine.estimating import scaling
from service.engine.estimating.model import PerformanceModel
from service.engine.estimating.scaling import DEFAULT, Link, Params, data_parallel, link_for


@pytest.mark.parametrize(
    ("gpu", "count", "nvlink", "link", "p2p"),
    [
        ("h100-sxm-80gb", 8, None, "nvswitch-nvlink4", True),  # HGX baseboard: NVSwitch
        ("v100-sxm2-16gb", 8, None, "nvlink-2", True),  # DGX-1 hybrid cube-mesh, no switch
        ("rtx-3090", 2, True, "nvlink-3-bridge", True),  # a bridged pair
        ("rtx-3090", 4, True, "pcie-4-x16", True),  # bridges join pairs only
        ("rtx-4090", 2, None, "pcie-4-x16-host-staged", False),  # no peer-to-peer at all
        ("a100-sxm4-80gb", 16, None, "nvswitch-nvlink3+infiniband-hdr", True),  # two servers
    ],
)
def test_the_link_a_ring_crosses(
    knowledge: Knowledge, gpu: str, count: int, nvlink: bool | None, link: str, p2p: bool
) -> None:
    found = link_for(knowledge, knowledge.gpus[gpu], count, nvlink)
    assert found.id == link
    assert found.p2p is p2p
    assert found.why  # every link says why it was chosen


def test_between_servers_the_network_binds(knowledge: Knowledge) -> None:
    gpu = knowledge.gpus["h100-sxm-80gb"]
    inside = link_for(knowledge, gpu, 8)
    across = link_for(knowledge, gpu, 16)
    network = knowledge.interconnects[scaling.DEFAULT_NETWORK]
    assert across.bandwidth_gb_per_s == network.bandwidth_gb_per_s_per_direction
    assert across.bandwidth_gb_per_s < inside.bandwidth_gb_per_s


@pytest.mark.parametrize(
    ("gpu", "network"),
    [
        ("a100-sxm4-80gb", "infiniband-hdr"),  # DGX A100: a 200 Gb/s HDR port per GPU
        ("a10", "infiniband-hdr"),
        ("h100-sxm-80gb", "infiniband-ndr"),  # DGX H100: a 400 Gb/s NDR port per GPU
        ("b200-sxm-180gb", "infiniband-ndr"),
        ("mi300x", "infiniband-ndr"),  # no record names CDNA 3's servers: the default
    ],
)
def test_servers_are_joined_by_their_generation_s_network(
    knowledge: Knowledge, gpu: str, network: str
) -> None:
    """An A100 cluster is not assumed to have an H100 cluster's network: 16 A100s cross
    HDR between their two servers, half NDR's bandwidth."""
    found = scaling.server_network(knowledge, knowledge.gpus[gpu])
    assert found.id == network
    across = link_for(knowledge, knowledge.gpus[gpu], 16)
    assert across.id.endswith("+" + network)
    assert found.name in across.why
    assert across.bandwidth_gb_per_s <= found.bandwidth_gb_per_s_per_direction


def test_host_staged_copies_get_half_the_pcie(knowledge: Knowledge) -> None:
    gpu = knowledge.gpus["rtx-4090"]
    pcie = knowledge.interconnects["pcie-4-x16"].bandwidth_gb_per_s_per_direction
    assert link_for(knowledge, gpu, 4).bandwidth_gb_per_s == pytest.approx(pcie / 2)


def test_ring_allreduce_moves_two_n_minus_one_over_n_of_the_bytes() -> None:
    gb = 1e9
    one_bucket = scaling.DDP_BUCKET_BYTES
    assert scaling.ring_allreduce_s(gb, 1, 100.0, 0.0) == 0.0
    assert scaling.ring_allreduce_s(gb, 8, 100.0, 0.0) == pytest.approx(2 * 7 / 8 * gb / 100e9)
    # latency: 2(n-1) steps per bucket
    assert scaling.ring_allreduce_s(one_bucket, 4, 1e9, 10.0) == pytest.approx(
        2 * 3 / 4 * one_bucket / 1e18 + 6 * 10e-6
    )


LINK = Link("test", "test link", 10.0, 0.0, True, "a test")
NO_SYNC = Params(bandwidth_share=1.0, overlap=1.0, sync_us=0.0, straggler=0.0)


def test_one_gpu_is_the_single_step() -> None:
    s = data_parallel(0.1, 0.06, 1e9, 1, None)
    assert s.step_s == 0.1
    assert s.allreduce_s == 0.0
    assert s.bound == "compute"


def test_backward_hides_all_buckets_but_the_last() -> None:
    gradients = 40 * scaling.DDP_BUCKET_BYTES  # 40 buckets
    s = data_parallel(1.0, 0.9, gradients, 8, LINK, NO_SYNC)
    # long backward: all but the last bucket overlap, the last one is exposed
    assert s.overlapped_s == pytest.approx(s.allreduce_s * 39 / 40)
    assert s.exposed_s == pytest.approx(s.allreduce_s / 40)
    assert s.step_s == pytest.approx(1.0 + s.exposed_s)
    assert s.bound == "compute"


def test_large_gradients_on_a_slow_link_are_communication_bound() -> None:
    slow = Link("slow", "slow link", 1.0, 10.0, False, "a test")
    s = data_parallel(0.05, 0.03, 4e9, 4, slow, NO_SYNC)
    assert s.bound == "communication"
    assert s.exposed_s == pytest.approx(s.allreduce_s - 0.03)
    assert s.efficiency < 0.1


def test_more_gpus_cost_more_per_step_and_sync_is_added() -> None:
    steps = [data_parallel(0.2, 0.12, 5e8, n, LINK).step_s for n in (2, 4, 8)]
    assert steps == sorted(steps)
    assert steps[0] > 0.2
    s = data_parallel(0.2, 0.12, 5e8, 2, LINK)
    assert s.sync_s == pytest.approx(DEFAULT.sync_us * 1e-6)
    assert s.compute_s == pytest.approx(0.2 * (1 + DEFAULT.straggler))


def test_scaling_from_the_measured_single_gpu_row(
    knowledge: Knowledge, model: PerformanceModel
) -> None:
    """Lambda's 2x/4x/8x rows, each predicted from the measured 1-GPU row of the same
    suite, workload, GPU and precision (this isolates the scaling model)."""
    report = scaling.validate_scaling(knowledge, model.profiles)
    summary = report["summary"]
    assert summary["all"]["rows"] > 1500
    for count in (2, 4, 8):
        assert summary[f"count={count}"]["median_ape"] < 0.08
    assert summary["all"]["median_ape"] < 0.06
    # superlinear rows (n GPUs faster than n times one) are named, not fitted
    assert all(r["measured_efficiency"] > 1 for r in report["superlinear"])
    assert all(math.isfinite(r["predicted"]) for r in report["rows"])
