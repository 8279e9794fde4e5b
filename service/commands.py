"""The product's commands: ``rightsize recommend``, ``estimate``, ``plan``, ``tco``, ``gpus``,
``models``, ``ask`` and ``trace upload``.

Each one is a call of :class:`service.client.Client`: in this process by default (the app
built here, no server), or against a server with ``--url`` (``RIGHTSIZE_URL``) and
``--api-key`` (``RIGHTSIZE_API_KEY``). Tables for a terminal, ``--json`` for scripts (the
API's answer as is), progress on stderr, and these exit codes:

\b
  0  answered
  1  an unexpected failure (a bug: please report it)
  2  the command line is wrong (click's usage error), or a file cannot be read
  3  the API refused the request (4xx): the message names each bad field
  4  no answer: the server is unreachable, timed out, or failed (5xx, 503)
  5  the key is missing, unknown or lacks the role (401, 403)
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any, TypeVar

import click
from rich.console import Console
from rich.progress import BarColumn, DownloadColumn, Progress, TransferSpeedColumn
from rich.table import Table

from service.client import ApiError, Client, Unreachable, model_description

T = TypeVar("T")
EXIT_REFUSED, EXIT_UNAVAILABLE, EXIT_KEY = 3, 4, 5
out = Console(highlight=False, soft_wrap=False)
err = Console(stderr=True, highlight=False)
WORKLOAD = (
    (
        "--task",
        click.Choice(("training", "fine-tuning", "inference")),
        "training, fine-tuning or inference (default: fine-tuning with --method, else training)",
    ),
    ("--method", click.Choice(("full", "lora", "qlora")), "fine-tuning: full, lora or qlora"),
    ("--lora-rank", int, "LoRA / QLoRA adapter rank"),
    ("--batch-size", int, "samples per step per GPU (required)"),
    ("--seq-len", int, "tokens per sample (training and fine-tuning)"),
    ("--image-size", int, "input height and width, pixels (vision)"),
    ("--prompt-tokens", int, "inference: tokens in the prompt"),
    ("--output-tokens", int, "inference: tokens generated"),
    ("--precision", str, "fp32, tf32, bf16, fp16, fp8, int8, int4 (default bf16)"),
    ("--optimizer", str, "adamw, adam, sgd, sgd+momentum, adafactor, '8-bit adam'"),
    ("--activation-checkpointing", str, "none, selective or full"),
    ("--attention", str, "flash or materialized"),
    ("--dataset-samples", int, "samples in the dataset"),
    ("--dataset-tokens", int, "tokens in the dataset (instead of --dataset-samples)"),
    ("--epochs", float, "passes over the dataset"),
)


def _connection(command: Callable[..., Any]) -> Callable[..., Any]:
    command = click.option(
        "--json", "as_json", is_flag=True, help="print the API's JSON answer as is"
    )(command)
    command = click.option(
        "--api-key",
        envvar="RIGHTSIZE_API_KEY",
        default=None,
        help="API key for --url (RIGHTSIZE_API_KEY)",
    )(command)
    return click.option(
        "--url",
        envvar="RIGHTSIZE_URL",
        default=None,
        help="a rightsize server (RIGHTSIZE_URL); default: answer in this process",
    )(command)


def _workload_options(command: Callable[..., Any]) -> Callable[..., Any]:
    for flag, kind, text in reversed(WORKLOAD):
        command = click.option(flag, type=kind, default=None, help=text)(command)
    return command


def _workload(options: dict[str, Any]) -> dict[str, Any]:
    names = [flag[2:].replace("-", "_") for flag, _, _ in WORKLOAD]
    found = {k: options.pop(k) for k in names if options.get(k) is not None}
    for k in names:
        options.pop(k, None)
    found.setdefault("task", "fine-tuning" if "method" in found else "training")
    return found


def _model(value: str) -> dict[str, Any]:
    try:
        return model_description(value)
    except ValueError as exc:
        raise click.BadParameter(str(exc), param_hint="MODEL") from None


@contextmanager
def _client(url: str | None, api_key: str | None, model: bool = False) -> Iterator[Client]:
    """A client of ``url``, else of an app built here; ``model``: the command estimates,
    so the performance model is made ready first (built on the first run, then cached)."""
    if url:
        with Client(url, api_key) as client:
            yield client
        return
    with err.status("loading the knowledge (in this process; --url for a server) ..."):
        client = Client.in_process({"RIGHTSIZE_LOG_LEVEL": "WARNING"})
    if model:
        with err.status("loading the performance model (the first run builds it) ..."):
            client.warm()
    with client:
        yield client


def _call(label: str, work: Callable[[], T]) -> T:
    """``work()`` under a spinner; the API's refusals and outages as messages and codes."""
    try:
        with err.status(label):
            return work()
    except ApiError as exc:
        err.print(f"[bold red]error[/]: {exc.describe()}", markup=True, highlight=False)
        code = EXIT_KEY if exc.status in (401, 403) else EXIT_REFUSED
        raise SystemExit(EXIT_UNAVAILABLE if exc.status >= 500 else code) from None
    except Unreachable as exc:
        err.print(f"[bold red]error[/]: {exc}")
        raise SystemExit(EXIT_UNAVAILABLE) from None


