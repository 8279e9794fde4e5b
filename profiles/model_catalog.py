"""The named model catalog: ``profiles/data/catalog*.yaml``, each entry a description.

Every entry is validated (its description resolved) when the catalog is loaded, so a bad
entry fails at start-up, not in a request. Names are matched after folding case and
punctuation and dropping an ``org/`` prefix: ``meta-llama/Llama-2-7b-hf`` finds
``llama-2-7b`` through its aliases. :meth:`Catalog.search` finds entries by the words of a
query (``"llama 3.2"``, ``"whisper"``), folded the same way.
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

from profiles.description import resolve_family
from profiles.errors import ProfileError, UnknownModel
from profiles.resolved import ResolvedModel


def fold(name: str) -> str:
    """Case- and punctuation-insensitive key; an ``org/`` prefix is dropped."""
    return _squash(name.rsplit("/", 1)[-1])


def _squash(text: str) -> str:
    """Case- and punctuation-insensitive, keeping an ``org/`` prefix's letters."""
    return re.sub(r"[^a-z0-9.]", "", text.lower())


def _searchable(text: str) -> tuple[str, frozenset[int]]:
    """``text`` squashed, and where its words start in that: after dropped punctuation or
    spaces, at a lower-to-upper case change (``TinyLlama``) and where letters meet digits
    (``resnet50``, with ``.`` on the digits' side: ``v1.5``)."""
    kept: list[str] = []
    starts = {0}
    gap, previous = False, ""
    for char in text:
        low = char.lower()
        if not re.fullmatch(r"[a-z0-9.]", low):
            gap = True
            continue
        if kept and (
            gap or (previous.islower() and char.isupper()) or low.isalpha() != kept[-1].isalpha()
        ):
            starts.add(len(kept))
        kept.append(low)
        gap, previous = False, char
    return "".join(kept), frozenset(starts)


def _occurs(word: str, text: str, starts: frozenset[int]) -> bool:
    """``word`` begins a word of ``text``, or (three characters or more) occurs anywhere."""
    return any(text.startswith(word, i) for i in starts) or (len(word) >= 3 and word in text)


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
        # per entry: the folded name and aliases (what an exact or prefix match compares),
        # and every text a query word may occur in: those, org-prefixed aliases whole, and
        # the family; each with where its words start
        self._names: dict[str, frozenset[str]] = {}
        self._texts: dict[str, tuple[tuple[str, frozenset[int]], ...]] = {}
        for entry in entries:
            spellings = (entry.name, *entry.aliases)
            self._names[entry.name] = frozenset(fold(s) for s in spellings)
            texts = {_searchable(s.rsplit("/", 1)[-1]) for s in spellings}
            texts |= {_searchable(s) for s in entry.aliases if "/" in s}
            texts.add(_searchable(entry.model.family))
            self._texts[entry.name] = tuple(sorted(texts, key=lambda t: t[0]))

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

    def search(self, text: str, limit: int | None = None) -> list[CatalogEntry]:
        """Entries where every word of ``text`` occurs in the name, an alias or the family.

        Case and punctuation are folded as for :meth:`get` (``"Qwen2.5 7b"`` finds
        ``qwen2.5-7b``; a word ``meta-llama/Llama-3.2-1B`` is matched without its ``org/``).
        A word of one or two characters must begin a word there (``t5`` finds ``flan-t5-xl``,
        not ``resnet50-v1.5``); a longer one may occur anywhere (``bert`` finds ``roberta``).
        Ranked: the entries whose name or an alias is the whole query, then those whose name
        or an alias starts with it, then the rest; by name within each. A query without
        words returns every entry by name. ``limit``: at most this many.
        """
        if limit is not None and limit < 0:
            raise ValueError(f"limit must be at least 0, got {limit}")
        words = [fold(w) or _squash(w) for w in re.split(r"[\s,;]+", text)]
        words = [w for w in words if w]
        whole = fold(text.strip()) or "".join(words)

        def rank(entry: CatalogEntry) -> tuple[int, str]:
            names = self._names[entry.name]
            if whole in names:
                return 0, entry.name
            if whole and any(n.startswith(whole) for n in names):
                return 1, entry.name
            return 2, entry.name

        found = [
            e
            for e in self.entries.values()
            if all(any(_occurs(w, *s) for s in self._texts[e.name]) for w in words)
        ]
        found.sort(key=rank)
        return found if limit is None else found[:limit]

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
