"""GPU kernel kinds: classification of kernel names by the rules in ``data/kernel_kinds.yaml``."""

from __future__ import annotations

import functools
import importlib.resources
import re
from dataclasses import dataclass

import yaml

KINDS = (
    "tensor_gemm",
    "simt_gemm",
    "convolution",
    "elementwise",
    "reduction",
    "communication",
    "memcpy_h2d",
    "memcpy_d2h",
    "memcpy_d2d",
    "memset",
    "other",
)
COMPUTE = frozenset(
    {"tensor_gemm", "simt_gemm", "convolution", "elementwise", "reduction", "other"}
)


@dataclass(frozen=True)
class Rule:
    value: str  # a kind or a precision
    pattern: re.Pattern[str]


MATRIX = frozenset({"tensor_gemm", "convolution"})


def _compile(entries: list[dict[str, object]], key: str) -> tuple[Rule, ...]:
    out = []
    for entry in entries:
        patterns = entry["patterns"]
        assert isinstance(patterns, list)
        joined = "|".join(f"(?:{p})" for p in patterns)
        out.append(Rule(str(entry[key]), re.compile(joined, re.IGNORECASE)))
    return tuple(out)


@functools.lru_cache(maxsize=1)
def rules() -> tuple[tuple[Rule, ...], tuple[Rule, ...]]:
    """(kind rules, precision rules) from ``data/kernel_kinds.yaml``."""
    text = (importlib.resources.files("profiles") / "data" / "kernel_kinds.yaml").read_text()
    data = yaml.safe_load(text)
    kinds = _compile(data["kinds"], "kind")
    unknown = {r.value for r in kinds} - set(KINDS)
    if unknown:
        raise ValueError(f"kernel_kinds.yaml: unknown kinds {sorted(unknown)}")
    return kinds, _compile(data["precisions"], "precision")


@functools.lru_cache(maxsize=65536)
def classify_kernel(name: str) -> tuple[str, str | None]:
    """(kind, precision) of a kernel by its name; precision only for matrix kernels."""
    kind_rules, precision_rules = rules()
    kind = next((r.value for r in kind_rules if r.pattern.search(name)), "other")
    if kind not in MATRIX:
        return kind, None
    precision = next((r.value for r in precision_rules if r.pattern.search(name)), None)
    if precision is None and kind == "tensor_gemm":
        precision = "16-bit"
    return kind, precision


def classify_copy(category: str, name: str) -> str:
    """The kind of a ``gpu_memcpy`` / ``gpu_memset`` event (direction from its name)."""
    if category == "gpu_memset":
        return "memset"
    upper = name.upper()
    if "HTOD" in upper:
        return "memcpy_h2d"
    if "DTOH" in upper:
        return "memcpy_d2h"
    return "memcpy_d2d"  # DtoD and peer-to-peer
