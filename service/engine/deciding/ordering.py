"""The order of the candidates: the buyer's objective, the band within which a smaller footprint
wins, the Pareto front, and why the first is first."""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

from knowledge.records import Gpu
from service.engine.deciding.candidate import Candidate, Setting, _gpu_symbols, _request_symbols
from service.engine.estimating.on_request import EstimateService
from service.engine.rules import Fired, RuleBook


def _compare(kept: Sequence[Candidate]) -> None:
    """Each candidate against the cheapest one and the newest generation's fastest."""
    if not kept:
        return
    cheapest = min(kept, key=lambda c: c.unit_cost_usd)
    year = max(c.gpu.release_year for c in kept)
    newest = min((c for c in kept if c.gpu.release_year == year), key=lambda c: c.hours_per_unit)
    for c in kept:
        c.context["speedup_over_cheapest"] = cheapest.hours_per_unit / c.hours_per_unit
        c.context["cost_over_cheapest"] = _times(c.unit_cost_usd, cheapest.unit_cost_usd)
        c.context["newest_gpu"] = newest.gpu.id
        c.context["time_over_newest"] = c.hours_per_unit / newest.hours_per_unit
        c.context["cost_over_newest"] = _times(c.unit_cost_usd, newest.unit_cost_usd)


def _times(cost_usd: float, other_usd: float) -> float:
    """How many times ``other_usd`` a cost is; a free choice (owned GPUs priced at 0 and no
    running costs) is as costly as another free one and infinitely cheaper than any other."""
    if other_usd > 0:
        return cost_usd / other_usd
    return 1.0 if cost_usd <= 0 else math.inf


def _pareto(kept: Sequence[Candidate]) -> None:
    """Mark the candidates no other beats on both time and cost per unit of work (one pass
    over them in order of time, then cost: a candidate is on the front when it is cheaper
    than every faster one)."""
    cheapest = math.inf
    ordered_by_time = sorted(kept, key=lambda c: (c.hours_per_unit, c.unit_cost_usd))
    i = 0
    while i < len(ordered_by_time):  # candidates of equal time are judged together
        j = i
        while j < len(ordered_by_time) and (
            ordered_by_time[j].hours_per_unit == ordered_by_time[i].hours_per_unit
        ):
            j += 1
        tied = ordered_by_time[i:j]
        least = tied[0].unit_cost_usd  # sorted by cost within the tie
        for c in tied:
            c.pareto = c.unit_cost_usd < cheapest and c.unit_cost_usd == least
        cheapest = min(cheapest, least)
        i = j


def _catalog(
    service: EstimateService, s: Setting, book: RuleBook, excluded: list[dict[str, Any]]
) -> tuple[list[Gpu], dict[str, list[Fired]]]:
    """The GPUs worth planning: those with a price or a cloud offer that no gpu-scope rule
    excludes; and the gpu-scope warnings of each, for its candidates."""
    offered = {o.gpu_id for o in service.knowledge.offers if o.gpu_count >= 1}
    base = _request_symbols(s)
    out, warnings = [], {}
    for gpu in service.knowledge.gpus.values():
        if not gpu.price_usd and gpu.id not in offered:
            continue
        fired = book.fire("gpu", {**base, **_gpu_symbols(gpu)})
        out_reasons = [f.to_dict() for f in fired if f.rule.effect == "exclude"]
        if out_reasons:
            excluded.append({"gpu": gpu.id, "reasons": out_reasons})
        else:
            out.append(gpu)
            warnings[gpu.id] = fired
    return out, warnings


# Candidates whose score is within BAND of the best, or within BAND_USD of it, are told
# apart by their footprint: a tenth is about the estimate's own error on GPUs it was not
# fitted on (rightsize validate: 6-13% median) and less than cloud and marketplace prices
# move between two catalogs; a dollar a job is below what anyone weighs against running
# on fewer machines
BAND = 0.10

BAND_USD = 1.0


def ordered(kept: Sequence[Candidate], s: Setting) -> list[Candidate]:
    """``kept`` best first: by the objective's score; among those within the band of the
    best (less any another clearly beats), the request's tie-breaker decides. By default
    the smaller footprint: fewer instances, then one GPU before several (a single-GPU job
    needs no distributed setup; four GPUs or eight in one machine are the same work); among
    equal footprints the fastest (times within :data:`BAND` of each other count as equal,
    the better score first). Serving counts every GPU: replicas are servers of their own,
    and more of them serve the same demand no better."""

    def score(c: Candidate) -> tuple[float, float]:
        return c.score(s.objective, s.time_value)

    scored = sorted(kept, key=score)
    if not scored:
        return []
    best = score(scored[0])[0]
    limit = best * (1 + BAND)
    if s.objective == "best_value":  # cheapest means the least money, fastest the least time
        limit = max(limit, best + BAND_USD)
    cut = next((i for i, c in enumerate(scored) if score(c)[0] > limit), len(scored))
    band, rest = scored[:cut], scored[cut:]
    # one clearly beaten by another in the band never wins on its footprint
    front = _front(band, score)
    rest = sorted((c for c in band if c not in front), key=score) + rest
    band = front
    tie = s.request.tie_breaker
    if tie == "carbon":
        band.sort(key=lambda c: (c.energy.kg_co2e, c.instances, c.count, score(c)))
    elif tie == "time":
        band.sort(key=lambda c: (c.hours_per_unit, c.instances, c.count, score(c)))
    else:
        band = _by_footprint(band, score, serving=s.task == "inference")
    return band + rest


