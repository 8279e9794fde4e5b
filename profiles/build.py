"""Build a :class:`~profiles.models.runnable.Runnable` for a resolved model, on the meta device.

Weights are never initialised (on the meta device there is nothing to initialise, and
the init functions would only cost time); a deadline stops the build of a description
that is within the limits but still too large to build in time.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable, Iterator
from typing import Any

import torch
from torch import nn

from profiles import interrupt
from profiles.errors import ProfileTooSlow
from profiles.models import vision
from profiles.models.blocks import TransformerModel
from profiles.models.runnable import Runnable, TransformerRunnable
from profiles.resolved import ResolvedModel

_INIT_FUNCTIONS = (
    "kaiming_uniform_",
    "kaiming_normal_",
    "uniform_",
    "normal_",
    "zeros_",
    "ones_",
    "trunc_normal_",
    "xavier_uniform_",
    "xavier_normal_",
    "constant_",
)


@contextlib.contextmanager
def no_init() -> Iterator[None]:
    """Make ``torch.nn.init`` functions no-ops while modules are constructed."""
    saved = {name: getattr(nn.init, name) for name in _INIT_FUNCTIONS}
    try:
        for name in _INIT_FUNCTIONS:
            setattr(nn.init, name, lambda tensor, *a, **k: tensor)
        yield
    finally:
        for name, fn in saved.items():
            setattr(nn.init, name, fn)


class _Deadline:
    def __init__(self, deadline: float | None, limit_s: float) -> None:
        self.deadline, self.limit_s = deadline, limit_s

    def check(self) -> None:
        if self.deadline is not None and (
            time.monotonic() > self.deadline or interrupt.requested()
        ):
            raise ProfileTooSlow(self.limit_s)


Builder = Callable[[Any, torch.dtype], Runnable]


def _vision(cls: type[nn.Module]) -> Builder:
    def build(spec: Any, dtype: torch.dtype) -> Runnable:
        module = cls(spec, dtype)
        size = getattr(spec, "image_size", 224)
        return Runnable(module, image_size=size, channels=getattr(spec, "in_channels", 3))

    return build


BUILDERS: dict[str, Builder] = {
    "transformer": lambda spec, dtype: TransformerRunnable(TransformerModel(spec, dtype)),
    "resnet": _vision(vision.ResNet),
    "vit": _vision(vision.ViT),
    "efficientnet": _vision(vision.EfficientNet),
    "cnn": _vision(vision.Cnn),
}


def build(
    model: ResolvedModel, dtype: torch.dtype, deadline: float | None = None, limit_s: float = 0.0
) -> Runnable:
    """The model on the meta device, with parameters in ``dtype``."""
    if model.family not in BUILDERS:
        from profiles.models.registry import SPECIAL_BUILDERS

        builder = SPECIAL_BUILDERS[model.family]
    else:
        builder = BUILDERS[model.family]
    guard = _Deadline(deadline, limit_s)
    hook = nn.modules.module.register_module_module_registration_hook(lambda *_: guard.check())
    try:
        with no_init():
            return builder(model.spec, dtype)
    finally:
        hook.remove()
