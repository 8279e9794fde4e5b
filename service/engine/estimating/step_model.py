"""The step model: how long one step takes on one GPU, split into what bounds it.

    step = GPU part + launches + host + input

- GPU part: the step's ideal time on each resource (:func:`~service.engine.estimating.roofline.
  resource_times`: tensor cores, CUDA cores, vector arithmetic, memory at the bandwidth the
  SMs can use), each weighed by a learned inverse efficiency. Kernels too small to fill a
  larger GPU show up twice: in the usable-bandwidth cap (requests in flight per SM) and in
  the fixed time per kernel below.
- Launches and host: what no GPU shortens. For a benchmarked workload, a time per step
  fitted to its measurements (per precision and software generation), split for the
  breakdown into kernel launches (the profile's launch count x the per-launch cost of
  eager PyTorch, :data:`LAUNCH_S`) and the rest (Python, data loading, synchronisation).
  For any other model: the host launches kernels while the GPU runs earlier ones, so
  launches cost only what they exceed the GPU part by (a short step, a decode step at a
  small batch), plus the median benchmarked workload's host time per step.
- Input: for a benchmarked workload, a time per sample no GPU shortens (reading,
  decoding, augmenting and copying each sample: the input pipeline's ceiling per host),
  fitted per software generation measured on enough GPUs to tell it from GPU work, and
  pulled towards zero.

Fitted per workload by non-negative least squares on relative errors (iteratively
reweighted, so that a broken benchmark row cannot drag a fit: Cauchy weights), which keeps
every part non-negative and lets a part the measurements do not need fall to zero. The
rows of one workload span few GPUs of few eras, so each part is pulled towards a default
(ridge rows): the efficiencies towards those all workloads share, the fixed and per-sample
times towards zero (the GPU part is the better default). A
faster GPU shrinks the GPU part only; the rest bounds the speed-up from below (Amdahl).
The input pipeline's ceiling is a bound of its own (:mod:`service.engine.estimating.estimate`).
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field

import numpy as np
from scipy.optimize import nnls

from knowledge.records import Gpu
from service.engine.estimating.roofline import (
    MathMode,
    ResourceTimes,
    resource_times,
    usable_bandwidth,
)
from service.engine.estimating.step_profile import StepProfile

RESOURCES = ("tensor", "tf32", "cuda_core", "vector", "memory")
# software generations of the stored benchmarks, oldest first: a generation without its
# own fit borrows the nearest one's host time (newer first)
SUITES = ("lambda-v0", "lambda-v1", "lambda-v2")
DEFAULT_SUITE = SUITES[-1]  # what an estimate assumes: the newest containers measured
ROBUST_SCALE = 0.1  # relative residual at which a row's weight in the fit halves
ITERATIONS = 8
HOST_SCALE = 1e-3  # the host columns in ms, so that NNLS sees similar scales
# a ridge pull on the per-sample input time: a fit with few GPUs in a software generation
# cannot tell a GPU-independent per-sample cost from a per-sample GPU cost (both grow with
# the batch), and the GPU part is the better default (0.1: leave-one-GPU-out 5.8% -> 5.9%,
# forward from before 2020 17.1% -> 16.7%)
SAMPLE_PENALTY = 0.1
INPUT_MIN_GPUS = 4  # GPUs a software generation needs for an input time of its own
# The same pull on the fixed time per step of each (precision, software generation): with
# the rows of a few GPUs it trades against GPU work as freely (0.3: leave one architecture
# out 12.2% -> 11.4%, forward from before 2020 and leave-one-GPU-out unchanged)
HOST_PENALTY = 0.3
# A pull of each workload's efficiencies towards those every workload shares (the general
# fit): a workload measured on GPUs of one era cannot tell its resources apart (their
# times grow together), and what other workloads show is the better default. 0.1: forward
# from before 2020 15.1% -> 13.1% (mean 19.5% -> 18.0%), leave one architecture out
# 12.7% -> 12.2%, leave-one-GPU-out 5.9% -> 5.8%, forward from before 2022 4.9% -> 5.6%
PRIOR_PENALTY = 0.1
# The most DRAM bytes per SM cycle a GPU has been shown to use: an H200 (132 SMs at 1.98 GHz,
# 4.8 TB/s, 18.4 B per SM cycle) ran PyTorch's elementwise kernels at 4.3 TB/s, 90% of its
# peak, as GPUs with fewer bytes per SM cycle do (this project's trace of ResNet-50,
# tests/profiles/fixtures/traces/h200-resnet50-fp16-b256.json.gz, bench/device/results)
DEMONSTRATED_BYTES_PER_SM_CYCLE = 18.4
SAMPLE_SCALE = 1e-5  # the per-sample columns in 10 us per sample
CLASS_ROUNDS = 3  # rounds of fitting the workloads, then the GPU classes' factors
CLASS_RANGE = (0.7, 1.4)  # a GPU class's factor stays within these
CLASS_MIN_ROWS = 20  # a class measured on fewer rows keeps factor 1
# Host time per eager operator (Python, dispatcher, autograd, CUDA launch): measured with
# PyTorch 2.11 on an H200 host, 200 tiny Linear layers trained at batch 1 (about 820
# kernels a step) in 25.4 ms a step (bench/device/results/h200-2026-12-04.json,
# "launch-probe"), so 31 us per launch; the step's GPU work is negligible there.
LAUNCH_S = 31e-6


@dataclass(frozen=True, slots=True)
class FitRow:
    """One measured single-GPU step the step model is fitted on."""

    workload: str
    suite: str
    profile: StepProfile
    gpu: Gpu
    mode: MathMode
    step_s: float  # measured

    @property
    def mobile(self) -> bool:
        return self.gpu.form_factor == "mobile"


@dataclass(frozen=True, slots=True)
class Coefficients:
    """Real seconds per ideal second on each resource (1 / efficiency; 0: not needed)."""

    tensor: float  # 16-bit (and 8-bit) tensor-core work
    tf32: float  # fp32 matmuls on TF32 tensor cores
    cuda_core: float
    vector: float
    memory: float

    def weigh(self, times: ResourceTimes, mode: MathMode) -> ResourceTimes:
        return ResourceTimes(
            times.tensor_s * (self.tf32 if mode.tf32 else self.tensor),
            times.cuda_core_s * self.cuda_core,
            times.vector_s * self.vector,
            times.memory_s * self.memory,
        )


@dataclass(frozen=True, slots=True)
class WorkloadFit:
    """The fitted step of one benchmarked workload."""

    coefficients: Coefficients
    host_s: Mapping[tuple[str, str], float]  # (precision, suite) -> fixed time per step
    mobile_s: float  # extra per step on laptop parts (their hosts, their clocks)
    rows: int
    per_sample_s: Mapping[str, float] = field(default_factory=dict)  # suite -> input time

    def input_s(self, samples: float, suite: str) -> float:
        """Time per step no GPU shortens that grows with the samples (the input pipeline:
        reading, decoding, augmenting, copying each sample), for ``suite`` or, where it was
        not measured, the nearest generation measured."""
        for other in _nearest_suites(suite):
            if other in self.per_sample_s:
                return self.per_sample_s[other] * samples
        return 0.0

    def fixed_s(self, precision: str, suite: str) -> float:
        """The fixed time per step for ``precision`` in ``suite``, or the nearest fitted."""
        if (precision, suite) in self.host_s:
            return self.host_s[(precision, suite)]
        order = _nearest_suites(suite)
        for other in order:
            if (precision, other) in self.host_s:
                return self.host_s[(precision, other)]
        for other in order:
            found = [v for (p, s), v in self.host_s.items() if s == other]
            if found:
                return float(np.mean(found))
        return float(np.mean(list(self.host_s.values()))) if self.host_s else 0.0


def _nearest_suites(suite: str) -> list[str]:
    if suite not in SUITES:
        return list(reversed(SUITES))
    i = SUITES.index(suite)
    return sorted(SUITES, key=lambda s: (abs(SUITES.index(s) - i), -SUITES.index(s)))


@dataclass(frozen=True, slots=True)
class StepParts:
    """One step on one GPU, split (seconds). ``gpu`` holds the weighed resource times."""

    gpu: ResourceTimes
    optimizer_s: float  # the optimizer update's share of the GPU part
    launch_s: float
    host_s: float
    input_s: float = 0.0  # the input pipeline's share per step, beyond what the GPU hides
    ideal_s: float = 0.0  # the GPU part with every resource at its peak

    @property
    def efficiency(self) -> float:
        """Ideal GPU time over the GPU part's."""
        return self.ideal_s / self.gpu_s if self.gpu_s > 0 else 1.0

    @property
    def gpu_s(self) -> float:
        return self.gpu.total_s

    @property
    def total_s(self) -> float:
        return self.gpu_s + self.launch_s + self.host_s + self.input_s

    def largest(self) -> str:
        """The part that bounds the step: compute, memory_bandwidth, kernel_launches, host,
        input."""
        g = self.gpu
        parts = {
            "compute": g.tensor_s + g.cuda_core_s + g.vector_s,
            "memory_bandwidth": g.memory_s,
            "kernel_launches": self.launch_s,
            "host": self.host_s,
            "input": self.input_s,
        }
        return max(parts, key=lambda k: parts[k])


