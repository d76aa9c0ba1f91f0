"""The transformers causal LMs benchc builds (`model causal_lm { ... }`): the families, the spec
settings each family has and the config key each maps to, the published presets, and the
transformers config a resolved model becomes. Data and pure functions only, no torch.

A family is a `model_type` of transformers' `AutoModelForCausalLM`. Its parameters, FLOPs and
memory are never computed by a formula of its own: plan/census.py builds the model from the
config made here on the meta device and counts what it holds (its weight matrices and embedding
shapes, its attention's facts).
"""

from __future__ import annotations

# spec setting -> transformers config key, shared by every family
COMMON_KEYS = {
    "hidden": "hidden_size",
    "layers": "num_hidden_layers",
    "heads": "num_attention_heads",
    "kv_heads": "num_key_value_heads",
    "head_dim": "head_dim",
    "intermediate": "intermediate_size",
    "vocab": "vocab_size",
    "max_positions": "max_position_embeddings",
    "rope_theta": "rope_theta",
    "tie_embeddings": "tie_word_embeddings",
}
# family -> (its settings beyond the common ones -> config key; the config keys a setting of
# the same name turns on besides)
FAMILY_KEYS: dict[str, dict[str, str]] = {
    "llama": {},
    "mistral": {"sliding_window": "sliding_window"},
    "mixtral": {
        "sliding_window": "sliding_window",
        "experts": "num_local_experts",
        "experts_per_token": "num_experts_per_tok",
    },
    "qwen2": {"sliding_window": "sliding_window"},
    "qwen3": {"sliding_window": "sliding_window"},
    "qwen3_moe": {
        "sliding_window": "sliding_window",
        "intermediate": "moe_intermediate_size",  # every layer is sparse: the expert's width
        "experts": "num_experts",
        "experts_per_token": "num_experts_per_tok",
    },
}
FAMILIES = tuple(FAMILY_KEYS)
# a sliding window in the Qwen families is used only where use_sliding_window is on (and then
# on the layers from max_window_layers on, as transformers' Qwen2Config lays them out)
SWITCHED_ON = {"qwen2": {"sliding_window": {"use_sliding_window": True}},
               "qwen3": {"sliding_window": {"use_sliding_window": True}},
               "qwen3_moe": {"sliding_window": {"use_sliding_window": True}}}  # fmt: skip
# families whose head_dim defaults to hidden / heads (Qwen3's is 128 whatever the width)
DERIVED_HEAD_DIM = ("llama", "mistral", "mixtral", "qwen2")
SHAPE_SETTINGS = (*COMMON_KEYS, "experts", "experts_per_token", "sliding_window")

# optimum-habana 1.21.2's adapt_transformers_to_gaudi swaps in a Gaudi class for these
# (optimum/habana/transformers/modeling_utils.py): the class a Gaudi program builds.
GAUDI_CLASSES = {
    "llama": "GaudiLlamaForCausalLM",
    "mistral": "GaudiMistralForCausalLM",
    "mixtral": "GaudiMixtralForCausalLM",
    "qwen2": "GaudiQwen2ForCausalLM",
    "qwen3": "GaudiQwen3ForCausalLM",
    "qwen3_moe": "GaudiQwen3MoeForCausalLM",
}

# optimum-habana's Gaudi Mixtral attention runs FusedSDPA whenever Habana's kernels load: its
# forward takes no use_flash_attention switch (models/mixtral/modeling_mixtral.py)
GAUDI_ALWAYS_FUSED = ("mixtral",)

_LLAMA_3_ROPE = {
    "rope_type": "llama3",
    "factor": 8.0,
    "low_freq_factor": 1.0,
    "high_freq_factor": 4.0,
    "original_max_position_embeddings": 8192,
}


def _preset(model_type: str, extra: dict | None = None, **settings) -> dict:
    return {"model_type": model_type, **settings, "config_extra": extra or {}}