def _emit(answer: Any, as_json: bool, render: Callable[[Any], None]) -> None:
    if as_json:
        click.echo(json.dumps(answer, indent=2, sort_keys=True))
    else:
        render(answer)


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


# -- recommend -------------------------------------------------------------------------------


@click.command()
@click.argument("model", required=False)
@_workload_options
@click.option("--objective", type=click.Choice(("best_value", "fastest", "cheapest")))
@click.option("--budget-capital", type=float, help="the most to spend buying, USD")
@click.option("--budget-monthly", type=float, help="the most to spend a month, USD")
@click.option("--deadline-hours", type=float, help="the job must finish within, hours")
@click.option("--max-gpus", type=int, help="at most this many GPUs")
@click.option("--provider", "providers", multiple=True, help="only these clouds (repeat)")
@click.option("--region", "regions", multiple=True, help="only these regions (repeat)")
@click.option("--deployment", type=click.Choice(("any", "cloud", "on-premise")))
@click.option("--gpu-hours-per-month", type=float, help="usage: GPU-hours a month")
@click.option("--runs-per-month", type=float, help="usage: jobs a month")
@click.option("--horizon-months", type=int, help="usage: months to cost (default 36)")
@click.option("--pattern", type=click.Choice(("steady", "bursty")), help="usage pattern")
@click.option("--interruptible", is_flag=True, default=None, help="checkpointed: spot is fine")
@click.option("--value-of-time", type=float, help="USD an hour of waiting costs the team")
@click.option("--trace-id", help="recommend from an uploaded trace instead of a model")
@click.option(
    "--trace",
    "trace_file",
    type=click.Path(exists=True, dir_okay=False, path_type=Path),
    help="upload this trace, then recommend from it",
)
@click.option(
    "--request",
    "request_file",
    type=click.Path(exists=True, dir_okay=False, path_type=Path),
    help="a whole request body (JSON); options override it",
)
@_connection
def recommend(
    model: str | None,
    url: str | None,
    api_key: str | None,
    as_json: bool,
    request_file: Path | None,
    trace_file: Path | None,
    **options: Any,
) -> None:
    """Rank GPUs, counts and deployments for MODEL and a workload, with costs and reasons.

    MODEL is a catalog name (rightsize models), or a path to a Hugging Face config.json or
    to a description (.json).

    \b
    Example:
      rightsize recommend llama-3-8b --method qlora --batch-size 4 --seq-len 2048 \\
          --dataset-tokens 20000000 --deployment cloud
    """
    body: dict[str, Any] = {}
    if request_file is not None:
        body = _json_file(request_file)
    workload = _workload(options)
    if model is not None:
        body["model"] = _model(model)
    if len(workload) > 1 or ("workload" not in body and model is not None):
        body["workload"] = {**body.get("workload", {}), **workload}
    constraints = {
        "budget_capital_usd": options["budget_capital"],
        "budget_monthly_usd": options["budget_monthly"],
        "deadline_hours": options["deadline_hours"],
        "max_gpus": options["max_gpus"],
        "providers": list(options["providers"]) or None,
        "regions": list(options["regions"]) or None,
        "deployment": options["deployment"],
    }
    usage = {
        k: options[k]
        for k in (
            "gpu_hours_per_month",
            "runs_per_month",
            "horizon_months",
            "pattern",
            "interruptible",
        )
    }
    for name, asked in (("constraints", constraints), ("usage", usage)):
        given = {k: v for k, v in asked.items() if v is not None}
        if given:
            body[name] = {**body.get(name, {}), **given}
    for name, value in (
        ("objective", options["objective"]),
        ("trace_id", options["trace_id"]),
        ("value_of_time_usd_per_hour", options["value_of_time"]),
    ):
        if value is not None:
            body[name] = value
    if not {"model", "trace_id", "profile_id"} & set(body) and trace_file is None:
        raise click.UsageError("give MODEL (or --trace, --trace-id, or --request with a model)")
    with _client(url, api_key, model=True) as client:
        if trace_file is not None:
            body["trace_id"] = _uploaded(client, trace_file, {})["trace_id"]
        answer = _call("ranking GPUs, counts and deployments ...", lambda: client.recommend(**body))
    _emit(answer, as_json, lambda a: _recommendation(a, url))


