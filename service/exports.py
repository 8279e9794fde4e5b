"""Procurement exports of a stored recommendation (the JSON of ``GET /v1/recommendations/{id}``):
its candidates as CSV for a spreadsheet, and the bill of materials of its best-ranked on-premise
candidate, priced by the cost engine (:func:`service.engine.deciding.cost.tco`), every figure
with its
source. The printable quote page that shows the bill is :mod:`service.quote`.

Pure functions, no Flask. A spreadsheet reads a text cell starting with ``=``, ``+``, ``-`` or
``@`` as a formula (OWASP, "CSV Injection"), so such cells get a leading apostrophe; numbers
written here are not text and keep their sign.
"""

from __future__ import annotations

import csv
import io
import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from knowledge import Knowledge
from knowledge.errors import KnowledgeError
from service.engine.deciding import cost
from service.engine.errors import EngineError
from service.engine.requests import UsageAsked

FORMULA_STARTS = ("=", "+", "-", "@", "\t", "\r")
COLUMNS = (
    "rank", "gpu", "gpu_name", "count", "vram_gib", "deployment", "provider", "instance_type",
    "server_design", "region", "pricing", "instances", "gpus_per_instance", "usd_per_gpu_hour",
    "usd_per_instance_hour", "capital_usd_per_gpu", "capital_usd_per_server", "job_hours",
    "unit", "per_unit_usd", "gpu_hours_per_month", "monthly_usd", "horizon_months",
    "horizon_usd", "capital_usd", "kwh", "kg_co2e", "memory_per_gpu_gib", "memory_headroom",
    "fits", "pareto", "score", "rules", "price_source", "price_as_of",
)  # fmt: skip
Row = tuple[str, ...]


def _cell(value: Any) -> str:
    """A CSV cell: numbers as Python writes them, text defused when a spreadsheet would run it."""
    if value is None:
        return ""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int):
        return str(value)
    if isinstance(value, float):
        return repr(value) if math.isfinite(value) else ""
    text = str(value)
    return "'" + text if text.startswith(FORMULA_STARTS) else text


def _row(r: Mapping[str, Any]) -> dict[str, Any]:
    """A candidate's columns, by name (see :data:`COLUMNS`)."""
    d, c, est = r.get("deployment") or {}, r.get("cost") or {}, r.get("estimate") or {}
    energy, usage, offer = r.get("energy") or {}, c.get("usage") or {}, r.get("offer") or {}
    owned = d.get("kind") == "on-premise"
    count, instances, capital = r.get("count") or 0, d.get("instances") or 0, c.get("capital_usd")
    rate, headroom = c.get("usd_per_gpu_hour"), est.get("memory_headroom")
    whole = bool(count and instances)  # both: in every answer the engine gives
    return {
        **{k: r.get(k) for k in ("rank", "gpu", "gpu_name", "count", "vram_gib", "pareto")},
        **{k: d.get(k) for k in ("provider", "instance_type", "server_design", "region")},
        **{k: d.get(k) for k in ("pricing", "instances", "gpus_per_instance")},
        "deployment": d.get("kind"),
        "usd_per_gpu_hour": rate,
        "usd_per_instance_hour": rate * count / instances if rate and whole and not owned else None,
        "capital_usd_per_gpu": capital / count if capital and whole and owned else None,
        "capital_usd_per_server": capital / instances if capital and whole and owned else None,
        "job_hours": (r.get("job") or {}).get("hours"),
        "unit": est.get("unit"),
        **{k: c.get(k) for k in ("per_unit_usd", "monthly_usd", "horizon_usd", "capital_usd")},
        **{k: usage.get(k) for k in ("gpu_hours_per_month", "horizon_months")},
        **{k: energy.get(k) for k in ("kwh", "kg_co2e")},
        **{k: est.get(k) for k in ("memory_per_gpu_gib", "memory_headroom")},
        "fits": None if headroom is None else headroom >= 0,
        "score": r.get("score"),
        "rules": ";".join(str(x.get("rule")) for x in r.get("reasons") or ()),
        "price_source": offer.get("source") or ("knowledge/data/onprem.yaml" if owned else None),
        "price_as_of": offer.get("catalog_date"),
    }


def candidates_csv(answer: Mapping[str, Any]) -> str:
    """One row per recommended candidate, in rank order, under a header of :data:`COLUMNS`:
    prices per GPU-hour and per instance-hour (cloud), capital per GPU and per server (on
    premise), the job's hours and cost, the usage's monthly and horizon cost, energy, memory
    and the ids of the rules that gave reasons (``;``-separated)."""
    out = io.StringIO()
    writer = csv.DictWriter(out, COLUMNS, lineterminator="\r\n")
    writer.writeheader()
    for r in answer.get("recommendations") or ():
        writer.writerow({k: _cell(v) for k, v in _row(r).items()})
    return out.getvalue()


