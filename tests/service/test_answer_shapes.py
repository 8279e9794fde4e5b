"""openapi.yaml says what every answer holds: no free-form object in an answer whose shape
the code knows. Each free-form object left is listed with its reason; the list can only
shrink (a new one fails, and so does an entry that has been typed since)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

SPEC = yaml.safe_load(
    (Path(__file__).resolve().parents[2] / "openapi.yaml").read_text(encoding="utf-8")
)
OPEN = "the caller's own input, echoed as sent"
ALLOWED = {
    "AskAnswer.request": OPEN,
    "AskAnswer.understood": OPEN,
    "Recommendation.request": OPEN,
    "Trace.options": OPEN,
    "StoredRow.row": OPEN,
    "ModelDetail.description": "a model's published configuration, as its authors wrote it",
    "Job.result": "what the job made: a trace record or a retrain's summary, by the job's kind",
    "Benchmark.details": "the source table's own columns, which differ by suite",
    "TransformerSpec.extra": OPEN,
    "LayerListSpec.layers[]": "the caller's layers, defaults filled in: keys by layer type",
    "TraceAnalysis.distributed": "the trace's own distributedInfo, as the PyTorch that "
    "recorded it wrote it (its keys change between versions)",
}  # fmt: skip


def _refs(value: Any, out: set[str]) -> None:
    if isinstance(value, dict):
        if "$ref" in value:
            out.add(value["$ref"].rsplit("/", 1)[-1])
        for v in value.values():
            _refs(v, out)
    elif isinstance(value, list):
        for v in value:
            _refs(v, out)


def _answer_schemas() -> set[str]:
    """Every schema an answer reaches (the problems of errors aside)."""
    schemas = SPEC["components"]["schemas"]
    todo: set[str] = set()
    for item in SPEC["paths"].values():
        for op in item.values():
            if isinstance(op, dict):
                _refs(op.get("responses", {}), todo)
    seen: set[str] = set()
    while todo:
        name = todo.pop()
        if name in seen or name not in schemas:
            continue
        seen.add(name)
        _refs(schemas[name], todo)
    return {n for n in seen if not n.endswith("Problem")}


def _free(name: str, schema: dict[str, Any], path: str = "") -> list[str]:
    """The objects under ``schema`` that declare neither properties nor a value type."""
    out = []
    typed_map = isinstance(schema.get("additionalProperties"), dict) and bool(
        schema["additionalProperties"]
    )
    if schema.get("type") == "object" and "properties" not in schema and not typed_map:
        out.append(f"{name}.{path}")
    for key, value in schema.get("properties", {}).items():
        out += _free(name, value, f"{path}.{key}" if path else key)
    if isinstance(schema.get("items"), dict):
        out += _free(name, schema["items"], f"{path}[]")
    return out


def test_every_free_form_object_in_an_answer_is_listed_with_its_reason() -> None:
    schemas = SPEC["components"]["schemas"]
    found = {f for name in _answer_schemas() for f in _free(name, schemas[name])}
    assert sorted(found - set(ALLOWED)) == [], "an answer's shape is not described"
    assert sorted(set(ALLOWED) - found) == [], "typed since: take it off the list"