@dataclass(frozen=True)
class StepModel:
    """The fitted step model (see the module docstring)."""

    bytes_per_sm_cycle: float | None  # the usable-bandwidth cap (see bytes_per_sm_cycle)
    launch_s: float  # host time per kernel launch
    general: Coefficients  # for models the benchmarks did not measure
    general_host_s: Mapping[str, float]  # suite -> host time per step beyond launches
    workloads: Mapping[str, WorkloadFit] = field(default_factory=dict)
    # GPU part of a GPU class over that of other GPUs of the same specs (see gpu_class)
    class_factors: Mapping[str, float] = field(default_factory=dict)

    def class_factor(self, gpu: Gpu) -> float:
        return self.class_factors.get(gpu_class(gpu), 1.0)

    def bandwidth(self, gpu: Gpu) -> float:
        """The DRAM bandwidth ``gpu``'s kernels can use (bytes/s): capped at the most bytes
        per SM cycle that any measured GPU supplied (see :func:`usable_bandwidth`)."""
        return usable_bandwidth(gpu, self.bytes_per_sm_cycle)

    def parts(
        self,
        profile: StepProfile,
        gpu: Gpu,
        mode: MathMode,
        workload: str | None,
        suite: str = DEFAULT_SUITE,
        phases: Sequence[str] | None = None,
    ) -> StepParts:
        """The step of ``profile`` on ``gpu``. ``workload``: the benchmarked workload it is
        (its own fit), or None (the general fit). ``phases``: only those phases, for one
        inference pass (its launches, and no training loop's host time)."""
        bandwidth = self.bandwidth(gpu)
        ideal = resource_times(profile.mix, mode, bandwidth, phases)
        fit = self.workloads.get(workload) if workload else None
        coefficients = fit.coefficients if fit else self.general
        factor = self.class_factor(gpu)
        step = resource_times(profile.mix, mode, bandwidth, ["optimizer"])
        optimizer = coefficients.weigh(step, mode).scaled(factor).at_least(step.roofline_s)
        # the learned weights are an average over the benchmarks: where they would put a
        # step under its roofline (GEMM-heavy LLM steps, a small weight on tensor time),
        # the roofline holds
        weighed = coefficients.weigh(ideal, mode).scaled(factor).at_least(ideal.roofline_s)
        launches = profile.mix.phase_launches(phases) * self.launch_s
        feed = 0.0
        if fit is not None and phases is None:
            fixed = fit.fixed_s(profile.precision, suite)
            if gpu.form_factor == "mobile":
                fixed += fit.mobile_s
            launch = min(fixed, launches)
            host = fixed - launch
            feed = fit.input_s(profile.samples_per_step, suite)
        else:  # launches overlap the GPU's work: only what outlasts it shows
            launch = max(0.0, launches - weighed.total_s)
            host = 0.0 if phases is not None else self.general_host(suite)
        return StepParts(
            weighed,
            0.0 if phases is not None else optimizer.total_s,
            launch,
            host,
            feed,
            ideal.total_s,
        )

    def phase_gpu_s(
        self,
        profile: StepProfile,
        gpu: Gpu,
        mode: MathMode,
        workload: str | None,
        phases: Sequence[str],
    ) -> float:
        """The GPU part of ``phases`` alone (the backward pass DDP overlaps within)."""
        bandwidth = self.bandwidth(gpu)
        fit = self.workloads.get(workload) if workload else None
        coefficients = fit.coefficients if fit else self.general
        times = resource_times(profile.mix, mode, bandwidth, phases)
        weighed = coefficients.weigh(times, mode).scaled(self.class_factor(gpu))
        return weighed.at_least(times.roofline_s).total_s

    def general_host(self, suite: str) -> float:
        for other in _nearest_suites(suite):
            if other in self.general_host_s:
                return self.general_host_s[other]
        return 0.0