# The models' own config.json figures; `params` is the published parameter count, which
# tests/test_causal_lm.py checks against the model built on the meta device.
PRESETS: dict[str, dict] = {
    "llama-3.1-8b": _preset(
        "llama",
        {"rope_scaling": _LLAMA_3_ROPE, "rms_norm_eps": 1e-5},
        hidden=4096,
        layers=32,
        heads=32,
        kv_heads=8,
        intermediate=14336,
        vocab=128256,
        max_positions=131072,
        rope_theta=500000.0,
    ),
    "llama-3.1-70b": _preset(
        "llama",
        {"rope_scaling": _LLAMA_3_ROPE, "rms_norm_eps": 1e-5},
        hidden=8192,
        layers=80,
        heads=64,
        kv_heads=8,
        intermediate=28672,
        vocab=128256,
        max_positions=131072,
        rope_theta=500000.0,
    ),
    "mistral-7b": _preset(
        "mistral",
        {"rms_norm_eps": 1e-5},
        hidden=4096,
        layers=32,
        heads=32,
        kv_heads=8,
        intermediate=14336,
        vocab=32000,
        max_positions=32768,
        rope_theta=10000.0,
        sliding_window=4096,
    ),
    "mixtral-8x7b": _preset(
        "mixtral",
        {"rms_norm_eps": 1e-5},
        hidden=4096,
        layers=32,
        heads=32,
        kv_heads=8,
        intermediate=14336,
        vocab=32000,
        max_positions=32768,
        rope_theta=1e6,
        experts=8,
        experts_per_token=2,
    ),
    "qwen2.5-7b": _preset(
        "qwen2",
        {"rms_norm_eps": 1e-6},
        hidden=3584,
        layers=28,
        heads=28,
        kv_heads=4,
        intermediate=18944,
        vocab=152064,
        max_positions=131072,
        rope_theta=1e6,
        tie_embeddings=False,
    ),
    "qwen3-8b": _preset(
        "qwen3",
        {"rms_norm_eps": 1e-6},
        hidden=4096,
        layers=36,
        heads=32,
        kv_heads=8,
        head_dim=128,
        intermediate=12288,
        vocab=151936,
        max_positions=40960,
        rope_theta=1e6,
        tie_embeddings=False,
    ),
    "qwen3-30b-a3b": _preset(
        "qwen3_moe",
        {"rms_norm_eps": 1e-6, "norm_topk_prob": True},
        hidden=2048,
        layers=48,
        heads=32,
        kv_heads=4,
        head_dim=128,
        intermediate=768,
        vocab=151936,
        max_positions=40960,
        rope_theta=1e6,
        experts=128,
        experts_per_token=8,
        tie_embeddings=False,
    ),
}
# The published parameter counts (the model cards'); None where none is published exactly.
PUBLISHED_PARAMS = {
    "llama-3.1-8b": 8_030_261_248,
    "mistral-7b": 7_241_732_096,
    "mixtral-8x7b": 46_702_792_704,
    "qwen2.5-7b": 7_615_616_512,
}


def config_keys(model_type: str) -> dict[str, str]:
    """Spec setting -> config key for this family."""
    return {**COMMON_KEYS, **FAMILY_KEYS[model_type]}


def settings_of(model_type: str) -> tuple[str, ...]:
    """The shape settings a spec may write for this family."""
    return tuple(config_keys(model_type))


def transformers_config(model: dict) -> dict:
    """The config (as config.json holds it) of a resolved causal_lm model dict: the settings'
    config keys over the extras a preset or config folder gave. Unset settings (None) are left
    to transformers' defaults for the family."""
    model_type = model["model_type"]
    config = {"model_type": model_type, **(model.get("config_extra") or {})}
    for setting, key in config_keys(model_type).items():
        value = model.get(setting)
        if value is None:
            continue
        config[key] = bool(value) if setting == "tie_embeddings" else value
        config.update(SWITCHED_ON.get(model_type, {}).get(setting, {}))
    heads, hidden = config.get("num_attention_heads"), config.get("hidden_size")
    if model_type in DERIVED_HEAD_DIM and heads and hidden and config.get("head_dim") == hidden // heads:
        del config["head_dim"]  # the family's own default: the same model, the same config
    return config
