"""The parts of the SD3 pipeline around the MMDiT: text encoders and VAE, as configs.

Full size: SD3's published architecture (CLIP ViT-L/14 and OpenCLIP ViT-bigG/14 text towers,
T5 v1.1 XXL encoder, a 16-channel VAE). Smoke: the smallest parts that keep every code path
and fit the smoke MMDiT (joint width 64 = T5 width = the two CLIP widths side by side;
pooled width 64 = the two CLIP projections side by side). Keyword arguments of
transformers' CLIPTextConfig / T5Config and diffusers' AutoencoderKL.
"""

from __future__ import annotations

CLIP_TOKENS = 77

FULL = {
    "clip_l": {"hidden_size": 768, "intermediate_size": 3072, "num_hidden_layers": 12,
               "num_attention_heads": 12, "projection_dim": 768, "vocab_size": 49408,
               "max_position_embeddings": CLIP_TOKENS, "hidden_act": "quick_gelu"},
    "clip_g": {"hidden_size": 1280, "intermediate_size": 5120, "num_hidden_layers": 32,
               "num_attention_heads": 20, "projection_dim": 1280, "vocab_size": 49408,
               "max_position_embeddings": CLIP_TOKENS, "hidden_act": "gelu"},
    "t5": {"d_model": 4096, "d_ff": 10240, "num_layers": 24, "num_heads": 64, "d_kv": 64,
           "vocab_size": 32128, "feed_forward_proj": "gated-gelu"},
    "vae": {"in_channels": 3, "out_channels": 3, "latent_channels": 16,
            "block_out_channels": [128, 256, 512, 512], "layers_per_block": 2,
            "norm_num_groups": 32, "use_quant_conv": False, "use_post_quant_conv": False,
            "shift_factor": 0.0609, "scaling_factor": 1.5305, "sample_size": 1024,
            "down_block_types": ["DownEncoderBlock2D"] * 4,
            "up_block_types": ["UpDecoderBlock2D"] * 4},
}  # fmt: skip

SMOKE = {
    "clip_l": {**FULL["clip_l"], "hidden_size": 32, "intermediate_size": 64, "num_hidden_layers": 1,
               "num_attention_heads": 2, "projection_dim": 32, "vocab_size": 1000},
    "clip_g": {**FULL["clip_g"], "hidden_size": 32, "intermediate_size": 64, "num_hidden_layers": 1,
               "num_attention_heads": 2, "projection_dim": 32, "vocab_size": 1000},
    "t5": {**FULL["t5"], "d_model": 64, "d_ff": 128, "num_layers": 1, "num_heads": 2, "d_kv": 32,
           "vocab_size": 1000},
    "vae": {**FULL["vae"], "block_out_channels": [8, 16, 16, 16], "layers_per_block": 1,
            "norm_num_groups": 8, "sample_size": 128},
}  # fmt: skip
