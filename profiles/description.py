"""Model descriptions: catalog name, Hugging Face config, parametric family or layer list.

:func:`resolve` turns the JSON a client sends into a :class:`ResolvedModel` (a validated
spec for one of the builders) or raises an error naming the field. Sane limits are checked
here, before anything is built.
"""

from __future__ import annotations

import itertools
from typing import Any

from marshmallow import Schema, ValidationError, fields, validate, validates_schema

from profiles.errors import InvalidDescription, LimitExceeded
from profiles.hf_config import from_hf_config
from profiles.models.spec_fields import Strict, load_fields
from profiles.models.transformer import ACTIVATIONS, TransformerSpec
from profiles.models.vision import RESNET_BLOCKS, CnnSpec, EfficientNetSpec, ResNetSpec, ViTSpec
from profiles.resolved import MAX_LAYERS, MAX_PARAMETERS, MAX_VOCAB, MAX_WIDTH, ResolvedModel

FAMILIES = ("transformer", "resnet", "vit", "efficientnet", "cnn", "unet", "layers")


def _pos(high: float, **kw: Any) -> fields.Integer:
    return fields.Integer(validate=validate.Range(1, high), strict=True, **kw)


class TransformerFields(Strict):
    family = fields.String(required=True)
    arch = fields.String(
        load_default="decoder", validate=validate.OneOf(["decoder", "encoder", "encoder-decoder"])
    )
    layers = _pos(MAX_LAYERS, required=True)
    decoder_layers = _pos(MAX_LAYERS, allow_none=True)
    hidden = _pos(MAX_WIDTH, required=True)
    heads = _pos(MAX_WIDTH, required=True)
    kv_heads = _pos(MAX_WIDTH, allow_none=True)
    head_dim = _pos(MAX_WIDTH, allow_none=True)
    ffn = _pos(MAX_WIDTH * 16, required=True)
    vocab = _pos(MAX_VOCAB, required=True)
    norm = fields.String(validate=validate.OneOf(["rmsnorm", "layernorm"]))
    norm_bias = fields.Boolean()
    activation = fields.String(validate=validate.OneOf(sorted(ACTIVATIONS)))
    gated = fields.Boolean()
    position = fields.String(validate=validate.OneOf(["rope", "learned", "relative", "none"]))
    max_positions = _pos(100_000_000)
    type_vocab = fields.Integer(validate=validate.Range(0, 1000), strict=True)
    embedding_norm = fields.Boolean()
    bias = fields.Boolean()
    qkv_bias = fields.Boolean()
    k_bias = fields.Boolean()
    parallel_block = fields.Boolean()
    norms_per_layer = fields.Integer(validate=validate.OneOf([2, 4]), strict=True)
    final_norm = fields.Boolean()
    tie_embeddings = fields.Boolean()
    head = fields.String(validate=validate.OneOf(["lm", "pooler", "classifier", "none"]))
    num_classes = fields.Integer(validate=validate.Range(0, 1_000_000), strict=True)
    moe_experts = fields.Integer(validate=validate.Range(0, 10_000), strict=True)
    moe_top_k = fields.Integer(validate=validate.Range(0, 10_000), strict=True)
    relative_buckets = _pos(10_000)
    audio_frontend = fields.Integer(validate=validate.Range(0, 10_000), strict=True)
    encoder_positions = fields.Integer(validate=validate.Range(0, 10_000_000), strict=True)
    adaptive_cutoffs = fields.List(_pos(MAX_VOCAB), validate=validate.Length(1, 16))
    adaptive_div_val = _pos(64)
    adaptive_tail_shares = fields.List(
        fields.Float(validate=validate.Range(0, 1)), validate=validate.Length(1, 16)
    )

    @validates_schema
    def _shapes(self, data: dict[str, Any], **_: Any) -> None:
        heads, kv = data["heads"], data.get("kv_heads") or data["heads"]
        if data.get("head_dim") is None and data["hidden"] % heads:
            raise ValidationError(
                f"hidden ({data['hidden']}) must be divisible by heads ({heads}), or give head_dim",
                "hidden",
            )
        if heads % kv:
            raise ValidationError(
                f"heads ({heads}) must be a multiple of kv_heads ({kv})", "kv_heads"
            )
        experts, top_k = data.get("moe_experts", 0), data.get("moe_top_k", 0)
        if bool(experts) != bool(top_k) or top_k > experts:
            raise ValidationError(
                "with moe_experts, moe_top_k must be between 1 and moe_experts", "moe_top_k"
            )
        if data.get("position") == "learned" and not data.get("max_positions"):
            raise ValidationError("learned positions need max_positions", "max_positions")
        if data.get("head") == "classifier" and not data.get("num_classes"):
            raise ValidationError("a classifier head needs num_classes", "num_classes")
        self._adaptive(data)

    def _adaptive(self, data: dict[str, Any]) -> None:
        cutoffs = data.get("adaptive_cutoffs")
        shares = data.get("adaptive_tail_shares")
        if cutoffs is None:
            if shares is not None or "adaptive_div_val" in data:
                raise ValidationError("needs adaptive_cutoffs", "adaptive_cutoffs")
            return
        bounds = [0, *cutoffs, data["vocab"]]
        if any(a >= b for a, b in itertools.pairwise(bounds)):
            raise ValidationError(
                "cutoffs must rise strictly between 0 and vocab", "adaptive_cutoffs"
            )
        if shares is None or len(shares) != len(cutoffs) or sum(shares) >= 1:
            raise ValidationError(
                "one share of the tokens per tail cluster (as many as cutoffs), below 1 in all",
                "adaptive_tail_shares",
            )
        if data.get("arch", "decoder") != "decoder" or data.get("head", "lm") != "lm":
            raise ValidationError("adaptive softmax is for decoder language models", "arch")
        if not data.get("tie_embeddings"):
            raise ValidationError(
                "the adaptive softmax shares the adaptive input's weights: set tie_embeddings",
                "tie_embeddings",
            )


