"""The print-ready quote page of a stored recommendation (the JSON of
``GET /v1/recommendations/{id}``): the workload asked, the first choice, the bill of materials
from :func:`service.exports.bill_of_materials` with its power and TCO against renting, the
other candidates, the reasons, the assumptions and the source of every figure.

Pure functions, no Flask: the figures are worded here, the page is laid out by the Jinja2
template ``service/web/templates/quote.html`` (autoescaped: every value is escaped); the page
has no script and loads nothing.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from functools import cache
from typing import Any

import jinja2

from service.exports import Bill, Row

Pairs = list[tuple[str, Any]]


@cache
def _template() -> jinja2.Template:
    env = jinja2.Environment(
        loader=jinja2.PackageLoader("service.web", "templates"),
        autoescape=True,
        trim_blocks=True,
        lstrip_blocks=True,
        undefined=jinja2.StrictUndefined,
    )
    env.filters["cell"] = lambda value: "–" if value is None else value
    return env.get_template("quote.html")


def _table(
    head: Sequence[str], rows: Iterable[Sequence[Any]], numeric: int = 99, kind: str = "list"
) -> dict[str, Any]:
    """A table for the template; the columns from ``numeric`` on are right-aligned."""
    return {"head": list(head), "rows": [list(r) for r in rows], "numeric": numeric, "kind": kind}


def _n(value: Any) -> str:
    """A figure as people read it: whole above 100 (or when whole), two decimals above 1,
    else 3 significant digits."""
    if not isinstance(value, int | float) or isinstance(value, bool):
        return "–" if value is None else str(value)
    if abs(value) >= 100 or float(value).is_integer():
        return f"{value:,.0f}"
    return f"{value:,.2f}" if abs(value) >= 1 else f"{value:.3g}"


def _usd(value: Any) -> str:
    return "–" if value is None else f"{_n(value)} USD"


def _where(r: Mapping[str, Any]) -> str:
    d = r["deployment"]
    if d["kind"] == "on-premise":
        return f"{d['instances']} x {d['server_design']} server, owned (on premise)"
    pricing = str(d["pricing"]).replace("_", "-")
    return f"{d['instances']} x {d['instance_type']}, {d['provider']} {d['region']}, {pricing}"


def _model(request: Mapping[str, Any]) -> str:
    for key, kind in (("profile_id", "stored profile"), ("trace_id", "stored trace")):
        if request.get(key):
            return f"{kind} {request[key]}"
    model = request.get("model") or {}
    config = model.get("hf_config")
    if isinstance(config, Mapping):
        return str(config.get("_name_or_path") or config.get("model_type") or "a config.json")
    if "family" in model:
        return f"{model['family']} (parametric family)"
    return str(model.get("name") or ("a layer list" if "layers" in model else "–"))


def _workload(answer: Mapping[str, Any]) -> Pairs:
    request = answer.get("request") or {}
    w, usage = request.get("workload") or {}, request.get("usage") or {}
    shape = ("method", "batch_size", "seq_len", "image_size", "prompt_tokens", "output_tokens")
    size = w.get("dataset_samples") or w.get("dataset_tokens")
    unit = "samples" if w.get("dataset_samples") else "tokens"
    epochs = f" x {w['epochs']:g} epochs" if isinstance(w.get("epochs"), int | float) else ""
    hours, runs = usage.get("gpu_hours_per_month"), usage.get("runs_per_month") or 1
    use = f"{_n(hours)} GPU-hours" if hours is not None else f"{_n(runs)} run(s)"
    limits = request.get("constraints") or {}
    return [
        ("Model", _model(request)),
        ("Task", w.get("task", "as profiled or traced")),
        ("Shape", ", ".join(f"{k} {w[k]}" for k in shape if k in w) or "–"),
        ("Precision", w.get("precision")),
        ("Dataset", f"{size:,} {unit}{epochs}" if isinstance(size, int) else "none given"),
        ("Usage", f"{use} a month over {usage.get('horizon_months', 36)} months"),
        ("Objective", answer.get("objective")),
        ("Constraints", "; ".join(f"{k} {v}" for k, v in limits.items()) or "none"),
    ]


def _choice(r: Mapping[str, Any]) -> Pairs:
    c, unit, energy, usage = r["cost"], r["estimate"]["unit"], r["energy"], r["cost"]["usage"]
    pairs = [
        ("GPUs", f"{r['count']} x {r['gpu_name']} ({r['gpu']}), {_n(r['vram_gib'])} GiB each"),
        ("Deployment", _where(r)),
        ("Time", f"{_n(r['job']['hours'])} h per {unit}"),
        ("Cost", f"{_usd(c['per_unit_usd'])} per {unit}; {_usd(c['usd_per_gpu_hour'])} a GPU-hour"),
        ("Monthly", f"{_usd(c['monthly_usd'])} at {_n(usage['gpu_hours_per_month'])} GPU-hours"),
        ("Horizon", f"{_usd(c['horizon_usd'])} over {usage['horizon_months']} months"),
        ("Memory", f"{_n(r['estimate']['memory_per_gpu_gib'])} GiB per GPU"),
        ("Energy", f"{_n(energy['kwh'])} kWh, {_n(energy['kg_co2e'])} kg CO2e per {unit}"),
    ]
    offer = r.get("offer")
    if offer:
        hourly = offer["usd_per_gpu_hour"] * r["count"] / offer["instances"]
        pairs[2:2] = [
            ("Offer", f"{offer['provider']} {offer['instance_type']} in {offer['region']}"),
            ("Pricing", f"{offer['pricing']}, {offer['instances']} instance(s)"),
            ("Unit price", f"{_usd(hourly)} per instance-hour"),
            ("Price as of", f"{offer['catalog_date']} ({offer['source']})"),
        ]
    return pairs


def _bill(bill: Bill, answer: Mapping[str, Any]) -> list[dict[str, Any]]:
    own, usage, t = bill.tco["on_premise"], bill.tco["usage"], bill.tco
    p = {x["name"]: x["value"] for x in t["parameters"]}
    energy = t["energy"]["on_premise"]
    rows: list[tuple[Any, ...]] = [
        (x.item, x.what, x.quantity, _usd(x.unit_usd), _usd(x.total_usd)) for x in bill.lines
    ]
    rows.append(("Capital", "GPUs, servers and fabric", "", "", _usd(own["capital_usd"])))
    host_w = p["server_power_overhead_w_per_gpu_slot"]
    power = [
        ("IT load", f"{bill.it_kw:.2f} kW (board power + {host_w:g} W host per GPU slot)"),
        ("At the wall", f"{bill.it_kw * energy['pue']:.2f} kW at PUE {energy['pue']:g}"),
        (
            "Energy",
            f"{_usd(bill.monthly_energy_usd)} a month: {_n(energy['kwh_per_month'])} kWh at "
            f"{p['power_price_usd_per_kwh']:g} USD/kWh",
        ),
        (
            "Colocation",
            f"{_usd(bill.colocation_usd_per_month)} a month: space, power capacity and cooling "
            f"at {p['colocation_usd_per_kw_month']:g} USD per kW-month (in the fixed cost)",
        ),
    ]
    even = t["break_even_gpu_hours_per_month"]
    years = p["depreciation_years"]
    tco = [
        ("Fixed", f"{_usd(own['monthly_fixed_usd'])} a month: depreciation over {years:g} years, "
                  "staff, colocation"),
        ("Monthly", f"{_usd(own['monthly_usd'])} at {_n(usage['gpu_hours_per_month'])} GPU-hours "
                    f"({own['utilisation']:.0%} of the hours owned)"),
        (f"TCO over {usage['horizon_months']} months", _usd(own["horizon_usd"])),
        ("Break-even", f"{_n(even)} GPU-hours a month" if even else "renting stays cheaper"),
    ]  # fmt: skip
    note = f"Rank {bill.rank}: {bill.count} x {bill.gpu_name} in {bill.servers} x {bill.design}."
    if bill.knowledge_version != answer.get("knowledge_version"):
        note += f" Priced on today's knowledge ({bill.knowledge_version})."
    return [
        {"p": note},
        {"table": _table(("Item", "What", "Qty", "Unit price", "Total"), rows, 2)},
        {"h3": "Power and cooling"},
        {"facts": power},
        {"h3": "Total cost of ownership"},
        {"facts": tco},
    ]


def _compare(bill: Bill | None, answer: Mapping[str, Any]) -> list[dict[str, Any]]:
    """Owning against renting, a month and over the horizon."""
    rows = []
    if bill is not None:
        own, cloud, mix = (bill.tco[k] for k in ("on_premise", "cloud", "hybrid"))
        rows.append((f"own {bill.count} x {bill.gpu_name}", own["monthly_usd"], own["horizon_usd"]))
        if cloud:
            what = f"rent the same GPUs: {cloud['provider']} {cloud['instance_type']}"
            where = f"{cloud['region']}, {cloud['pricing']}"
            rows.append((f"{what} in {where}", cloud["monthly_usd"], cloud["horizon_usd"]))
        if mix:
            what = f"own {mix['owned_count']} for the baseline, rent the rest"
            rows.append((what, mix["monthly_usd"], mix["horizon_usd"]))
    recs = answer.get("recommendations") or ()
    best = next((r for r in recs if r["deployment"]["kind"] == "cloud"), None)
    if best is not None:
        what = f"rank {best['rank']}: {best['count']} x {best['gpu_name']} on {_where(best)}"
        rows.append((what, best["cost"]["monthly_usd"], best["cost"]["horizon_usd"]))
    note = [] if bill else [{"p": "No on-premise candidate in this answer."}]
    if not rows:
        return [*note, {"p": "No cloud candidate in this answer."}]
    shown = [(what, _usd(month), _usd(horizon)) for what, month, horizon in rows]
    return [*note, {"table": _table(("Option", "Monthly", "Horizon"), shown, 1)}]


def _sources(answer: Mapping[str, Any], bill: Bill | None) -> dict[str, Any]:
    """Every figure the page uses, with its source and date, each once."""
    found: dict[tuple[str, str], Row] = {}

    def add(figure: str, value: Any, source: Any, as_of: Any = "") -> None:
        if source:
            found.setdefault((figure, str(source)), (figure, _n(value), str(source), str(as_of)))

    def price(offer: Mapping[str, Any]) -> None:
        figure = f"price of {offer['offer_id']} in {offer['region']}, {offer['pricing']}"
        value = f"{offer['usd_per_gpu_hour']:.3g} USD a GPU-hour"
        add(figure, value, offer["source"], offer["catalog_date"])

    if bill is not None:
        for p in bill.tco["parameters"]:
            unit = str(p["unit"]).replace("_", " ")
            add(p["name"], f"{_n(p['value'])} {unit}", p["source"], p["as_of"])
        for row in bill.facts:
            add(*row)
        if bill.tco["cloud"]:
            price(bill.tco["cloud"])
    for r in (answer.get("recommendations") or ())[:1]:
        if r.get("offer"):
            price(r["offer"])
        energy = r["energy"]
        add("pue", energy.get("pue"), energy.get("pue_source"))
        grid = energy.get("grid_g_co2e_per_kwh")
        add("grid intensity, g CO2e/kWh", grid, energy.get("grid_source"))
        for x in r.get("links") or ():
            figure = f"link {x['scope']}: {x['name']}"
            add(figure, f"{x['gb_per_s']:g} GB/s", x["source"], x["as_of"])
    return _table(("Figure", "Value", "Source", "As of"), found.values(), kind="src")


STYLE = """
@page { size: A4; margin: 14mm 14mm 16mm; }
body { font: 10pt/1.4 "DejaVu Sans", Arial, sans-serif; color: #111; max-width: 182mm;
  margin: 1.5em auto; }
