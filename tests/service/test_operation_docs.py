"""Every operation in openapi.yaml is fit for tool calling: an operation id, a summary, a
description and an example, and the examples are requests the API accepts."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml
from flask import Flask
from openapi_schema_validator import OAS30Validator
from referencing import Registry, Resource
from referencing.jsonschema import DRAFT4

from service import create_app
from service.api.operations import OPERATIONS
from tests.conftest import with_key

SPEC = yaml.safe_load(
    (Path(__file__).resolve().parents[2] / "openapi.yaml").read_text(encoding="utf-8")
)
METHODS = ("get", "post", "put", "patch", "delete")
OPS = [
    (method, path, op)
    for path, item in SPEC["paths"].items()
    for method, op in item.items()
    if method in METHODS
]
IDS = [f"{m.upper()} {p}" for m, p, _ in OPS]
# cheap to answer: sent to the app (the others are checked against their schema only)
SENT = {
    ("post", "/v1/profiles"),
    ("post", "/v1/estimates"),
    ("post", "/v1/tco"),
    ("post", "/v1/benchmarks"),
}


def _examples(path: str, op: dict[str, Any]) -> list[Any]:
    found = [c["example"] for c in op.get("requestBody", {}).get("content", {}).values()
             if "example" in c]  # fmt: skip
    params = [*SPEC["paths"][path].get("parameters", []), *op.get("parameters", [])]
    found += [p["example"] for p in params if "example" in p]
    for response in op.get("responses", {}).values():
        found += [c["example"] for c in response.get("content", {}).values() if "example" in c]
    return found


@pytest.mark.parametrize(("method", "path", "op"), OPS, ids=IDS)
def test_operation_has_id_summary_description_and_example(
    method: str, path: str, op: dict[str, Any]
) -> None:
    assert op.get("operationId"), "no operationId"
    assert len(op.get("summary", "")) > 10, "no summary"
    assert len(op.get("description", "")) > 30, "no description"
    assert _examples(path, op), "no example"


def test_operation_ids_are_unique_and_the_table_has_no_stale_entries() -> None:
    ids = [op["operationId"] for _, _, op in OPS]
    assert len(ids) == len(set(ids))
    assert set(OPERATIONS) == {(m, p) for m, p, _ in OPS}


def test_every_operation_of_the_app_is_in_the_file() -> None:
    """The spec covers every /v1 route the app serves (the page and the docs aside)."""
    app = create_app({"TESTING": True})
    served = {
        (method.lower(), rule.rule.replace("<string:", "{").replace(">", "}"))
        for rule in app.url_map.iter_rules()
        if rule.rule.startswith("/v1/")
        for method in rule.methods or ()
        if method.lower() in METHODS
    }
    assert served <= {(m, p) for m, p, _ in OPS}


JSON_BODIES = [
    (m, p, c["example"], c["schema"])
    for m, p, op in OPS
    for media, c in op.get("requestBody", {}).get("content", {}).items()
    if media == "application/json" and "example" in c and "$ref" in c.get("schema", {})
]


@pytest.mark.parametrize(("method", "path", "example", "schema"), JSON_BODIES,
                         ids=[f"{m.upper()} {p}" for m, p, _, _ in JSON_BODIES])  # fmt: skip
def test_json_examples_match_their_schema(
    method: str, path: str, example: Any, schema: dict[str, Any]
) -> None:
    registry = Registry().with_resource("urn:spec", Resource(SPEC, specification=DRAFT4))
    validator = OAS30Validator({"$ref": "urn:spec" + schema["$ref"]}, registry=registry)
    validator.validate(example)
    if "workload" in example:  # the check would see a wrong example
        assert not validator.is_valid({**example, "workload": {"batch_size": "32"}})


@pytest.fixture(scope="module")
def keyed_app(tmp_path_factory: pytest.TempPathFactory) -> Flask:
    rows = tmp_path_factory.mktemp("rows") / "rows.jsonl"
    return create_app({"TESTING": True, "SUBMISSIONS_FILE": str(rows)})


@pytest.mark.parametrize(("method", "path"), sorted(SENT))
def test_cheap_examples_are_answered(keyed_app: Flask, method: str, path: str) -> None:
    example = OPERATIONS[(method, path)].body
    response = with_key(keyed_app.test_client()).open(path, method=method, json=example)
    assert response.status_code in (200, 201), response.get_json()
