"""Resolving names given as query filters; an unknown name is a 422 with close matches."""

from __future__ import annotations

from knowledge import Knowledge
from service.errors import InvalidInput


def _unknown(field: str, what: str, name: str, close: list[str]) -> InvalidInput:
    hint = ", ".join(close) or "none"
    return InvalidInput(field, f"unknown {what} '{name}' (close matches: {hint})", "query")


def gpu_filter(knowledge: Knowledge, name: str, field: str = "gpu") -> str:
    """The GPU id for ``name``."""
    gpu_id = knowledge.resolve_gpu(name)
    if gpu_id is None:
        raise _unknown(field, "GPU", name, knowledge.gpu_index.suggest(name))
    return gpu_id


def workload_filter(knowledge: Knowledge, name: str, field: str = "model") -> set[str]:
    """Ids of the workloads ``name`` stands for (a model can have several)."""
    found = knowledge.workloads_matching(name)
    if not found:
        raise _unknown(field, "model or workload", name, knowledge.suggest_workloads(name))
    return found
