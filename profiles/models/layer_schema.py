"""Validation of layer-list descriptions: one strict schema per layer type.

:func:`load_layers` checks a list of layers (recursing into the nested lists of
``group``, ``residual``, ``skip_concat``, ``repeat``, ``branch`` and ``heads``) and fills in
defaults; every error names its field as ``model.layers[i].<field>``
(``model.layers[2].layers[0].kernel`` inside a nested list). An unknown layer type is
answered with the closest known ones.
"""

from __future__ import annotations

import difflib
from typing import Any

from marshmallow import Schema, ValidationError, fields, validate, validates_schema

from profiles.errors import InvalidDescription, LimitExceeded
from profiles.models.spec_fields import IntOrList, Strict, load_fields
from profiles.resolved import MAX_WIDTH

MAX_ROWS = 10_000_000_000  # embedding rows (recommender tables run to 10^8 and beyond)
MAX_SPAN = 10_000  # kernel, stride, dilation, padding
MAX_DEPTH = 32  # nesting of layer lists
NESTED = ("layers", "shortcut")
CONTAINERS = ("group", "residual", "skip_concat", "repeat", "branch", "heads")


class Padding(fields.Field):
    """``"same"`` or explicit padding (an integer or one per spatial dimension)."""

    def __init__(self, length: int, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.explicit = IntOrList(low=0, high=MAX_SPAN, length=length)

    def _deserialize(self, value: Any, attr: str | None, data: Any, **kwargs: Any) -> Any:
        if value == "same":
            return "same"
        return self.explicit.deserialize(value, attr, data, **kwargs)


def _width(**kw: Any) -> fields.Integer:
    return fields.Integer(strict=True, validate=validate.Range(1, MAX_WIDTH), **kw)


def _type() -> fields.String:
    return fields.String(required=True)


def _nested(**kw: Any) -> fields.List:
    return fields.List(fields.Raw(), **kw)


def _conv(n: int, transpose: bool) -> type[Schema]:
    body: dict[str, fields.Field] = {
        "type": _type(),
        "out_channels": _width(required=True),
        "kernel": IntOrList(high=MAX_SPAN, length=n, required=True),
        "stride": IntOrList(high=MAX_SPAN, length=n, load_default=1),
        "groups": _width(load_default=1),
        "dilation": IntOrList(high=MAX_SPAN, length=n, load_default=1),
        "bias": fields.Boolean(load_default=True),
    }
    if transpose:
        body["padding"] = IntOrList(low=0, high=MAX_SPAN, length=n, load_default=0)
        body["output_padding"] = IntOrList(low=0, high=MAX_SPAN, length=n, load_default=0)
    else:
        body["padding"] = Padding(length=n, load_default="same")
    name = f"ConvTranspose{n}dLayer" if transpose else f"Conv{n}dLayer"
    return Strict.from_dict(body, name=name)


class LinearLayer(Strict):
    type = _type()
    out_features = _width(required=True)
    bias = fields.Boolean(load_default=True)


class EmbeddingLayer(Strict):
    type = _type()
    num_embeddings = fields.Integer(
        strict=True, required=True, validate=validate.Range(1, MAX_ROWS)
    )
    dim = _width(required=True)


class AttentionLayer(Strict):
    type = _type()
    heads = _width(required=True)
    causal = fields.Boolean(load_default=False)
    bias = fields.Boolean(load_default=True)


class PlainLayer(Strict):
    """Layers without settings: norms over the features or channels, activations."""

    type = _type()


class GroupNormLayer(Strict):
    type = _type()
    groups = _width(required=True)


class LeakyReluLayer(Strict):
    type = _type()
    negative_slope = fields.Float(load_default=0.01, validate=validate.Range(0, 1))


class GluLayer(Strict):
    type = _type()
    dim = fields.Integer(strict=True, load_default=-1)


class DropoutLayer(Strict):
    """Accepted for transcription; a no-op (its mask costs one elementwise pass)."""

    type = _type()
    p = fields.Float(validate=validate.Range(0, 1))


class PoolLayer(Strict):
    type = _type()
    kernel = IntOrList(high=MAX_SPAN, required=True)
    stride = IntOrList(high=MAX_SPAN)
    padding = IntOrList(low=0, high=MAX_SPAN, load_default=0)


class FlattenLayer(Strict):
    type = _type()
    start = fields.Integer(strict=True, load_default=0, validate=validate.Range(0, 4))


class ReshapeLayer(Strict):
    type = _type()
    shape = fields.List(_width(), required=True, validate=validate.Length(1, 4))


class TransposeLayer(Strict):
    type = _type()
    dims = fields.List(
        fields.Integer(strict=True), load_default=[0, -1], validate=validate.Length(2, 2)
    )


class UpsampleLayer(Strict):
    type = _type()
    scale = IntOrList(high=MAX_SPAN, required=True)


class RecurrentLayer(Strict):
    type = _type()
    hidden = _width(required=True)
    layers = fields.Integer(strict=True, load_default=1, validate=validate.Range(1, 100))
    bidirectional = fields.Boolean(load_default=False)


class RoIAlignLayer(Strict):
    type = _type()
    rois = fields.Integer(strict=True, required=True, validate=validate.Range(1, 100_000))
    output_size = fields.Integer(strict=True, required=True, validate=validate.Range(1, 1024))


class GroupLayer(Strict):
    """A nested list run in place (a named part, for reuse through YAML anchors).

    ``frozen``: its weights are not trained (no gradients, no optimizer states), as a
    detector's pretrained stem is; with nothing trainable before it, backward never
    reaches it, so it saves nothing for backward.
    """

    type = _type()
    layers = _nested(required=True, validate=validate.Length(min=1))
    frozen = fields.Boolean(load_default=False)


class ResidualLayer(Strict):
    type = _type()
    layers = _nested(required=True)
    shortcut = _nested()


class SkipConcatLayer(Strict):
    type = _type()
    layers = _nested(required=True)
    dim = fields.Integer(strict=True, load_default=0)


class RepeatLayer(Strict):
    type = _type()
    times = fields.Integer(strict=True, required=True, validate=validate.Range(1, 10_000))
    layers = _nested(required=True, validate=validate.Length(min=1))


class BranchLayer(Strict):
    """``held: false``: the output joins the loss as soon as it is made (a running sum, as a
    skip connection's accumulator or a conditioning input added in place), instead of being
    held until the loss as detection heads' outputs are."""

    type = _type()
    layers = _nested(required=True, validate=validate.Length(min=1))
    name = fields.String(validate=validate.Regexp(r"^[A-Za-z_][A-Za-z0-9_.-]{0,63}$"))
    held = fields.Boolean(load_default=True)

    @validates_schema
    def _named_is_held(self, data: dict[str, Any], **_: Any) -> None:
        if "name" in data and not data["held"]:
            raise ValidationError("a named branch feeds heads later: it must be held", "held")


class HeadsLayer(Strict):
    type = _type()
    sources = fields.List(
        fields.String(), required=True, data_key="from", validate=validate.Length(1, 64)
    )
    layers = _nested(required=True, validate=validate.Length(min=1))


def _schemas() -> dict[str, type[Schema]]:
    out: dict[str, type[Schema]] = {}
    for n in (1, 2, 3):
        out[f"conv{n}d"] = _conv(n, transpose=False)
        out[f"conv_transpose{n}d"] = _conv(n, transpose=True)
    plain = (
        "layernorm",
        "rmsnorm",
        "batchnorm",
        "frozen_batchnorm",
        "relu",
        "gelu",
        "silu",
        "tanh",
        "sigmoid",
        "softmax",
        "global_avgpool",
    )
    out.update(dict.fromkeys(plain, PlainLayer))
    out.update(
        {
            "linear": LinearLayer,
            "embedding": EmbeddingLayer,
            "attention": AttentionLayer,
            "groupnorm": GroupNormLayer,
            "leaky_relu": LeakyReluLayer,
            "glu": GluLayer,
            "dropout": DropoutLayer,
            "maxpool": PoolLayer,
            "avgpool": PoolLayer,
            "flatten": FlattenLayer,
            "reshape": ReshapeLayer,
            "transpose": TransposeLayer,
            "upsample": UpsampleLayer,
            "lstm": RecurrentLayer,
            "gru": RecurrentLayer,
            "roi_align": RoIAlignLayer,
            "group": GroupLayer,
            "residual": ResidualLayer,
            "skip_concat": SkipConcatLayer,
            "repeat": RepeatLayer,
            "branch": BranchLayer,
            "heads": HeadsLayer,
        }
    )
    return out


SCHEMAS = _schemas()
LAYER_TYPES = tuple(sorted(SCHEMAS))


def load_layers(raw: Any, path: str = "model.layers", depth: int = 0) -> tuple[dict[str, Any], ...]:
    """Validate a list of layer descriptions; defaults filled in, nested lists as tuples."""
    if depth > MAX_DEPTH:
        raise InvalidDescription(path, f"layer lists nest at most {MAX_DEPTH} deep")
    if not isinstance(raw, list):
        raise InvalidDescription(path, "must be a list of layers", raw)
    return tuple(_load_one(item, f"{path}[{i}]", depth) for i, item in enumerate(raw))


def _load_one(item: Any, where: str, depth: int) -> dict[str, Any]:
    if not isinstance(item, dict):
        raise InvalidDescription(where, "must be an object with a type", item)
    kind = item.get("type")
    schema = SCHEMAS.get(kind) if isinstance(kind, str) else None
    if schema is None:
        close = difflib.get_close_matches(str(kind), LAYER_TYPES, n=3, cutoff=0.5)
        hint = f"; did you mean {' or '.join(close)}?" if close else ""
        raise InvalidDescription(
            f"{where}.type",
            f"unknown layer type {kind!r}{hint} (known: {', '.join(LAYER_TYPES)})",
            kind,
        )
    data = load_fields(schema(), item, where)
    if kind in CONTAINERS:
        for key in NESTED:
            if key in data:
                data[key] = load_layers(data[key], f"{where}.{key}", depth + 1)
    return data


def count_layers(layers: tuple[dict[str, Any], ...]) -> int:
    """Layers after expanding ``repeat`` (containers count as one each, plus contents)."""
    total = 0
    for layer in layers:
        if layer["type"] in CONTAINERS:
            inner = sum(count_layers(layer[k]) for k in NESTED if k in layer)
            total += inner * layer.get("times", 1)
        total += 1
    return total


def check_layer_count(layers: tuple[dict[str, Any], ...], limit: int) -> None:
    n = count_layers(layers)
    if n > limit:
        raise LimitExceeded("model.layers", n, limit, "layer count (repeats expanded)")
