"""pyproject.toml declares what the code imports, and imports what it declares."""

from __future__ import annotations

import ast
import re
import sys
import tomllib
from importlib.metadata import packages_distributions
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("service", "knowledge", "profiles")
# declared and used, though no module of ours imports them by name
USED_WITHOUT_IMPORT = {
    "httptools": "uvicorn's HttpToolsProtocol, which service/front/protocol.py extends, runs on it",
}


def _declared() -> set[str]:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["project"]
    names = (re.match(r"[A-Za-z0-9_.-]+", d) for d in project["dependencies"])
    return {m.group(0).lower().replace("_", "-") for m in names if m}


def _imported() -> set[str]:
    """Top-level names of the modules our packages import, ours and the stdlib's left out."""
    found: set[str] = set()
    for package in PACKAGES:
        for path in (ROOT / package).rglob("*.py"):
            for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
                if isinstance(node, ast.Import):
                    found.update(a.name.split(".")[0] for a in node.names)
                elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
                    found.add(node.module.split(".")[0])
    return found - set(sys.stdlib_module_names) - set(PACKAGES)


def _distributions(modules: set[str]) -> dict[str, set[str]]:
    """Each imported module's distributions (lower case)."""
    known = packages_distributions()
    return {m: {d.lower().replace("_", "-") for d in known.get(m, [])} for m in modules}


def test_every_import_is_declared() -> None:
    declared = _declared()
    missing = {m: d for m, d in _distributions(_imported()).items() if not d & declared}
    assert not missing, f"imported but not declared in pyproject.toml: {missing}"


def test_every_declaration_is_imported() -> None:
    used = set().union(*_distributions(_imported()).values())
    unused = _declared() - used - set(USED_WITHOUT_IMPORT)
    assert not unused, f"declared in pyproject.toml but never imported: {sorted(unused)}"
