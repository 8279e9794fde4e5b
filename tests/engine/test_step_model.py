"""The step model on made-up measurements: it recovers what generated them."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from knowledge import Knowledge
from profiles.profile import Memory
from service.engine.estimating import step_model
from service.engine.estimating.roofline import OpMix, math_mode, resource_times
from service.engine.estimating.step_model import FitRow
from service.engine.estimating.step_profile import StepProfile

GPUS = ("v100-sxm2-16gb", "rtx-3090", "a100-sxm4-80gb", "rtx-a6000", "a10", "titan-rtx")


def _profile(batch: float) -> StepProfile:
    work = {
        ("forward", "matmul"): (2e12 * batch, 4e9 * batch),
        ("backward", "matmul"): (4e12 * batch, 8e9 * batch),
        ("forward", "elementwise"): (1e9 * batch, 6e9 * batch),
        ("optimizer", "elementwise"): (1e9, 2e9),
    }
    memory = Memory(1e9, 1e9, 2e9, 0, 1e8 * batch, 0, 1e7 * batch, 5e8)
    return StepProfile(
        "training", "fp16", batch, batch, batch, OpMix(work, {"forward": 300, "backward": 500}),
        memory, model_name="made-up",
    )  # fmt: skip


def _rows(
    knowledge: Knowledge, host_s: float, tensor: float, memory: float, input_s: float = 0.0
) -> list[FitRow]:
    """Steps made by the model itself: tensor and memory inefficiencies and a host time."""
    truth = step_model.StepModel(
        None,
        0.0,
        step_model.Coefficients(0, 0, 0, 0, 0),
        {},
        {
            "w": step_model.WorkloadFit(
                step_model.Coefficients(tensor, tensor, 0.0, 0.0, memory),
                {("fp16", "lambda-v1"): host_s},
                0.0,
                0,
                {"lambda-v1": input_s},
            )
        },
    )
    rows = []
    for gid in GPUS:
        gpu = knowledge.gpus[gid]
        mode = math_mode(gpu, "fp16")
        for batch in (8.0, 32.0, 128.0):
            p = _profile(batch)
            step = truth.parts(p, gpu, mode, "w", "lambda-v1").total_s
            rows.append(FitRow("w", "lambda-v1", p, gpu, mode, step))
    return rows


def test_the_fit_recovers_the_efficiencies_and_the_host_time(knowledge: Knowledge) -> None:
    rows = _rows(knowledge, host_s=0.05, tensor=2.5, memory=1.8)
    fitted = step_model.fit(rows)
    fit = fitted.workloads["w"]
    assert fit.coefficients.tensor == pytest.approx(2.5, rel=0.02)
    assert fit.coefficients.memory == pytest.approx(1.8, rel=0.02)
    # the pull towards zero (HOST_PENALTY) keeps most of the host time
    assert 0.042 < fit.fixed_s("fp16", "lambda-v1") <= 0.0501
    # a software generation without rows borrows the nearest one's host time
    assert fit.fixed_s("fp16", "lambda-v2") == fit.fixed_s("fp16", "lambda-v1")


def test_a_broken_row_does_not_drag_the_fit(knowledge: Knowledge) -> None:
    rows = _rows(knowledge, host_s=0.05, tensor=2.5, memory=1.8)
    rows[0] = dataclasses.replace(rows[0], step_s=rows[0].step_s / 10)  # a broken run
    fitted = step_model.fit(rows)
    assert fitted.workloads["w"].coefficients.tensor == pytest.approx(2.5, rel=0.05)
    for row in rows[1:]:  # the other rows' steps stay right
        parts = fitted.parts(row.profile, row.gpu, row.mode, "w", "lambda-v1")
        assert parts.total_s == pytest.approx(row.step_s, rel=0.03)


def test_the_largest_part_is_the_bound(knowledge: Knowledge) -> None:
    fitted = step_model.fit(_rows(knowledge, host_s=5.0, tensor=2.5, memory=1.8))
    gpu = knowledge.gpus["a100-sxm4-80gb"]
    parts = fitted.parts(_profile(8.0), gpu, math_mode(gpu, "fp16"), "w", "lambda-v1")
    assert parts.largest() in {"host", "kernel_launches"}
    assert parts.total_s == pytest.approx(
        parts.gpu_s + parts.launch_s + parts.host_s + parts.input_s
    )


def test_a_gpu_class_slower_than_its_datasheet_gets_a_factor(knowledge: Knowledge) -> None:
    """Datacenter GDDR cards (A10 here) measured 20% slower in their GPU part than their
    specs say: the fit finds the factor, and the other GPUs keep theirs at 1."""
    rows = _rows(knowledge, host_s=0.05, tensor=2.5, memory=1.8)
    slowed = []
    for row in rows:
        if step_model.gpu_class(row.gpu) != "datacenter-gddr":
            slowed.append(row)
            continue
        gpu_s = row.step_s - 0.05  # the made-up host time
        slowed.append(dataclasses.replace(row, step_s=0.05 + 1.2 * gpu_s))
    rows = slowed * 8  # enough rows per class (CLASS_MIN_ROWS)
    fitted = step_model.fit(rows)
    assert step_model.gpu_class(knowledge.gpus["a10"]) == "datacenter-gddr"
    assert step_model.gpu_class(knowledge.gpus["a100-sxm4-80gb"]) == "datacenter"
    assert fitted.class_factors["datacenter-gddr"] == pytest.approx(1.2, rel=0.03)
    assert fitted.class_factor(knowledge.gpus["rtx-3090"]) == 1.0


def test_the_fit_recovers_an_input_time_per_sample(knowledge: Knowledge) -> None:
    """0.2 ms per sample no GPU shortens (an input pipeline): told apart from GPU work by
    the GPUs' different speeds (the fit's pull towards zero keeps most of it), kept on any
    GPU, and the steps stay right."""
    rows = _rows(knowledge, host_s=0.02, tensor=2.5, memory=1.8, input_s=2e-4)
    fitted = step_model.fit(rows)
    fit = fitted.workloads["w"]
    assert 0.015 < fit.input_s(100, "lambda-v1") <= 0.0201
    for row in rows:
        parts = fitted.parts(row.profile, row.gpu, row.mode, "w", "lambda-v1")
        assert parts.total_s == pytest.approx(row.step_s, rel=0.03)
        assert parts.input_s == pytest.approx(fit.input_s(row.profile.samples_per_step, "x"))


def test_a_generation_with_few_gpus_has_no_input_time_of_its_own(knowledge: Knowledge) -> None:
    """Two GPUs cannot tell a per-sample input cost from GPU work, and another generation's
    hosts say nothing about theirs: their generation gets none (its steps stay right, the
    time going to the GPU part); a generation never measured takes the nearest measured."""
    rows = _rows(knowledge, host_s=0.02, tensor=2.5, memory=1.8, input_s=2e-4)
    few = [dataclasses.replace(r, suite="lambda-v2") for r in rows if r.gpu.id in GPUS[:2]]
    fit = step_model.fit(rows + few).workloads["w"]
    assert set(fit.per_sample_s) == {"lambda-v1", "lambda-v2"}
    assert fit.per_sample_s["lambda-v1"] > 1e-4
    assert fit.per_sample_s["lambda-v2"] == 0.0
    assert fit.input_s(100, "lambda-v0") == fit.input_s(100, "lambda-v1")


def test_a_part_the_rows_cannot_tell_takes_its_default() -> None:
    """The ridge rows: where the rows cannot tell two parts apart (their columns grow
    together, as a workload's resource times do on GPUs of one era), the default decides
    the split (a workload's efficiency defaults to the one all workloads share), and the
    steps stay what the rows need."""
    columns = np.array([[1.0, 1.0], [2.0, 2.0], [3.0, 3.0]])
    measured = np.array([2.0, 4.0, 6.0])
    x = step_model._robust_nnls(columns, measured, np.array([0.0, 0.1]), np.array([0.0, 1.7]))
    assert x[1] == pytest.approx(1.7, rel=0.02)
    assert x[0] + x[1] == pytest.approx(2.0, rel=0.01)
    plain = step_model._robust_nnls(columns, measured)
    assert plain[1] != pytest.approx(1.7, rel=0.05)  # without the default, another split


def test_no_weighing_puts_a_step_under_its_roofline(knowledge: Knowledge) -> None:
    """Weights learned as an average can be below 1 on tensor time (a small weight there,
    a large one on bytes): a GEMM-heavy step must still take at least its FLOPs at peak."""
    light = step_model.Coefficients(0.1, 0.1, 0.1, 0.1, 0.1)
    model = step_model.StepModel(None, 0.0, light, {})
    gpu = knowledge.gpus["a100-sxm4-80gb"]
    mode = math_mode(gpu, "fp16")
    p = _profile(64.0)
    for phases in (["forward"], ["backward"], ["forward", "backward"]):
        ideal = resource_times(p.mix, mode, model.bandwidth(gpu), phases)
        assert ideal.roofline_s > ideal.total_s * 0.1  # the weights alone would go under
        assert model.phase_gpu_s(p, gpu, mode, None, phases) == pytest.approx(ideal.roofline_s)
    parts = model.parts(p, gpu, mode, None)
    whole = resource_times(p.mix, mode, model.bandwidth(gpu), None)
    assert parts.gpu.total_s == pytest.approx(whole.roofline_s)
    # weights above the roofline are left alone
    heavy = step_model.StepModel(None, 0.0, step_model.Coefficients(2, 2, 2, 2, 2), {})
    assert heavy.parts(p, gpu, mode, None).gpu.total_s == pytest.approx(2 * whole.total_s)
