"""What the command line prints of a validation report (``rightsize validate``)."""

from __future__ import annotations

import json
from typing import Any

import click


def _ape_table(rows: list[dict[str, Any]]) -> None:
    click.echo(f"    {'':<34} {'rows':>5} {'median':>7} {'mean':>7}")
    for row in rows:
        name, median, mean = row["name"], row["median_ape"], row["mean_ape"]
        click.echo(f"    {name:<34} {row['rows']:>5} {median:7.1%} {mean:7.1%}")


def _split(title: str, found: dict[str, Any]) -> None:
    click.echo(
        f"  {title}: {found['rows']} rows, median APE {found['median_ape']:.1%}, "
        f"mean {found['mean_ape']:.1%}"
    )


def _worst(rows: list[dict[str, Any]]) -> None:
    for row in rows:
        click.echo(
            f"    {row['suite']} {row['workload']} {row['gpu']} {row['precision']} "
            f"b={row['batch_per_gpu']:g}: measured {row['measured']:.4g}, predicted "
            f"{row['predicted']:.4g} ({row['error']:+.0%}; bound {row['bound']})"
        )


def _llm(llm: dict[str, Any]) -> None:
    """The LLM section of the validation report, printed."""
    stack = llm["optimized_stack"]
    click.echo(
        f"LLMs, optimized stack (16-bit GEMMs at {stack['efficiency_16bit']:.2f} of peak, FP8 "
        f"at {stack['efficiency_8bit']:.2f}; {stack['source']}):"
    )
    _split("MLPerf Training GPT-3 / Llama 2 LoRA, GPU held out", llm["mlperf_training"])
    others = llm["mlperf_training_other"]
    click.echo(
        f"  MLPerf Training, the other workloads, GPU held out: {others['rows_predicted']} rows, "
        f"median {others['median_ape']:.1%} mean {others['mean_ape']:.1%}"
    )
    _ape_table(others["by_workload"])
    offline = llm["mlperf_inference_offline"]
    click.echo(
        f"  MLPerf Inference v3.1 Offline, GPU held out: {offline['rows_predicted']} rows, "
        f"median {offline['median_ape']:.1%} mean {offline['mean_ape']:.1%}"
    )
    _ape_table(offline["by_workload"])
    ops = llm["operators"]
    held = ops["held_out"]
    click.echo(
        f"  vidur Llama-2-7B operators, GPU held out: {held['rows']} rows, median "
        f"{held['median_ape']:.1%} mean {held['mean_ape']:.1%} (fitted on all: "
        f"{ops['fitted_on_all']['median_ape']:.1%})"
    )
    for table, found in llm["golden"].items():
        kind = "golden" if found["held"] else "reported (not held)"
        click.echo(
            f"  {kind} {table}: median gap {found['median_gap_points']:.1f} points "
            f"({found['median_signed_gap_points']:+.1f} signed), largest "
            f"{found['max_gap_points']:.1f}"
        )
        for row in found["rows"]:
            click.echo(
                f"    {row['model']!s:<8} {row['gpus']:>6} GPUs seq {row['seq']:>6}: printed "
                f"{row['printed']:.4g}, predicted {row['predicted']:.4g} "
                f"({row['gap_points']:+.1f} points, {row['bound']})"
            )


def _stacks(found: dict[str, Any]) -> None:
    """The named stacks on their published runs, each publication left out of the fit."""
    click.echo(
        f"named stacks on {found['publications']} publications of their maintainers' runs "
        "(knowledge/data/stack_runs), each predicted by a fit that left its publication out:"
    )
    click.echo(f"    {'stack':<14} {'kind':<20} {'rows':>5} {'median':>7} {'worst':>7}")
    for row in found["table"]:
        click.echo(
            f"    {row['stack']:<14} {row['kind']:<20} {row['rows']:>5} "
            f"{row['median_ape']:7.1%} {row['worst_ape']:7.1%}"
        )
    fits = found["memory_fits"]
    click.echo(
        f"  published runs estimated to fit the GPU they ran on: {fits['fit']} of {fits['rows']}"
    )
    click.echo("  worst ten, named stacks:")
    for w in found["worst"]:
        click.echo(
            f"    {w['ape']:7.1%}  {w['row']}: {w['kind']}, measured {w['measured']:.4g}, "
            f"estimated {w['predicted']:.4g}; {w['cause']}"
        )
    click.echo(f"  rows not scored: {len(found['skipped'])} (reasons in the JSON report)")