@dataclass(frozen=True, slots=True)
class Line:
    """One line of a bill of materials: what is bought, how many, at what unit price."""

    item: str
    what: str
    quantity: int
    unit_usd: float
    total_usd: float


@dataclass(frozen=True, slots=True)
class Bill:
    """The best-ranked on-premise candidate of an answer priced by :func:`cost.tco` at the
    request's usage: capital lines that sum to ``tco['on_premise']['capital_usd']`` (each
    unit price a tco parameter, listed with its source), power, and owning against renting."""

    rank: int
    gpu_name: str
    count: int
    design: str  # the server design's name (server_designs.yaml)
    servers: int
    lines: tuple[Line, ...]  # GPUs, server slots and, beyond one 8-GPU server, the fabric
    it_kw: float  # provisioned IT load: GPU board power plus host overhead per slot
    monthly_energy_usd: float  # the engine's energy per GPU-hour times the usage's hours
    colocation_usd_per_month: float  # space, power capacity and cooling, per IT kW
    tco: dict[str, Any]  # POST /v1/tco's answer for the GPU, count and usage
    facts: tuple[Row, ...]  # (figure, value, source, as_of) of the GPU and server design
    knowledge_version: str


def bill_of_materials(
    knowledge: Knowledge, answer: Mapping[str, Any], asked: UsageAsked
) -> Bill | None:
    """The bill for the answer's best-ranked on-premise candidate at ``asked`` (the request's
    usage, typed), with the request's on-premise overrides and cloud providers and regions;
    None where the answer has none, or the engine cannot price it now (a usage beyond what
    the count gives, a GPU no longer in the knowledge)."""
    recs = answer.get("recommendations") or ()
    owned = next((r for r in recs if r["deployment"]["kind"] == "on-premise"), None)
    if owned is None:
        return None
    request = answer.get("request") or {}
    limits = request.get("constraints") or {}
    count = int(owned["count"])
    try:
        gpu = knowledge.gpu(owned["gpu"])
        usage = cost.usage_from(asked, float(owned["job"]["hours"]) * count)
        found = cost.tco(
            knowledge, gpu, count, usage, request.get("onprem"),
            limits.get("providers"), limits.get("regions"),
        )  # fmt: skip
    except (EngineError, KnowledgeError):
        return None
    p = {x["name"]: x["value"] for x in found["parameters"]}
    design = knowledge.server_designs[cost.server_kind(gpu, count)]
    servers = int(owned["deployment"]["instances"])
    slots, slot_usd = servers * design.max_gpus, p["server_cost_usd_per_gpu_slot"]
    lines = [
        Line("GPUs", gpu.name, count, p["gpu_price_usd"], count * p["gpu_price_usd"]),
        Line(
            "Servers",
            f"{servers} x {design.name}: {count} of {slots} GPU slots, priced per slot "
            f"(a whole server's host: {slot_usd * design.max_gpus:,.0f} USD)",
            count,
            slot_usd,
            count * slot_usd,
        ),
    ]
    if count > cost.GPUS_PER_SERVER and "network_usd_per_gpu" in p:
        links = owned.get("links") or ()
        fabric = next((x["name"] for x in links if x["scope"] == "between"), design.network)
        per_gpu = p["network_usd_per_gpu"]
        what = f"fabric between the {servers} servers: {fabric}"
        lines.append(Line("Networking", what, count, per_gpu, count * per_gpu))
    it_kw = count * (gpu.tdp_w + p["server_power_overhead_w_per_gpu_slot"]) / 1000
    source = gpu.sources[0] if gpu.sources else "knowledge/data/gpus"
    facts = [(f"{gpu.name}: board power", f"{gpu.tdp_w:g} W", source, gpu.as_of.isoformat())]
    for what, fact in (("host vCPUs", design.vcpus), ("host memory, GiB", design.memory_gib)):
        value = f"{fact.value:g}"
        facts.append((f"{design.name}: {what}", value, fact.source, fact.as_of.isoformat()))
    energy_usd = found["on_premise"]["energy_usd_per_gpu_hour"] * usage.gpu_hours_per_month
    colocation_usd = it_kw * p["colocation_usd_per_kw_month"]
    return Bill(
        int(owned["rank"]), gpu.name, count, design.name, servers, tuple(lines), it_kw,
        energy_usd, colocation_usd, found, tuple(facts), knowledge.version,
    )  # fmt: skip