def gpu_class(gpu: Gpu) -> str:
    """GPUs whose datasheet figures overstate what their kernels get, as a class with a
    learned factor on the GPU part: datacenter cards with GDDR memory (A10, A40, L4, L40S)
    run ECC by default, which on GDDR costs bandwidth (HBM carries it on the side), and they
    are passively cooled in servers at a fixed power. Separate classes for GeForce and
    workstation cards were tried and left out: their factors came out at 1.01 and 1.05, and
    the forward-in-time error grew."""
    if gpu.segment == "datacenter" and gpu.memory_type.upper().startswith("GDDR"):
        return "datacenter-gddr"
    return "datacenter"


def bytes_per_sm_cycle(gpus: Iterable[Gpu]) -> float:
    """The most DRAM bytes per SM cycle a GPU is counted on to use: the usable-bandwidth cap.

    The benchmarked GPUs range from 5 (Turing) to 13.4 (A100 80GB) bytes per SM cycle and
    their speed follows their bandwidth up to there; an H200 measured by this project used
    18.4 as well as they use theirs. A GPU whose memory outruns its SMs further (a B200:
    26 bytes per SM cycle) is not counted on for the rest: nothing measured says that its
    SMs keep enough requests in flight (Little's law)."""
    found = [gpu.memory_bandwidth_gb_per_s * 1e9 / gpu.sm_cycles_per_s for gpu in gpus]
    return max([*found, DEMONSTRATED_BYTES_PER_SM_CYCLE])


