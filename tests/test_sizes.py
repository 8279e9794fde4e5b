"""Modules a reader can hold: none over 600 lines; a function over 60 lines says why, in a
``# long:`` comment on the line above it (or above its decorators)."""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("service", "profiles", "knowledge")
MODULE_LINES = 600
FUNCTION_LINES = 60


def _modules() -> list[Path]:
    return [p for pkg in PACKAGES for p in (ROOT / pkg).rglob("*.py")]


def test_no_module_is_over_600_lines() -> None:
    long = {
        p.relative_to(ROOT).as_posix(): n
        for p in _modules()
        if (n := len(p.read_text(encoding="utf-8").splitlines())) > MODULE_LINES
    }
    assert not long, f"split these: {long}"


def test_a_long_function_says_why() -> None:
    unexplained = []
    for path in _modules():
        lines = path.read_text(encoding="utf-8").splitlines()
        for node in ast.walk(ast.parse("\n".join(lines))):
            if not isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
                continue
            if node.end_lineno is None or node.end_lineno - node.lineno + 1 <= FUNCTION_LINES:
                continue
            first = min([node.lineno, *(d.lineno for d in node.decorator_list)])
            if not lines[first - 2].strip().startswith("# long:"):
                unexplained.append(f"{path.relative_to(ROOT).as_posix()}:{node.name}")
    assert not unexplained, "split these, or say why in a '# long:' comment: " + ", ".join(
        unexplained
    )
