"""A layer-list DSL for models no family covers, built on the meta device.

A description gives the per-sample ``input_shape`` ([C, H, W], [C, L], [C, D, H, W],
[T, F] or [L]), whether the input is ``float`` or ``tokens`` (integer ids for a first
``embedding``), and ``layers``: a list of ``{"type": ..., ...}`` objects (types and their
fields in :mod:`profiles.models.layer_schema`). Channels and features are never given:
each layer takes them from the shape that reaches it.

Conventions: convolutions and pools read ``[C, *spatial]``; ``linear``, the norms over
features, ``attention``, ``lstm`` and ``gru`` read the last dimension (``[L, D]`` / ``[T, F]``);
``transpose`` and ``reshape`` move between the two. ``padding: same`` pads
``dilation * (kernel - 1) // 2`` on each side (size-preserving at stride 1 for odd kernels).
``group`` runs a nested list in place (``frozen: true``: its weights are not trained),
``residual`` adds its body (or ``shortcut``) to its
input, ``skip_concat`` joins input and body along ``dim``, ``repeat`` stacks ``times``
copies with separate weights, ``branch`` and ``heads`` compute side outputs. ``roi_align``
turns each sample into ``rois`` samples.

The list is built and shape-checked when it is resolved: each layer is charged its
parameters (the 2e13 limit is checked before the layer is constructed) and run on a
batch-of-one meta tensor, so a shape error names the layer, the shape that reached it
and what it expects. Training loss: the sum over the final output and every side output
of ``output.float().mean()``, a stand-in for the real objective, whose own cost (a
reduction over the outputs) is small beside the layers'.
"""

from __future__ import annotations

import functools
import json
from dataclasses import asdict, dataclass
from typing import Any

import torch
from marshmallow import fields, validate
from torch import nn

from profiles.errors import InvalidDescription, LimitExceeded
from profiles.models import layer_modules as lm
from profiles.models.layer_schema import CONTAINERS, check_layer_count, load_layers
from profiles.models.layer_shapes import expect, leaf_module, leaf_parameters, shape_text
from profiles.models.runnable import Runnable
from profiles.models.spec_fields import Strict, load_fields
from profiles.models.transformer import StepContext
from profiles.resolved import MAX_LAYERS, MAX_PARAMETERS, MAX_WIDTH, ResolvedModel
from profiles.workload import Workload

META = torch.device("meta")
Shape = tuple[int, ...]
# leaves whose output has their input's shape (expect() checks all they can refuse)
SHAPE_PRESERVING = frozenset(("batchnorm", "frozen_batchnorm", "layernorm", "rmsnorm",
                              "groupnorm", "relu", "gelu", "silu", "tanh", "sigmoid",
                              "softmax", "leaky_relu", "dropout"))  # fmt: skip


@dataclass(frozen=True)
class LayerListSpec:
    input_shape: tuple[int, ...]
    input: str  # float | tokens
    layers: tuple[dict[str, Any], ...]


class LayerListFields(Strict):
    family = fields.String(validate=validate.Equal("layers"))
    input_shape = fields.List(
        fields.Integer(strict=True, validate=validate.Range(1, MAX_WIDTH)),
        required=True,
        validate=validate.Length(1, 4),
    )
    input = fields.String(load_default="float", validate=validate.OneOf(["float", "tokens"]))
    layers = fields.List(fields.Raw(), required=True, validate=validate.Length(min=1))


def layer_list_spec(data: dict[str, Any]) -> LayerListSpec:
    """Validate a layer-list description and shape-check it (errors name the field)."""
    loaded = load_fields(LayerListFields(), data)
    if loaded["input"] == "tokens" and len(loaded["input_shape"]) != 1:
        raise InvalidDescription(
            "model.input_shape", "token input is one sequence: [L]", loaded["input_shape"]
        )
    layers = load_layers(loaded["layers"])
    check_layer_count(layers, MAX_LAYERS)
    spec = LayerListSpec(tuple(loaded["input_shape"]), loaded["input"], layers)
    if _checked_parameters(json.dumps(asdict(spec), sort_keys=True)) == 0:
        raise InvalidDescription("model.layers", "no layer has weights: nothing to train")
    return spec


@functools.lru_cache(maxsize=512)
def _checked_parameters(canonical: str) -> int:
    """Build (so shape-check) a spec given as canonical JSON; its parameter count.

    Memoized: the catalog resolves the same lists each time an app is created, and the
    check is a pure function of the description (failures are not cached).
    """
    data = json.loads(canonical)
    spec = LayerListSpec(tuple(data["input_shape"]), data["input"], _tuples(data["layers"]))
    return parameters_of(spec)


def _tuples(layers: list[dict[str, Any]]) -> tuple[dict[str, Any], ...]:
    return tuple(
        {
            k: _tuples(v) if k in ("layers", "shortcut") and isinstance(v, list) else v
            for k, v in layer.items()
        }
        for layer in layers
    )


