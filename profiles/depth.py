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

from collections.abc import Sequence
from dataclasses import replace

from profiles.line import carried
from profiles.resolved import ResolvedModel
from profiles.step import Measured

COUNTED = (1, 2, 3)  # layers counted
DEEP = 6  # fewer layers than this are counted whole: the three counts would cost as much
# layer-experts counted past which a count is long work: each expert's operators are run
# one by one (2026-12-07, a loaded 2-core machine, 24 layers counted by depth: 8 experts
# 0.95 s, 64 experts 6.4 s, 256 experts 17 s, 1,000 past 57 s; dense Llama 3 8B 0.42 s)
LONG_UNITS = 100


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


def deeper(found: Sequence[Measured], layers: int) -> Measured | None:
    """The step of ``layers`` layers from the steps of 1, 2 and 3 (``found``), or None where
    they do not grow by whole layers or the peak could move (:func:`profiles.line.carried`:
    the third layer adding what the second did, what holds for 1 to 2 holds from there on)."""
    if len(found) != len(COUNTED):
        return None
    return carried(found, COUNTED, layers)


def counted_units(model: ResolvedModel) -> int:
    """What counting a step of ``model`` costs, in layers run times the experts each
    holds (plus one: the rest of the layer): what a transformer's count time grows with
    (the counter sees every expert's operators on the meta device); 0 for other families,
    whose counts take about a second at most."""
    if model.family != "transformer":
        return 0
    spec = model.spec
    layers = sum(COUNTED) if uniform_layers(model) is not None else int(spec.layers)
    if spec.arch == "encoder-decoder":
        layers += int(spec.n_decoder_layers)
    return layers * (1 + int(getattr(spec, "moe_experts", 0) or 0))


def expected_long(model: ResolvedModel) -> bool:
    """Whether counting ``model`` is known to be long work (more than about a second): the
    compute pool keeps it off the process that light work needs."""
    return counted_units(model) > LONG_UNITS
