"""Run a training script under the profiler: ``python -m profiles.capture_main train.py ...``.

The script runs as ``python train.py ...`` would run it (``__main__``, its own ``sys.argv``,
its directory first on ``sys.path``) inside :func:`profiles.capture.capture`, with every
``optimizer.step()`` advancing the schedule, so the script needs no change. Its exit status
is this command's. ``rightsize capture -- python train.py ...`` runs this.
"""

from __future__ import annotations

import argparse
import os
import runpy
import sys
from collections.abc import Sequence

from profiles.capture import Plan, capture, step_hooks


def parser() -> argparse.ArgumentParser:
    defaults = Plan()
    p = argparse.ArgumentParser(
        prog="python -m profiles.capture_main",
        description="Record a torch.profiler trace of a training script's first steps "
        "(one step = one optimizer.step() call).",
    )
    p.add_argument("--output", "-o", default="trace.json.gz", help="trace file (gzipped)")
    p.add_argument("--wait", type=int, default=defaults.wait, help="steps skipped first")
    p.add_argument("--warmup", type=int, default=defaults.warmup, help="steps to warm up")
    p.add_argument("--active", type=int, default=defaults.active, help="steps recorded")
    p.add_argument("--cpu-only", action="store_true", help="record no CUDA activity")
    p.add_argument("script", help="the training script")
    p.add_argument("args", nargs=argparse.REMAINDER, help="the script's arguments")
    return p


def _exit_status(code: object) -> int:
    """What ``sys.exit(code)`` in the script would have made the process exit with."""
    if code is None:
        return 0
    if isinstance(code, int):
        return code
    print(code, file=sys.stderr)
    return 1


def main(argv: Sequence[str] | None = None) -> int:
    options = parser().parse_args(argv)
    if not os.path.isfile(options.script):
        print(f"capture: no script {options.script!r}", file=sys.stderr)
        return 2
    try:
        plan = Plan(options.wait, options.warmup, options.active)
    except ValueError as exc:
        print(f"capture: {exc}", file=sys.stderr)
        return 2
    saved_argv, saved_path0 = sys.argv, sys.path[0]
    sys.argv = [options.script, *options.args]
    # as for `python train.py`: the script's directory, not the working directory, comes first
    sys.path[0] = os.path.dirname(os.path.abspath(options.script))
    status = 0
    try:
        with (
            capture(
                options.output,
                plan.wait,
                plan.warmup,
                plan.active,
                cpu_only=True if options.cpu_only else None,
            ) as session,
            step_hooks(session),
        ):
            try:
                runpy.run_path(options.script, run_name="__main__")
            except SystemExit as exc:
                status = _exit_status(exc.code)
    finally:
        sys.argv, sys.path[0] = saved_argv, saved_path0
    return status


if __name__ == "__main__":
    sys.exit(main())
