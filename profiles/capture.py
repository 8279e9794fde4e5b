"""Record a trace of a few training steps with the settings the trace analysis needs.

``capture`` wraps ``torch.profiler.profile``: a schedule (skip ``wait`` steps, warm up for
``warmup``, record ``active``), CPU and (where there is one) CUDA activity, operator input
shapes, FLOPs and memory events. The Chrome trace is written gzipped with an atomic rename,
and the command that uploads it is printed on stderr::

    with capture("trace.json.gz") as session:
        for batch in loader:
            train_step(batch)
            session.step()

``step_hooks(session)`` advances the schedule on every ``optimizer.step()`` instead, so a
script needs no change (``python -m profiles.capture_main train.py`` does this).
"""

from __future__ import annotations

import gzip
import json
import os
import shlex
import sys
import tempfile
import weakref
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, BinaryIO

import torch
from torch.profiler import ProfilerActivity, profile, schedule

DEFAULT_URL = "http://127.0.0.1:8000"
TAIL_BYTES = 1 << 16  # the end of an exported trace, where its traceName is


@dataclass(frozen=True)
class Plan:
    """The profiler schedule, in steps."""

    wait: int = 1
    warmup: int = 2
    active: int = 3
    repeat: int = 1

    def __post_init__(self) -> None:
        if min(self.wait, self.warmup) < 0 or self.active < 1 or self.repeat < 1:
            raise ValueError(
                "the schedule needs wait >= 0, warmup >= 0, active >= 1 and repeat >= 1 "
                f"(got wait={self.wait}, warmup={self.warmup}, active={self.active}, "
                f"repeat={self.repeat})"
            )

    @property
    def cycle(self) -> int:
        return self.wait + self.warmup + self.active


def upload_url() -> str:
    """Where the server's trace upload is: ``$RIGHTSIZE_URL`` (default 127.0.0.1:8000)."""
    return (os.environ.get("RIGHTSIZE_URL") or DEFAULT_URL).rstrip("/") + "/v1/traces"


def upload_command(path: str) -> str:
    """The shell command that uploads the trace at ``path`` (with a write key, which the
    upload needs: ``$RIGHTSIZE_API_KEY`` in the shell that runs it)."""
    auth = shlex.quote("Authorization: Bearer ") + '"$RIGHTSIZE_API_KEY"'
    return f"curl -F {shlex.quote('file=@' + path)} {upload_url()} -H {auth}"


def _say(message: str) -> None:
    print(f"rightsize capture: {message}", file=sys.stderr, flush=True)


def _tagged(path: Path, tag: str) -> Path:
    """``trace.json.gz`` -> ``trace.<tag>.json.gz`` (the tag goes before the extensions)."""
    name = path.name
    for ending in (".json.gz", ".json", ".gz"):
        if name.endswith(ending) and len(name) > len(ending):
            return path.with_name(f"{name[: -len(ending)]}.{tag}{ending}")
    return path.with_name(f"{name}.{tag}")


def _rank_output(path: Path) -> Path:
    """One file per rank when launched by torchrun, so that ranks do not overwrite each other."""
    rank, world = os.environ.get("RANK"), os.environ.get("WORLD_SIZE", "1")
    return _tagged(path, f"rank{rank}") if rank is not None and world not in ("", "1") else path


