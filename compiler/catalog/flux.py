"""Flux (Black Forest Labs' FLUX.1): its presets, how a spec's settings become diffusers'
FluxTransformer2DModel keyword arguments, and the pipeline's other parts as configs.

One job: the published facts of Flux in one place. FLUX.1 [dev] and [schnell] share the
transformer's shape (19 double-stream blocks, 38 single-stream blocks, 24 heads of 128); dev
embeds the distilled guidance value, schnell does not (and is sampled in 4 steps with 256
text tokens). The pipeline around it: CLIP ViT-L/14's text tower (its pooled output, 768
wide, conditions the transformer), the T5 v1.1 XXL encoder (its tokens, 4096 wide) and a
16-channel VAE whose latents are packed 2 x 2 into the transformer's 64 input channels.
Keyword arguments of diffusers' FluxTransformer2DModel / AutoencoderKL /
FlowMatchEulerDiscreteScheduler and transformers' CLIPTextConfig / T5Config.
"""

from __future__ import annotations

from .sd3_components import CLIP_TOKENS
from .sd3_components import FULL as _SD3

PACKING = 2  # latents packed 2 x 2 into tokens: image tokens = (resolution / 16) ** 2
LATENT_CHANNELS = 16  # the VAE's; the transformer reads 16 x 2 x 2 = 64 channels

_FLUX_1 = {
    "depth": 19,
    "single_depth": 38,
    "heads": 24,
    "head_dim": 128,
    "joint_attention_dim": 4096,
    "pooled_projection_dim": 768,
}
PRESETS = {
    # black-forest-labs/FLUX.1-dev: 11,901,408,320 transformer parameters
    "flux.1-dev": {**_FLUX_1, "guidance": True, "text_tokens": 512},
    # black-forest-labs/FLUX.1-schnell: 11,891,178,560 (no guidance embedder), 256 text tokens
    "flux.1-schnell": {**_FLUX_1, "guidance": False, "text_tokens": 256},
}
# the published transformer parameter counts (tests/test_flux.py counts them on the meta device)
PUBLISHED_PARAMS = {"flux.1-dev": 11_901_408_320, "flux.1-schnell": 11_891_178_560}

SMOKE = {"depth": 2, "single_depth": 2, "heads": 2, "head_dim": 32, "joint_attention_dim": 64,
         "pooled_projection_dim": 32, "text_tokens": 16}  # fmt: skip

# The rotary position embedding splits each head into (frame, row, column) axes: Flux's
# (16, 56, 56) of 128. Each axis must be even (pairs of rotated dims), hence head_dim % 32.
HEAD_DIM_MULTIPLE = 32


def rope_axes(head_dim: int) -> list[int]:
    """Flux's axes of the rotary embedding for a head width: an eighth, then two equal halves
    of the rest ((16, 56, 56) for 128)."""
    first = head_dim // 8
    return [first, (head_dim - first) // 2, (head_dim - first) // 2]


def transformer_config(model: dict) -> dict:
    """FluxTransformer2DModel's keyword arguments for the resolved settings."""
    return {
        "patch_size": 1,
        "in_channels": LATENT_CHANNELS * PACKING**2,
        "num_layers": int(model["depth"]),
        "num_single_layers": int(model["single_depth"]),
        "attention_head_dim": int(model["head_dim"]),
        "num_attention_heads": int(model["heads"]),
        "joint_attention_dim": int(model["joint_attention_dim"]),
        "pooled_projection_dim": int(model["pooled_projection_dim"]),
        "guidance_embeds": bool(model["guidance"]),
        "axes_dims_rope": rope_axes(int(model["head_dim"])),
    }


# The pipeline's other parts. CLIP-L is SD3's first tower without its projection (Flux reads
# its pooled output); T5 is SD3's; the VAE is SD3's with Flux's scaling and shift.
FULL_PARTS = {
    "clip_l": {k: v for k, v in _SD3["clip_l"].items() if k != "projection_dim"},
    "t5": dict(_SD3["t5"]),
    "vae": {**_SD3["vae"], "scaling_factor": 0.3611, "shift_factor": 0.1159},
}
# smoke: CLIP-L 32 wide (= the smoke transformer's pooled width), T5 64 (its joint width)
SMOKE_PARTS = {
    "clip_l": {**FULL_PARTS["clip_l"], "hidden_size": 32, "intermediate_size": 64,
               "num_hidden_layers": 1, "num_attention_heads": 2, "vocab_size": 1000},
    "t5": {**FULL_PARTS["t5"], "d_model": 64, "d_ff": 128, "num_layers": 1, "num_heads": 2,
           "d_kv": 32, "vocab_size": 1000},
    "vae": {**FULL_PARTS["vae"], "block_out_channels": [8, 16, 16, 16], "layers_per_block": 1,
            "norm_num_groups": 8, "sample_size": 128},
}  # fmt: skip

# FlowMatchEulerDiscreteScheduler: dev shifts its schedule by the image's length (dynamic
# shifting, as its scheduler_config.json), schnell does not
SCHEDULERS = {
    True: {"base_image_seq_len": 256, "base_shift": 0.5, "max_image_seq_len": 4096,
           "max_shift": 1.15, "num_train_timesteps": 1000, "shift": 3.0,
           "use_dynamic_shifting": True},
    False: {"num_train_timesteps": 1000, "shift": 1.0, "use_dynamic_shifting": False},
}  # fmt: skip
MAX_TEXT_TOKENS = 512  # FluxPipeline refuses a longer max_sequence_length
CLIP_TEXT_TOKENS = CLIP_TOKENS