def _robust_nnls(
    columns: np.ndarray,
    measured: np.ndarray,
    penalty: np.ndarray | None = None,
    target: np.ndarray | None = None,
) -> np.ndarray:
    """Non-negative x minimising the relative error of columns @ x, robustly: iteratively
    reweighted with Cauchy weights, so that a row many times off (a broken run) weighs
    next to nothing while rows within a few times ROBUST_SCALE keep most of theirs.
    ``penalty`` (per column, 0: none) adds ridge rows that pull a column's value towards
    its ``target`` (default zero) unless the rows need another."""
    a = columns / measured[:, None]
    b = np.ones(len(measured))
    rows = len(measured)
    if penalty is not None and (penalty > 0).any():
        keep = penalty > 0
        scale = np.abs(a).mean(axis=0)
        ridge = np.diag(penalty * scale * np.sqrt(rows))[keep]
        goal = np.zeros(len(penalty)) if target is None else target
        a = np.vstack([a, ridge])
        b = np.concatenate([b, (ridge @ goal)])
    weights = np.ones(len(b))
    x = np.zeros(columns.shape[1])
    for _ in range(ITERATIONS):
        x, _ = nnls(a * weights[:, None], b * weights)
        residual = (a[:rows] @ x - 1.0) / ROBUST_SCALE
        weights[:rows] = 1.0 / np.sqrt(1.0 + residual**2)
    return x


