"""The ``rightsize`` command line: serve the API, write the OpenAPI file, check knowledge."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

import click

from knowledge import Knowledge, KnowledgeInvalid, load_knowledge
from service.cli.reports import print_validation
from service.config import load_settings
from service.infra.keys import ROLES, KeyFile

if TYPE_CHECKING:  # the engine (scikit-learn) is imported by the commands that use it
    from service.engine.estimating.model import PerformanceModel


@click.group()
def main() -> None:
    """rightsize: which GPU hardware to buy or rent for a deep-learning workload, and why.

    The product's commands (recommend, ask, estimate, plan, tco, gpus, models, trace)
    answer in this process, or from a server with --url (RIGHTSIZE_URL) and --api-key
    (RIGHTSIZE_API_KEY); --json prints the API's answer.

    \b
    Exit codes:
      0  answered
      1  an unexpected failure (a bug: please report it)
      2  the command line is wrong, or a file cannot be read
      3  the API refused the request (4xx): the message names each bad field
      4  no answer: no server there, a timeout, or a server failure (5xx)
      5  the API key is missing, unknown or lacks the role (401, 403)
    """


@main.command()
@click.option("--host", default="127.0.0.1", show_default=True)
@click.option("--port", default=8000, show_default=True, type=int)
@click.option(
    "--workers",
    default=None,
    type=int,
    help="processes (default: 2 with Redis, 1 on the in-process cache, which a "
    "second process would not share)",
)
@click.option("--threads", default=None, type=int, help="threads a worker (RIGHTSIZE_THREADS, 16)")
def serve(host: str, port: int, workers: int | None, threads: int | None) -> None:
    """Serve the API with gunicorn (Redis if RIGHTSIZE_REDIS_URL is set, else in-process)."""
    from gunicorn.app.base import Application

    from service import create_app
    from service.front import Bridge, FrontLimits

    try:
        app = create_app()
    except KnowledgeInvalid as exc:
        raise click.ClickException(f"refusing to start: {exc}") from None

    if workers is None:
        workers = 2 if app.config["RIGHTSIZE_REDIS_URL"] else 1

    class _Server(Application):
        def load_config(self) -> None:
            # service/gunicorn_conf.py: timeouts, recycling, limits, the model warm-up
            self.load_config_from_module_name_or_filename("python:service.gunicorn_conf")
            self.cfg.set("bind", f"{host}:{port}")
            self.cfg.set("workers", workers)
            if threads is not None:
                self.cfg.set("threads", threads)

        def load(self) -> Any:
            return Bridge(app, self.cfg.threads, FrontLimits.of(app.config))

    click.echo(f"rightsize on http://{host}:{port} (API docs at /docs)")
    _Server().run()


_model_dir_option = click.option(
    "--model-dir",
    type=click.Path(path_type=Path, file_okay=False),
    default=None,
    help="performance model cache (default: RIGHTSIZE_MODEL_DIR)",
)


def _performance_model(model_dir: Path | None) -> tuple[Knowledge, Path, PerformanceModel]:
    """The knowledge, the model cache directory, and the model built (or reused) there."""
    from profiles.model_catalog import Catalog
    from service.engine.estimating.model import build

    directory = model_dir or Path(load_settings()["RIGHTSIZE_MODEL_DIR"])
    with _progress("loading the knowledge ..."):
        kb = load_knowledge()
    with _progress(f"building the performance model (or loading it from {directory}) ..."):
        return kb, directory, build(kb, Catalog.load(), directory)


def _progress(label: str) -> Any:
    """A spinner on stderr while long work runs (nothing is drawn where it is not a tty)."""
    from rich.console import Console

    return Console(stderr=True).status(label)


@main.command()
@_model_dir_option
def train(model_dir: Path | None) -> None:
    """Build the performance model from knowledge/ into its cache (the service does this at
    start-up when the cache is missing or was made on other knowledge)."""
    from service.engine.estimating.model import MODEL_VERSION

    kb, directory, model = _performance_model(model_dir)
    click.echo(
        f"performance model {MODEL_VERSION} on knowledge {kb.version}: "
        f"{len(model.single)} single-GPU and {len(model.observations) - len(model.single)} "
        f"multi-GPU benchmark rows ({len(model.skipped)} skipped), built in "
        f"{model.built_s:.1f} s; cached in {directory}"
    )


SKIPPED_SHOWN = 20  # stored rows a retrain lists as skipped (the job's result has them all)


@main.command()
@_model_dir_option
@click.option("--validate", "run_validation", is_flag=True, help="validate it too (minutes)")
def retrain(model_dir: Path | None, run_validation: bool) -> None:
    """Fit the model on the curated rows and every submitted one (POST /v1/benchmarks);
    running services switch to it without a restart. Stored rows that no longer check are
    skipped and listed; a refit that fails marks nothing (exit 1), the services keep their
    model."""
    from profiles.model_catalog import Catalog
    from service.submissions import RetrainFailed, SubmissionStore, validate_layer
    from service.submissions import retrain as run_retrain

    settings = load_settings()
    directory = model_dir or Path(settings["RIGHTSIZE_MODEL_DIR"])
    base = load_knowledge(settings["RIGHTSIZE_KNOWLEDGE_DIR"])
    store = SubmissionStore(settings["RIGHTSIZE_SUBMISSIONS_FILE"])
    catalog = Catalog.load()
    try:
        with _progress("refitting the model on the curated and submitted rows ..."):
            result = run_retrain(base, catalog, store, directory)
    except RetrainFailed as exc:
        raise click.ClickException(str(exc)) from None
    click.echo(
        f"model on knowledge {result['knowledge_version']}: {result['submitted_rows']} "
        f"submitted rows with the curated ones ({result['rows_fitted']} single-GPU rows "
        f"fitted, {result['built_s']:.1f} s); marked in {store.trained_path}"
    )
    skipped = result["skipped"]
    if skipped:
        click.echo(f"{len(skipped)} stored rows skipped (not fitted):")
        for row in skipped[:SKIPPED_SHOWN]:
            click.echo(f"  {row['id']}: {row['reason']}")
        if len(skipped) > SKIPPED_SHOWN:
            click.echo(f"  ... and {len(skipped) - SKIPPED_SHOWN} more")
    if run_validation:
        with _progress("validating the refitted model (minutes) ..."):
            found = validate_layer(base, catalog, store, directory)
        for name, value in found["figures"].items():
            if value is not None:
                click.echo(f"  {name}: {value:.4g}")


@main.command("benchmark-profiles")
@click.option(
    "--check",
    is_flag=True,
    help="only say whether the packaged file is current (exit 1 if it is not)",
)
def benchmark_profiles(check: bool) -> None:
    """Profile the benchmarked workloads' steps (batch 1 and 2, each precision) and write
    them into the package (service/engine/estimating/data/benchmark_profiles.json), so that the
    service builds its model without profiling. Run after changing the profiler, the model
    catalog or the benchmarked workloads."""
    from service.engine.estimating import shipped

    kb = load_knowledge()
    if check:
        stale = shipped.stale_entries(kb)
        if stale:
            raise click.ClickException(
                f"{len(stale)} entries are stale or missing ({', '.join(stale[:4])}...): run "
                "`rightsize benchmark-profiles`"
            )
        click.echo("benchmark profiles are current")
        return
    path, count = shipped.write(kb)
    click.echo(f"wrote {count} benchmark step profiles to {path}")


@main.command()
@click.option("--burst", is_flag=True, help="stop when the queue is empty")
def worker(burst: bool) -> None:
    """Run a background worker: large trace uploads, retraining (needs RIGHTSIZE_REDIS_URL)."""
    from service import jobs
    from service.infra.cache import redis_client

    settings = load_settings()
    url = settings["RIGHTSIZE_REDIS_URL"]
    if url is None:
        raise click.ClickException("RIGHTSIZE_REDIS_URL is not set: there is no queue to work on")
    client = redis_client(url, timeout_s=30)
    jobs.worker(client, settings["RIGHTSIZE_KEY_PREFIX"]).work(burst=burst)


@main.command()
@click.option(
    "--output",
    "-o",
    type=click.Path(path_type=Path),
    default=None,
    help="file to write (default: print)",
)
def openapi(output: Path | None) -> None:
    """Write the OpenAPI document generated from the code (openapi.yaml)."""
    from service import create_app
    from service.openapi import spec_yaml

    text = spec_yaml(create_app())
    if output is None:
        click.echo(text, nl=False)
    else:
        output.write_text(text, encoding="utf-8")
        click.echo(f"wrote {output}")


@main.group()
def knowledge() -> None:
    """Inspect and derive the knowledge base."""


@knowledge.command("check")
@click.option("--root", type=click.Path(path_type=Path, file_okay=False), default=None)
def knowledge_check(root: Path | None) -> None:
    """Load and validate every knowledge file; print counts and unresolved benchmark rows."""
    try:
        kb = load_knowledge(root)
    except KnowledgeInvalid as exc:
        click.echo(str(exc), err=True)
        sys.exit(1)
    click.echo(f"knowledge version {kb.version}")
    for name, count in kb.stats().items():
        click.echo(f"  {name}: {count}")
    for line in kb.unresolved:
        click.echo(f"  unresolved: {line}")


@knowledge.command("derive", context_settings={"ignore_unknown_options": True})
@click.argument("args", nargs=-1, type=click.UNPROCESSED)
def knowledge_derive(args: tuple[str, ...]) -> None:
    """Re-derive the tables taken from ../shared/data (same as python -m knowledge.derive)."""
    from knowledge.derive.__main__ import main as derive_main

    sys.exit(derive_main(list(args)))


WORKLOAD_OPTIONS = (
    ("--task", str),
    ("--method", str),
    ("--lora-rank", int),
    ("--batch-size", int),
    ("--seq-len", int),
    ("--image-size", int),
    ("--prompt-tokens", int),
    ("--output-tokens", int),
    ("--precision", str),
    ("--optimizer", str),
    ("--activation-checkpointing", str),
    ("--attention", str),
    ("--dataset-samples", int),
    ("--dataset-tokens", int),
    ("--epochs", float),
)


def _workload_options(command: Any) -> Any:
    for flag, kind in reversed(WORKLOAD_OPTIONS):
        command = click.option(flag, type=kind, default=None, help=f"workload {flag[2:]}")(command)
    return command


def _model_argument(model: str) -> dict[str, Any]:
    """A catalog name, or a path to a config.json / family / layer-list JSON file."""
    path = Path(model)
    if path.suffix == ".json" and path.is_file():
        import json

        data = json.loads(path.read_text(encoding="utf-8"))
        if "model_type" in data:
            return {"hf_config": data}
        return dict(data)
    return {"name": model}


@main.command()
@click.argument("model")
@_workload_options
@click.option("--json", "as_json", is_flag=True, help="print the API's JSON")
@click.option("--time-limit", type=float, default=60.0, show_default=True)
def profile(model: str, as_json: bool, time_limit: float, **options: Any) -> None:
    """Profile MODEL (catalog name or a .json description) for a workload.

    Example: rightsize profile llama-3-8b --task training --batch-size 8 --seq-len 4096
    --precision bf16
    """
    import json

    from marshmallow import ValidationError

    from profiles import ProfileError
    from profiles.description import resolve
    from profiles.model_catalog import Catalog
    from profiles.profile import profile as run_profile
    from profiles.report import render
    from profiles.workload import WorkloadSchema

    raw = {k: v for k, v in options.items() if v is not None}
    raw.setdefault("task", "training")
    try:
        workload = WorkloadSchema().load(raw)
        result = run_profile(resolve(_model_argument(model), Catalog.load()), workload, time_limit)
    except ValidationError as exc:
        raise click.UsageError(f"workload: {exc.messages}") from None
    except ProfileError as exc:
        raise click.ClickException(str(exc)) from None
    data = result.to_dict()
    click.echo(json.dumps(data, indent=2) if as_json else render(data))


PYTHON_NAME = re.compile(r"^python(\d+(\.\d+)?)?(\.exe)?$")
PROBE = """
import importlib.util
def found(name):
    try:
        return importlib.util.find_spec(name) is not None
    except ImportError:  # a parent package missing
        return False
