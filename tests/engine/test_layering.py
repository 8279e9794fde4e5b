"""The engine is plain Python: it imports no web framework and nothing above it."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

import service.engine
from service import errors as http_errors
from service.engine import errors

ENGINE = Path(service.engine.__file__).parent
MODULES = sorted(ENGINE.glob("*.py"))
FORBIDDEN = ("flask", "werkzeug", "flask_smorest", "marshmallow", "webargs")
ABOVE = ("service.api", "service.errors", "service.cache", "service.state", "service.cli")


def _imports(path: Path) -> set[str]:
    found = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            found |= {alias.name for alias in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module:
            found.add(node.module)
    return found


@pytest.mark.parametrize("path", MODULES, ids=[p.name for p in MODULES])
def test_no_engine_module_imports_the_web_layer(path: Path) -> None:
    for name in _imports(path):
        root = name.split(".")[0]
        assert root not in FORBIDDEN, f"{path.name} imports {name}"
        assert not name.startswith(ABOVE), f"{path.name} imports {name}"


def test_the_engine_modules_are_all_checked() -> None:
    names = {p.name for p in MODULES}
    assert {"estimate.py", "step_model.py", "model.py", "service.py", "validation.py"} <= names


def test_the_engine_raises_its_own_errors_and_they_map_to_http_once() -> None:
    """Every engine error is an EngineError (no HTTP error inside the engine); the one
    mapping in service.errors turns each kind into its status."""
    assert not any(issubclass(c, http_errors.ApiError) for c in _error_classes())
    cases = [
        (errors.NotFound("profile", "abc"), 404),
        (errors.InvalidRequest("count", "too many"), 422),
        (errors.UnsupportedPrecision("v100", "bf16", ["fp32", "fp16"]), 422),
        (errors.UnknownReference("no GPU activity"), 422),
        (errors.ModelUnavailable("disk full"), 503),
    ]
    from flask import Flask

    with Flask(__name__).test_request_context():
        for error, status in cases:
            response = http_errors.from_engine_error(error)
            assert response.status_code == status
            assert response.mimetype == http_errors.PROBLEM_MIME
            if isinstance(error, errors.InvalidRequest):
                body = response.get_json()
                assert body["errors"][0]["field"] == error.field


def _error_classes() -> list[type]:
    return [
        value
        for value in vars(errors).values()
        if isinstance(value, type) and issubclass(value, Exception)
    ]
