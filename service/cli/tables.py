"""How the product's commands print an answer in a terminal: one rich table or a few
lines per kind of answer (``--json`` prints the API's answer instead)."""

from __future__ import annotations

import json
from typing import Any

from rich.console import Console
from rich.table import Table

out = Console(highlight=False, soft_wrap=False)


def _num(value: Any, digits: int = 3) -> str:
    if value is None:
        return "-"
    if isinstance(value, float):
        return f"{value:,.{digits}g}" if abs(value) < 1000 else f"{value:,.0f}"
    return f"{value:,}" if isinstance(value, int) else str(value)


def _hours(value: float | None) -> str:
    if value is None:
        return "-"
    return f"{value * 60:.0f} min" if value < 1 else f"{value:,.1f} h"


def _usd(value: float | None) -> str:
    return "-" if value is None else f"${value:,.2f}" if value < 100 else f"${value:,.0f}"


def _gib(value: float | None) -> str:
    return "-" if value is None else f"{value:,.1f} GiB"


def recommendation(answer: dict[str, Any], url: str | None) -> None:
    rows = answer.get("recommendations", [])
    monthly = any(r["cost"]["monthly_usd"] != r["cost"]["per_unit_usd"] for r in rows)
    table = Table(title=f"rightsize: {answer.get('objective')}", title_justify="left")
    for name in ("#", "GPUs", "deployment", "job", "cost/job", "a month", "kg CO2e", "GiB/GPU"):
        if name == "a month" and not monthly:
            continue  # one job a month: the same figure
        left = name in ("GPUs", "deployment")
        table.add_column(
            name, justify="left" if left else "right", overflow="fold" if left else "ellipsis"
        )
    pricing = {"on_demand": "", "spot": " spot", "reserved": " reserved", "owned": " bought"}
    for r in rows:
        d, est, cost = r["deployment"], r["estimate"], r["cost"]
        where = d.get("instance_type") or d.get("server_design") or ""
        times = f" x{d['instances']}" if d["instances"] > 1 else ""
        memory = est["memory_per_gpu_gib"]
        cells = [
            str(r["rank"]),
            f"{r['count']} x {r['gpu']}",
            f"{d['provider']} {where}{times}{pricing.get(d['pricing'], '')}",
            _hours(r["job"]["hours"]),
            _usd(cost["per_unit_usd"]),
            *([_usd(cost["monthly_usd"])] if monthly else []),
            _num(r["energy"]["kg_co2e"], 2),
            f"{memory:.0f}/{r['vram_gib']:.0f}" if memory is not None else "-",
        ]
        table.add_row(*cells)
    out.print(table)
    if answer.get("why_first"):
        out.print(f"Why first: {answer['why_first']}")
    for tip in answer.get("advice", [])[:5]:
        out.print(f"Advice ({tip['rule']}): {tip['message']}")
    excluded = answer.get("excluded", [])
    if excluded:
        shown = ", ".join(f"{x['gpu']} ({x['reasons'][0]['rule']})" for x in excluded[:8])
        more = f" and {len(excluded) - 8} more" if len(excluded) > 8 else ""
        out.print(f"Excluded: {shown}{more}")
    ident = answer["id"]
    if url is None:
        out.print(f"id {ident} (answered in this process: a server keeps and shares it)")
        return
    base = url.rstrip("/")
    out.print(
        f"id {ident}: share {base}/?id={ident}; "
        f"CSV {base}/v1/recommendations/{ident}/export.csv; "
        f"quote {base}/v1/recommendations/{ident}/quote"
    )