class ResNetFields(Strict):
    family = fields.String(required=True)
    depth = fields.Integer(
        required=True, strict=True, validate=validate.OneOf(sorted(RESNET_BLOCKS))
    )
    width = _pos(4096)
    num_classes = _pos(1_000_000)
    image_size = fields.Integer(strict=True, validate=validate.Range(32, 16384))


class ViTFields(Strict):
    family = fields.String(required=True)
    layers = _pos(MAX_LAYERS, required=True)
    hidden = _pos(MAX_WIDTH, required=True)
    heads = _pos(MAX_WIDTH, required=True)
    ffn = _pos(MAX_WIDTH * 16, required=True)
    patch = _pos(1024, required=True)
    image_size = fields.Integer(strict=True, validate=validate.Range(8, 16384))
    num_classes = _pos(1_000_000)
    channels = _pos(1024)

    @validates_schema
    def _shapes(self, data: dict[str, Any], **_: Any) -> None:
        if data["hidden"] % data["heads"]:
            raise ValidationError("hidden must be divisible by heads", "hidden")
        if data.get("image_size", 224) % data["patch"]:
            raise ValidationError("image_size must be a multiple of patch", "patch")


class EfficientNetFields(Strict):
    family = fields.String(required=True)
    width_mult = fields.Float(validate=validate.Range(0.1, 16))
    depth_mult = fields.Float(validate=validate.Range(0.1, 16))
    image_size = fields.Integer(strict=True, validate=validate.Range(32, 16384))
    num_classes = _pos(1_000_000)


class CnnFields(Strict):
    family = fields.String(required=True)
    channels = fields.List(_pos(MAX_WIDTH), required=True, validate=validate.Length(1, 100))
    blocks = fields.List(_pos(MAX_LAYERS), required=True, validate=validate.Length(1, 100))
    kernel = fields.Integer(strict=True, validate=validate.OneOf([1, 3, 5, 7, 9, 11]))
    in_channels = _pos(1024)
    image_size = fields.Integer(strict=True, validate=validate.Range(8, 16384))
    num_classes = _pos(1_000_000)

    @validates_schema
    def _shapes(self, data: dict[str, Any], **_: Any) -> None:
        if len(data["channels"]) != len(data["blocks"]):
            raise ValidationError("needs one entry per stage, as channels", "blocks")


def transformer_parameters(spec: TransformerSpec) -> float:
    """Approximate parameter count, from the shape alone (for the limit check)."""
    d, kv, hd = spec.hidden, spec.n_kv_heads, spec.d_head
    attn = d * spec.heads * hd * 2 + d * kv * hd * 2
    mlp = (3 if spec.gated else 2) * d * spec.ffn * max(1, spec.moe_experts)
    stacks = spec.layers + (spec.n_decoder_layers * 1.5 if spec.arch == "encoder-decoder" else 0)
    return stacks * (attn + mlp) + spec.vocab * d * 2


