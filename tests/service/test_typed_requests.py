"""Every JSON body the API takes loads into a typed request object (a dataclass the engine
or the feature reads by field), not a dict: each ``@blp.arguments`` schema of a body has a
``post_load`` that makes one, and a real body comes out as that dataclass."""

from __future__ import annotations

import ast
import dataclasses
import importlib
from pathlib import Path
from typing import Any

import pytest

API = Path(__file__).resolve().parents[2] / "service" / "api"


def _body_schemas() -> list[tuple[str, str]]:
    """(module, schema class) of every ``blp.arguments`` whose location is the JSON body."""
    found = []
    for path in sorted(API.glob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if not (isinstance(node, ast.Call) and ast.unparse(node.func) == "blp.arguments"):
                continue
            where = {k.arg: ast.unparse(k.value) for k in node.keywords}.get("location", "'json'")
            if where.strip("'\"") == "json" and isinstance(node.args[0], ast.Name):
                found.append((f"service.api.{path.stem}", node.args[0].id))
    return found


def _post_load(cls: type) -> bool:
    hooks = (getattr(getattr(cls, n, None), "__marshmallow_hook__", None) for n in dir(cls))
    return any(h and any("post_load" in str(tag) for tag in h) for h in hooks)


def test_every_body_schema_is_found() -> None:
    assert len(_body_schemas()) >= 9, _body_schemas()


@pytest.mark.parametrize(("module", "name"), _body_schemas())
def test_a_body_loads_into_a_typed_request(module: str, name: str) -> None:
    cls = getattr(importlib.import_module(module), name)
    assert _post_load(cls), f"{name} loads a dict: give it a post_load making a dataclass"


BODIES: dict[str, Any] = {
    "EstimateRequestSchema": {"model": {"name": "gpt2"}, "gpu": "h100-sxm-80gb",
                              "workload": {"task": "training", "batch_size": 2, "seq_len": 128}},
    "PlanRequestSchema": {"profile_id": "p", "gpu": "h100-sxm-80gb", "interconnect": {}},
    "ProjectionRequestSchema": {"gpus": ["h100-sxm-80gb"]},
    "AskRequestSchema": {"question": "fine-tune llama 3 8b"},
    "RetrainRequestSchema": {},
}  # fmt: skip


@pytest.mark.parametrize("name", sorted(BODIES))
def test_the_engine_gets_fields_not_a_dict(name: str) -> None:
    module = next(m for m, n in _body_schemas() if n == name)
    loaded = getattr(importlib.import_module(module), name)().load(BODIES[name])
    assert dataclasses.is_dataclass(loaded), type(loaded)
    assert not isinstance(loaded, type)
    if name == "PlanRequestSchema":
        assert dataclasses.is_dataclass(loaded.interconnect)
