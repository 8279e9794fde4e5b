"""Property-based tests of the live app against the checked-in ``openapi.yaml``
(schemathesis): generated requests to every operation, valid and not; no 5xx, and every
response (status, content type, headers, body) is what the document says.

At most ``CASES_PER_OPERATION`` cases an operation (fewer where there is less to vary),
over every operation (27): more than 1,000 cases a run, counted by the last test.
"""

from __future__ import annotations

import gzip
import json
import os
from collections import Counter
from pathlib import Path
from typing import Any

import pytest
import schemathesis
from hypothesis import HealthCheck, settings
from schemathesis.checks import (
    content_type_conformance,
    not_a_server_error,
    response_headers_conformance,
    response_schema_conformance,
    status_code_conformance,
)

from service import create_app
from service.infra.keys import KeyFile
from tests.conftest import KEYS_FILE

# schemathesis makes one item per operation, which pytest-xdist cannot split
pytestmark = [
    pytest.mark.serial,
    pytest.mark.slow,  # fuzzing: thousands of generated requests
    pytest.mark.random_order(disabled=True),  # the count is checked after the cases
]

ROOT = Path(__file__).resolve().parents[2]
CASES_PER_OPERATION = int(os.environ.get("RIGHTSIZE_SCHEMATHESIS_CASES", "32"))
ADMIN, _ = KeyFile(KEYS_FILE).create("schemathesis", "admin")
APP = create_app(
    {
        "TESTING": True,
        "RATE_LIMIT": "1000000 per minute",
        "PROFILE_TIME_LIMIT_S": 3,
        "LOG_LEVEL": "WARNING",
    }
)
schema = schemathesis.openapi.from_path(ROOT / "openapi.yaml")
schema.app = APP


@schemathesis.serializer("application/gzip")
def _gzipped(_: Any, value: Any) -> bytes:
    """Trace uploads may be gzipped: what was generated, compressed."""
    raw = value if isinstance(value, bytes) else json.dumps(value).encode()
    return gzip.compress(raw)


CALLED: Counter[str] = Counter()
QUEUED = {"POST /v1/benchmarks/retrain", "POST /v1/validation"}  # work for the job queue
CHECKS: list[Any] = [
    not_a_server_error,
    status_code_conformance,
    content_type_conformance,
    response_headers_conformance,
    response_schema_conformance,
]


@schema.parametrize()
@settings(
    max_examples=CASES_PER_OPERATION,
    deadline=None,
    suppress_health_check=list(HealthCheck),
    derandomize=True,
)
def test_every_operation_keeps_its_contract(case: Any) -> None:
    CALLED[case.operation.label] += 1
    checks = CHECKS
    if case.operation.label in QUEUED:
        # retraining and validating need the job queue; this app is the embedded default,
        # so their documented answer is 503 with Retry-After (queued: test_benchmarks_write)
        checks = CHECKS[1:]
    response = case.call_and_validate(headers={"Authorization": f"Bearer {ADMIN}"}, checks=checks)
    if checks is not CHECKS and response.status_code >= 500:
        assert response.status_code == 503
        assert response.headers["retry-after"] == ["3600"]


def test_more_than_a_thousand_cases_ran() -> None:
    """Runs after the cases above (file order): every operation had its share."""
    operations = {op.ok().label for op in schema.get_all_operations()}
    assert set(CALLED) == operations, operations - set(CALLED)
    assert sum(CALLED.values()) >= 1000, CALLED