def resolve_layers(data: dict[str, Any]) -> ResolvedModel:
    return ResolvedModel("layers", layer_list_spec(data), description=data)


class _Builder:
    """Builds a list layer by layer, following the shape and charging parameters."""

    def __init__(self, dtype: torch.dtype) -> None:
        self.f: dict[str, Any] = {"device": META, "dtype": dtype}
        self.parameters = 0
        self.taps: dict[str, Shape] = {}

    def sequence(
        self, layers: tuple[dict[str, Any], ...], shape: Shape, tokens: bool, path: str
    ) -> tuple[lm.Sequence, Shape]:
        modules = []
        for i, layer in enumerate(layers):
            module, shape = self.layer(layer, shape, tokens and i == 0, f"{path}[{i}]")
            modules.append(module)
        return lm.Sequence(modules), shape

    def layer(
        self, layer: dict[str, Any], shape: Shape, tokens: bool, where: str
    ) -> tuple[nn.Module, Shape]:
        kind = layer["type"]
        if tokens and kind != "embedding":
            raise InvalidDescription(
                where,
                f"{kind} gets token ids: with input: tokens the list starts with an embedding",
            )
        if kind == "embedding" and not tokens:
            raise InvalidDescription(
                where, "an embedding takes token ids: only as the first layer, with input: tokens"
            )
        if kind in CONTAINERS:
            result: tuple[nn.Module, Shape] = getattr(self, f"_{kind}")(layer, shape, where)
            return result
        expect(layer, shape, where)
        self.charge(leaf_parameters(layer, shape))
        module = leaf_module(layer, shape, self.f)
        if kind in SHAPE_PRESERVING:
            return module, shape
        return module, self.probe(module, shape, tokens, where, kind)

    def charge(self, parameters: int) -> None:
        self.parameters += parameters
        if self.parameters > MAX_PARAMETERS:
            raise LimitExceeded("model", self.parameters, MAX_PARAMETERS, "parameter count")

    def probe(self, module: nn.Module, shape: Shape, tokens: bool, where: str, what: str) -> Shape:
        """Run ``module`` on a batch-of-one meta tensor; its output shape, or the error."""
        if tokens:
            x = torch.zeros(1, *shape, dtype=torch.long, device=META)
        else:
            x = torch.empty(1, *shape, dtype=self.f["dtype"], device=META)
        try:
            with torch.no_grad():
                out = lm.call(module, x, StepContext(), lm.RunState(taps=self._tap_tensors()))
        except (RuntimeError, ValueError, IndexError) as exc:
            text = str(exc).strip()
            reason = text.splitlines()[0][:300] if text else type(exc).__name__
            raise InvalidDescription(
                where, f"{what} cannot take an input of shape {shape_text(shape)}: {reason}"
            ) from None
        return tuple(out.shape[1:])

    def _tap_tensors(self) -> dict[str, torch.Tensor]:
        return {
            n: torch.empty(1, *s, dtype=self.f["dtype"], device=META) for n, s in self.taps.items()
        }

    def _group(self, layer: dict[str, Any], shape: Shape, where: str) -> tuple[nn.Module, Shape]:
        body, out = self.sequence(layer["layers"], shape, False, f"{where}.layers")
        if layer["frozen"]:
            body.requires_grad_(False)
        return lm.Region(body, "plain", checkpointable=_pure(layer)), out

    def _residual(self, layer: dict[str, Any], shape: Shape, where: str) -> tuple[nn.Module, Shape]:
        body, out = self.sequence(layer["layers"], shape, False, f"{where}.layers")
        shortcut, want, against = None, shape, "the input's shape"
        if "shortcut" in layer:
            shortcut, want = self.sequence(layer["shortcut"], shape, False, f"{where}.shortcut")
            against = f"the shortcut's output {shape_text(want)}"
        if out != want:
            raise InvalidDescription(
                f"{where}.layers",
                f"the residual body turns {shape_text(shape)} into {shape_text(out)}; "
                f"it must give back {against}",
            )
        return lm.Region(body, "residual", shortcut, checkpointable=_pure(layer)), out

    def _skip_concat(
        self, layer: dict[str, Any], shape: Shape, where: str
    ) -> tuple[nn.Module, Shape]:
        dim = layer["dim"]
        if not -len(shape) <= dim < len(shape):
            raise InvalidDescription(f"{where}.dim", f"out of range for {shape_text(shape)}", dim)
        body, out = self.sequence(layer["layers"], shape, False, f"{where}.layers")
        d = dim % len(shape)
        if len(out) != len(shape) or any(
            a != b for i, (a, b) in enumerate(zip(out, shape, strict=True)) if i != d
        ):
            raise InvalidDescription(
                f"{where}.layers",
                f"the body turns {shape_text(shape)} into {shape_text(out)}; to concatenate "
                f"along dim {dim} every other dimension must match",
            )
        joined = tuple(
            a + b if i == d else a for i, (a, b) in enumerate(zip(shape, out, strict=True))
        )
        return lm.Region(body, "concat", dim=dim, checkpointable=_pure(layer)), joined

    def _repeat(self, layer: dict[str, Any], shape: Shape, where: str) -> tuple[nn.Module, Shape]:
        copies: list[nn.Module] = []
        for t in range(layer["times"]):
            try:
                body, shape = self.sequence(layer["layers"], shape, False, f"{where}.layers")
            except LimitExceeded:
                raise
            except InvalidDescription as exc:
                if t == 0:
                    raise
                raise InvalidDescription(
                    exc.field,
                    f"{exc.message} (in repetition {t + 1} of {layer['times']})",
                    exc.value,
                ) from None
            copies.append(lm.Region(body, "plain", checkpointable=_pure(layer)))
        return lm.Sequence(copies), shape

    def _branch(self, layer: dict[str, Any], shape: Shape, where: str) -> tuple[nn.Module, Shape]:
        body, out = self.sequence(layer["layers"], shape, False, f"{where}.layers")
        name = layer.get("name")
        if name is not None:
            if name in self.taps:
                raise InvalidDescription(f"{where}.name", "already names an earlier branch", name)
            self.taps[name] = out
        return lm.Branch(body, name, layer["held"]), shape

    def _heads(self, layer: dict[str, Any], shape: Shape, where: str) -> tuple[nn.Module, Shape]:
        sources = tuple(layer["sources"])
        for j, name in enumerate(sources):
            if name not in self.taps:
                known = ", ".join(sorted(self.taps)) or "none"
                raise InvalidDescription(
                    f"{where}.from[{j}]",
                    f"no earlier branch is named {name!r} (named so far: {known})",
                    name,
                )
        body, _ = self.sequence(layer["layers"], self.taps[sources[0]], False, f"{where}.layers")
        for j, name in enumerate(sources[1:], start=1):
            self.probe(
                body,
                self.taps[name],
                False,
                f"{where}.from[{j}]",
                f"the shared layers (built for {sources[0]!r})",
            )
        return lm.Heads(body, sources), shape


