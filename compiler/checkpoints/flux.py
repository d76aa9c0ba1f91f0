"""A Flux weights folder read as the model it holds, without torch: a transformer folder
(`config.json` of diffusers' FluxTransformer2DModel and `diffusion_pytorch_model.safetensors`
or its index), or a whole pipeline folder (`model_index.json` of FluxPipeline, and its
transformer, vae, text_encoder (CLIP-L) and text_encoder_2 (T5) folders).

One job: the spec settings a Flux folder implies, its transformer's tensors held to those of
the model its config builds (counted on the meta device by the caller), its other parts'
headers read. A transformer benchc would not build as the folder's config says (other input
channels, patches or rotary axes than every FLUX.1's) is refused: the model counted must be
the model run.
"""

from __future__ import annotations

import json
from pathlib import Path

from ..catalog.flux import LATENT_CHANNELS, PACKING, rope_axes
from .reading import (
    DIFFUSERS_WEIGHTS,
    TRANSFORMERS_WEIGHTS,
    Checkpoint,
    CheckpointError,
    check_tensors,
    config_integer,
    must_be_folder,
    read_config,
)

# spec setting <- config key, and FluxTransformer2DModel's own default where the key is absent
FLUX_SHAPE = {
    "depth": ("num_layers", 19),
    "single_depth": ("num_single_layers", 38),
    "heads": ("num_attention_heads", 24),
    "head_dim": ("attention_head_dim", 128),
    "joint_attention_dim": ("joint_attention_dim", 4096),
    "pooled_projection_dim": ("pooled_projection_dim", 768),
}
FLUX_PARTS = {  # the pipeline's part folders: (library, class) as model_index.json names them
    "transformer": ("diffusers", "FluxTransformer2DModel"),
    "vae": ("diffusers", "AutoencoderKL"),
    "text_encoder": ("transformers", "CLIPTextModel"),
    "text_encoder_2": ("transformers", "T5EncoderModel"),
}


def read_flux(folder: Path, path: str, expected_of) -> Checkpoint:
    """A transformer folder (kind "flux") or a pipeline folder (kind "flux_pipeline", its parts
    listed). expected_of(config) -> {tensor: shape} of the transformer that config builds."""
    if (folder / "model_index.json").is_file():
        return _read_pipeline(folder, path, expected_of)
    config = read_config(folder / "config.json", path)
    shape, tensors = _read_transformer(folder, path, config, path, expected_of)
    return Checkpoint(path, "flux", shape, tensors)


def _read_transformer(folder: Path, path: str, config: dict, where: str, expected_of) -> tuple[dict, int]:
    file = f"{where}/config.json"
    name = config.get("_class_name")
    if name != "FluxTransformer2DModel":
        found = name or config.get("model_type") or "no _class_name"
        raise CheckpointError(f"{file} is for {found}, not diffusers' FluxTransformer2DModel",
                              hint="name a folder saved from FluxTransformer2DModel, or a FluxPipeline's "
                              "folder")  # fmt: skip
    shape = {}
    for setting, (key, default) in FLUX_SHAPE.items():
        value = config_integer(config, key, file, "flux", setting)
        shape[setting] = default if value is None else value
    guidance = config.get("guidance_embeds", False)
    if not isinstance(guidance, bool):
        raise CheckpointError(f"{file}: guidance_embeds = {json.dumps(guidance)[:40]} is not true or false")
    shape["guidance"] = guidance
    channels = LATENT_CHANNELS * PACKING**2
    built = {"in_channels": channels, "patch_size": 1, "out_channels": None,
             "axes_dims_rope": rope_axes(shape["head_dim"])}  # fmt: skip
    for key, value in built.items():
        given = config.get(key, value)
        if key == "out_channels" and given in (None, channels):
            continue
        if (list(given) if isinstance(given, (list, tuple)) else given) != value:
            raise CheckpointError(f"{file}: {key} = {json.dumps(given)[:40]}; benchc builds every Flux "
                                  f"transformer with {key} = {json.dumps(value)} (FLUX.1's)")  # fmt: skip
    if shape["head_dim"] % 32:
        raise CheckpointError(f"{file}: attention_head_dim = {shape['head_dim']} is not a multiple of 32")
    expected = expected_of(shape) if expected_of is not None else None
    return shape, check_tensors(folder, where, DIFFUSERS_WEIGHTS, expected)


def _read_pipeline(folder: Path, path: str, expected_of) -> Checkpoint:
    index = read_config(folder / "model_index.json", path, "model_index.json")
    if index.get("_class_name") != "FluxPipeline":
        found = index.get("_class_name") or "no pipeline"
        raise CheckpointError(f"{path}/model_index.json is for {found}, not FluxPipeline",
                              hint="name the folder FluxPipeline.save_pretrained wrote")  # fmt: skip
    shape, tensors = {}, 0
    for part, (library, name) in FLUX_PARTS.items():
        entry = index.get(part)
        if not (isinstance(entry, list) and entry == [library, name]):
            raise CheckpointError(
                f'{path}/model_index.json: {part} is {json.dumps(entry)[:60]}, not ["{library}", "{name}"]'
            )
        sub, where = folder / part, f"{path}/{part}"
        must_be_folder(sub, where)
        config = read_config(sub / "config.json", where)
        if part == "transformer":
            shape, tensors = _read_transformer(sub, path, config, where, expected_of)
        else:
            weights = TRANSFORMERS_WEIGHTS if library == "transformers" else DIFFUSERS_WEIGHTS
            check_tensors(sub, where, weights, None)
    return Checkpoint(path, "flux_pipeline", shape, tensors, tuple(FLUX_PARTS))
