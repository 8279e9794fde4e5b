"""scripts/test leaves the serial run out under ``-m "not slow"``: that is right only while
every test marked serial is marked slow too."""

from __future__ import annotations

import ast
from pathlib import Path

TESTS = Path(__file__).resolve().parent


def _marks(node: ast.AST) -> set[str]:
    return {
        n.attr
        for n in ast.walk(node)
        if isinstance(n, ast.Attribute) and n.attr in {"serial", "slow"}
    }


def test_every_serial_test_is_slow_too() -> None:
    serial = []
    for path in TESTS.rglob("test_*.py"):
        tree = ast.parse(path.read_text(encoding="utf-8"))
        module = set().union(
            *(_marks(n) for n in tree.body if isinstance(n, ast.Assign)
              and any(isinstance(t, ast.Name) and t.id == "pytestmark" for t in n.targets))
        )  # fmt: skip
        for node in ast.walk(tree):
            if isinstance(node, ast.FunctionDef | ast.ClassDef):
                marks = module | set().union(*(_marks(d) for d in node.decorator_list))
                if "serial" in marks:
                    serial.append(path.name)
                    assert "slow" in marks, f"{path.name}::{node.name} is serial, not slow"
    assert serial, "no serial test found: the check reads the marks wrongly"
