"""The model and the workload of a ``/v1/profiles`` answer, as the profiler resolved them.

The model (:func:`profiles.profile._assemble`'s ``model_info``) holds the family's spec
(``asdict`` of the spec the description resolved to, :mod:`profiles.description`): its keys
depend on the family, so :class:`SpecByFamily` dumps it with the schema of the family beside
it, and :func:`spec_variants` tells OpenAPI the spec is one of those schemas. The workload is
:class:`profiles.workload.Workload` as a dict: every key is always there, null where the task
does not use it (training and fine-tuning: seq_len, optimizer, dataset_*, epochs; fine-tuning:
method, lora_rank; inference: prompt_tokens, output_tokens).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from marshmallow import Schema, fields

from service.api.described import flag, integer, integers, number, text


class TransformerSpecSchema(Schema):
    """A transformer's shape; names follow Hugging Face configs where they exist."""

    arch = text("decoder, encoder or encoder-decoder")
    layers = integer("layers (encoder-decoder: encoder layers)")
    decoder_layers = integer("encoder-decoder: decoder layers (null otherwise)", True)
    hidden = integer("hidden size")
    heads = integer("attention heads")
    kv_heads = integer("key/value heads (grouped-query attention; = heads without it)")
    head_dim = integer("width of one head")
    ffn = integer("MLP inner width (per expert with MoE)")
    vocab = integer("vocabulary size")
    norm = text("rmsnorm or layernorm")
    norm_bias = flag("LayerNorm with a bias")
    activation = text("MLP activation (silu, gelu, ...)")
    gated = flag("gated MLP (SwiGLU / GeGLU: gate, up, down)")
    position = text("rope, learned, relative or none")
    max_positions = integer("learned position table length (0: none)")
    type_vocab = integer("token type vocabulary (BERT; 0: none)")
    embedding_norm = flag("LayerNorm after the embeddings (BERT)")
    bias = flag("biases on every linear layer")
    qkv_bias = flag("biases on q, k and v only (Qwen2)")
    k_bias = flag("with bias: whether k has one (Whisper has none)")
    parallel_block = flag("attention and MLP side by side from one norm (Falcon)")
    norms_per_layer = integer("norms per layer: 2, or 4 (Gemma 2's post-norms)")
    final_norm = flag("a norm after the last layer")
    tie_embeddings = flag("the output head shares the embedding weights")
    head = text("lm, pooler, classifier or none")
    num_classes = integer("classifier outputs (0: no classifier)")
    moe_experts = integer("experts per MoE layer (0: dense)")
    moe_top_k = integer("experts each token passes through (0: dense)")
    relative_buckets = integer("relative attention bias buckets (T5)")
    audio_frontend = integer("mel bins into two conv1d layers (Whisper; 0: none)")
    encoder_positions = integer("encoder learned positions (Whisper; 0: none)")
    adaptive_cutoffs = integers("adaptive input/softmax cluster boundaries (Transformer-XL; [])")
    adaptive_div_val = integer("width divisor per adaptive cluster (1: none)")
    adaptive_tail_shares = fields.List(
        fields.Float(), metadata={"description": "share of target tokens per tail cluster ([])"}
    )
    extra = fields.Dict(metadata={"description": "reserved for builder options; {} today"})


class ResNetSpecSchema(Schema):
    depth = integer("18, 34, 50, 101 or 152 layers")
    width = integer("channels of the first stage's bottleneck")
    num_classes = integer("classifier outputs")
    image_size = integer("input height and width, pixels")


class ViTSpecSchema(Schema):
    layers = integer("encoder layers")
    hidden = integer("hidden size")
    heads = integer("attention heads")
    ffn = integer("MLP inner width")
    patch = integer("patch height and width, pixels")
    image_size = integer("input height and width, pixels")
    num_classes = integer("classifier outputs")
    channels = integer("input channels")


class EfficientNetSpecSchema(Schema):
    width_mult = number("channel multiplier over B0")
    depth_mult = number("depth multiplier over B0")
    image_size = integer("input height and width, pixels")
    num_classes = integer("classifier outputs")


class CnnSpecSchema(Schema):
    channels = integers("output channels of each stage")
    blocks = integers("conv-BN-ReLU layers of each stage (the first with stride 2)")
    kernel = integer("kernel size")
    in_channels = integer("input channels")
    image_size = integer("input height and width, pixels")
    num_classes = integer("classifier outputs")


