"""The architecture as a checked contract: import-linter's contracts in pyproject.toml (the
engine's rooms in layers, the engine plain Python, no import circle) hold, and the engine's
errors map to HTTP in one place."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from service import errors as http_errors
from service.engine import errors

ROOT = Path(__file__).resolve().parents[1]


def test_the_import_contracts_hold() -> None:
    """lint-imports (scripts/test runs it too) reads the contracts from pyproject.toml."""
    linter = Path(sys.executable).with_name("lint-imports")
    found = subprocess.run(
        [str(linter), "--no-cache"],
        check=False,
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert found.returncode == 0, found.stdout[-4000:] + found.stderr[-2000:]
    assert "0 broken" in found.stdout


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
