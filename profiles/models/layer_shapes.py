"""Leaf layers of a layer list: what input each expects, its parameters, its module.

Shapes here are per sample (no batch dimension). :func:`expect` rejects an input a layer
cannot take, naming the layer (or the field at fault) and the shape that reached it;
:func:`leaf_parameters` counts weights from the description alone, before anything is
built; :func:`leaf_module` builds the torch module on the meta device.
"""

from __future__ import annotations

import math
from typing import Any

from torch import nn

from profiles.errors import InvalidDescription
from profiles.models import layer_modules as lm
from profiles.models.transformer import RMSNorm

Shape = tuple[int, ...]
_SPATIAL = {2: "[C, L]", 3: "[C, H, W]", 4: "[C, D, H, W]"}
_ACTIVATIONS: dict[str, type[nn.Module]] = {
    "relu": nn.ReLU,
    "gelu": nn.GELU,
    "silu": nn.SiLU,
    "tanh": nn.Tanh,
    "sigmoid": nn.Sigmoid,
}


def shape_text(shape: Shape) -> str:
    return "[" + ", ".join(str(d) for d in shape) + "]"


def _conv_rank(kind: str) -> int:
    return int(kind[-2])


def _tuple(value: int | tuple[int, ...], n: int) -> tuple[int, ...]:
    return (value,) * n if isinstance(value, int) else tuple(value)


def _rank_wanted(kind: str) -> tuple[set[int], str] | None:
    if kind.startswith("conv"):
        n = _conv_rank(kind)
        return {n + 1}, _SPATIAL[n + 1]
    wanted: dict[str, tuple[set[int], str]] = {
        "maxpool": ({2, 3, 4}, "[C, L], [C, H, W] or [C, D, H, W]"),
        "avgpool": ({2, 3, 4}, "[C, L], [C, H, W] or [C, D, H, W]"),
        "upsample": ({2, 3, 4}, "[C, L], [C, H, W] or [C, D, H, W]"),
        "global_avgpool": ({2, 3, 4}, "[C, ...spatial]"),
        "attention": ({2}, "[L, D]"),
        "lstm": ({2}, "[T, F]"),
        "gru": ({2}, "[T, F]"),
        "roi_align": ({3}, "[C, H, W]"),
        "batchnorm": ({1, 2, 3, 4}, "[C, ...]"),
        "frozen_batchnorm": ({1, 2, 3, 4}, "[C, ...]"),
    }
    return wanted.get(kind)


def expect(layer: dict[str, Any], shape: Shape, where: str) -> None:
    """Raise InvalidDescription if ``layer`` cannot take a per-sample input of ``shape``."""
    kind = layer["type"]
    rank = _rank_wanted(kind)
    if rank is not None and len(shape) not in rank[0]:
        raise InvalidDescription(
            where, f"{kind} expects a {rank[1]} input; got {shape_text(shape)}"
        )
    if kind.startswith("conv") and (
        shape[0] % layer["groups"] or layer["out_channels"] % layer["groups"]
    ):
        raise InvalidDescription(
            f"{where}.groups",
            f"{layer['groups']} groups must divide "
            f"{shape[0]} input and {layer['out_channels']} output channels",
            layer["groups"],
        )
    if kind == "groupnorm" and shape[0] % layer["groups"]:
        raise InvalidDescription(
            f"{where}.groups",
            f"{layer['groups']} groups do not divide {shape[0]} channels",
            layer["groups"],
        )
    if kind == "attention" and shape[1] % layer["heads"]:
        raise InvalidDescription(
            f"{where}.heads",
            f"width {shape[1]} does not split into {layer['heads']} heads",
            layer["heads"],
        )
    _expect_reshaping(layer, shape, where)


def _expect_reshaping(layer: dict[str, Any], shape: Shape, where: str) -> None:
    kind = layer["type"]
    if kind == "reshape" and math.prod(layer["shape"]) != math.prod(shape):
        raise InvalidDescription(
            f"{where}.shape",
            f"{shape_text(tuple(layer['shape']))} does "
            f"not hold the {math.prod(shape)} values of {shape_text(shape)}",
            layer["shape"],
        )
    if kind == "transpose" and any(not -len(shape) <= d < len(shape) for d in layer["dims"]):
        raise InvalidDescription(
            f"{where}.dims", f"out of range for {shape_text(shape)}", layer["dims"]
        )
    if kind == "flatten" and layer["start"] >= len(shape):
        raise InvalidDescription(
            f"{where}.start", f"out of range for {shape_text(shape)}", layer["start"]
        )
    if kind == "glu":
        dim = layer["dim"]
        if not -len(shape) <= dim < len(shape) or shape[dim] % 2:
            raise InvalidDescription(
                f"{where}.dim", f"glu halves an even dimension of {shape_text(shape)}", dim
            )
    if (
        kind == "upsample"
        and not isinstance(layer["scale"], int)
        and (len(layer["scale"]) != len(shape) - 1)
    ):
        raise InvalidDescription(
            f"{where}.scale",
            f"needs one factor per spatial dimension of {shape_text(shape)}",
            layer["scale"],
        )


def _recurrent_parameters(layer: dict[str, Any], features: int) -> int:
    gates = 4 if layer["type"] == "lstm" else 3
    h, dirs = layer["hidden"], 2 if layer["bidirectional"] else 1
    total = 0
    for i in range(layer["layers"]):
        fin = features if i == 0 else h * dirs
        total += dirs * (gates * h * (fin + h) + 2 * gates * h)  # weights, b_ih and b_hh
    return total