def estimate(a: dict[str, Any]) -> None:
    table = Table(
        title=f"{a['count']} x {a['gpu']} ({a.get('math_mode', '')})",
        title_justify="left",
        show_header=False,
    )
    throughput = a.get("throughput") or {}
    stack = a.get("stack") or {}
    rows = [
        (
            "stack",
            stack.get("id", "-")
            + (
                f" (overridden: {', '.join(stack['overridden'])})"
                if stack.get("overridden")
                else ""
            ),
        ),
        ("step time", f"{_num(a['step_time_s'])} s"),
        ("samples/s", _num(throughput.get("samples_per_s"))),
        ("tokens/s", _num(throughput.get("tokens_per_s"))),
        (
            "memory per GPU",
            f"{_gib(a['memory_per_gpu_bytes'] / 2**30)} of "
            f"{_gib(a['usable_memory_bytes'] / 2**30)} usable",
        ),
        ("fits (the whole model on each GPU)", "yes" if a.get("fits") else "NO"),
        ("bound", a.get("bound") or "-"),
    ]
    if a.get("interval"):
        rows.append(
            ("80% interval", f"{_num(a['interval']['low'])} - {_num(a['interval']['high'])} s")
        )
    if a.get("time_to_train_s"):
        rows.append(("time to train", _hours(a["time_to_train_s"] / 3600)))
    served = a.get("inference")
    if served and "data_parallel" in served:  # serving a generative model
        rows += [
            (
                "serving",
                f"{served['data_parallel']} x {served['tensor_parallel']} GPU(s), "
                f"{served['concurrency']} sequences each"
                + ("" if served["fits"] else " (does NOT fit)"),
            ),
            ("time to first token", f"{_num(served['time_to_first_token_s'])} s"),
            ("time per output token", f"{_num(served['time_per_output_token_s'] * 1e3)} ms"),
            ("between tokens, others joining", f"{_num(served['inter_token_latency_s'] * 1e3)} ms"),
            ("output tokens/s", _num(served["all_output_tokens_per_s"])),
        ]
    reported = a.get("memory_reported")
    if reported:
        rows.append((
            "memory as reported",
            f"allocated {_gib(reported['allocated_peak_bytes'] / 2**30)}, reserved "
            f"{_gib(reported['reserved_bytes'] / 2**30)}, nvidia-smi "
            f"{_gib(reported['nvidia_smi_bytes'] / 2**30)}",
        ))  # fmt: skip
    for row in rows:
        table.add_row(*row)
    out.print(table)


def plan(a: dict[str, Any]) -> None:
    table = Table(
        title=f"layouts on {a['count']} x {a['gpu']} ({a.get('layouts_total')} valid)",
        title_justify="left",
    )
    for name in ("#", "DP", "TP", "PP", "ZeRO", "recompute", "step", "MFU", "memory/GPU", "fits"):
        table.add_column(name, justify="right")
    for x in a.get("layouts", [])[:10]:
        lay = x.get("layout") or {}
        table.add_row(
            str(x.get("rank", "")),
            _num(lay.get("data_parallel")),
            _num(lay.get("tensor_parallel")),
            _num(lay.get("pipeline_parallel")),
            _num(lay.get("zero_stage")),
            str(lay.get("activation_checkpointing", "-")),
            f"{_num(x.get('step_time_s'))} s",
            _num(x.get("mfu"), 2),
            _gib((x.get("memory_per_gpu_bytes") or 0) / 2**30),
            "yes" if x.get("fits") else "no",
        )
    out.print(table)


def tco(a: dict[str, Any]) -> None:
    months = a["usage"]["horizon_months"]
    table = Table(
        title=f"{a['count']} x {a['gpu']}, {_num(a['usage']['gpu_hours_per_month'])} "
        f"GPU-hours a month, {months} months",
        title_justify="left",
    )
    for name in ("", "a month", f"over {months} months", "per GPU-hour"):
        table.add_column(name, justify="right" if name else "left")
    onprem = a["on_premise"]
    table.add_row(
        "on premise",
        _usd(onprem["monthly_usd"]),
        _usd(onprem["horizon_usd"]),
        _usd(onprem["cost_per_gpu_hour_usd"]),
    )
    cloud = a.get("cloud")
    if cloud:
        table.add_row(
            f"cloud: {cloud['provider']} {cloud['instance_type']} ({cloud['pricing']})",
            _usd(cloud["monthly_usd"]),
            _usd(cloud["horizon_usd"]),
            _usd(cloud["usd_per_gpu_hour"]),
        )
    out.print(table)
    out.print(
        f"Cheapest: {a['cheapest']}; break-even "
        f"{_num(a.get('break_even_gpu_hours_per_month'))} GPU-hours a month"
    )