def write_gzipped(prof: profile, path: Path) -> int:
    """Export ``prof``'s Chrome trace to ``path``, gzipped; atomic. Returns the bytes written."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, raw_name = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".json", dir=path.parent)
    os.close(fd)
    gz_name = raw_name + ".gz"
    try:
        prof.export_chrome_trace(raw_name)
        with open(raw_name, "rb") as src, open(gz_name, "wb") as sink:
            # no name or time in the gzip header: the bytes depend on the trace alone
            with gzip.GzipFile(filename="", mode="wb", fileobj=sink, mtime=0) as dst:
                _copy_renamed(src, dst, os.path.getsize(raw_name), raw_name, path.name)
            sink.flush()
            os.fsync(sink.fileno())
        os.replace(gz_name, path)
    finally:
        for name in (raw_name, gz_name):
            if os.path.exists(name):
                os.remove(name)
    return path.stat().st_size


def _copy_renamed(src: BinaryIO, dst: gzip.GzipFile, size: int, old: str, new: str) -> None:
    """Copy ``src``; in its tail, where Kineto writes ``traceName``, name ``new``, not ``old``.

    Kineto names the trace after the file it exported to: the temporary file, whose path
    would otherwise end up in the trace (and in the viewer's title).
    """
    remaining = max(size - TAIL_BYTES, 0)
    while remaining:
        chunk = src.read(min(1 << 20, remaining))
        if not chunk:
            break
        dst.write(chunk)
        remaining -= len(chunk)
    quoted_old, quoted_new = (json.dumps(name)[1:-1].encode() for name in (old, new))
    dst.write(src.read().replace(quoted_old, quoted_new))


@dataclass
class _Writer:
    """The ``on_trace_ready`` handler: each finished cycle to its file, then how to upload."""

    output: Path
    display: str  # the output path as the user gave it (relative to the start directory)
    start_dir: str
    gpu: bool
    plan: Plan
    session: Capture | None = None
    written: list[Path] = field(default_factory=list)

    def __call__(self, prof: profile) -> None:
        cycle = len(self.written) + 1
        path = self.output if cycle == 1 else _tagged(self.output, str(cycle))
        size = write_gzipped(prof, path)
        self.written.append(path)
        shown = self.display if cycle == 1 else str(path)
        if os.getcwd() != self.start_dir:  # the script moved: the relative name would mislead
            shown = str(path)
        steps = self.session.steps if self.session is not None else 0
        if steps < self.plan.cycle * cycle:
            recorded = max(
                steps - self.plan.cycle * (cycle - 1) - self.plan.wait - self.plan.warmup, 0
            )
            _say(
                f"the run ended after {steps} steps, before the schedule (wait {self.plan.wait}"
                f" + warmup {self.plan.warmup} + active {self.plan.active}) completed: the trace "
                f"holds what was recorded, {recorded} complete step(s) of {self.plan.active}"
            )
        _say(f"wrote {shown} ({size / 1024:.1f} KiB)")
        if not self.gpu:
            _say("no GPU activity was recorded (CPU only): the analysis will say so")
        _say(f"upload it with:\n  {upload_command(shown)}")


class Capture:
    """A recording in progress: call :meth:`step` once at the end of every training step."""

    def __init__(self, profiler: profile, writer: _Writer) -> None:
        self.profiler = profiler
        self.writer = writer
        self.steps = 0

    @property
    def plan(self) -> Plan:
        return self.writer.plan

    @property
    def written(self) -> list[Path]:
        """The trace files written so far (one per cycle of the schedule)."""
        return list(self.writer.written)

    def step(self) -> None:
        """Mark the end of a training step (advances the profiler's schedule)."""
        self.steps += 1
        self.profiler.step()

    def finish(self) -> None:
        """Stop the profiler; a run that ends while recording still gets its trace.

        Ending during a recording, the profiler hands what it has to the writer; ending
        before one (waiting, or warming up, when nothing is kept yet), there is nothing to
        write, and that is said.
        """
        self.profiler.stop()
        if not self.writer.written:
            plan = self.plan
            _say(
                f"nothing recorded: the run ended after {self.steps} steps, before recording "
                f"starts (after wait {plan.wait} + warmup {plan.warmup} steps); lower the wait "
                "or warm-up, or run more steps (does the script call optimizer.step(), or "
                "session.step() once per step?)"
            )


def activities(cpu_only: bool | None) -> list[ProfilerActivity]:
    """CPU, plus CUDA (also ROCm's HIP) when a GPU is there; ``cpu_only=False`` requires one."""
    found = [ProfilerActivity.CPU]
    if cpu_only is False and not torch.cuda.is_available():
        raise RuntimeError("cpu_only=False, but torch sees no CUDA device")
    if not cpu_only and torch.cuda.is_available():
        found.append(ProfilerActivity.CUDA)
    return found


@contextmanager
def capture(
    output: str | os.PathLike[str] = "trace.json.gz",
    wait: int = 1,
    warmup: int = 2,
    active: int = 3,
    repeat: int = 1,
    cpu_only: bool | None = None,
) -> Iterator[Capture]:
    """Profile the steps run inside the block; the trace goes to ``output`` (gzipped).

    ``repeat`` cycles of the schedule are recorded; the second and later go to
    ``<name>.2.json.gz`` and so on. Under torchrun each rank writes ``<name>.rank<N>...``.
    ``cpu_only``: None records CUDA activity where a GPU is available, True never, False
    requires a GPU.
    """
    plan = Plan(wait, warmup, active, repeat)
    kinds = activities(cpu_only)
    display = os.fspath(output)
    path = _rank_output(Path(display).absolute())
    if path.name != Path(display).name:
        display = str(path)
    writer = _Writer(path, display, os.getcwd(), ProfilerActivity.CUDA in kinds, plan)
    profiler = profile(
        activities=kinds,
        schedule=schedule(wait=wait, warmup=warmup, active=active, repeat=repeat),
        on_trace_ready=writer,
        record_shapes=True,  # input shapes: which GEMMs and convolutions ran at which size
        with_flops=True,  # FLOPs of matmuls and convolutions: achieved TFLOPS per kernel kind
        profile_memory=True,  # allocator events: the peak memory the target GPU must hold
    )
    session = Capture(profiler, writer)
    writer.session = session
    profiler.start()
    try:
        yield session
    finally:
        session.finish()


@contextmanager
def step_hooks(session: Capture) -> Iterator[None]:
    """Advance ``session`` after every ``optimizer.step()`` while the block runs.

    A script with several optimizers (a GAN's two, say) steps each once per training step:
    only the first optimizer seen advances the schedule (the next one seen, if it is freed).
    """
    from torch.optim.optimizer import register_optimizer_step_post_hook

    first: list[weakref.ReferenceType[Any]] = []

    def hook(optimizer: Any, args: Any, kwargs: Any) -> None:
        if not first or first[0]() is None:
            first[:] = [weakref.ref(optimizer)]
        if first[0]() is optimizer:
            session.step()

    handle = register_optimizer_step_post_hook(hook)
    try:
        yield
    finally:
        handle.remove()
