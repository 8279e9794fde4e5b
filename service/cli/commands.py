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

from service.cli import options as opts
from service.cli import tables
from service.client import ApiError, Client, Unreachable

T = TypeVar("T")
EXIT_REFUSED, EXIT_UNAVAILABLE, EXIT_KEY = 3, 4, 5
err = Console(stderr=True, highlight=False)


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


# -- recommend -------------------------------------------------------------------------------


# long: a command whose options map one to one onto the request's fields
@click.command()
@click.argument("model", required=False)
@opts.workload_options
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
@opts.stack_options
@opts.connection
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
        body = opts.json_file(request_file)
    body.update(opts.stack_fields(options))
    workload = opts.workload(options)
    if model is not None:
        body["model"] = opts.model(model)
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
    _emit(answer, as_json, lambda a: tables.recommendation(a, url))


# -- ask ---------------------------------------------------------------------------------------


@click.command()
@click.argument("question", nargs=-1, required=True)
@opts.connection
def ask(question: tuple[str, ...], url: str | None, api_key: str | None, as_json: bool) -> None:
    """Ask in words, e.g. rightsize ask "QLoRA llama 3 8b on 20M tokens under $50, cloud only"."""
    text = " ".join(question)
    with _client(url, api_key, model=True) as client:
        answer = _call("reading the question and ranking ...", lambda: client.ask(text))
    if as_json:
        _emit(answer, True, print)
        return
    tables.asked(answer, url)


# -- estimate, plan ----------------------------------------------------------------------------


@click.command()
@click.argument("model")
@opts.workload_options
@opts.gpu_options
@opts.stack_options
@opts.connection
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
    stack = opts.stack_fields(options)
    workload = opts.workload(options)
    with _client(url, api_key, model=True) as client:
        answer = _call(
            "estimating ...",
            lambda: client.estimate(opts.model(model), workload, gpu=gpu, count=count, **stack),
        )
    _emit(answer, as_json, tables.estimate)


@click.command()
@click.argument("model")
@opts.workload_options
@opts.gpu_options
@opts.stack_options
@opts.connection
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
    stack = opts.stack_fields(options)
    workload = opts.workload(options)
    with _client(url, api_key, model=True) as client:
        answer = _call(
            "planning layouts ...",
            lambda: client.plan(opts.model(model), workload, gpu=gpu, count=count, **stack),
        )
    _emit(answer, as_json, tables.plan)


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
@opts.connection
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
    _emit(answer, as_json, tables.tco)


# -- catalogs --------------------------------------------------------------------------------


@click.command()
@click.option("--vendor")
@click.option("--architecture")
@click.option("--min-memory-gb", type=float)
@click.option("--sort", default=None, help="a field, '-' first for descending")
@click.option("--page-size", type=int, default=100, show_default=True)
@opts.connection
def gpus(url: str | None, api_key: str | None, as_json: bool, **query: Any) -> None:
    """List the GPUs rightsize knows, with their memory, peak rates and price."""
    with _client(url, api_key) as client:
        answer = _call("reading the GPU catalog ...", lambda: client.gpus(**query))
    _emit(answer, as_json, tables.gpus)


@click.command()
@click.option("--task", type=click.Choice(("training", "fine-tuning", "inference")))
@opts.connection
def stacks(url: str | None, api_key: str | None, as_json: bool, task: str | None) -> None:
    """List the software stacks estimates are made for, with what each does by default."""
    with _client(url, api_key) as client:
        answer = _call("reading the stacks ...", lambda: client.stacks(task))
    _emit(answer, as_json, tables.stacks)


@click.command()
@click.argument("search", required=False)
@click.option("--page-size", type=int, default=100, show_default=True)
@opts.connection
def models(
    search: str | None, url: str | None, api_key: str | None, as_json: bool, page_size: int
) -> None:
    """List the model catalog, or the models matching SEARCH (name or alias)."""
    with _client(url, api_key) as client:
        answer = _call(
            "reading the model catalog ...", lambda: client.models(q=search, page_size=page_size)
        )
    _emit(answer, as_json, tables.models)


# -- traces ----------------------------------------------------------------------------------


@click.group()
def trace() -> None:
    """Profiler traces of a sample run (record one with: rightsize capture)."""


@trace.command("upload")
@click.argument("file", type=click.Path(exists=True, dir_okay=False, path_type=Path))
@click.option("--reference-gpu", help="the GPU the trace was recorded on, if not in it")
@click.option("--batch-size", type=int, help="samples per step in the trace")
@opts.connection
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
    _emit(answer, as_json, tables.trace)


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


COMMANDS = (recommend, ask, estimate, plan, tco, gpus, stacks, models, trace)


def register(group: click.Group) -> None:
    """Add the product's commands to ``group`` (the ``rightsize`` command)."""
    for command in COMMANDS:
        group.add_command(command)
