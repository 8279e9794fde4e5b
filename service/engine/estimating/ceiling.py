"""How fast the input pipeline can feed a GPU: a ceiling on its samples a second."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class InputCeiling:
    """The most samples a second the input can give each GPU, and where that comes from."""

    samples_per_s_per_gpu: float
    source: str  # "request", "trace" or "benchmarks"
    note: str