print(int(found("profiles.capture_main")), int(found("torch")))
"""


def _capture_env(python: str) -> dict[str, str]:
    """The environment for ``python``: the repo root on PYTHONPATH if it can't import profiles."""
    env = dict(os.environ)
    try:
        found = subprocess.run(
            [python, "-c", PROBE], check=False, env=env, capture_output=True, text=True, timeout=60
        ).stdout.split()
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise click.ClickException(f"cannot run {python}: {exc}") from None
    if found[:1] != ["1"]:
        import profiles

        root = str(Path(profiles.__file__).resolve().parent.parent)
        env["PYTHONPATH"] = os.pathsep.join(p for p in (root, env.get("PYTHONPATH")) if p)
    if found[1:2] != ["1"]:
        raise click.ClickException(f"{python} cannot import torch: install torch for it first")
    return env


def _wait(child: subprocess.Popen[bytes]) -> int:
    """The child's exit status; Ctrl-C reaches it too, so wait while it writes its trace."""
    while True:
        try:
            code = child.wait()
        except KeyboardInterrupt:
            continue
        return code if code >= 0 else 128 - code  # killed by signal N: 128 + N, as a shell says


@main.command(context_settings={"ignore_unknown_options": True, "allow_interspersed_args": False})
@click.option(
    "--output",
    "-o",
    type=click.Path(path_type=Path, dir_okay=False),
    default=Path("trace.json.gz"),
    show_default=True,
    help="trace file to write (gzipped Chrome trace)",
)
@click.option("--wait", type=click.IntRange(min=0), default=1, show_default=True)
@click.option("--warmup", type=click.IntRange(min=0), default=2, show_default=True)
@click.option("--active", type=click.IntRange(min=1), default=3, show_default=True)
@click.argument("command", nargs=-1, required=True, type=click.UNPROCESSED)
@click.pass_context
def capture(
    ctx: click.Context, output: Path, wait: int, warmup: int, active: int, command: tuple[str, ...]
) -> None:
    """Record a torch.profiler trace of a training script, ready to upload.

    Example: rightsize capture --active 5 -- python train.py --lr 3e-4

    One step is one optimizer.step() call: WAIT steps are skipped, WARMUP warm the
    profiler up, ACTIVE are recorded (with shapes, FLOPs and memory). The script needs no
    change; the command to upload the trace is printed when it is written.
    """
    python, *rest = command
    if not PYTHON_NAME.match(Path(python).name) or not rest or rest[0].startswith("-"):
        raise click.UsageError(
            f"capture runs a Python training script: `rightsize capture -- python train.py "
            f"[args]` (got `{' '.join(command)}`; python options such as -m or -c are not "
            "supported)"
        )
    script, *args = rest
    if not Path(script).is_file():
        raise click.UsageError(f"no script '{script}'")
    env = _capture_env(python)
    options = ["--output", str(output), "--wait", str(wait), "--warmup", str(warmup)]
    argv = [python, "-m", "profiles.capture_main", *options, "--active", str(active)]
    with subprocess.Popen([*argv, script, *args], env=env) as child:
        code = _wait(child)
    ctx.exit(code)


