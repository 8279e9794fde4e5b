"""The named model catalog: ``profiles/data/catalog*.yaml``, each entry a description.

Every entry is validated (its description resolved) when the catalog is loaded, so a bad
entry fails at start-up, not in a request. Names are matched after folding case and
punctuation and dropping an ``org/`` prefix: ``meta-llama/Llama-2-7b-hf`` finds
``llama-2-7b`` through its aliases.
"""

from __future__ import annotations

import difflib
import functools
import importlib.resources
import re
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import yaml

from profiles.description import ResolvedModel, resolve_family
from profiles.errors import ProfileError, UnknownModel


def fold(name: str) -> str:
    """Case- and punctuation-insensitive key; an ``org/`` prefix is dropped."""
    return re.sub(r"[^a-z0-9.]", "", name.rsplit("/", 1)[-1].lower())


@dataclass(frozen=True)
class CatalogEntry:
    name: str
    aliases: tuple[str, ...]
    description: dict[str, Any]
    parameters: int | None
    source: str
    as_of: str
    notes: str | None
    model: ResolvedModel

    def summary(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "aliases": list(self.aliases),
            "family": self.model.family,
            "parameters": self.parameters,
            "source": self.source,
            "as_of": self.as_of,
            "notes": self.notes,
        }


class CatalogError(ProfileError):
    """An invalid catalog file (names the file and the entry)."""


_FIELDS = {"name", "aliases", "description", "parameters", "source", "as_of", "notes"}


class Catalog:
    def __init__(self, entries: list[CatalogEntry]) -> None:
        self.entries = {e.name: e for e in entries}
        self._index: dict[str, str] = {}
        for entry in entries:
            for alias in (entry.name, *entry.aliases):
                owner = self._index.setdefault(fold(alias), entry.name)
                if owner != entry.name:
                    raise CatalogError(f"alias '{alias}' names both {owner} and {entry.name}")

    @classmethod
    def load(cls, root: Path | None = None) -> Catalog:
        """The catalog in ``root`` (default: the package's), validated; memoised by content."""
        folder = root or Path(str(importlib.resources.files("profiles") / "data"))
        texts = tuple(
            (path.name, path.read_text(encoding="utf-8"))
            for path in sorted(folder.glob("catalog*.yaml"))
        )
        return _load(texts)

    def get(self, name: str) -> CatalogEntry:
        found = self._index.get(fold(name))
        if found is None:
            raise UnknownModel(name, self.suggest(name))
        return self.entries[found]

    def resolve(self, name: str) -> ResolvedModel:
        return self.get(name).model

    def suggest(self, name: str, limit: int = 5) -> list[str]:
        key = fold(name)
        close = difflib.get_close_matches(key, list(self._index), n=limit * 3, cutoff=0.5)
        names = [self._index[k] for k in close]
        names += [n for k, n in self._index.items() if key and key in k]
        return list(dict.fromkeys(names))[:limit]


@functools.lru_cache(maxsize=4)
def _load(texts: tuple[tuple[str, str], ...]) -> Catalog:
    entries = []
    for name, text in texts:
        for i, raw in enumerate(yaml.safe_load(text) or []):
            entries.append(_entry(raw, f"{name}, entry {i + 1}"))
    return Catalog(entries)


def _entry(raw: Any, where: str) -> CatalogEntry:
    if not isinstance(raw, dict) or set(raw) - _FIELDS or not {"name", "description"} <= set(raw):
        raise CatalogError(f"{where}: expected the fields {sorted(_FIELDS)}")
    try:
        model = resolve_family(raw["description"])
    except ProfileError as exc:
        raise CatalogError(f"{where} ({raw['name']}): {exc}") from exc
    model = replace(model, name=raw["name"], source=raw.get("source"), notes=raw.get("notes"))
    return CatalogEntry(
        name=raw["name"],
        aliases=tuple(raw.get("aliases", ())),
        description=raw["description"],
        parameters=raw.get("parameters"),
        source=raw.get("source", ""),
        as_of=str(raw.get("as_of", "")),
        notes=raw.get("notes"),
        model=model,
    )
