"""Rules across a request's fields, told in the OpenAPI document as well as enforced.

A request names its model one way (model and workload, or a stored profile, or a stored
trace), and a workload's task decides which of its fields it takes. OpenAPI 3.0 says both
(``oneOf``, ``not``); :func:`document` lays them over the component schemas, made from the
tables the validators read (each request schema's ``SOURCES``,
:data:`profiles.workload.TASK_FIELDS`), so a client, a reader and a test generator know
what is refused before sending it.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any, ClassVar

from apispec import APISpec
from marshmallow import ValidationError, validates_schema

from profiles import workload


def _absent() -> dict[str, Any]:
    """A property that may not be there (a fresh object: the YAML repeats no anchors)."""
    return {"not": {}}


def _ways(sources: Sequence[Sequence[str]]) -> str:
    return ", or ".join(" and ".join(group) for group in sources)


class OneSource:
    """A request schema naming its model one way of ``SOURCES``: groups of fields given
    together (``("model", "workload")``), the first the usual one."""

    SOURCES: ClassVar[tuple[tuple[str, ...], ...]]

    @validates_schema
    def _one_source(self, data: dict[str, Any], **_: Any) -> None:
        named = [group for group in self.SOURCES if any(k in data for k in group)]
        if len(named) > 1:
            raise ValidationError(f"name the model one way: {_ways(self.SOURCES)}", named[1][0])
        group = named[0] if named else self.SOURCES[0]
        missing = [k for k in group if k not in data]
        if missing:
            others = [g for g in self.SOURCES if g != group]
            raise ValidationError(f"required (or give {_ways(others)} instead)", missing[0])


def one_source(sources: Sequence[Sequence[str]]) -> dict[str, Any]:
    """``oneOf`` the sources: each group's fields required, the other groups' absent."""
    names = [k for group in sources for k in group]
    return {
        "description": f"Name the model one way: {_ways(sources)}.",
        "oneOf": [
            {
                "required": list(group),
                "properties": {k: _absent() for k in names if k not in group},
            }
            for group in sources
        ],
    }


def workload_by_task() -> dict[str, Any]:
    """``oneOf`` the tasks, each with the fields it takes (fine-tuning twice: a full one
    without ``lora_rank``, a LoRA one naming its method)."""
    every = set().union(*workload.TASK_FIELDS.values())

    def properties(task: str, **more: dict[str, Any]) -> dict[str, Any]:
        found: dict[str, Any] = {"task": {"enum": [task]}}
        found |= {k: _absent() for k in sorted(every - set(workload.TASK_FIELDS[task]))}
        if task != "inference":
            found["precision"] = {"enum": list(workload.TRAINING_PRECISIONS)}
        return found | more

    variants: list[dict[str, Any]] = []
    for task, names in workload.TASK_FIELDS.items():
        if "lora_rank" not in names:
            variants.append({"title": task, "properties": properties(task)})
            continue
        full = [m for m in workload.METHODS if m not in workload.LORA_METHODS]
        lora = list(workload.LORA_METHODS)
        variants.append(
            {
                "title": f"{task}, {' or '.join(full)}",
                "properties": properties(task, method={"enum": full}, lora_rank=_absent()),
            }
        )
        variants.append(
            {
                "title": f"{task}, {' or '.join(lora)}",
                "required": ["method"],
                "properties": properties(task, method={"enum": lora}),
            }
        )
    fields = {task: ", ".join(names) for task, names in workload.TASK_FIELDS.items()}
    return {
        "description": "The fields a task takes: "
        + "; ".join(f"{task}: {names}" for task, names in fields.items())
        + ". lora_rank needs method lora or qlora; int8 and int4 are inference precisions; "
        "give dataset_samples or dataset_tokens, not both.",
        "oneOf": variants,
        "anyOf": [
            {"properties": {"dataset_samples": _absent()}},
            {"properties": {"dataset_tokens": _absent()}},
        ],
    }


def document(spec: APISpec, requests: Iterable[type[OneSource]]) -> None:
    """Lay the rules over the component schemas of ``spec``: the workload's by task, and
    each of ``requests`` its sources."""
    rules = {"Workload": workload_by_task()}
    for schema in requests:
        rules[schema.__name__.removesuffix("Schema")] = one_source(schema.SOURCES)
    components: dict[str, dict[str, Any]] = spec.components.schemas
    for name, rule in rules.items():
        if name not in components:
            raise LookupError(f"no component schema {name} in the OpenAPI document")
        components[name].update(rule)