class UNetSpecSchema(Schema):
    """A Stable Diffusion style U-Net (diffusers' UNet2DConditionModel)."""

    block_out_channels = integers("output channels of each level")
    layers_per_block = integer("ResNet blocks per level")
    cross_attention_dim = integer("width of the text embeddings attended to")
    attention_heads = integers("attention heads of each level, resolved")
    linear_projection = flag("linear (not 1x1 conv) projections in and out of attention")
    in_channels = integer("latent channels in")
    out_channels = integer("latent channels out")
    sample_size = integer("latent height and width (pixels / 8)")
    text_tokens = integer("text tokens attended to")


class LayerListSpecSchema(Schema):
    input_shape = integers("one sample's input shape: [C, H, W], [T, F] or [L]")
    input = text("float, or tokens (integer ids for a first embedding)")
    layers = fields.List(
        fields.Dict(),
        metadata={
            "description": "the layers as sent, every default filled in: each object's "
            "keys are those of its type (the layer-list form of the request's model)"
        },
    )


SPEC_SCHEMAS: dict[str, type[Schema]] = {
    "transformer": TransformerSpecSchema,
    "resnet": ResNetSpecSchema,
    "vit": ViTSpecSchema,
    "efficientnet": EfficientNetSpecSchema,
    "cnn": CnnSpecSchema,
    "unet": UNetSpecSchema,
    "layers": LayerListSpecSchema,
}


class SpecByFamily(fields.Field):
    """A spec dumped by the schema of its family: the ``family`` of the object holding it."""

    def __init__(self, schemas: Mapping[str, type[Schema]], **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.schemas = dict(schemas)

    def _serialize(self, value: Any, attr: str | None, obj: Any, **kwargs: Any) -> Any:
        if value is None:
            return None
        family = obj.get("family") if isinstance(obj, Mapping) else getattr(obj, "family", "")
        schema = self.schemas.get(str(family))
        if schema is None:
            raise ValueError(f"no spec schema for the model family {family!r}")
        return schema().dump(value)


def spec_variants(converter: Any, field: fields.Field, **_: Any) -> dict[str, Any]:
    """apispec attribute function: a :class:`SpecByFamily` is any of its families' schemas
    (each a component). Register with ``api.ma_plugin.converter.add_attribute_function``."""
    if not isinstance(field, SpecByFamily):
        return {}
    return {"anyOf": [converter.resolve_nested_schema(s) for s in field.schemas.values()]}


class ProfileModelSchema(Schema):
    name = text("catalog name (null: described by family, config or layers)", True)
    family = text("transformer, resnet, vit, efficientnet, cnn, unet or layers")
    source = text("where the catalog entry's figures come from (null off the catalog)", True)
    notes = text("the catalog entry's notes", True)
    spec = SpecByFamily(
        SPEC_SCHEMAS,
        metadata={"description": "the resolved shape: the schema of its family (see family)"},
    )
    parameters = number("parameters, counted on the built model")
    trainable_parameters = number("parameters that receive gradients (0 for inference)")
    adapters = number("LoRA adapters inserted (lora and qlora only)")
    active_parameters = number("parameters one token passes through (MoE: top-k experts)")
    parameter_dtype = text("dtype the weights are built in (float32, bfloat16, float16)")


class ResolvedWorkloadSchema(Schema):
    """The workload with every default filled in; null where the task does not use a key."""

    task = text("training, fine-tuning or inference")
    batch_size = integer("samples per step per GPU (data-parallel replica)")
    precision = text("compute precision (fp32, tf32, bf16, fp16, fp8, int8, int4)")
    method = text("fine-tuning: full, lora or qlora; null otherwise", True)
    lora_rank = integer("LoRA / QLoRA adapter rank; null without adapters", True)
    seq_len = integer("tokens per sample (training and fine-tuning of token models)", True)
    image_size = integer("input height and width, pixels, where the request set it", True)
    prompt_tokens = integer("inference: tokens in the prompt", True)
    output_tokens = integer("inference: tokens generated", True)
    optimizer = text("training and fine-tuning: the optimizer; null for inference", True)
    activation_checkpointing = text("none, full or selective")
    attention = text("flash (fused) or materialized scores")
    dataset_samples = integer("samples in the dataset, where given", True)
    dataset_tokens = integer("tokens in the dataset, where given", True)
    epochs = number("passes over the dataset (1 where not given)")
