"""A step's counts at three values of one size (layers, batch), carried along their line.

Where every count of a step (FLOPs, bytes, operator calls, kernel launches, memory) grows by
the same amount per unit of a size, the counts at any value of that size follow from the
counts at two values; a third one that lies on the same line is the check. Exact rational
arithmetic keeps the carried counts what counting them would give.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import fields
from fractions import Fraction
from typing import Any, TypeVar

from profiles.counting import Totals
from profiles.step import Measured

K = TypeVar("K")


def _value(values: Sequence[Any], at: Sequence[int], to: int) -> Any:
    """A count (or :class:`Totals`) at ``to`` from its values at the sizes ``at``, where
    they lie on one line (None otherwise)."""
    if isinstance(values[0], Totals):
        out = {}
        for f in fields(Totals):
            carried = _value([getattr(t, f.name) for t in values], at, to)
            if carried is None:
                return None
            out[f.name] = carried
        return Totals(**out)
    exact = [Fraction(v) for v in values]
    slope = (exact[1] - exact[0]) / (at[1] - at[0])
    if any(v != exact[0] + slope * (x - at[0]) for v, x in zip(exact[2:], at[2:], strict=True)):
        return None
    found = exact[0] + slope * (to - at[0])
    if isinstance(values[0], int):
        return int(found) if found.denominator == 1 else None
    return float(found)


def _table(found: Sequence[Mapping[K, Any]], at: Sequence[int], to: int) -> dict[K, Any] | None:
    if any(t.keys() != found[0].keys() for t in found):
        return None
    out: dict[K, Any] = {}
    for key in found[0]:
        carried = _value([t[key] for t in found], at, to)
        if carried is None:
            return None
        out[key] = carried
    return out


def carried(found: Sequence[Measured], at: Sequence[int], to: int) -> Measured | None:
    """The step at size ``to`` from the steps counted at the sizes ``at`` (three, ascending),
    or None where one of its counts leaves their line, their notes differ, or the peak they
    show could move (:func:`peaks_stay`)."""
    if len(found) != 3 or len(at) != 3 or any(m.notes != found[0].notes for m in found):
        return None
    if not peaks_stay(found[0], found[1]):
        return None
    totals = _table([m.totals for m in found], at, to)
    by_op = _table([m.by_op for m in found], at, to)
    launches = _table([m.launches for m in found], at, to)
    counts = _table([_counts(m) for m in found], at, to)
    if totals is None or by_op is None or launches is None or counts is None:
        return None
    return Measured(
        totals=totals, by_op=by_op, launches=launches, notes=list(found[0].notes), **counts
    )


def _counts(measured: Measured) -> dict[str, Any]:
    """The step's single figures (memory), by field."""
    skip = ("totals", "by_op", "launches", "notes")
    return {f.name: getattr(measured, f.name) for f in fields(Measured) if f.name not in skip}


def peaks_stay(smaller: Measured, larger: Measured) -> bool:
    """Whether the peaks the steps at two values of a size show stay the peaks at every
    larger value. Live memory at any moment of a step is what is held in a few places (the
    forward's end, a layer of the backward, its end), each growing along the size by its
    activations, gradients or KV cache, or by nothing: the peak is the largest of them, and
    the one that peaks stays the largest only if it grows at least as fast as any other
    could (a full step's gradients outgrowing its activations move the peak to the
    backward's end as layers are added)."""
    a = larger.activations_bytes - smaller.activations_bytes
    g = larger.gradient_bytes - smaller.gradient_bytes
    kv = larger.kv_cache_bytes - smaller.kv_cache_bytes
    held = a + larger.temporary_peak_bytes - smaller.temporary_peak_bytes + kv  # no gradients
    freed = larger.freed_before_peak_bytes - smaller.freed_before_peak_bytes
    with_gradients = held + g - freed
    return held >= max(a, kv) and with_gradients >= max(a, g, kv)
