"""A trace analysed in a process of its own, under a time and a memory limit.

:func:`analyse_bounded` starts ``python -m profiles.trace.bounded`` (a fresh interpreter
that imports only the trace reader: none of the service, torch or the caller's main
module), which reads the file and writes JSON lines: its progress while reading, then the
analysis or the reason it failed. The caller kills it past ``time_limit_s`` or when its
resident memory passes ``memory_bytes``: a large trace cannot take the service with it.
"""

from __future__ import annotations

import json
import os
import queue
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import asdict
from pathlib import Path
from typing import IO, Any

from profiles.trace.stream import Limits, StreamStats, TraceFormatError

STEP_S = 0.1  # how often the caller looks at the child's memory and time
PROGRESS_EVERY_S = 0.5


def _report(line: dict[str, Any]) -> None:
    sys.stdout.write(json.dumps(line) + "\n")
    sys.stdout.flush()


def main(argv: list[str]) -> None:
    """The child: ``path``, the limits as JSON, the step marker (or '')."""
    from profiles.trace.read import analysed

    path, limits, marker = argv[0], Limits(**json.loads(argv[1])), argv[2] or None
    last = [0.0]
    try:
        with open(path, "rb") as raw:
            total = os.fstat(raw.fileno()).st_size

            def progress(phase: str, stats: StreamStats) -> None:
                now = time.monotonic()
                if now - last[0] >= PROGRESS_EVERY_S or phase != "reading":
                    last[0] = now
                    _report({"phase": phase, "read": stats.compressed_bytes, "total": total,
                             "json": stats.decompressed_bytes, "events": stats.events})  # fmt: skip

            analysis, trace_id = analysed(raw, limits, marker, progress)
        _report({"analysis": analysis, "trace_id": trace_id})
    except TraceFormatError as exc:
        _report({"error": exc.kind, "message": str(exc)})
    except MemoryError:
        _report({"error": "too-large", "message": "the trace needs more memory than it got"})


def _progress(line: dict[str, Any]) -> str:
    """What a job says of its analysis, e.g. "reading: 120 of 512 MiB (1,000 MiB of JSON,
    3,141,592 events)"."""
    done = (
        f"{line['json'] / 2**20:,.0f} MiB of JSON, {line['events']:,} events"
        if line["phase"] == "reading"
        else f"{line['events']:,} events read"
    )
    if line["phase"] == "reading":
        return f"reading: {line['read'] / 2**20:,.1f} of {line['total'] / 2**20:,.1f} MiB ({done})"
    return f"analysing: {done}"


def _resident_bytes(pid: int) -> int:
    """The process's resident memory (0 where /proc does not tell)."""
    try:
        with open(f"/proc/{pid}/statm", encoding="ascii") as statm:
            return int(statm.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
    except (OSError, ValueError, IndexError):
        return 0


def _lines(source: IO[str], into: queue.Queue[dict[str, Any] | None]) -> None:
    for line in source:
        try:
            into.put(json.loads(line))
        except ValueError:
            continue
    into.put(None)


def analyse_bounded(
    path: Path,
    limits: Limits,
    marker: str | None,
    time_limit_s: float,
    memory_bytes: int,
    report: Callable[[str], None] | None = None,
) -> tuple[dict[str, Any], str]:
    """The analysis of the trace in ``path`` and its id (:func:`profiles.trace.read.analysed`),
    from a child killed past ``time_limit_s`` (``too-slow``) or ``memory_bytes`` resident
    (``too-large``). ``report`` hears its progress ("reading: 120.0 of 512.0 MiB (1,024 MiB of
    JSON, 3,141,592 events)", then "analysing: ...")."""
    child = subprocess.Popen(
        [sys.executable, "-m", "profiles.trace.bounded", str(path),
         json.dumps(asdict(limits)), marker or ""],
        stdout=subprocess.PIPE,
        stdin=subprocess.DEVNULL,
        text=True,
    )  # fmt: skip
    assert child.stdout is not None
    lines: queue.Queue[dict[str, Any] | None] = queue.Queue()
    threading.Thread(target=_lines, args=(child.stdout, lines), daemon=True).start()
    until = time.monotonic() + time_limit_s
    try:
        while True:
            try:
                line = lines.get(timeout=STEP_S)
            except queue.Empty:
                line = {}
            if line is None:
                child.wait(5)
                raise TraceFormatError(
                    "crashed", f"the analysis ended abnormally (exit code {child.returncode})"
                )
            if "trace_id" in line:
                return line["analysis"], line["trace_id"]
            if "error" in line:
                raise TraceFormatError(line["error"], line["message"])
            if "phase" in line and report is not None:
                report(_progress(line))
            if _resident_bytes(child.pid) > memory_bytes:
                raise TraceFormatError(
                    "too-large",
                    f"analysing the trace needs more than {memory_bytes} bytes of memory "
                    "(RIGHTSIZE_TRACE_MEMORY_LIMIT_BYTES): record fewer steps",
                )
            if time.monotonic() > until:
                raise TraceFormatError(
                    "too-slow",
                    f"analysing the trace passed its limit of {time_limit_s:g} s "
                    "(RIGHTSIZE_TRACE_TIME_LIMIT_S): record fewer steps",
                )
    finally:
        if child.poll() is None:
            child.kill()
        child.wait(5)
        child.stdout.close()


if __name__ == "__main__":
    main(sys.argv[1:])
