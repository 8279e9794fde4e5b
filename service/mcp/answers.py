"""What the MCP tools say back: a short markdown summary of each kind of API answer, and
a problem (4xx, 5xx, or no answer at all) as text naming the fields to correct.

The summaries read the API's JSON defensively (``.get``): a field missing shows as
'None' or 'n/a' rather than failing the call.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class Reply:
    """An API answer: its status (0 where none came) and its body (parsed JSON, else the
    text)."""

    status: int
    body: Any


def problem_text(reply: Reply) -> str:
    """A problem+json answer as the assistant should read it: what, and which fields."""
    problem = reply.body if isinstance(reply.body, dict) else {"detail": str(reply.body)}
    detail = str(problem.get("detail") or "no detail given")
    status = f" ({reply.status})" if reply.status else ""  # 0: no answer at all
    lines = [f"{problem.get('title') or 'Error'}{status}: {detail}"]
    for error in problem.get("errors") or []:
        named = f"{error.get('field')}: {error.get('message')}" if isinstance(error, dict) else ""
        if named not in detail:  # the detail says the first few already
            lines.append(f"- {named}")
    matches = ", ".join(map(str, problem.get("suggestions") or []))
    if matches and matches not in detail:
        lines.append(f"close matches: {matches}")
    return "\n".join(lines)


# -- markdown summaries of the answers ------------------------------------------------------


def _n(value: Any, digits: int = 3) -> str:
    """A number to ``digits`` significant figures (whole above that, in powers of ten above
    ten million), or 'n/a'."""
    if value is None:
        return "n/a"
    if isinstance(value, bool) or not isinstance(value, int | float):
        return str(value)
    if abs(value) >= 1e7:  # FLOPs, parameters: 5.4e11
        return f"{value:.{digits}g}".replace("e+0", "e").replace("e+", "e")
    if abs(value) >= 10**digits:
        return f"{value:,.0f}"
    return f"{value:.{digits}g}"


def _gib(value: Any) -> str:
    return _n(value / 2**30) if isinstance(value, int | float) else "n/a"


def _table(header: Sequence[str], rows: Iterable[Sequence[Any]]) -> str:
    lines = ["| " + " | ".join(header) + " |", "|" + " --- |" * len(header)]
    lines += ["| " + " | ".join(str(c).replace("|", "\\|") for c in row) + " |" for row in rows]
    return "\n".join(lines)


def _page(answer: dict[str, Any]) -> str:
    return (
        f"Page {answer.get('page')} of {answer.get('pages')} ({answer.get('total')} in all; "
        "`page` and `page_size` for more)"
    )


def own_summary(answer: dict[str, Any]) -> str:
    """The answer's own ``summary`` (a recommendation writes one)."""
    return str(answer.get("summary") or "Answered: the JSON follows.")


def ask_summary(answer: dict[str, Any]) -> str:
    """The recommendation's summary, and how the question was read (to check)."""
    understood = answer.get("understood") or {}
    read = {k: understood[k] for k in ("model", "workload") if k in understood}
    unused = ", ".join(answer.get("unparsed") or []) or "none"
    return f"{own_summary(answer)}\n\nRead as {json.dumps(read)}; words not used: {unused}"


def estimate_summary(answer: dict[str, Any]) -> str:
    interval = answer.get("interval") or {}
    speed = answer.get("throughput") or {}
    fits = "fits" if answer.get("fits") else "**does not fit**"
    headroom = answer.get("memory_headroom")
    lines = [
        f"**{answer.get('count', 1)} x {answer.get('gpu')}** ({answer.get('precision')}): "
        f"step time **{_n(answer.get('step_time_s'))} s** (80% interval "
        f"{_n(interval.get('low'))} to {_n(interval.get('high'))} s)",
        f"- throughput (all GPUs): {_n(speed.get('samples_per_s'))} samples/s, "
        f"{_n(speed.get('tokens_per_s'))} tokens/s",
        f"- memory per GPU: {_gib(answer.get('memory_per_gpu_bytes'))} GiB of "
        f"{_gib(answer.get('usable_memory_bytes'))} GiB usable: {fits}"
        + (f" ({headroom:.0%} headroom)" if isinstance(headroom, float) else ""),
        f"- bound by: {answer.get('bound')}",
    ]
    if answer.get("latency_s") is not None:
        lines.append(f"- latency: {_n(answer['latency_s'])} s a request")
    if answer.get("time_to_train_s") is not None:
        lines.append(f"- time to train: {_n(answer['time_to_train_s'] / 3600)} h")
    return "\n".join(lines)


def plan_summary(answer: dict[str, Any]) -> str:
    layouts = answer.get("layouts") or []
    head = (
        f"**{answer.get('gpu')}**, {answer.get('task')}: {answer.get('layouts_total')} valid "
        f"layouts at {answer.get('count')} GPUs (the fewest that fit: "
        f"{answer.get('smallest_count')})"
    )
    if not layouts:
        return head + "; none to show."
    rows = []
    for row in layouts[:5]:
        lay = row.get("layout") or {}
        shape = "x".join(str(lay.get(f"{k}_parallel")) for k in ("data", "tensor", "pipeline"))
        rows.append(
            (
                row.get("rank"),
                f"{shape} (CP {lay.get('context_parallel')})",
                lay.get("zero_stage"),
                f"{lay.get('micro_batch_size')} x {lay.get('gradient_accumulation')}",
                lay.get("activation_checkpointing"),
                _n(row.get("step_time_s")),
                _n(row.get("samples_per_s")),
                _gib(row.get("memory_per_gpu_bytes")),
                _n(row.get("mfu"), 2),
                row.get("bound"),
            )
        )
    header = ("#", "DP x TP x PP", "ZeRO", "micro-batch x accum.", "checkpointing", "step s")
    return f"{head}; the best {len(rows)}:\n\n" + _table(
        (*header, "samples/s", "GiB/GPU", "MFU", "bound"), rows
    )


