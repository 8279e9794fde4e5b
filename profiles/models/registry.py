"""Builders for the families outside :data:`profiles.build.BUILDERS`: ``unet`` and ``layers``.

:func:`resolve_special` is what :func:`profiles.description.resolve_family` calls for
``family: unet``, ``family: layers`` and a bare ``{input_shape, layers: [...]}``; it
validates the description (errors name ``model.<field>``) and checks the sane limits.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch

from profiles.errors import InvalidDescription, LimitExceeded
from profiles.models.layers import build_layers, resolve_layers
from profiles.models.runnable import Runnable
from profiles.models.unet import UNetSpec, build_unet, unet_spec
from profiles.resolved import MAX_PARAMETERS, ResolvedModel

SPECIAL_BUILDERS: dict[str, Callable[[Any, torch.dtype], Runnable]] = {
    "unet": build_unet,
    "layers": build_layers,
}


def unet_parameters(spec: UNetSpec) -> float:
    """Upper estimate of a U-Net's parameters from its shape (for the limit check)."""
    temb = 4 * spec.block_out_channels[0]
    per_level = 0.0
    for c in spec.block_out_channels:
        resnet = 9 * 2 * c * c + 9 * c * c + 2 * c * c + temb * c
        transformer = 16 * c * c + 2 * c * spec.cross_attention_dim
        per_level += (2 * spec.layers_per_block + 3) * (resnet + transformer)
    return per_level


def resolve_special(data: dict[str, Any]) -> ResolvedModel:
    """A ``unet`` or layer-list description → :class:`ResolvedModel`."""
    family = data.get("family")
    if family == "unet":
        spec = unet_spec(data)
        total = unet_parameters(spec)
        if total > MAX_PARAMETERS:
            raise LimitExceeded("model", total, MAX_PARAMETERS, "parameter count")
        return ResolvedModel("unet", spec, description=data)
    if family in (None, "layers"):
        return resolve_layers(data)
    raise InvalidDescription("model.family", "not a special family (unet, layers)", family)
