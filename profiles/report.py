"""A readable text breakdown of a profile (what ``rightsize profile`` prints)."""

from __future__ import annotations

from typing import Any

_UNITS = ("", "K", "M", "G", "T", "P", "E")


def si(value: float | None, unit: str = "") -> str:
    if value is None:
        return "-"
    magnitude = 0
    while abs(value) >= 1000 and magnitude < len(_UNITS) - 1:
        value /= 1000
        magnitude += 1
    return f"{value:.3g} {_UNITS[magnitude]}{unit}".strip()


def gib(value: float) -> str:
    return f"{value / 2**30:,.2f} GiB"


def render(profile: dict[str, Any]) -> str:
    model, workload, memory = profile["model"], profile["workload"], profile["memory"]
    lines = [
        f"{model['name'] or model['family']}: {si(model['parameters'])} parameters"
        + (
            f" ({si(model['active_parameters'])} active)"
            if model["active_parameters"] != model["parameters"]
            else ""
        )
        + f", {model['parameter_dtype']}",
        "workload: " + ", ".join(f"{k}={v}" for k, v in workload.items() if v is not None),
        f"per step: {profile['samples_per_step']} samples, {profile['tokens_per_step']} tokens",
        "",
        "FLOPs:",
    ]
    lines += [f"  {k:<16} {si(v, 'FLOP')}" for k, v in profile["flops"].items()]
    lines += ["", f"{'phase':<14}{'kind':<15}{'FLOPs':>12}{'bytes':>12}{'FLOP/B':>9}"]
    for cost in profile["by_kind"]:
        moved = cost["bytes_read"] + cost["bytes_written"]
        intensity = cost["arithmetic_intensity"]
        lines.append(
            f"{cost['phase']:<14}{cost['kind']:<15}{si(cost['flops']):>12}{si(moved, 'B'):>12}"
            f"{(f'{intensity:.1f}' if intensity is not None else '-'):>9}"
        )
    lines += ["", "heaviest operators (by bytes moved):"]
    heaviest = sorted(profile["by_op"], key=lambda o: -(o["bytes_read"] + o["bytes_written"]))
    for op in heaviest[:8]:
        moved = op["bytes_read"] + op["bytes_written"]
        lines.append(
            f"  {op['phase']:<12}{op['op']:<32}{op['calls']:>6} calls {si(moved, 'B'):>10}"
        )
    lines += ["", "memory per replica:"]
    lines += [f"  {k.removesuffix('_bytes'):<24} {gib(v):>14}" for k, v in memory.items()]
    lines += ["", "assumptions:"] + [f"  - {a}" for a in profile["assumptions"]]
    return "\n".join(lines)