# long: the report printed section by section, a line each
def print_validation(report: dict[str, Any], version: str, as_json: bool) -> None:
    """``rightsize validate``'s report, printed: every held-out split, the multi-GPU rows,
    the LLM rows and the named stacks (``as_json``: the whole report as JSON)."""
    if as_json:
        click.echo(json.dumps(report, indent=2))
        return
    single = report["single_gpu"]
    click.echo(
        f"knowledge {version}, model {report['model']['model_version']}: "
        f"{single['rows']} single-GPU rows, each predicted by a model fitted without it"
    )
    _split("leave one GPU out", single)
    click.echo(f"    Spearman of GPU ranks, median {single['spearman']['median']:.3f}")
    for year, found in report["forward_in_time"].items():
        _split(f"forward in time, fitted before {year} (predicting {year} and later)", found)
    _split("leave one architecture out", report["leave_one_architecture_out"])
    multi = report["multi_gpu"]
    _split("multi-GPU, end to end with the GPU held out", multi)
    _ape_table(multi["groups"])
    alone = multi["scaling_from_measured_single_gpu"]["all"]
    click.echo(
        f"  scaling model alone (from the measured 1-GPU row): {alone['rows']} rows, "
        f"median {alone['median_ape']:.1%} mean {alone['mean_ape']:.1%}"
    )
    speed = report["speedup_over_previous_flagship"]
    click.echo(
        "  speed-up over the previous generation's flagship, predicted against measured: "
        f"{speed['rows']} rows, median APE {speed['median_ape']:.1%}, mean {speed['mean_ape']:.1%}"
    )
    memory = report["memory_fit"]
    click.echo(
        f"  memory fit: {memory['fit']} of {memory['configurations']} stored single-GPU "
        f"configurations ({memory['share']:.1%}) are estimated to fit the GPU they ran on"
    )
    for entry in memory["by_workload"]:
        click.echo(
            f"    {entry['workload']:<34} {entry['configurations']:>5} {entry['share']:7.1%}"
        )
    interval = report["interval"]
    click.echo(
        f"  interval ({interval['nominal']:.0%} nominal) holds the measured value for "
        f"{interval['coverage_held_in']:.1%} of held-in rows, "
        f"{interval['coverage_held_out']:.1%} held out"
    )
    click.echo("  per GPU (leave one GPU out):")
    _ape_table(single["by_gpu"])
    click.echo("  per GPU (forward in time, fitted before 2020):")
    _ape_table(report["forward_in_time"]["2020"]["by_gpu"])
    click.echo("  per model and precision (leave one GPU out):")
    _ape_table(single["by_workload"])
    click.echo("  speed-up over the previous flagship, per model and precision:")
    _ape_table(speed["by_workload"])
    for year, found in report["forward_in_time"].items():
        click.echo(f"  worst ten, forward in time (fitted before {year}):")
        _worst(found["worst"])
    click.echo("  worst ten, leave one GPU out:")
    _worst(single["worst"])
    _llm(report["llm"])
    if report.get("stacks"):
        _stacks(report["stacks"])
    for name, target in report["targets"].items():
        verdict = {True: "met", False: "not met", None: "not measured yet"}[target["met"]]
        value = target["value"]
        shown = "-" if value is None else f"{value:.4g}"
        click.echo(f"  target {name} {target['target']}: {shown}, {verdict}")
