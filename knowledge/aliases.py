"""Name normalisation and the alias index that maps every known name of a thing to its id."""

from __future__ import annotations

import difflib
import re
from collections.abc import Iterable

_VENDOR_WORDS = frozenset({"nvidia", "amd", "intel", "tesla", "geforce", "quadro"})
_TOKEN = re.compile(r"[a-z0-9.]+")


def normalise_name(name: str) -> str:
    """Fold a product name so that spelling variants compare equal.

    Lowercase, drop leading vendor words, keep only ``[a-z0-9.]``:
    ``"NVIDIA GeForce RTX 4090"``, ``"RTX 4090"`` and ``"rtx4090"`` all give ``"rtx4090"``.
    """
    tokens = _TOKEN.findall(name.lower())
    while len(tokens) > 1 and tokens[0] in _VENDOR_WORDS:
        tokens.pop(0)
    return "".join(tokens)


class AliasConflict(ValueError):
    """Two ids claim the same normalised name."""

    def __init__(self, name: str, first: str, second: str) -> None:
        self.name, self.first, self.second = name, first, second
        super().__init__(f"alias '{name}' names both '{first}' and '{second}'")


class AliasIndex:
    """Resolve ids and aliases (after :func:`normalise_name`) to canonical ids."""

    def __init__(self) -> None:
        self._by_name: dict[str, str] = {}
        self._ids: list[str] = []

    def add(self, ident: str, names: Iterable[str]) -> None:
        """Register ``ident`` under itself and every name; raise :class:`AliasConflict`."""
        self._ids.append(ident)
        for name in (ident, *names):
            key = normalise_name(name)
            owner = self._by_name.setdefault(key, ident)
            if owner != ident:
                raise AliasConflict(name, owner, ident)

    def resolve(self, name: str) -> str | None:
        """The canonical id for ``name``, or None."""
        return self._by_name.get(normalise_name(name))

    def suggest(self, name: str, limit: int = 5) -> list[str]:
        """Ids whose names are close to ``name`` (for "did you mean" messages)."""
        key = normalise_name(name)
        names = difflib.get_close_matches(key, list(self._by_name), n=limit * 3, cutoff=0.6)
        found = [self._by_name[n] for n in names]
        found += [i for i in self._ids if key and key in normalise_name(i)]
        return list(dict.fromkeys(found))[:limit]