def tco_summary(answer: dict[str, Any]) -> str:
    usage = answer.get("usage") or {}
    lines = [
        f"**{answer.get('count')} x {answer.get('gpu')}**, "
        f"{_n(usage.get('gpu_hours_per_month'))} GPU-hours a month for "
        f"{usage.get('horizon_months')} months: cheapest is **{answer.get('cheapest')}**"
    ]
    owned, cloud, hybrid = (answer.get(k) for k in ("on_premise", "cloud", "hybrid"))
    if owned:
        lines.append(
            f"- on premise: {_n(owned.get('monthly_usd'))} USD a month "
            f"({_n(owned.get('capital_usd'))} USD capital)"
        )
    if cloud:
        lines.append(
            f"- cloud: {_n(cloud.get('monthly_usd'))} USD a month ({cloud.get('provider')} "
            f"{cloud.get('instance_type')}, {cloud.get('pricing')}, "
            f"{_n(cloud.get('usd_per_gpu_hour'))} USD a GPU-hour)"
        )
    if hybrid:
        lines.append(
            f"- hybrid: {_n(hybrid.get('monthly_usd'))} USD a month "
            f"({hybrid.get('owned_count')} GPUs owned, the rest rented)"
        )
    even = answer.get("break_even_gpu_hours_per_month")
    lines.append(
        f"- break-even: owning pays above {_n(even)} GPU-hours a month"
        if even is not None
        else "- break-even: none (renting stays cheaper at any usage)"
    )
    return "\n".join(lines)


def profile_summary(answer: dict[str, Any]) -> str:
    model, work = answer.get("model") or {}, answer.get("workload") or {}
    flops, memory = answer.get("flops") or {}, answer.get("memory") or {}
    return "\n".join(
        (
            f"**{model.get('name')}** ({_n(model.get('parameters'))} parameters), "
            f"{work.get('task')} at batch {work.get('batch_size')}, {work.get('precision')}",
            f"- one step: {_n(flops.get('total'))} FLOPs ({_n(flops.get('per_sample'))} a "
            f"sample), arithmetic intensity {_n(answer.get('arithmetic_intensity'))} FLOPs/byte",
            f"- memory: {_gib(memory.get('total_bytes'))} GiB (parameters "
            f"{_gib(memory.get('parameters_bytes'))}, activations "
            f"{_gib(memory.get('activations_bytes'))}, optimizer states "
            f"{_gib(memory.get('optimizer_states_bytes'))} GiB)",
            f"- profile_id `{answer.get('profile_id')}`: give it to estimate, plan or "
            "recommend instead of model and workload",
        )
    )


def models_summary(answer: dict[str, Any]) -> str:
    rows = (
        (m.get("name"), m.get("family"), _n(m.get("parameters")), ", ".join(m["aliases"][:3]))
        for m in answer.get("items", [])
    )
    return _table(("name", "family", "parameters", "aliases"), rows) + "\n\n" + _page(answer)


def model_summary(answer: dict[str, Any]) -> str:
    return (
        f"**{answer.get('name')}** ({answer.get('family')}): "
        f"{_n(answer.get('parameters'))} parameters; also called "
        f"{', '.join(answer.get('aliases') or []) or 'nothing else'}; source {answer.get('source')}"
    )


# what distinguishes one stack from another at a glance (every property is in the JSON)
STACK_PROPERTIES = ("kernels", "loss", "master_weights", "optimizer_states", "sharding",
                    "continuous_batching")  # fmt: skip


def stacks_summary(answer: dict[str, Any]) -> str:
    """The stacks, one line each, and how a request names one."""
    rows = []
    for stack in answer.get("stacks", []):
        properties = stack.get("properties") or {}
        tasks = stack.get("tasks") or []
        shown = [
            f"{name} {properties[name]}"
            for name in STACK_PROPERTIES
            if name in properties and (name != "continuous_batching" or "inference" in tasks)
        ]
        rows.append((stack.get("id"), stack.get("name"), ", ".join(tasks), "; ".join(shown)))
    return (
        _table(("id", "name", "tasks", "what it does by default"), rows)
        + "\n\nName one as `stack` in a recommendation, estimate or plan; override any "
        "property in `stack_options`."
    )


GPU_COLUMNS = ("memory_gb", "memory_bandwidth_gb_per_s", "bf16_tflops", "fp8_tflops", "tdp_w")


def gpus_summary(answer: dict[str, Any]) -> str:
    rows = (
        (g.get("id"), g.get("name"), *(_n(g.get(c)) for c in (*GPU_COLUMNS, "price_usd")))
        for g in answer.get("items", [])
    )
    header = ("id", "name", "memory GB", "GB/s", "BF16 TFLOPS", "FP8 TFLOPS", "TDP W", "USD")
    return _table(header, rows) + "\n\n" + _page(answer)


def gpu_summary(answer: dict[str, Any]) -> str:
    figures = ", ".join(f"{c} {_n(answer.get(c))}" for c in (*GPU_COLUMNS, "price_usd"))
    return (
        f"**{answer.get('name')}** (`{answer.get('id')}`, {answer.get('architecture')}, "
        f"{answer.get('form_factor')}, {answer.get('release_year')}): {figures}"
    )