def _recommendation(answer: dict[str, Any], url: str | None) -> None:
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


# -- ask ---------------------------------------------------------------------------------------


@click.command()
@click.argument("question", nargs=-1, required=True)
@_connection
def ask(question: tuple[str, ...], url: str | None, api_key: str | None, as_json: bool) -> None:
    """Ask in words, e.g. rightsize ask "QLoRA llama 3 8b on 20M tokens under $50, cloud only"."""
    text = " ".join(question)
    with _client(url, api_key, model=True) as client:
        answer = _call("reading the question and ranking ...", lambda: client.ask(text))
    if as_json:
        _emit(answer, True, print)
        return
    out.print(f"Understood: {json.dumps(answer.get('understood'), sort_keys=True)}")
    if answer.get("unparsed"):
        out.print(f"Not used: {' '.join(answer['unparsed'])}")
    _recommendation(answer, url)


# -- estimate, plan ----------------------------------------------------------------------------


def _gpu_options(command: Callable[..., Any]) -> Callable[..., Any]:
    command = click.option("--count", type=int, default=1, show_default=True, help="GPUs")(command)
    return click.option("--gpu", required=True, help="GPU id or name (rightsize gpus)")(command)


@click.command()
@click.argument("model")
@_workload_options
@_gpu_options
@_connection
def estimate(
    model: str,
    gpu: str,
    count: int,
    url: str | None,
    api_key: str | None,
    as_json: bool,
    **options: Any,
) -> None:
    """Estimate step time, throughput, memory and the bound of MODEL on a GPU.

    \b
    Example: rightsize estimate bert-base --task fine-tuning --batch-size 32 --seq-len 384 \\
                 --gpu a100-sxm4-80gb
    """
    workload = _workload(options)
    with _client(url, api_key, model=True) as client:
        answer = _call(
            "estimating ...", lambda: client.estimate(_model(model), workload, gpu=gpu, count=count)
        )
    _emit(answer, as_json, _estimate)


def _estimate(a: dict[str, Any]) -> None:
    table = Table(
        title=f"{a['count']} x {a['gpu']} ({a.get('math_mode', '')})",
        title_justify="left",
        show_header=False,
    )
    throughput = a.get("throughput") or {}
    rows = [
        ("step time", f"{_num(a['step_time_s'])} s"),
        ("samples/s", _num(throughput.get("samples_per_s"))),
        ("tokens/s", _num(throughput.get("tokens_per_s"))),
        (
            "memory per GPU",
            f"{_gib(a['memory_per_gpu_bytes'] / 2**30)} of "
            f"{_gib(a['usable_memory_bytes'] / 2**30)} usable",
        ),
        ("fits", "yes" if a.get("fits") else "NO"),
        ("bound", a.get("bound") or "-"),
    ]
    if a.get("interval"):
        rows.append(
            ("80% interval", f"{_num(a['interval']['low'])} - {_num(a['interval']['high'])} s")
        )
    if a.get("time_to_train_s"):
        rows.append(("time to train", _hours(a["time_to_train_s"] / 3600)))
    for row in rows:
        table.add_row(*row)
    out.print(table)


@click.command()
@click.argument("model")
@_workload_options
@_gpu_options
@_connection
def plan(
    model: str,
    gpu: str,
    count: int,
    url: str | None,
    api_key: str | None,
    as_json: bool,
    **options: Any,
) -> None:
    """Rank every valid parallel layout of MODEL on COUNT x GPU.

    \b
    Example: rightsize plan llama-3-8b --batch-size 8 --seq-len 2048 --gpu h100-sxm-80gb \\
                 --count 8
    """
    workload = _workload(options)
    with _client(url, api_key, model=True) as client:
        answer = _call(
            "planning layouts ...",
            lambda: client.plan(_model(model), workload, gpu=gpu, count=count),
        )
    _emit(answer, as_json, _plan)


def _plan(a: dict[str, Any]) -> None:
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


# -- tco -------------------------------------------------------------------------------------