def _stack_summary(st: dict[str, Any]) -> str:
    p = st["properties"]
    parts = [f"{p['kernels']} kernels", f"{p['attention']} attention"]
    if "inference" in st["tasks"] and st["tasks"] == ["inference"]:
        parts.append(
            "continuous batching, paged KV" if p["continuous_batching"] else "static batch"
        )
        parts.append("CUDA graphs" if p["cuda_graphs"] else "a launch a kernel")
    else:
        parts += [
            f"{p['loss']} loss",
            "fp32 master weights" if p["master_weights"] == "fp32" else "pure 16-bit",
            f"{p['optimizer_states']} optimizer states",
            f"{p['sharding']} sharding",
            "splits " + "/".join(p.get("parallelism") or ["data"]),
        ]
    parts.append("weights " + " ".join(p["weight_precisions"]))
    return "; ".join(parts)


def stacks(a: dict[str, Any]) -> None:
    table = Table(
        title=f"Software stacks ({len(a['stacks'])}): name one with --stack, override a "
        "property with --stack-option NAME=VALUE",
        title_justify="left",
    )
    table.add_column("id", no_wrap=True)
    table.add_column("for", overflow="fold")
    table.add_column("what it does", overflow="fold")
    table.add_column("default for", overflow="fold")
    for st in a["stacks"]:
        table.add_row(
            st["id"],
            ", ".join(st["tasks"]),
            _stack_summary(st),
            ", ".join(st["default_for"]) or "-",
        )
    out.print(table)


def gpus(a: dict[str, Any]) -> None:
    table = Table(
        title=f"GPUs ({a.get('total', len(a['items']))}): memory GB, bandwidth GB/s, "
        "dense TFLOPS, board power W, list price",
        title_justify="left",
    )
    for name in ("id", "GB", "GB/s", "bf16", "fp8", "W", "USD"):
        table.add_column(name, justify="left" if name == "id" else "right", no_wrap=True)
    for g in a["items"]:
        table.add_row(
            g["id"],
            f"{g['memory_gb']:g}",
            _num(g.get("memory_bandwidth_gb_per_s")),
            _num(g.get("bf16_tflops")),
            _num(g.get("fp8_tflops")),
            _num(g.get("tdp_w")),
            _num(g.get("price_usd")),
        )
    out.print(table)


def models(a: dict[str, Any]) -> None:
    table = Table(title=f"models ({a.get('total', len(a['items']))})", title_justify="left")
    for name in ("name", "family", "parameters", "aliases"):
        table.add_column(name, justify="right" if name == "parameters" else "left")
    for m in a["items"]:
        params = m.get("parameters")
        table.add_row(
            m["name"],
            m["family"],
            f"{params / 1e9:,.2f} B" if params else "-",
            ", ".join(m.get("aliases", [])[:3]),
        )
    out.print(table)


def trace(a: dict[str, Any]) -> None:
    analysis = a.get("analysis") or {}
    out.print(
        f"trace {a['trace_id']} on {analysis.get('device_name') or '?'} "
        f"(reference GPU: {a.get('reference_gpu_id') or 'unknown'})"
    )
    step_us = analysis.get("step_time_us")
    if step_us:
        idle = (analysis.get("breakdown") or {}).get("idle_us") or {}
        worst = max(idle, key=lambda k: idle[k]) if idle else None
        out.print(
            f"{analysis.get('steps_found', '?')} steps, {step_us / 1e3:,.2f} ms a step"
            + (f"; most idle time: {worst} ({idle[worst] / step_us:.0%})" if worst else "")
        )
    for tip in a.get("advice", [])[:5]:
        out.print(f"Advice ({tip.get('rule')}): {tip.get('message')}")
    out.print(f"Recommend from it: rightsize recommend --trace-id {a['trace_id']}")


def asked(answer: dict[str, Any], url: str | None) -> None:
    """``/v1/ask``'s answer: how the question was read, then the recommendation."""
    out.print(f"Understood: {json.dumps(answer.get('understood'), sort_keys=True)}")
    if answer.get("unparsed"):
        out.print(f"Not used: {' '.join(answer['unparsed'])}")
    recommendation(answer, url)