h1 { font-size: 17pt; margin: 0 0 .2em; } h3 { font-size: 10.5pt; margin: .9em 0 .3em; }
h2 { font-size: 12.5pt; margin: 1.3em 0 .4em; border-bottom: 1.5px solid #333; }
table { border-collapse: collapse; width: 100%; margin: .3em 0; }
th, td { text-align: left; vertical-align: top; padding: 2px 5px; border-bottom: 1px solid #ccc;
  overflow-wrap: break-word; } .src td:nth-child(3) { overflow-wrap: anywhere; }
thead th { border-bottom: 1.5px solid #333; } .kv th { width: 28%; font-weight: 600; }
.n, .src td:last-child { white-space: nowrap; } .n { text-align: right; }
.meta { color: #444; margin: 0; } .hint { border: 1px dashed #888; padding: .3em .6em; }
footer { font-size: 8pt; color: #444; margin-top: 2em; } code { font-size: 9pt; }
@media print {
  body { margin: 0; max-width: none; font-size: 9pt; } .hint { display: none; }
  h2, h3 { break-after: avoid; } tr, li { break-inside: avoid; }
}
"""


def _section(title: str, *blocks: dict[str, Any]) -> dict[str, Any]:
    """A titled section of blocks: each one of ``p``, ``h3``, ``facts``, ``table`` or ``ul``."""
    return {"title": title, "blocks": list(blocks)}


def quote_html(answer: Mapping[str, Any], bill: Bill | None) -> str:
    """A print-ready page (A4, no script, nothing loaded) quoting the answer's first choice:
    the workload asked, the choice, the bill of materials of ``bill`` (the first choice's own
    on premise, else the on-premise alternative) with its power and TCO against the cloud,
    the other candidates, the reasons, the assumptions and the source of every figure."""
    recs = answer.get("recommendations") or ()
    first = recs[0] if recs else None
    ident, created = str(answer.get("id", "")), str(answer.get("created_at", ""))
    versions = f"knowledge {answer.get('knowledge_version')} · rules {answer.get('rules_version')}"
    sections = [_section("Workload asked", {"facts": _workload(answer)})]
    if first is None:
        excluded = len(answer.get("excluded") or ())
        text = f"No candidate meets the constraints ({excluded} GPU types excluded)."
        sections.append(_section("First choice", {"p": text}))
    else:
        sections.extend(_ranked(answer, first, bill))
    items = [*(answer.get("assumptions") or ()), *(bill.tco["assumptions"] if bill else ())]
    sections.append(_section("Assumptions", {"ul": items}))
    sections.append(_section("Sources", {"table": _sources(answer, bill)}))
    return _template().render(
        title=first["gpu_name"] if first else "no candidate",
        ident=ident,
        created=created,
        versions=versions,
        style=STYLE,
        sections=sections,
    )


def _ranked(
    answer: Mapping[str, Any], first: Mapping[str, Any], bill: Bill | None
) -> list[dict[str, Any]]:
    """The sections of an answer with candidates: the first choice, the bill of materials,
    owning against renting, the other candidates and the reasons."""
    why = [{"p": answer["why_first"]}] if answer.get("why_first") else []
    out = [_section(f"First choice: {_where(first)}", {"facts": _choice(first)}, *why)]
    owned_first = first["deployment"]["kind"] == "on-premise"
    title = "Bill of materials" if owned_first else "On-premise alternative: bill of materials"
    if bill is not None:
        out.append(_section(title, *_bill(bill, answer)))
    elif owned_first:
        text = "The cost engine cannot price this choice at this usage today (see POST /v1/tco)."
        out.append(_section(title, {"p": text}))
    out.append(_section("Owning against renting", *_compare(bill, answer)))
    recs = answer.get("recommendations") or ()
    others = [
        (r["rank"], f"{r['count']} x {r['gpu_name']}", _where(r), _n(r["job"]["hours"]),
         _usd(r["cost"]["per_unit_usd"]), _usd(r["cost"]["monthly_usd"]))
        for r in recs[1:]
    ]  # fmt: skip
    if others:
        head = ("#", "GPUs", "Deployment", "Hours", f"Per {first['estimate']['unit']}", "Monthly")
        out.append(_section("Other candidates", {"table": _table(head, others, 3)}))
    reasons = [(x["rule"], x["message"], x["source"], x["as_of"]) for x in first["reasons"]]
    for x in answer.get("advice") or ():
        reasons.append((x["rule"], f"advice: {x['message']}", x["source"], x["as_of"]))
    if reasons:
        said = ("Rule", "Says", "Source", "Date")
        out.append(_section("Reasons", {"table": _table(said, reasons, kind="src")}))
    return out