def _transformer(data: dict[str, Any]) -> ResolvedModel:
    fields_ = load_fields(TransformerFields(), data)
    fields_.pop("family")
    # canonical form: equal models get equal specs (and profile ids) however they were written
    fields_["kv_heads"] = fields_.get("kv_heads") or fields_["heads"]
    fields_["head_dim"] = fields_.get("head_dim") or fields_["hidden"] // fields_["heads"]
    if fields_.get("arch") == "encoder-decoder":
        fields_["decoder_layers"] = fields_.get("decoder_layers") or fields_["layers"]
    else:
        fields_.pop("decoder_layers", None)
    for key in ("adaptive_cutoffs", "adaptive_tail_shares"):
        if key in fields_:
            fields_[key] = tuple(fields_[key])
    spec = TransformerSpec(**fields_)
    total = transformer_parameters(spec)
    if total > MAX_PARAMETERS:
        raise LimitExceeded("model", total, MAX_PARAMETERS, "parameter count")
    return ResolvedModel("transformer", spec, description=data)


def _simple(kind: str, schema: Schema, spec_type: type, data: dict[str, Any]) -> ResolvedModel:
    fields_ = load_fields(schema, data)
    fields_.pop("family")
    for key in ("channels", "blocks"):
        if isinstance(fields_.get(key), list):
            fields_[key] = tuple(fields_[key])
    return ResolvedModel(kind, spec_type(**fields_), description=data)


def resolve_family(data: dict[str, Any]) -> ResolvedModel:
    """A parametric family description → its spec (errors name ``model.<field>``)."""
    family = data.get("family")
    if family == "transformer":
        return _transformer(data)
    if family == "resnet":
        return _simple("resnet", ResNetFields(), ResNetSpec, data)
    if family == "vit":
        return _simple("vit", ViTFields(), ViTSpec, data)
    if family == "efficientnet":
        return _simple("efficientnet", EfficientNetFields(), EfficientNetSpec, data)
    if family == "cnn":
        return _simple("cnn", CnnFields(), CnnSpec, data)
    if family in ("unet", "layers") or (family is None and isinstance(data.get("layers"), list)):
        from profiles.models.registry import resolve_special

        return resolve_special(data)
    raise InvalidDescription("model.family", f"must be one of {', '.join(FAMILIES)}", family)


def resolve(model: Any, catalog: Any) -> ResolvedModel:
    """Any accepted model description → :class:`ResolvedModel`."""
    if not isinstance(model, dict):
        raise InvalidDescription(
            "model", "must be an object: {name}, {hf_config}, {family} or {layers, input_shape}"
        )
    if "model_type" in model and not {"name", "hf_config", "family"} & set(model):
        return _unwrapped_hf_config(model)
    given = [k for k in ("name", "hf_config", "family") if k in model]
    if "family" not in given and isinstance(model.get("layers"), list):
        given.append("layers")
    if len(given) != 1:
        raise InvalidDescription(
            "model",
            "give exactly one of name, hf_config, family or a layers list"
            + (f" (got {', '.join(given)})" if given else ""),
        )
    if "name" in model:
        if set(model) != {"name"}:
            extra = sorted(set(model) - {"name"})
            raise InvalidDescription(f"model.{extra[0]}", "not allowed beside name")
        if not isinstance(model["name"], str):
            raise InvalidDescription("model.name", "must be a string: a catalog name or alias")
        return catalog.resolve(model["name"])
    if "hf_config" in model:
        if set(model) != {"hf_config"}:
            extra = sorted(set(model) - {"hf_config"})
            raise InvalidDescription(f"model.{extra[0]}", "not allowed beside hf_config")
        return resolve_family(from_hf_config(model["hf_config"]))
    return resolve_family(model)


def _unwrapped_hf_config(config: dict[str, Any]) -> ResolvedModel:
    """A Hugging Face ``config.json`` sent as the model itself (it has ``model_type``), as
    people have it: read as ``{"hf_config": config}``, its errors naming ``model.<key>``."""
    try:
        return resolve_family(from_hf_config(config))
    except InvalidDescription as exc:
        exc.field = exc.field.replace("model.hf_config", "model", 1)
        exc.args = (f"{exc.field}: {exc.message}",)
        raise
