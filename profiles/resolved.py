"""A model description resolved into something buildable, and the limits every description
is held to (the description, the layer list and the special families check them)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

MAX_PARAMETERS = 2e13
MAX_LAYERS = 10_000
MAX_WIDTH = 1_000_000
MAX_VOCAB = 10_000_000


@dataclass(frozen=True)
class ResolvedModel:
    """A buildable model: the family, its spec, and where it came from."""

    family: str
    spec: Any
    name: str | None = None
    source: str | None = None
    notes: str | None = None
    description: dict[str, Any] = field(default_factory=dict)
