"""Recommendations: every GPU, count, layout and deployment that can run a workload, costed,
explained by the rules (:mod:`service.engine.rules`) and ranked by the buyer's objective.

A candidate is one GPU type at a count with the planner's fastest layout there
(:func:`service.engine.planning.search.planned_at`), run either on-premise (bought, costed by
:mod:`service.engine.deciding.cost`) or as a cloud offer. Its "work" is one job when the workload
gives a dataset (``dataset_samples`` or ``dataset_tokens`` and ``epochs``), else a million
samples. Objectives:

- ``fastest``: the shortest job;
- ``cheapest``: the smallest spend over the usage's horizon (capital and running costs);
- ``best_value`` (default): the lowest cost per unit of work, within the deadline.

Rules with effect ``penalise`` multiply the objective's score by their factor.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from dataclasses import replace
from typing import Any

from knowledge.records import Gpu
from service.engine.deciding import cost, stack_advice
from service.engine.deciding.candidate import (
    Candidate,
    Setting,
    _request_symbols,
    _run_symbols,
    _setting,
    _symbols,
)
from service.engine.deciding.costing import _deployments, _feed
from service.engine.deciding.ordering import _catalog, _compare, _pareto, ordered, why_first
from service.engine.deciding.presentation import SHOWN, _assumptions, _merged, _shown, summary
from service.engine.deciding.runs import (
    DEFAULT_MAX_GPUS,
    TRAINING_MEMORY_MARGIN,
    _kept_runs,
    _serving_runs,
    _traced_runs,
)
from service.engine.errors import NotFound
from service.engine.estimating import software as stacks
from service.engine.estimating.estimate import USABLE_MEMORY_SHARE
from service.engine.estimating.layout import ModelShape
from service.engine.estimating.on_request import EstimateService
from service.engine.estimating.roofline import math_mode
from service.engine.estimating.software import Stack
from service.engine.estimating.step_profile import StepProfile
from service.engine.owners import NOBODY, Reader
from service.engine.planning.search import sized_at
from service.engine.planning.work import stacked, work
from service.engine.requests import RecommendationRequest
from service.engine.rules import RuleBook

EXCLUDE = frozenset({"exclude"})

KEEP = frozenset({"penalise", "warn", "advise"})


# long: the recommendation's steps in order (candidates, runs, costs, ordering, words)
def recommend(
    service: EstimateService, request: RecommendationRequest, reader: Reader = NOBODY
) -> dict[str, Any]:
    """The ranked, costed and explained candidates for a request (``POST
    /v1/recommendations``), without its id (:func:`service.engine.requests.request_digest`);
    a trace it names is read as ``reader`` (by default no key's: one names no trace)."""
    book = service.rules
    excluded: list[dict[str, Any]] = []
    if request.trace_id:
        record = service.traces.get(request.trace_id, reader)
        if record is None:
            raise NotFound("trace", request.trace_id)
        part = record["analysis"].get("breakdown") or {}
        wall = part.get("wall_us") or 0
        idle = (part.get("idle_us") or {}).get("input", 0.0)
        precision = record["options"].get("precision") or "fp32"
        s = _setting(request, precision, "train", None, True, idle / wall if wall else 0.0)
        s = replace(s, feed=_feed(service.knowledge, None, None))
        gpus, warnings = _catalog(service, s, book, excluded)
        runs = _traced_runs(service, s, record, gpus, excluded)
        profile, shape = None, None
    else:
        raw = service.body_profile(request.source())
        profile = StepProfile.from_profile(raw)
        params = (raw.get("model") or {}).get("parameters")
        s = _setting(request, profile.precision, profile.task, params / 1e9 if params else None)
        s = replace(s, feed=_feed(service.knowledge, raw, profile))
        gpus, warnings = _catalog(service, s, book, excluded)
        limit = s.constraints.max_gpus or DEFAULT_MAX_GPUS
        shape = ModelShape.from_profile(raw)
        s = replace(s, stack=_stack(service, request, profile, shape))
        planner = _kept_runs if profile.trains else _serving_runs
        runs = planner(service, s, profile, shape, gpus, min(limit, 1024), excluded)
    base = _request_symbols(s)
    candidates: list[Candidate] = []
    for run in runs:
        found = _deployments(service, s, run, excluded)
        shared = _run_symbols(found)
        for c in found:
            c.context = _symbols(c, base, shared)
        candidates.extend(found)
    kept = _admitted(book, candidates, excluded)
    memo = book.results()
    _compare(kept)
    for c in kept:
        c.fired = warnings[c.gpu.id] + book.fire("candidate", c.context, KEEP, memo)
    _pareto(kept)
    shown, seen = [], set()
    for c in ordered(kept, s):  # the best of each GPU, count and provider
        if (c.gpu.id, c.count, c.provider) not in seen:
            seen.add((c.gpu.id, c.count, c.provider))
            shown.append(c)
    best = min(kept, key=lambda c: c.score(s.objective, s.time_value)[0], default=None)
    shown = shown[:SHOWN]
    if best is not None and best not in shown and len(shown) == SHOWN:
        # the band's order may leave the best score out: shown last, for the reader to weigh
        shown[-1] = best
    advice = _advice(service, s, book, profile, shape, shown, kept, gpus)
    recs = [_shown(i + 1, c, s) for i, c in enumerate(shown)]
    merged = _merged(excluded, {c.gpu.id for c in kept})
    return {
        "objective": s.objective,
        "recommendations": recs,
        "why_first": why_first(shown, s, best),
        "candidates_total": len(kept),
        "excluded": merged,
        "advice": advice,
        "summary": summary(s, recs, advice, len(merged)),
        "assumptions": _assumptions(s, profile),
        "stack": s.stack.to_dict() if s.stack is not None else None,
        "knowledge_version": service.knowledge.version,
        "rules_version": book.digest,
    }


def _stack(
    service: EstimateService, request: RecommendationRequest, profile: StepProfile,
    shape: ModelShape | None,
) -> Stack:  # fmt: skip
    """The request's stack (named, else the default for the work), checked against the
    precisions the work asks of it."""
    found = stacks.for_work(service.knowledge, request.stack, request.stack_options, profile, shape)
    stacks.check_formats(found, profile.precision, request.weight_precision)
    return found


def _admitted(
    book: RuleBook, candidates: Sequence[Candidate], excluded: list[dict[str, Any]]
) -> list[Candidate]:
    """The candidates no exclusion rule fires on; the others listed in ``excluded``."""
    kept = []
    memo = book.results()  # rule results by the values they read
    for c in candidates:  # first the exclusions, which compare nothing
        out = book.fire("candidate", c.context, EXCLUDE, memo)
        if out:
            excluded.append({"gpu": c.gpu.id, "count": c.count, "deployment": c.deployment,
                             "provider": c.provider,
                             "reasons": [f.to_dict() for f in out]})  # fmt: skip
        else:
            kept.append(c)
    return kept


def _advice(
    service: EstimateService, s: Setting, book: RuleBook, profile: StepProfile | None,
    shape: ModelShape | None, shown: Sequence[Candidate], kept: Sequence[Candidate],
    gpus: Sequence[Gpu] = (),
) -> list[dict[str, Any]]:  # fmt: skip
    """The request-scope rules: software fixes worth doing before a purchase, and the hybrid
    deployment when owning the baseline and renting the bursts is cheapest."""
    top = shown[0] if shown else None
    symbols: dict[str, Any] = {**_request_symbols(s), "smallest_count": None,
                               "fits_one_gpu_accumulating": False, "largest_gpu": None,
                               "micro_batch": profile.batch_size if profile else None}  # fmt: skip
    if top is not None:
        smallest = min(c.count for c in kept if c.gpu.id == top.gpu.id)
        symbols["smallest_count"] = float(smallest)
        if profile is not None and smallest > 1:
            symbols["fits_one_gpu_accumulating"] = _fits_one_accumulating(
                service, s, profile, shape, top.gpu
            )
    elif profile is not None and gpus:  # nothing holds the micro-batch: does one at 1?
        largest = max(gpus, key=lambda g: g.memory_gb)
        if _fits_one_accumulating(service, s, profile, shape, largest):
            symbols["fits_one_gpu_accumulating"] = True
            symbols["largest_gpu"] = largest.name
    if profile is not None and top is not None and s.precision in ("fp32", "tf32"):
        model = service._built_model()
        stock = stacks.named(service.knowledge, "pytorch")
        slow = work(profile, top.gpu, math_mode(top.gpu, s.precision), stock, model.step_model)
        if top.gpu.bf16_tflops:
            fast = work(profile, top.gpu, math_mode(top.gpu, "bf16"), stock, model.step_model)
            symbols["mixed_precision_speedup"] = (slow.forward_s + slow.backward_s) / (
                fast.forward_s + fast.backward_s
            )
    if top is not None and top.planned is not None:
        memory = top.planned.memory
        if top.planned.layout.activation_checkpointing == "none" and memory.total_bytes:
            # full checkpointing keeps one layer input per layer: most activations go
            symbols["checkpointing_memory_saving"] = (
                0.8 * memory.activations_bytes / (memory.total_bytes)
            )
    symbols.update(_switch(service, s, profile, shape, top))
    symbols.update(_hybrid(s, kept))
    return [f.to_dict() for f in book.fire("request", symbols)]


def _switch(
    service: EstimateService, s: Setting, profile: StepProfile | None,
    shape: ModelShape | None, top: Candidate | None,
) -> dict[str, Any]:  # fmt: skip
    """The stack that would run the top choice's training fastest, where one beats the
    request's by enough to name (see :mod:`service.engine.deciding.stack_advice`)."""
    none: dict[str, Any] = {
        "faster_stack": None,
        "faster_stack_speedup": None,
        "faster_stack_fit": None,
        "stack": s.stack.id if s.stack else None,
    }
    if profile is None or top is None or top.planned is None or s.stack is None:
        return none
    usable = top.gpu.memory_gb * 2**30 * USABLE_MEMORY_SHARE * TRAINING_MEMORY_MARGIN
    found = stack_advice.faster_stack(
        service.knowledge, service._built_model().step_model, s.stack, profile, shape,
        top.gpu, top.planned.layout, top.site.network, usable,
    )  # fmt: skip
    if found is None:
        return none
    return {**none, "faster_stack": found.stack.id, "faster_stack_speedup": found.speedup,
            "faster_stack_fit": found.stack.compute.source}  # fmt: skip


def _fits_one_accumulating(
    service: EstimateService, s: Setting, profile: StepProfile,
    shape: ModelShape | None, gpu: Gpu,
) -> bool:  # fmt: skip
    """Whether one ``gpu`` holds the workload at micro-batch 1 (its batch then accumulated
    over micro-batches): the same model and workload profiled at batch 1, under the layout
    of one GPU that needs least memory. Only for a described training workload with a batch
    above 1 (a stored profile does not say how to profile it again)."""
    request = s.request
    workload = request.workload
    if not profile.trains or profile.batch_size <= 1 or request.model is None or not workload:
        return False
    single = dataclasses.replace(workload, batch_size=1)
    one = StepProfile.from_profile(
        service.body_profile({"model": request.model, "workload": single})
    )
    assert s.stack is not None  # a described workload's
    one = stacked(one, shape, s.stack)
    usable = gpu.memory_gb * 2**30 * USABLE_MEMORY_SHARE
    sized = sized_at(1, one, shape, 1)
    return bool(sized) and sized[0][1].total_bytes <= usable


def _hybrid(s: Setting, kept: Sequence[Candidate]) -> dict[str, Any]:
    """Whether owning the baseline of the best on-premise choice and renting its bursts on
    the same GPU's cheapest offer costs less than either alone."""
    owned = [c for c in kept if c.onprem is not None]
    if not owned or s.usage.pattern != "bursty":
        return {"hybrid_cheaper": False}
    best = min(owned, key=lambda c: c.monthly_usd)
    clouds = [c for c in kept if c.offer is not None and c.gpu.id == best.gpu.id
              and c.count == best.count]  # fmt: skip
    if not clouds or best.usage is None or best.onprem is None:
        return {"hybrid_cheaper": False}
    rented = min(clouds, key=lambda c: c.monthly_usd)
    assert rented.offer is not None
    mix = cost.hybrid(best.gpu, best.count, best.usage, best.onprem.parameters, rented.offer)
    if mix is None:
        return {"hybrid_cheaper": False}
    other = min(best.monthly_usd, rented.monthly_usd)
    return {
        "hybrid_cheaper": mix.monthly_usd < other,
        "hybrid_owned": float(mix.owned_count),
        "hybrid_saving_share": 1 - mix.monthly_usd / other if other else None,
    }
