"""A deep stack of identical layers counted at one, two and three layers.

Every layer of a decoder-only or encoder-only transformer runs the same operators on tensors
of the same shapes, so each count of a step (FLOPs, bytes, operator calls, kernel launches,
activations, gradients, optimizer state, KV cache) grows by the same amount with each layer
added. The counter therefore runs the model with 1, 2 and 3 layers and takes the full depth
as ``m1 + (L - 1) (m2 - m1)``; it does so only where the third count adds exactly what the
second added (anything that does not grow by whole layers, such as a memory peak that moves
from one place to another, shows there), and counts the whole model otherwise.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import fields, replace
from typing import Any, TypeVar

from profiles.counting import Totals
from profiles.description import ResolvedModel
from profiles.step import Measured

COUNTED = (1, 2, 3)  # layers counted
DEEP = 6  # fewer layers than this are counted whole: the three counts would cost as much

K = TypeVar("K")


def uniform_layers(model: ResolvedModel) -> int | None:
    """The depth of ``model`` where it is one stack of identical layers worth counting by
    depth, else None."""
    spec = model.spec
    if model.family != "transformer" or spec.arch not in ("decoder", "encoder"):
        return None
    if spec.decoder_layers or spec.layers < DEEP:
        return None
    return int(spec.layers)


def shallow(model: ResolvedModel, layers: int) -> ResolvedModel:
    """``model`` with ``layers`` layers, all else the same."""
    return replace(model, spec=replace(model.spec, layers=layers))


def _grown(values: Sequence[Any], layers: int) -> Any:
    """A count (or :class:`Totals`) at ``layers`` layers from its values at 1, 2 and 3, where
    the second and third layers add the same (None otherwise)."""
    if isinstance(values[0], Totals):
        out = {}
        for f in fields(Totals):
            grown = _grown([getattr(t, f.name) for t in values], layers)
            if grown is None:
                return None
            out[f.name] = grown
        return Totals(**out)
    a, b, c = values
    return a + (layers - 1) * (b - a) if c - b == b - a else None


def _table(found: Sequence[Mapping[K, Any]], layers: int) -> dict[K, Any] | None:
    if any(t.keys() != found[0].keys() for t in found):
        return None
    out: dict[K, Any] = {}
    for key in found[0]:
        grown = _grown([t[key] for t in found], layers)
        if grown is None:
            return None
        out[key] = grown
    return out


def deeper(found: Sequence[Measured], layers: int) -> Measured | None:
    """The step of ``layers`` layers from the steps of 1, 2 and 3 (``found``), or None where
    they do not grow by whole layers or the peak could move (:func:`may_deepen`: the third
    layer adding what the second did, what holds for 1 to 2 holds from there on)."""
    if len(found) != len(COUNTED) or any(m.notes != found[0].notes for m in found):
        return None
    if not may_deepen(found[0], found[1]):
        return None
    totals = _table([m.totals for m in found], layers)
    by_op = _table([m.by_op for m in found], layers)
    launches = _table([m.launches for m in found], layers)
    counts = _table([_counts(m) for m in found], layers)
    if totals is None or by_op is None or launches is None or counts is None:
        return None
    return Measured(
        totals=totals, by_op=by_op, launches=launches, notes=list(found[0].notes), **counts
    )


def _counts(measured: Measured) -> dict[str, Any]:
    """The step's single figures (memory), by field."""
    skip = ("totals", "by_op", "launches", "notes")
    return {f.name: getattr(measured, f.name) for f in fields(Measured) if f.name not in skip}


def may_deepen(one: Measured, two: Measured) -> bool:
    """Whether the peaks the steps of one and two layers show stay the peaks at any depth
    (the third layer is not counted otherwise). Live memory at any moment of a step is what
    is held in a few places (the forward's end, a layer of the backward, its end), each
    growing by a whole layer's activations, gradients or KV cache per layer, or by nothing:
    the peak is the largest of them, and one that peaks at 1-2 layers stays the largest only
    if it grows at least as fast as any other could (a full step's gradients outgrowing its
    activations move the peak to the backward's end as layers are added: such a step is
    counted whole)."""
    a = two.activations_bytes - one.activations_bytes
    g = two.gradient_bytes - one.gradient_bytes
    kv = two.kv_cache_bytes - one.kv_cache_bytes
    held = a + two.temporary_peak_bytes - one.temporary_peak_bytes + kv  # without gradients
    with_gradients = held + g - (two.freed_before_peak_bytes - one.freed_before_peak_bytes)
    return held >= max(a, kv) and with_gradients >= max(a, g, kv)