def _resource_columns(times: ResourceTimes, mode: MathMode) -> list[float]:
    """One column per entry of RESOURCES."""
    tf32 = times.tensor_s if mode.tf32 else 0.0
    return [times.tensor_s - tf32, tf32, times.cuda_core_s, times.vector_s, times.memory_s]


def _coefficients(x: np.ndarray, tf32_rows: bool) -> Coefficients:
    """The fitted resource coefficients; where no row ran TF32, TF32 work is taken to be as
    efficient as the other tensor-core work (the best guess the data allows)."""
    tensor, tf32, cuda_core, vector, memory = (float(v) for v in x[: len(RESOURCES)])
    return Coefficients(tensor, tf32 if tf32_rows else tensor, cuda_core, vector, memory)


def _fit_workload(
    rows: Sequence[FitRow],
    kappa: float | None,
    factors: Mapping[str, float],
    prior: Coefficients | None = None,
) -> WorkloadFit:
    hosts = sorted({(r.profile.precision, r.suite) for r in rows})
    measured, suites = _input_suites(rows)
    mobile = any(r.mobile for r in rows)
    n, h = len(RESOURCES), len(hosts)
    matrix = np.zeros((len(rows), n + h + len(suites) + (1 if mobile else 0)))
    for i, row in enumerate(rows):
        bandwidth = usable_bandwidth(row.gpu, kappa)
        times = resource_times(row.profile.mix, row.mode, bandwidth)
        factor = factors.get(gpu_class(row.gpu), 1.0)
        matrix[i, :n] = [v * factor for v in _resource_columns(times, row.mode)]
        matrix[i, n + hosts.index((row.profile.precision, row.suite))] = HOST_SCALE
        if row.suite in suites:
            samples = row.profile.samples_per_step * SAMPLE_SCALE
            matrix[i, n + h + suites.index(row.suite)] = samples
        if mobile and row.mobile:
            matrix[i, -1] = HOST_SCALE
    penalty = np.zeros(matrix.shape[1])
    penalty[n : n + h] = HOST_PENALTY
    penalty[n + h : n + h + len(suites)] = SAMPLE_PENALTY
    target = np.zeros(matrix.shape[1])
    if prior is not None:
        penalty[:n] = PRIOR_PENALTY
        target[:n] = [getattr(prior, name) for name in RESOURCES]
    x = _robust_nnls(matrix, np.array([r.step_s for r in rows]), penalty, target)
    per_sample = dict.fromkeys(measured, 0.0)
    per_sample.update({s: float(x[n + h + i] * SAMPLE_SCALE) for i, s in enumerate(suites)})
    return WorkloadFit(
        _coefficients(x, any(r.mode.tf32 for r in rows)),
        {key: float(x[n + i] * HOST_SCALE) for i, key in enumerate(hosts)},
        float(x[-1] * HOST_SCALE) if mobile else 0.0,
        len(rows),
        per_sample,
    )


def _input_suites(rows: Sequence[FitRow]) -> tuple[list[str], list[str]]:
    """The software generations measured, and those with an input time per sample of their
    own: where their rows span enough GPUs (INPUT_MIN_GPUS) to tell a GPU-independent cost
    per sample from GPU work. A generation measured on fewer has none (its hosts are its
    own: another generation's input pipeline says nothing about them, and the GPU part is
    the better default; forward from before 2020 16.0% -> 15.1%, the rest unchanged)."""
    gpus: dict[str, set[str]] = defaultdict(set)
    for row in rows:
        gpus[row.suite].add(row.gpu.id)
    able = [s for s, ids in sorted(gpus.items()) if len(ids) >= INPUT_MIN_GPUS]
    return sorted(gpus), able


