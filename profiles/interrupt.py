"""A request to stop the work in progress, checked where the time limits are checked.

A compute process (``service.infra.compute``) counts profiles and ranks answers for callers in
another process; when a caller gives up (its client went away, or its deadline passed)
the work must stop at once, without killing the process and the warm app it holds. The
process installs a probe here that says whether the task it runs was called off; the
profiler's deadline checks (every operator counted, every module built) and the engine's
consult it, and raise their time-limit errors, which end the task the ordinary way.

The state is the process's, by nature: a process runs one such task at a time and the
probe belongs to it (outside a compute process none is installed and nothing is asked).
"""

from __future__ import annotations

from collections.abc import Callable

_probe: list[Callable[[], bool]] = []


def install(probe: Callable[[], bool] | None) -> None:
    """Make ``probe`` the question asked by :func:`requested` (None: never stop)."""
    _probe[:] = [probe] if probe is not None else []


def requested() -> bool:
    """Whether the task this process runs was called off."""
    return bool(_probe) and _probe[0]()