@click.command()
@click.option("--gpu", required=True, help="GPU id or name")
@click.option("--count", type=int, default=1, show_default=True)
@click.option("--gpu-hours-per-month", type=float, help="GPU-hours a month over all GPUs")
@click.option("--runs-per-month", type=float, hidden=True)
@click.option("--horizon-months", type=int, default=36, show_default=True)
@click.option("--pattern", type=click.Choice(("steady", "bursty")), default="steady")
@click.option("--interruptible", is_flag=True, help="checkpointed work: spot prices count")
@click.option("--provider", "providers", multiple=True, help="only these clouds (repeat)")
@_connection
def tco(
    gpu: str,
    count: int,
    url: str | None,
    api_key: str | None,
    as_json: bool,
    providers: tuple[str, ...],
    **usage: Any,
) -> None:
    """Owning against renting COUNT x GPU at a usage, with the break-even.

    \b
    Example: rightsize tco --gpu h100-sxm-80gb --count 8 --gpu-hours-per-month 700
    """
    given = {k: v for k, v in usage.items() if v is not None and v is not False}
    extra = {"providers": list(providers)} if providers else {}
    with _client(url, api_key) as client:
        answer = _call("costing ...", lambda: client.tco(gpu, given, count, **extra))
    _emit(answer, as_json, _tco)


def _tco(a: dict[str, Any]) -> None:
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


# -- catalogs --------------------------------------------------------------------------------


@click.command()
@click.option("--vendor")
@click.option("--architecture")
@click.option("--min-memory-gb", type=float)
@click.option("--sort", default=None, help="a field, '-' first for descending")
@click.option("--page-size", type=int, default=100, show_default=True)
@_connection
def gpus(url: str | None, api_key: str | None, as_json: bool, **query: Any) -> None:
    """List the GPUs rightsize knows, with their memory, peak rates and price."""
    with _client(url, api_key) as client:
        answer = _call("reading the GPU catalog ...", lambda: client.gpus(**query))
    _emit(answer, as_json, _gpus)


def _gpus(a: dict[str, Any]) -> None:
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


@click.command()
@click.argument("search", required=False)
@click.option("--page-size", type=int, default=100, show_default=True)
@_connection
def models(
    search: str | None, url: str | None, api_key: str | None, as_json: bool, page_size: int
) -> None:
    """List the model catalog, or the models matching SEARCH (name or alias)."""
    with _client(url, api_key) as client:
        answer = _call(
            "reading the model catalog ...", lambda: client.models(q=search, page_size=page_size)
        )
    _emit(answer, as_json, _models)


def _models(a: dict[str, Any]) -> None:
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


# -- traces ----------------------------------------------------------------------------------


@click.group()
def trace() -> None:
    """Profiler traces of a sample run (record one with: rightsize capture)."""


@trace.command("upload")
@click.argument("file", type=click.Path(exists=True, dir_okay=False, path_type=Path))
@click.option("--reference-gpu", help="the GPU the trace was recorded on, if not in it")
@click.option("--batch-size", type=int, help="samples per step in the trace")
@_connection
def trace_upload(
    file: Path,
    url: str | None,
    api_key: str | None,
    as_json: bool,
    reference_gpu: str | None,
    batch_size: int | None,
) -> None:
    """Upload a trace (JSON, .gz or .zip) and print its analysis and software advice."""
    options = {"reference_gpu": reference_gpu, "batch_size": batch_size}
    with _client(url, api_key) as client:
        answer = _uploaded(client, file, options)
    if not url and not as_json:
        err.print(
            "(answered in this process, which keeps nothing: give --url to keep the "
            "trace on a server, or run: rightsize recommend --trace FILE)"
        )
    _emit(answer, as_json, _trace)


def _uploaded(client: Client, file: Path, options: dict[str, Any]) -> dict[str, Any]:
    """``file`` uploaded with a progress bar, and its analysis (a job's, followed)."""
    with Progress(
        "uploading",
        BarColumn(),
        DownloadColumn(),
        TransferSpeedColumn(),
        console=err,
        transient=True,
    ) as bar:
        task = bar.add_task("upload", total=file.stat().st_size)

        def sent(done: int, _: int) -> None:
            bar.update(task, completed=done)

        accepted = _call(
            "analysing the trace ...", lambda: client.upload_trace(file, progress=sent, **options)
        )
    return _call("analysing the trace in the background ...", lambda: client.wait_trace(accepted))


def _trace(a: dict[str, Any]) -> None:
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


def _json_file(path: Path) -> dict[str, Any]:
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise click.BadParameter(f"{path}: {exc}") from None
    if not isinstance(data, dict):
        raise click.BadParameter(f"{path}: a request is a JSON object")
    return data


COMMANDS = (recommend, ask, estimate, plan, tco, gpus, models, trace)


def register(group: click.Group) -> None:
    """Add the product's commands to ``group`` (the ``rightsize`` command)."""
    for command in COMMANDS:
        group.add_command(command)
