"""What the compute-pool tests hand to a child: a small app to build (the service's own
takes seconds) and tasks that mark that they ran or ignore being called off. A spawned
child imports this module, so it imports nothing of the tests' fixtures."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

from flask import Flask


def small_app(_: Any) -> Flask:
    return Flask("compute-test")


def mark(path: str) -> str:
    """Leave a file behind: the task ran."""
    Path(path).write_text("ran", encoding="utf-8")
    return path


def stubborn(seconds: float) -> float:
    """A task with no time-limit check: only killing its process stops it."""
    time.sleep(seconds)
    return seconds
