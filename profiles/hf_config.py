"""Hugging Face ``config.json`` → the profiler's transformer family fields.

Only what shapes the computation is read; a missing required key is a 422 naming it.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from profiles.errors import InvalidDescription, UnsupportedModelType

FIELD = "model.hf_config"


def _get(config: dict[str, Any], *keys: str, default: Any = ...) -> Any:
    for key in keys:
        if config.get(key) is not None:
            return config[key]
    if default is ...:
        raise InvalidDescription(f"{FIELD}.{keys[0]}", "required for this model_type")
    return default


def _act(config: dict[str, Any], key: str = "hidden_act", default: str = "silu") -> str:
    name = str(_get(config, key, default=default))
    mapping = {
        "silu": "silu",
        "swish": "silu",
        "gelu": "gelu",
        "gelu_new": "gelu_tanh",
        "gelu_pytorch_tanh": "gelu_tanh",
        "gelu_fast": "gelu_tanh",
        "relu": "relu",
    }
    if name not in mapping:
        raise InvalidDescription(f"{FIELD}.{key}", f"unsupported activation '{name}'", name)
    return mapping[name]


def _llama_like(config: dict[str, Any]) -> dict[str, Any]:
    return {
        "arch": "decoder",
        "layers": _get(config, "num_hidden_layers"),
        "hidden": _get(config, "hidden_size"),
        "heads": _get(config, "num_attention_heads"),
        "kv_heads": _get(config, "num_key_value_heads", default=None),
        "head_dim": _get(config, "head_dim", default=None),
        "ffn": _get(config, "intermediate_size"),
        "vocab": _get(config, "vocab_size"),
        "activation": _act(config),
        "tie_embeddings": bool(_get(config, "tie_word_embeddings", default=False)),
    }


def _mixtral(config: dict[str, Any]) -> dict[str, Any]:
    return {
        **_llama_like(config),
        "moe_experts": _get(config, "num_local_experts"),
        "moe_top_k": _get(config, "num_experts_per_tok"),
    }


def _qwen2(config: dict[str, Any]) -> dict[str, Any]:
    return {**_llama_like(config), "qkv_bias": True}


def _gemma2(config: dict[str, Any]) -> dict[str, Any]:
    fields = _llama_like(config)
    fields["activation"] = _act(config, "hidden_activation", "gelu_pytorch_tanh")
    fields["tie_embeddings"] = bool(_get(config, "tie_word_embeddings", default=True))
    return {**fields, "norms_per_layer": 4}


def _gpt2(config: dict[str, Any]) -> dict[str, Any]:
    hidden = _get(config, "n_embd", "hidden_size")
    return {
        "arch": "decoder",
        "layers": _get(config, "n_layer", "num_hidden_layers"),
        "hidden": hidden,
        "heads": _get(config, "n_head", "num_attention_heads"),
        "ffn": _get(config, "n_inner", default=None) or 4 * hidden,
        "vocab": _get(config, "vocab_size"),
        "norm": "layernorm",
        "norm_bias": True,
        "activation": _act(config, "activation_function", "gelu_new"),
        "gated": False,
        "position": "learned",
        "max_positions": _get(config, "n_positions", default=1024),
        "bias": True,
        "tie_embeddings": bool(_get(config, "tie_word_embeddings", default=True)),
    }


def _bert(config: dict[str, Any]) -> dict[str, Any]:
    return {
        "arch": "encoder",
        "layers": _get(config, "num_hidden_layers"),
        "hidden": _get(config, "hidden_size"),
        "heads": _get(config, "num_attention_heads"),
        "ffn": _get(config, "intermediate_size"),
        "vocab": _get(config, "vocab_size"),
        "norm": "layernorm",
        "norm_bias": True,
        "activation": _act(config, default="gelu"),
        "gated": False,
        "position": "learned",
        "max_positions": _get(config, "max_position_embeddings", default=512),
        "type_vocab": _get(config, "type_vocab_size", default=2),
        "embedding_norm": True,
        "bias": True,
        "final_norm": False,
        "head": "pooler",
    }


def _t5(config: dict[str, Any]) -> dict[str, Any]:
    proj = str(_get(config, "feed_forward_proj", default="relu"))
    gated = proj.startswith("gated-")
    act = proj.removeprefix("gated-")
    return {
        "arch": "encoder-decoder",
        "layers": _get(config, "num_layers"),
        "decoder_layers": _get(config, "num_decoder_layers", default=None),
        "hidden": _get(config, "d_model"),
        "heads": _get(config, "num_heads"),
        "head_dim": _get(config, "d_kv", default=None),
        "ffn": _get(config, "d_ff"),
        "vocab": _get(config, "vocab_size"),
        "activation": _act({"a": act}, "a"),
        "gated": gated,
        "position": "relative",
        "relative_buckets": _get(config, "relative_attention_num_buckets", default=32),
        "tie_embeddings": bool(_get(config, "tie_word_embeddings", default=True)),
    }


def _falcon(config: dict[str, Any]) -> dict[str, Any]:
    hidden = _get(config, "hidden_size")
    multi_query = bool(_get(config, "multi_query", default=True))
    return {
        "arch": "decoder",
        "layers": _get(config, "num_hidden_layers", "n_layer"),
        "hidden": hidden,
        "heads": _get(config, "num_attention_heads", "n_head"),
        "kv_heads": 1 if multi_query else _get(config, "num_kv_heads", default=None),
        "ffn": _get(config, "ffn_hidden_size", default=None) or 4 * hidden,
        "vocab": _get(config, "vocab_size"),
        "norm": "layernorm",
        "norm_bias": True,
        "activation": "gelu",
        "gated": False,
        "parallel_block": bool(_get(config, "parallel_attn", default=True)),
        "bias": bool(_get(config, "bias", default=False)),
        "tie_embeddings": True,
    }


def _whisper(config: dict[str, Any]) -> dict[str, Any]:
    return {
        "arch": "encoder-decoder",
        "layers": _get(config, "encoder_layers"),
        "decoder_layers": _get(config, "decoder_layers"),
        "hidden": _get(config, "d_model"),
        "heads": _get(config, "encoder_attention_heads"),
        "ffn": _get(config, "encoder_ffn_dim"),
        "vocab": _get(config, "vocab_size"),
        "norm": "layernorm",
        "norm_bias": True,
        "activation": _act(config, "activation_function", "gelu"),
        "gated": False,
        "position": "learned",
        "max_positions": _get(config, "max_target_positions"),
        "bias": True,
        "k_bias": False,
        "tie_embeddings": True,
        "audio_frontend": _get(config, "num_mel_bins"),
        "encoder_positions": _get(config, "max_source_positions"),
    }


def _vit(config: dict[str, Any]) -> dict[str, Any]:
    labels = config.get("id2label")
    return {
        "family": "vit",
        "layers": _get(config, "num_hidden_layers"),
        "hidden": _get(config, "hidden_size"),
        "heads": _get(config, "num_attention_heads"),
        "ffn": _get(config, "intermediate_size"),
        "patch": _get(config, "patch_size"),
        "image_size": _get(config, "image_size", default=224),
        "channels": _get(config, "num_channels", default=3),
        "num_classes": len(labels) if isinstance(labels, dict) and labels else 1000,
    }


CONVERTERS: dict[str, Callable[[dict[str, Any]], dict[str, Any]]] = {
    "llama": _llama_like,
    "mistral": _llama_like,
    "phi3": _llama_like,
    "qwen2": _qwen2,
    "mixtral": _mixtral,
    "gemma2": _gemma2,
    "gpt2": _gpt2,
    "bert": _bert,
    "t5": _t5,
    "vit": _vit,
    "falcon": _falcon,
    "whisper": _whisper,
}


def from_hf_config(config: Any) -> dict[str, Any]:
    """A family description (``{"family": "transformer", ...}`` or ``vit``) for a config."""
    if not isinstance(config, dict):
        raise InvalidDescription(FIELD, "must be a JSON object (the config.json contents)")
    model_type = config.get("model_type")
    if not isinstance(model_type, str):
        raise InvalidDescription(f"{FIELD}.model_type", "required: the config's model_type")
    converter = CONVERTERS.get(model_type)
    if converter is None:
        raise UnsupportedModelType(model_type, sorted(CONVERTERS))
    fields = converter(config)
    fields.setdefault("family", "transformer")
    return fields
