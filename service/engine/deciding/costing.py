"""Each run on each deployment: the input its hosts feed, its price, the whole job's time,
energy and cost."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from knowledge import Knowledge
from knowledge.records import Gpu
from service.engine import deadline
from service.engine.deciding import cost
from service.engine.deciding import job_time as job
from service.engine.deciding.candidate import (
    UNIT_SAMPLES,
    Candidate,
    Feed,
    Run,
    Setting,
    _no_site,
    _run_bound,
)
from service.engine.deciding.deployment import Site
from service.engine.deciding.job_time import JobTime, Sizes
from service.engine.estimating.on_request import EstimateService
from service.engine.estimating.step_profile import StepProfile


def _feed(knowledge: Knowledge, raw: Mapping[str, Any] | None, profile: StepProfile | None) -> Feed:
    """The job's dataset, download and checkpoint sizes and its input kind: images when the
    model takes an image size, token sequences when it takes a sequence length."""
    reserved = knowledge.input_rates.get("reserved")
    spare = float(reserved.vcpus_per_gpu.value) if reserved and reserved.vcpus_per_gpu else 1.0
    if raw is None or profile is None:
        return Feed(Sizes(0.0, 0.0, 0.0), "traced", None, spare)
    workload = raw.get("workload") or {}
    kind = "image" if profile.image_size and not profile.seq_len else (
        "text" if profile.seq_len else "tabular")  # fmt: skip
    rates = knowledge.input_rates.get(kind)
    dataset = 0.0
    if profile.trains and rates is not None:
        samples = float(workload.get("dataset_samples") or 0)
        tokens = float(workload.get("dataset_tokens") or samples * (profile.seq_len or 0))
        if kind == "text" and rates.bytes_per_token is not None:
            dataset = tokens * float(rates.bytes_per_token.value)
        elif rates.bytes_per_sample is not None:
            dataset = samples * float(rates.bytes_per_sample.value)
    memory = profile.memory
    params = float((raw.get("model") or {}).get("parameters") or 0)
    download = params * 2.0 if profile.task != "training" else 0.0  # 16-bit weights
    state = memory.optimizer_states_bytes + memory.master_weights_bytes + profile.gradients_bytes
    per_vcpu = None
    if profile.trains and rates is not None and rates.samples_per_s_per_vcpu is not None:
        per_vcpu = float(rates.samples_per_s_per_vcpu.value)
    return Feed(Sizes(dataset, download, state if profile.trains else 0.0), kind, per_vcpu, spare)


def _fed_rate(s: Setting, site: Site, count: int, rate: float) -> float | None:
    """The samples a second the deployment's hosts can prepare, where below ``rate``."""
    per_vcpu = s.feed.samples_per_s_per_vcpu
    if per_vcpu is None:
        return None
    instances = site.instances(count)
    on_each = min(count, site.gpus_per_instance)
    vcpus = max(site.vcpus - s.feed.reserved_vcpus_per_gpu * on_each, 1.0)
    ceiling = instances * vcpus * per_vcpu
    return ceiling if ceiling < rate else None


def _busy(run: Run, rate: float) -> float:
    """The share of a step the GPUs' kernels run (what their power draw follows)."""
    if run.planned is not None:
        step = run.planned.step
        busy = (step.compute_s + step.recompute_s + step.optimizer_s) / step.step_s
    else:
        busy = 0.8 if run.served is None else 0.7
    return busy * rate / run.samples_per_s


def _prices(
    site: Site, s: Setting, usage_kind: tuple[bool, bool]
) -> list[tuple[str, str, float, Any]]:
    """The offer's cheapest region at each pricing the usage admits: on demand; spot for
    interruptible work; reserved for steady use."""
    interruptible, steady = usage_kind
    regions = s.constraints.regions
    best: dict[str, tuple[float, str, Any]] = {}
    assert site.offer is not None
    for price in site.offer.prices:
        if regions and price.region not in regions:
            continue
        for pricing, rate in cost.admitted_rates(price, interruptible, steady):
            if pricing not in best or rate < best[pricing][0]:
                best[pricing] = (rate, price.region, price)
    return [(pricing, region, rate, price) for pricing, (rate, region, price) in best.items()]