@main.command()
@click.option("--json", "as_json", is_flag=True, help="print the whole report as JSON")
@_model_dir_option
def validate(as_json: bool, model_dir: Path | None) -> None:
    """Check the estimates on the stored benchmarks they were not fitted on (a GPU, the GPUs
    newer than a year, an architecture held out; multi-GPU rows; memory fit) and save the
    report that GET /v1/validation serves."""
    from profiles.model_catalog import Catalog
    from service.engine.estimating.on_request import save_report
    from service.engine.validating.validation import validate as run_validation

    kb, directory, model = _performance_model(model_dir)
    with _progress("validating: held-out GPUs, time, architectures, memory (minutes) ..."):
        report = run_validation(model, kb, Catalog.load())
    save_report(directory, report)
    print_validation(report, kb.version, as_json)


@main.group()
def prices() -> None:
    """Cloud prices laid over the curated ones (RIGHTSIZE_PRICES_FILE)."""


@prices.command("refresh")
@click.argument("catalog", type=click.Path(path_type=Path, dir_okay=False, exists=True))
def prices_refresh(catalog: Path) -> None:
    """Check CATALOG (offer_prices.csv's columns) and make it the price catalog: every row
    must parse and name a known offer, or nothing changes. Services pick it up by itself."""
    from service.prices import PriceFile, catalog_text
    from service.submissions import RejectedBatch

    settings = load_settings()
    store = PriceFile(settings["RIGHTSIZE_PRICES_FILE"])
    try:
        text = catalog_text(catalog.read_bytes())
    except ValueError as exc:
        raise click.ClickException(f"{catalog}: {exc}") from None
    try:
        meta = store.refresh(
            load_knowledge(settings["RIGHTSIZE_KNOWLEDGE_DIR"]),
            text,
            f"cli:{os.environ.get('USER', 'unknown')}",
        )
    except RejectedBatch as exc:
        for e in exc.errors[:20]:
            click.echo(f"  row {e.index + 1}, {e.field}: {e.message}", err=True)
        raise click.ClickException(f"{len(exc.errors)} error(s): nothing was changed") from None
    click.echo(f"{meta['rows']} prices of {meta['offers']} offers now in {store.path}")


