"""Resolving names given as query filters; an unknown name is a 422 with close matches."""

from __future__ import annotations

from knowledge import Knowledge
from service.errors import InvalidInput


def _unknown(
    field: str, what: str, name: str, close: list[str], location: str = "query"
) -> InvalidInput:
    hint = ", ".join(close) or "none"
    return InvalidInput(field, f"unknown {what} '{name}' (close matches: {hint})", location)


def gpu_filter(knowledge: Knowledge, name: str, field: str = "gpu", location: str = "query") -> str:
    """The GPU id for ``name`` (``location``: where the name came from, query or json)."""
    gpu_id = knowledge.resolve_gpu(name)
    if gpu_id is None:
        raise _unknown(field, "GPU", name, knowledge.gpu_index.suggest(name), location)
    return gpu_id


def workload_filter(knowledge: Knowledge, name: str, field: str = "model") -> set[str]:
    """Ids of the workloads ``name`` stands for (a model can have several)."""
    found = knowledge.workloads_matching(name)
    if not found:
        raise _unknown(field, "model or workload", name, knowledge.suggest_workloads(name))
    return found