def leaf_parameters(layer: dict[str, Any], shape: Shape) -> int:
    """Weights of a leaf layer fed ``shape``, from its description alone."""
    kind = layer["type"]
    if kind.startswith("conv"):
        kernel = math.prod(_tuple(layer["kernel"], _conv_rank(kind)))
        cin, cout, groups = shape[0], layer["out_channels"], layer["groups"]
        return cin * cout // groups * kernel + (cout if layer["bias"] else 0)
    if kind == "linear":
        return shape[-1] * layer["out_features"] + (layer["out_features"] if layer["bias"] else 0)
    if kind == "embedding":
        return int(layer["num_embeddings"]) * layer["dim"]
    if kind == "attention":
        d = shape[-1]
        return 4 * (d * d + (d if layer["bias"] else 0))
    if kind in ("lstm", "gru"):
        return _recurrent_parameters(layer, shape[-1])
    return {
        "layernorm": 2 * shape[-1],
        "rmsnorm": shape[-1],
        "batchnorm": 2 * shape[0],
        "groupnorm": 2 * shape[0],
    }.get(kind, 0)


def _conv_module(layer: dict[str, Any], cin: int, f: dict[str, Any]) -> nn.Module:
    kind = layer["type"]
    n = _conv_rank(kind)
    kernel, dilation = _tuple(layer["kernel"], n), _tuple(layer["dilation"], n)
    common = {
        "stride": layer["stride"],
        "dilation": layer["dilation"],
        "groups": layer["groups"],
        "bias": layer["bias"],
        **f,
    }
    if kind.startswith("conv_transpose"):
        cls: Any = (nn.ConvTranspose1d, nn.ConvTranspose2d, nn.ConvTranspose3d)[n - 1]
        return cls(
            cin,
            layer["out_channels"],
            kernel,
            padding=layer["padding"],
            output_padding=layer["output_padding"],
            **common,
        )
    padding = layer["padding"]
    if padding == "same":
        padding = tuple(d * (k - 1) // 2 for d, k in zip(dilation, kernel, strict=True))
    cls = (nn.Conv1d, nn.Conv2d, nn.Conv3d)[n - 1]
    return cls(cin, layer["out_channels"], kernel, padding=padding, **common)


def _pool_module(layer: dict[str, Any], rank: int) -> nn.Module:
    pools: Any = {
        "maxpool": (nn.MaxPool1d, nn.MaxPool2d, nn.MaxPool3d),
        "avgpool": (nn.AvgPool1d, nn.AvgPool2d, nn.AvgPool3d),
    }
    cls = pools[layer["type"]][rank - 2]
    return cls(layer["kernel"], layer.get("stride"), layer["padding"])


def leaf_module(layer: dict[str, Any], shape: Shape, f: dict[str, Any]) -> nn.Module:
    """The torch module for a leaf layer fed ``shape`` (meta device, dtype in ``f``)."""
    kind = layer["type"]
    if kind.startswith("conv"):
        return _conv_module(layer, shape[0], f)
    if kind in ("maxpool", "avgpool"):
        return _pool_module(layer, len(shape))
    if kind in _ACTIVATIONS:
        return _ACTIVATIONS[kind]()
    if kind in ("lstm", "gru"):
        cls = nn.LSTM if kind == "lstm" else nn.GRU
        return lm.Recurrent(
            cls(
                shape[-1],
                layer["hidden"],
                layer["layers"],
                batch_first=True,
                bidirectional=layer["bidirectional"],
                **f,
            )
        )
    if kind == "batchnorm":
        return lm.BatchNorm(shape[0], **f)
    builders: dict[str, Any] = {
        "linear": lambda: nn.Linear(shape[-1], layer["out_features"], bias=layer["bias"], **f),
        "embedding": lambda: nn.Embedding(layer["num_embeddings"], layer["dim"], **f),
        "attention": lambda: lm.SelfAttention(
            shape[-1], layer["heads"], layer["causal"], layer["bias"], f
        ),
        "frozen_batchnorm": lambda: lm.FrozenBatchNorm(shape[0], **f),
        "layernorm": lambda: nn.LayerNorm(shape[-1], **f),
        "rmsnorm": lambda: RMSNorm(shape[-1], **f),
        "groupnorm": lambda: nn.GroupNorm(layer["groups"], shape[0], **f),
        "leaky_relu": lambda: nn.LeakyReLU(layer["negative_slope"]),
        "softmax": lambda: nn.Softmax(dim=-1),
        "glu": lambda: nn.GLU(layer["dim"] + 1 if layer["dim"] >= 0 else layer["dim"]),
        "dropout": nn.Identity,
        "global_avgpool": lm.GlobalAvgPool,
        "flatten": lambda: lm.Flatten(layer["start"]),
        "reshape": lambda: lm.Reshape(tuple(layer["shape"])),
        "transpose": lambda: lm.Transpose(*layer["dims"]),
        "upsample": lambda: lm.Upsample(_tuple(layer["scale"], len(shape) - 1)),
        "roi_align": lambda: lm.RoIAlign(layer["rois"], layer["output_size"]),
    }
    module: nn.Module = builders[kind]()
    return module