@main.group()
def keys() -> None:
    """Create, list and revoke API keys (kept hashed in RIGHTSIZE_KEYS_FILE)."""


def _key_file() -> KeyFile:
    return KeyFile(load_settings()["RIGHTSIZE_KEYS_FILE"])


@keys.command("create")
@click.option("--name", required=True, help="who or what holds the key (e.g. ci, procurement-bot)")
@click.option("--role", type=click.Choice(ROLES), default="read", show_default=True)
def keys_create(name: str, role: str) -> None:
    """Create a key and print it once (only its hash is kept)."""
    try:
        token, record = _key_file().create(name, role)
    except ValueError as exc:
        raise click.BadParameter(str(exc)) from None
    click.echo(f"key {record.key_id} ({record.role}) for {record.name}; shown once, keep it:")
    click.echo(token)


@keys.command("list")
def keys_list() -> None:
    """The keys: id, role, name and when each was made (never the key itself)."""
    for record in _key_file().all():
        click.echo(f"{record.key_id}  {record.role:<5}  {record.created_at}  {record.name}")


@keys.command("revoke")
@click.argument("key_id")
def keys_revoke(key_id: str) -> None:
    """Revoke the key KEY_ID (the service refuses it at once, no restart)."""
    if not _key_file().revoke(key_id):
        raise click.ClickException(f"no key {key_id!r} (see: rightsize keys list)")
    click.echo(f"revoked {key_id}")


def _register_tools() -> None:
    from service.cli import commands
    from service.mcp.server import mcp_command

    commands.register(main)
    main.add_command(mcp_command)


_register_tools()