# A candidate is clearly beaten by another on no more instances that costs no more and
# whose GPUs each do at least this many times its GPUs' work: it is then not the smaller
# footprint, only the slower GPU (two cards where four of a faster kind finish in a
# quarter of the time for the same money)
CLEARLY_FASTER_PER_GPU = 1.5

# ... or that finishes the job in a third of the time, a day or more sooner, at a cost in
# the band (within BAND of the best, where costs count as equal): a single GPU's simpler
# setup is not worth days of waiting (8 H100s in one machine pre-training Llama 3 8B in two
# days for 3% more than one MI300X in thirteen); an hour or two sooner is (a three-hour
# fine-tune stays on one GPU)
CLEARLY_SOONER = 3.0

DAY_SAVED_H = 24.0


def _front(band: Sequence[Candidate], score: Any) -> list[Candidate]:
    """The candidates of ``band`` that no other in it clearly beats."""

    def per_gpu(c: Candidate) -> float:  # units of work a GPU-hour
        return 1.0 / (c.hours_per_unit * c.count)

    out = []
    for c in band:
        if not any(
            o.instances <= c.instances
            and (
                (score(o)[0] <= score(c)[0]
                 and per_gpu(o) >= CLEARLY_FASTER_PER_GPU * per_gpu(c))
                # within the band the costs count as equal: days sooner win
                or (
                    o.hours_per_unit * CLEARLY_SOONER <= c.hours_per_unit
                    and (c.job_hours or 0.0) - (o.job_hours or 0.0) >= DAY_SAVED_H
                )
            )
            for o in band
        ):  # fmt: skip
            out.append(c)
    return out


def _by_footprint(band: Sequence[Candidate], score: Any, serving: bool = False) -> list[Candidate]:
    def size(c: Candidate) -> tuple[int, int]:
        return (c.instances, c.count if serving else int(c.count > 1))

    groups: dict[tuple[int, int], list[Candidate]] = {}
    for c in sorted(band, key=size):
        groups.setdefault(size(c), []).append(c)
    out = []
    for group in groups.values():
        fastest = min(c.hours_per_unit for c in group)
        fast = [c for c in group if c.hours_per_unit <= fastest * (1 + BAND)]
        slow = [c for c in group if c.hours_per_unit > fastest * (1 + BAND)]
        out += sorted(fast, key=score) + sorted(slow, key=lambda c: (c.hours_per_unit, score(c)))
    return out


def _describe(c: Candidate) -> str:
    plural = "s" if c.instances > 1 else ""
    kind = "" if c.deployment == "cloud" else f" server{plural}"
    where = f"{c.instances} x {c.site.name}{kind}"
    return f"{c.count} x {c.gpu.name} ({where}, {c.provider} {c.pricing.replace('_', '-')})"


def why_first(shown: Sequence[Candidate], s: Setting, lowest: Candidate | None) -> str | None:
    """One line: why the first answer beat the runner-up (``lowest``: the candidate of the
    best score of all, which the band is measured from)."""
    if not shown or lowest is None:
        return None
    best = lowest.score(s.objective, s.time_value)[0]
    top = shown[0]
    if len(shown) == 1:
        return f"{_describe(top)} is the only candidate that meets the constraints"
    two = shown[1]
    mine = top.score(s.objective, s.time_value)[0]
    theirs = two.score(s.objective, s.time_value)[0]
    what, unit = {"fastest": ("job time", "h"), "cheapest": ("spend over the horizon", "USD")}.get(
        s.objective, ("cost per job", "USD")
    )
    same = (top.instances, top.count) == (two.instances, two.count)
    if theirs < mine or mine > best * (1 + 1e-9) or (mine == theirs and not same):
        tie = s.request.tie_breaker
        if tie == "carbon":
            edge = f"{top.energy.kg_co2e:.3g} kg CO2e against {two.energy.kg_co2e:.3g}"
        elif tie != "time" and top.instances < two.instances:
            edge = f"{top.instances} instance(s) against {two.instances}"
        elif tie != "time" and top.count == 1 < two.count:
            edge = f"one GPU against {two.count}"
        else:
            edge = f"time, {top.hours_per_unit:.3g} h against {two.hours_per_unit:.3g}"
        floor = f" (or {BAND_USD:g} USD)" if s.objective == "best_value" else ""
        rival = (f"the runner-up, {_describe(two)} at {theirs:,.4g} {unit}" if lowest is not two
                 else "that candidate")  # fmt: skip
        return (f"{_describe(top)}: {what} {mine:,.4g} {unit}, within {BAND:.0%}{floor} of "
                f"the best, {_describe(lowest)} at {best:,.4g} {unit} in "
                f"{lowest.hours_per_unit:.3g} h; it beats {rival}, on {edge}")  # fmt: skip
    if s.objective == "fastest":
        return (
            f"{_describe(top)} finishes in {top.hours_per_unit:.3g} h against "
            f"{two.hours_per_unit:.3g} h for {_describe(two)}"
        )
    return (
        f"{_describe(top)}: {what} {mine:,.4g} {unit} against {theirs:,.4g} for "
        f"{_describe(two)} ({_times(theirs, mine) - 1:+.0%})"
    )