def _pure(layer: dict[str, Any]) -> bool:
    """No branch or heads inside: safe to recompute under activation checkpointing."""
    if layer["type"] not in CONTAINERS:
        return True
    for key in ("layers", "shortcut"):
        for inner in layer.get(key, ()):
            if inner["type"] in ("branch", "heads") or not _pure(inner):
                return False
    return True


def build_layer_model(spec: LayerListSpec, dtype: torch.dtype) -> lm.LayerModel:
    builder = _Builder(dtype)
    body, _ = builder.sequence(
        spec.layers, spec.input_shape, spec.input == "tokens", "model.layers"
    )
    return lm.LayerModel(body)


class LayerListRunnable(Runnable):
    """Inputs ``[batch, *input_shape]``: floats in the parameter dtype, or int64 token ids."""

    module: lm.LayerModel

    def __init__(self, module: lm.LayerModel, spec: LayerListSpec, dtype: torch.dtype) -> None:
        super().__init__(module)
        self.spec, self.dtype = spec, dtype

    def tokens_per_sample(self, workload: Workload) -> int:
        return self.spec.input_shape[0] if self.spec.input == "tokens" else 1

    def inputs(self, workload: Workload) -> tuple[Any, ...]:
        shape = self.spec.input_shape
        if workload.image_size is not None and (
            len(shape) != 3 or shape[1:] != (workload.image_size, workload.image_size)
        ):
            raise InvalidDescription(
                "workload.image_size",
                f"a layer list takes the fixed input_shape {list(shape)}; leave image_size out",
                workload.image_size,
            )
        size = (workload.batch_size, *shape)
        if self.spec.input == "tokens":
            return (torch.zeros(size, dtype=torch.long, device=self.device),)
        return (torch.empty(size, dtype=self.dtype, device=self.device),)

    def forward(self, inputs: tuple[Any, ...], ctx: StepContext) -> torch.Tensor:
        return self.module(inputs[0], ctx)[0]

    def loss(self, inputs: tuple[Any, ...], ctx: StepContext) -> torch.Tensor:
        """Sum over the final and side outputs of ``output.float().mean()``."""
        out, sides = self.module(inputs[0], ctx)
        return sum((t.float().mean() for t in sides), out.float().mean())


def build_layers(spec: LayerListSpec, dtype: torch.dtype) -> Runnable:
    return LayerListRunnable(build_layer_model(spec, dtype), spec, dtype)


def parameters_of(spec: LayerListSpec) -> int:
    """The parameter count charged while building (equals the built module's)."""
    builder = _Builder(torch.float32)
    builder.sequence(spec.layers, spec.input_shape, spec.input == "tokens", "model.layers")
    return builder.parameters