def _fit_general(rows: Sequence[FitRow], kappa: float | None) -> Coefficients:
    """Efficiencies shared by every benchmarked workload (what a model never measured
    gets): one fit over all rows, each workload with its own fixed time per step."""
    keys = sorted({(r.workload, r.profile.precision, r.suite) for r in rows})
    n = len(RESOURCES)
    matrix = np.zeros((len(rows), n + len(keys)))
    for i, row in enumerate(rows):
        bandwidth = usable_bandwidth(row.gpu, kappa)
        times = resource_times(row.profile.mix, row.mode, bandwidth)
        matrix[i, :n] = _resource_columns(times, row.mode)
        matrix[i, n + keys.index((row.workload, row.profile.precision, row.suite))] = HOST_SCALE
    x = _robust_nnls(matrix, np.array([r.step_s for r in rows]))
    return _coefficients(x, any(r.mode.tf32 for r in rows))


def _general_host(workloads: Mapping[str, WorkloadFit], rows: Sequence[FitRow]) -> dict[str, float]:
    """Per software generation, the median over the benchmarked workloads of their fixed
    time per step beyond their kernel launches: the training loop's host time a model
    never measured is assumed to have (a median, so that the few host-bound speech
    models do not set it for everyone)."""
    launches = {(r.workload, r.profile.precision): r.profile.launches for r in rows}
    found: dict[str, list[float]] = defaultdict(list)
    for workload, fit in workloads.items():
        for (precision, suite), fixed in fit.host_s.items():
            beyond = fixed - launches.get((workload, precision), 0.0) * LAUNCH_S
            found[suite].append(max(beyond, 0.0))
    return {suite: float(np.median(values)) for suite, values in found.items()}


def fit(rows: Sequence[FitRow]) -> StepModel:
    """Fit the step model on measured single-GPU steps: the workloads' efficiencies and
    fixed times, and the GPU classes' factors, in turn (a few rounds settle them)."""
    kappa = bytes_per_sm_cycle({r.gpu.id: r.gpu for r in rows}.values())
    grouped: dict[str, list[FitRow]] = defaultdict(list)
    for row in rows:
        grouped[row.workload].append(row)
    general = _fit_general(rows, kappa)

    def fit_workloads(factors: Mapping[str, float]) -> dict[str, WorkloadFit]:
        return {w: _fit_workload(g, kappa, factors, general) for w, g in sorted(grouped.items())}

    factors: dict[str, float] = {}
    for _ in range(CLASS_ROUNDS):
        model = StepModel(kappa, LAUNCH_S, Coefficients(0, 0, 0, 0, 0), {}, fit_workloads(factors))
        factors = _class_factors(model, rows)
    workloads = fit_workloads(factors)
    host = _general_host(workloads, rows)
    return StepModel(kappa, LAUNCH_S, general, host, workloads, factors)


def _class_factors(model: StepModel, rows: Sequence[FitRow]) -> dict[str, float]:
    """Per GPU class, the median over its rows of (measured step - what no GPU shortens:
    launches, host, input) / GPU part, relative to that of the other GPUs (the reference
    class, 1)."""
    ratios: dict[str, list[float]] = defaultdict(list)
    for row in rows:
        parts = model.parts(row.profile, row.gpu, row.mode, row.workload, row.suite)
        if parts.gpu_s <= 0.2 * parts.total_s:  # the GPU part says little here
            continue
        cls = gpu_class(row.gpu)
        ratio = (row.step_s - parts.launch_s - parts.host_s - parts.input_s) / parts.gpu_s
        ratios[cls].append(ratio)
    reference = float(np.median(ratios["datacenter"])) if ratios["datacenter"] else 1.0
    return {
        cls: float(np.clip(np.median(v) / reference, *CLASS_RANGE))
        for cls, v in ratios.items()
        if cls != "datacenter" and len(v) >= CLASS_MIN_ROWS
    }
