"""Named model presets (`preset = "llama-2-70b"`) and the tiny shapes `--smoke` shrinks models to.

A preset is a set of model settings with the same names a spec uses; settings written in the
spec override it. Figures are the published architectures (the models' own configs).
"""

from __future__ import annotations

from .causal_lm import PRESETS as CAUSAL_LM_PRESETS
from .flux import PRESETS as FLUX_PRESETS
from .flux import SMOKE as FLUX_SMOKE

# SD3's MMDiT: hidden = 64 * depth, heads = depth, head dim 64; the caption projection
# is as wide as the hidden size (derived, so a preset with another depth stays consistent).
_MMDIT_D24 = {
    "depth": 24,
    "patch": 2,
    "in_channels": 16,
    "joint_attention_dim": 4096,
    "pooled_projection_dim": 2048,
    "pos_embed_max_size": 192,
    "qk_norm": "none",
}
_MMDIT_D38 = {**_MMDIT_D24, "depth": 38, "qk_norm": "rms_norm"}

_LLAMA_2_70B = {
    "hidden": 8192,
    "layers": 80,
    "heads": 64,
    "kv_heads": 8,
    "intermediate": 28672,
    "vocab": 32000,
    "max_positions": 4096,
}

PRESETS: dict[str, dict[str, dict]] = {
    "mmdit": {
        "sd3-medium": _MMDIT_D24,
        "mmdit-d24": _MMDIT_D24,
        "sd3-large": _MMDIT_D38,
        "mmdit-d38": _MMDIT_D38,
    },
    "sd3": {
        "sd3-medium": _MMDIT_D24,
        "sd3-large": _MMDIT_D38,
    },
    "llama": {
        "llama-2-7b": {
            "hidden": 4096,
            "layers": 32,
            "heads": 32,
            "kv_heads": 32,
            "intermediate": 11008,
            "vocab": 32000,
            "max_positions": 4096,
        },
        "llama-2-13b": {
            "hidden": 5120,
            "layers": 40,
            "heads": 40,
            "kv_heads": 40,
            "intermediate": 13824,
            "vocab": 32000,
            "max_positions": 4096,
        },
        "llama-2-70b": _LLAMA_2_70B,
        # Stable Beluga 2 is a fine-tune of Llama-2-70B: same architecture.
        "stable-beluga-2": _LLAMA_2_70B,
    },
}

PRESETS["flux"] = FLUX_PRESETS

# `model causal_lm` takes every preset: the Llama-2 shapes above (model_type llama) and the
# transformers families' (catalog/causal_lm.py); `model llama` also takes the Llama-3.1 ones.
_LLAMA_2 = dict(PRESETS["llama"])
PRESETS["causal_lm"] = {
    **{
        name: {"model_type": "llama", **shape, "config_extra": {}} for name, shape in PRESETS["llama"].items()
    },
    **CAUSAL_LM_PRESETS,
}
PRESETS["llama"].update(
    {name: shape for name, shape in CAUSAL_LM_PRESETS.items() if shape["model_type"] == "llama"}
)

# --smoke: the smallest shapes that still run every code path of the real model.
SMOKE_MODEL = {
    "mmdit": {
        "depth": 2,
        "heads": 2,
        "head_dim": 32,
        "joint_attention_dim": 64,
        "pooled_projection_dim": 64,
        "pos_embed_max_size": 16,
        "text_tokens": 16,
    },
    "llama": {
        "hidden": 128,
        "layers": 2,
        "heads": 4,
        "intermediate": 256,
        "vocab": 1024,
        "max_positions": 256,
    },
}
# a mixture of experts keeps routing (2 of 4 experts), a sliding window stays shorter than the
# smoke sequence (64 tokens), so both paths run
SMOKE_EXPERTS = {"experts": 4, "experts_per_token": 2}
SMOKE_SLIDING_WINDOW = 32
SMOKE_MODEL["sd3"] = {**SMOKE_MODEL["mmdit"], "t5_tokens": 16}
SMOKE_MODEL["flux"] = FLUX_SMOKE
# A Llama whose head_dim is not hidden / heads (q and o not square) keeps that path, shrunk:
# the smoke model's 4 heads x 16 = 64 query width against its hidden size of 128.
SMOKE_LLAMA_HEAD_DIM = 16
