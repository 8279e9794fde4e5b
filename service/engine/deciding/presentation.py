"""A recommendation as the answer shows it: each candidate's parts, the assumptions, the summary,
and the request's id."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from service.engine.deciding import job_time as job
from service.engine.deciding.candidate import UNIT_SAMPLES, Candidate, Setting
from service.engine.deciding.ordering import BAND
from service.engine.estimating.layout_memory import memory_parts
from service.engine.estimating.step_profile import StepProfile

SHOWN = 10  # recommendations returned


def _gib(parts: Mapping[str, float]) -> dict[str, float]:
    return {k: v / 2**30 for k, v in parts.items()}


def _step_parts(step: Any, step_s: float) -> dict[str, float]:
    """A training step's seconds by part; ``input``: what the host's input ceiling adds
    (``step_s``, the step as fed, over the step the GPUs would take)."""
    return {
        "compute": step.compute_s + step.recompute_s + step.optimizer_s,
        "communication": step.tensor_parallel_s
        + step.context_parallel_s
        + step.data_parallel_s
        + step.pipeline_send_s,
        "pipeline_bubble": step.pipeline_bubble_s,
        "host": step.host_s,
        "input": max(0.0, step_s - step.step_s),
    }


# long: one candidate's fields as shown, a field a line
def _shown(rank: int, c: Candidate, s: Setting) -> dict[str, Any]:
    layout = c.planned.layout.to_dict() if c.planned else c.served.layout if c.served else None
    unit = ("job" if c.job_hours is not None
            else f"{UNIT_SAMPLES:,.0f} {'requests' if c.served else 'samples'}")  # fmt: skip
    estimate: dict[str, Any] = {
        "step_time_s": c.step_s,
        "samples_per_s": c.samples_per_s,
        "hours_per_unit": c.hours_per_unit,
        "unit": unit,
        "bound": c.bound,
        "memory_per_gpu_gib": None,
        "memory_headroom": None,
        "mfu": None,
        "serving": None,
        "memory_gib": None,
        "step_parts_s": None,
    }
    if c.planned is not None:
        estimate["memory_gib"] = _gib(memory_parts(c.planned.memory))
        estimate["step_parts_s"] = _step_parts(c.planned.step, c.step_s)
        estimate["memory_per_gpu_gib"] = c.planned.memory.total_bytes / 2**30
        estimate["memory_headroom"] = round(c.planned.headroom, 4)
        estimate["mfu"] = c.planned.step.mfu * c.samples_per_s / c.planned.step.samples_per_s
    if c.served is not None:
        estimate["memory_gib"] = _gib(c.served.parts)
        estimate["memory_per_gpu_gib"] = c.served.memory_bytes / 2**30
        estimate["memory_headroom"] = round(c.served.headroom, 4)
        estimate["serving"] = c.served.figures
    site = c.site
    deployment = {
        "kind": c.deployment,
        "provider": c.provider,
        "instance_type": site.name if site.kind == "cloud" else None,
        "server_design": site.name if site.kind != "cloud" else None,
        "region": c.region,
        "pricing": c.pricing,
        "instances": c.instances,
        "gpus_per_instance": site.gpus_per_instance,
        "vcpus_per_instance": site.vcpus,
        "memory_gib_per_instance": site.memory_gib,
        "marketplace": site.marketplace,
        "cluster_network": site.cluster,
    }
    costs: dict[str, Any] = {
        "per_unit_usd": c.unit_cost_usd,
        "usd_per_gpu_hour": c.usd_per_gpu_hour,
        "monthly_usd": c.monthly_usd,
        "horizon_usd": c.horizon_usd,
        "capital_usd": c.capital_usd,
        "break_even_gpu_hours_per_month": c.context.get("break_even_gpu_hours"),
        "usage": None,
    }
    if c.usage is not None:
        costs["usage"] = {"gpu_hours_per_month": c.usage.gpu_hours_per_month,
                          "horizon_months": c.usage.horizon_months}  # fmt: skip
    return {
        "rank": rank,
        "gpu": c.gpu.id,
        "gpu_name": c.gpu.name,
        "count": c.count,
        "vram_gib": float(c.gpu.memory_gb),
        "deployment": deployment,
        "links": [x.to_dict() for x in site.links],
        "layout": layout,
        "estimate": estimate,
        "job": {**c.job.to_dict(), "unit": unit},
        "cost": costs,
        "energy": c.energy.to_dict(),
        "offer": c.offer.to_dict() if c.offer else None,
        "score": c.score(s.objective, s.time_value)[0],
        "reasons": [f.to_dict() for f in c.fired],
        "pareto": c.pareto,
    }


def _merged(excluded: Sequence[Mapping[str, Any]], kept: set[str]) -> list[dict[str, Any]]:
    """One entry per GPU that no candidate of is kept, with its distinct reasons (a
    candidate per count and offer may repeat them)."""
    out: dict[str, dict[str, Any]] = {}
    for e in excluded:
        if e["gpu"] in kept:
            continue
        entry = out.setdefault(e["gpu"], {"gpu": e["gpu"], "reasons": []})
        for r in e["reasons"]:
            if r not in entry["reasons"]:
                entry["reasons"].append(r)
    return list(out.values())


def _assumptions(s: Setting, profile: StepProfile | None) -> list[str]:
    out = [
        "each GPU on each of its cloud offers (whole instances) and server designs, at each "
        "power of two (and multiple of the instance's GPUs) up to max_gpus (default 64), with "
        "the planner's fastest layout on that deployment's own links: its GPUs' link inside "
        "an instance, the instance type's network between instances "
        "(knowledge/data/instance_networks.csv; without RDMA, half the line rate), tensor "
        "parallelism inside an instance only",
        "on-premise costs from knowledge/data/onprem.yaml (override any in onprem), server "
        "designs from server_designs.yaml; cloud prices from knowledge/data/offer_prices.csv, "
        "each offer's cheapest region per pricing",
        "the whole job: start-up, pretrained weights downloaded, dataset staged, steps, "
        "checkpoints (Young's interval) and expected restarts at the provider's interruption "
        "rate (knowledge/data/providers.yaml); billed per instance in the provider's "
        "increments and minimum",
        f"among candidates within {BAND:.0%} of the best score, the smaller footprint wins "
        "(fewer instances, fewer GPUs, the shorter job) unless tie_breaker says otherwise",
        "energy: each GPU at its board power in proportion to the busy share of its step "
        f"(idle {job.IDLE_SHARE:.0%}), its host's share per GPU slot, times the data "
        "centre's PUE; emissions at the region's grid intensity "
        "(knowledge/data/grid_intensity.csv)",
    ]
    if s.stack is not None:
        out.insert(0, s.stack.note())
    if s.feed.samples_per_s_per_vcpu is not None:
        out.append(
            f"input: each instance's vCPUs (less {s.feed.reserved_vcpus_per_gpu:g} per GPU) "
            f"prepare {s.feed.samples_per_s_per_vcpu:g} {s.feed.input_kind} samples a second "
            "each (knowledge/data/input_rates.yaml); a deployment whose hosts cannot feed its "
            "GPUs is input-bound"
        )
    if profile is not None and not profile.dataset_steps:
        what = "samples" if profile.trains else "requests"
        out.append(f"no dataset in the workload: cost and time are per million {what}, "
                   "steps only")  # fmt: skip
    if profile is not None and not profile.trains:
        out.append(
            "serving: each GPU's smallest group that holds the model (tensor parallel inside "
            "an instance for a generative model, else one GPU) as one, two, four and eight "
            "replicas; a generative model decodes as many sequences together as its memory "
            "holds (or concurrency), each sequence's prefill alone; latency is one request's "
            "(estimate.step_time_s)"
        )
    if s.traced:
        out.append("a traced step is projected onto each GPU at the trace's count; GPUs with "
                   "less memory than the reference are left out")  # fmt: skip
    return out


def summary(s: Setting, recs: Sequence[Mapping[str, Any]], advice: Sequence[Mapping[str, Any]],
            excluded: int) -> str:  # fmt: skip
    """A markdown answer of at most 1,200 characters, fit for a chat reply."""
    if not recs:
        return (f"**No candidate meets the constraints** ({excluded} GPU types excluded; "
                "see `excluded` for each one's reasons).")[:1200]  # fmt: skip
    lines = [f"**Objective: {s.objective.replace('_', ' ')}**"]
    for r in recs[:3]:
        est, c, d = r["estimate"], r["cost"], r["deployment"]
        kind = d["instance_type"] or d["server_design"]
        where = f"{d['instances']} x {kind} ({d['provider']}, {d['pricing'].replace('_', '-')})"
        lines.append(f"{r['rank']}. {r['count']} x {r['gpu_name']} on {where}: "
                     f"{est['hours_per_unit']:.3g} h and {_usd(c['per_unit_usd'])} per "
                     f"{est['unit']}, {r['energy']['kg_co2e']:.3g} kg CO2e")  # fmt: skip
    if advice:
        lines.append("First: " + advice[0]["message"])
    text = "\n".join(lines)
    return text if len(text) <= 1200 else text[:1197] + "..."


def _usd(value: float) -> str:
    return f"{value:,.0f} USD" if value >= 100 else f"{value:.3g} USD"
