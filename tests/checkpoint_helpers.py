"""Real weights folders for tests: tiny real models (transformers' Llama, diffusers' MMDiT and
Flux transformers, the whole SD3 and Flux pipelines) written by their own save_pretrained, with
a marker value in one weight so a test can tell loaded weights from random ones."""

from __future__ import annotations

from pathlib import Path

import torch

MARKER = 7.25  # written into one weight of every checkpoint made here

LLAMA = {
    "hidden_size": 64,
    "num_hidden_layers": 2,
    "num_attention_heads": 4,
    "num_key_value_heads": 2,
    "intermediate_size": 96,
    "vocab_size": 128,
    "max_position_embeddings": 256,
}
MMDIT = {
    "sample_size": 16,
    "patch_size": 2,
    "in_channels": 16,
    "out_channels": 16,
    "num_layers": 2,
    "attention_head_dim": 16,
    "num_attention_heads": 2,
    "joint_attention_dim": 64,
    "caption_projection_dim": 32,
    "pooled_projection_dim": 64,
    "pos_embed_max_size": 32,
}


def llama_checkpoint(folder: Path, **config) -> Path:
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(0)
    model = LlamaForCausalLM(LlamaConfig(**{**LLAMA, **config}))
    with torch.no_grad():
        model.model.norm.weight[0] = MARKER
    model.save_pretrained(folder)
    return folder


def mmdit_checkpoint(folder: Path, **config) -> Path:
    from diffusers import SD3Transformer2DModel

    torch.manual_seed(0)
    model = SD3Transformer2DModel(**{**MMDIT, **config})
    with torch.no_grad():
        model.proj_out.bias[0] = MARKER
    model.save_pretrained(folder)
    return folder


def sd3_checkpoint(folder: Path, program) -> Path:
    """The smoke SD3 pipeline a generated program builds (`program`: the loaded module of a
    compiled sd3 smoke point), saved whole: model_index.json and a folder per part."""
    torch.manual_seed(0)
    plan = program.PLAN["model"]
    pipe = program.build_pipeline(
        plan, program.StableDiffusion3Pipeline, {}, {}, torch.float32, torch.device("cpu")
    )
    with torch.no_grad():
        pipe.transformer.proj_out.bias[0] = MARKER
    pipe.save_pretrained(folder)
    return folder


FLUX = {
    "num_layers": 1,
    "num_single_layers": 2,
    "attention_head_dim": 32,
    "num_attention_heads": 2,
    "joint_attention_dim": 64,
    "pooled_projection_dim": 32,
    "guidance_embeds": True,
    "axes_dims_rope": [4, 14, 14],
}


def flux_checkpoint(folder: Path, **config) -> Path:
    from diffusers import FluxTransformer2DModel

    torch.manual_seed(0)
    model = FluxTransformer2DModel(**{**FLUX, **config})
    with torch.no_grad():
        model.proj_out.bias[0] = MARKER
    model.save_pretrained(folder)
    return folder


def flux_pipeline_checkpoint(folder: Path, program) -> Path:
    """The smoke Flux pipeline a generated program builds (`program`: the loaded module of a
    compiled flux inference smoke point), saved whole: model_index.json and a folder per part."""
    torch.manual_seed(0)
    pipe = program.build_pipeline(
        program.PLAN["model"], program.FluxPipeline, {}, {}, torch.float32, torch.device("cpu")
    )
    with torch.no_grad():
        pipe.transformer.proj_out.bias[0] = MARKER
    pipe.save_pretrained(folder)
    return folder