# long: each site of a run under each pricing, costed in one pass
def _deployments(
    service: EstimateService, s: Setting, run: Run, excluded: list[dict[str, Any]]
) -> list[Candidate]:
    """The run on each of its sites: each offer at the cheapest region of each pricing the
    usage admits, and the server design it is bought in; each with its whole job's time,
    cost as billed, energy and emissions."""
    deadline.check()
    k = service.knowledge
    overrides = s.request.onprem
    host_w = float(k.onprem["server_power_overhead_w_per_gpu_slot"].value)
    interruptible = s.usage.interruptible
    steady = s.usage.pattern == "steady"
    units = run.job_samples or UNIT_SAMPLES
    out = []
    run_bound = _run_bound(run)
    for site in run.sites:
        instances = site.instances(run.count)
        rate, bound = run.samples_per_s, run_bound
        fed = _fed_rate(s, site, run.count, rate) if run.planned is not None else None
        if fed is not None:
            rate, bound = fed, "input"
        steps_h = units / rate / 3600
        provider = k.providers[site.provider]
        between = next((x for x in site.links if x.scope == "between"), None)
        gbps = between.gb_per_s * 8 if between is not None and site.kind == "cloud" else None

        def timed(pricing: str, steps: float = steps_h, gbps: float | None = gbps) -> JobTime:
            if run.job_samples is None:  # per unit of work: the steps alone
                return JobTime(0.0, 0.0, steps, 0.0, 0.0, 0.0, 0, 0.0)
            return job.job_time(provider, instances, steps, s.feed.sizes, pricing, gbps,  # noqa: B023
                                run.planned is not None)  # fmt: skip

        busy = _busy(run, rate)
        if site.kind == "cloud":
            assert site.offer is not None
            for pricing, region, hourly, price in _prices(site, s, (interruptible, steady)):
                jt = timed(pricing)
                billed = job.billed_hours(provider, jt.hours) if run.job_samples else jt.hours
                job_cost = instances * hourly * billed
                per_gpu_hour = hourly * instances / run.count
                usage = cost.usage_from(s.usage, jt.hours * run.count)
                runs = usage.gpu_hours_per_month / (jt.hours * run.count)
                monthly = (instances * hourly * cost.HOURS_PER_MONTH if pricing == "reserved"
                           else runs * job_cost)  # fmt: skip
                offer = cost.CloudCost(
                    site.offer.id, site.provider, site.offer.instance_type, region,
                    price.catalog_date.isoformat(), price.source, pricing,
                    site.offer.gpu_count, instances, per_gpu_hour, monthly,
                    monthly * usage.horizon_months,
                )  # fmt: skip
                grid = k.grid_intensity(site.provider, region)
                power = job.energy(run.gpu.tdp_w, run.count, jt, busy, host_w,
                                   (float(provider.pue.value), provider.pue.source),
                                   (grid.g_co2e_per_kwh, grid.source))  # fmt: skip
                out.append(Candidate(
                    gpu=run.gpu, count=run.count, planned=run.planned, step_s=run.step_s,
                    samples_per_s=rate, job_hours=jt.hours if run.job_samples else None,
                    hours_per_unit=jt.hours, deployment="cloud", pricing=pricing,
                    provider=site.provider, capital_usd=0.0, monthly_usd=monthly,
                    horizon_usd=monthly * usage.horizon_months, usd_per_gpu_hour=per_gpu_hour,
                    cost_per_unit_usd=job_cost, site=site, instances=instances, job=jt,
                    energy=power, region=region, bound=bound, offer=offer, usage=usage,
                    served=run.served,
                ))  # fmt: skip
            continue
        params = _onprem_parameters(k, overrides, run.gpu, run.count)
        jt = timed("owned")
        usage = cost.usage_from(s.usage, jt.hours * run.count)
        own = cost.on_premise(run.gpu, run.count, usage, params)
        grid = k.grid_intensity("on-premise", "*")
        pue = params["pue"]
        power = job.energy(run.gpu.tdp_w, run.count, jt, busy, host_w,
                           (pue.value, pue.source), (grid.g_co2e_per_kwh, grid.source))  # fmt: skip
        out.append(Candidate(
            gpu=run.gpu, count=run.count, planned=run.planned, step_s=run.step_s,
            samples_per_s=rate, job_hours=jt.hours if run.job_samples else None,
            hours_per_unit=jt.hours, deployment="on-premise", pricing="owned",
            provider="on-premise", capital_usd=own.capital_usd, monthly_usd=own.monthly_usd,
            horizon_usd=own.horizon_usd, usd_per_gpu_hour=own.cost_per_gpu_hour_usd,
            cost_per_unit_usd=jt.hours * run.count * own.cost_per_gpu_hour_usd, site=site,
            instances=instances, job=jt, energy=power, region=None, bound=bound, onprem=own,
            usage=usage, served=run.served,
        ))  # fmt: skip
    if not out:
        excluded.append({**_no_site(run.gpu, s), "count": run.count})
    return out


def _onprem_parameters(
    knowledge: Knowledge, overrides: Mapping[str, float], gpu: Gpu, count: int
) -> dict[str, cost.Parameter]:
    """:func:`cost.onprem_parameters`, kept with the knowledge for the same GPU and count
    where the request overrides nothing."""
    if overrides:  # a request's own figures: not kept (they would pile up)
        return cost.onprem_parameters(knowledge, overrides, gpu, count)
    key = ("onprem_parameters", gpu.id, count)
    found = knowledge.derived.get(key)
    if found is None:
        found = knowledge.derived[key] = cost.onprem_parameters(knowledge, overrides, gpu, count)
    return dict(found)
