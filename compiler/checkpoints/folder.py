"""A local weights folder read as the model it holds: its config, the spec settings that config
implies, and the names and shapes of the tensors its safetensors files hold (headers only).

One job: read and judge a folder, without torch. Everything a user can get wrong comes out as
a `CheckpointError` (a message and a hint, in the user's terms); the caller locates it at the
spec's `weights` setting. Layouts, as `save_pretrained` writes them:

- causal_lm (and llama): `config.json` (a `model_type` benchc builds; llama for model llama)
  and `model.safetensors` or its index `model.safetensors.index.json` naming the shards; the
  tensors compared with those the model of that config holds, counted by the caller;
- mmdit: `config.json` (_class_name "SD3Transformer2DModel") and
  `diffusion_pytorch_model.safetensors` or its index;
- sd3: a pipeline folder, `model_index.json` (_class_name "StableDiffusion3Pipeline") and one
  folder per part (transformer, vae, text_encoder, text_encoder_2, text_encoder_3), each laid
  out as above;
- flux: a FluxTransformer2DModel folder or a FluxPipeline folder (checkpoints/flux.py).
"""

from __future__ import annotations

import json
from pathlib import Path

from ..catalog.causal_lm import DERIVED_HEAD_DIM, FAMILIES, SWITCHED_ON, config_keys
from .flux import read_flux
from .reading import (
    CONFIG_LIMIT,
    DIFFUSERS_WEIGHTS,
    SAVE_HINT,
    TRANSFORMERS_WEIGHTS,
    Checkpoint,
    CheckpointError,
    check_tensors,
    config_integer,
    must_be_folder,
    read_config,
)
from .tensors import expected_mmdit_tensors

# spec setting <- config key, with the config's default where diffusers has one
MMDIT_SHAPE = {
    "depth": "num_layers",
    "heads": "num_attention_heads",
    "head_dim": "attention_head_dim",
    "patch": "patch_size",
    "in_channels": "in_channels",
    "joint_attention_dim": "joint_attention_dim",
    "caption_projection_dim": "caption_projection_dim",
    "pooled_projection_dim": "pooled_projection_dim",
    "pos_embed_max_size": "pos_embed_max_size",
    "qk_norm": "qk_norm",
}
# The SD3 pipeline's parts: folder -> (library, class) as model_index.json names them.
SD3_PARTS = {
    "transformer": ("diffusers", "SD3Transformer2DModel"),
    "vae": ("diffusers", "AutoencoderKL"),
    "text_encoder": ("transformers", "CLIPTextModelWithProjection"),
    "text_encoder_2": ("transformers", "CLIPTextModelWithProjection"),
    "text_encoder_3": ("transformers", "T5EncoderModel"),
}
# config.json keys that describe the file, not the model
NOT_THE_MODEL = {"architectures", "torch_dtype", "dtype", "transformers_version", "_name_or_path",
                 "auto_map", "model_type", "use_cache", "bos_token_id", "eos_token_id",
                 "pad_token_id"}  # fmt: skip
# config.json keys benchc refuses: the model built would not be the one counted and measured
REFUSED_CONFIG_KEYS = {"quantization_config": "benchc builds and measures the model unquantized"}


def read_checkpoint(path: str, kind: str, expected_of=None) -> Checkpoint:
    """The folder at `path` (absolute) for model `kind`, checked; CheckpointError otherwise.
    expected_of(config) -> {tensor: shape}: the tensors a causal LM of that config holds (the
    plan counts them from the model itself); None: the headers are read, not compared."""
    folder = Path(path)
    must_be_folder(folder, path)
    if kind == "sd3":
        return _read_pipeline(folder, path)
    if kind == "flux":
        return read_flux(folder, path, expected_of)
    if (folder / "model_index.json").is_file() and not (folder / "config.json").exists():
        hint = (
            "for model mmdit name its transformer/ subfolder"
            if kind == "mmdit"
            else "name the folder the causal LM's save_pretrained wrote"
        )
        raise CheckpointError(f"'{path}' is a pipeline folder (model_index.json), not one model's", hint=hint)
    config = read_config(folder / "config.json", path)
    if kind in ("llama", "causal_lm"):
        return _read_causal_lm(folder, path, config, kind, expected_of)
    return _read_mmdit(folder, path, config)


def causal_lm_settings(config: dict, file: str, kind: str) -> tuple[str, dict, dict]:
    """A transformers config.json read as a causal LM: (model_type, the spec settings it gives,
    its other keys). Every size is bounded as the spec bounds the setting (model.KIND.NAME)
    before anything is built from it; a family benchc does not build, a quantized model and
    (under model llama) another family are refused."""
    model_type = config.get("model_type")
    if kind == "llama" and model_type != "llama":
        found = config.get("_class_name") or model_type or "no model_type"
        raise CheckpointError(f'{file} is for {found}, not a Llama (model_type "llama")',
                              hint="write model causal_lm: it builds every family benchc does")  # fmt: skip
    if model_type not in FAMILIES:
        found = json.dumps(model_type)[:40] if model_type is not None else "no model_type"
        raise CheckpointError(f"{file} is for model_type {found}, not a family benchc builds",
                              hint=f"supported model types: {', '.join(FAMILIES)}")  # fmt: skip
    for refused, why in REFUSED_CONFIG_KEYS.items():
        if refused in config:
            raise CheckpointError(f"{file} sets {refused}: {why}",
                                  hint=f"remove {refused} from a copy of the folder")  # fmt: skip
    settings = {}
    for setting, key in config_keys(model_type).items():
        if key not in config or config[key] is None:
            continue
        value = config[key]
        if setting == "tie_embeddings":
            if not isinstance(value, bool):
                raise CheckpointError(f"{file}: {key} = {json.dumps(value)[:40]} is not true or false")
        elif setting == "rope_theta":
            if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 < value < 1e12:
                raise CheckpointError(f"{file}: {key} = {json.dumps(value)[:40]} is not a positive number")
        else:
            value = config_integer(config, key, file, kind, setting)
        settings[setting] = value
    hidden, heads, head_dim = (settings.get(k) for k in ("hidden", "heads", "head_dim"))
    if head_dim is None and model_type in DERIVED_HEAD_DIM and hidden and heads and hidden % heads:
        raise CheckpointError(f"{file}: hidden_size {hidden:,} is not divisible by num_attention_heads "
                              f"{heads:,}, and it gives no head_dim", hint=SAVE_HINT)  # fmt: skip
    if head_dim is not None and head_dim % 2:
        raise CheckpointError(f"{file}: head_dim is {head_dim:,}, an odd number: rotary position "
                              "embeddings rotate pairs of dimensions")  # fmt: skip
    if model_type in SWITCHED_ON and not config.get("use_sliding_window"):
        settings.pop("sliding_window", None)  # the Qwen families: present, but off
    taken = {*config_keys(model_type).values(), *NOT_THE_MODEL, "use_sliding_window"}
    extra = {key: value for key, value in sorted(config.items()) if key not in taken}
    if len(json.dumps(extra)) > CONFIG_LIMIT:
        raise CheckpointError(f"{file}: its other keys take over {CONFIG_LIMIT:,} bytes")
    return model_type, settings, extra


def _read_causal_lm(folder: Path, path: str, config: dict, kind: str, expected_of) -> Checkpoint:
    file = f"{path}/config.json"
    model_type, shape, extra = causal_lm_settings(config, file, kind)
    expected = expected_of({"model_type": model_type, **config}) if expected_of is not None else None
    tensors = check_tensors(folder, path, TRANSFORMERS_WEIGHTS, expected)
    return Checkpoint(path, "causal_lm", shape, tensors, model_type=model_type, extra=extra)


def _read_mmdit(folder: Path, path: str, config: dict, where: str | None = None) -> Checkpoint:
    where = where or path
    file = f"{where}/config.json"
    name = config.get("_class_name")
    if name != "SD3Transformer2DModel":
        found = name or config.get("model_type") or "no _class_name"
        raise CheckpointError(
            f"{file} is for {found}, not diffusers' SD3Transformer2DModel",
            hint="name a folder saved from SD3Transformer2DModel (a pipeline's transformer/ subfolder)",
        )
    if config.get("dual_attention_layers"):
        raise CheckpointError(
            f"{file} has dual_attention_layers (SD3.5 Medium's MMDiT-X), which benchc's "
            "FLOPs and memory model do not cover"
        )
    if config.get("out_channels") not in (None, config.get("in_channels", 16)):
        raise CheckpointError(f"{file}: out_channels differs from in_channels, which benchc does not model")
    shape = {key: config_integer(config, source, file, "mmdit", key) for key, source in MMDIT_SHAPE.items()
             if key != "qk_norm"}  # fmt: skip
    defaults = {
        "depth": 18,
        "heads": 18,
        "head_dim": 64,
        "patch": 2,
        "in_channels": 16,
        "joint_attention_dim": 4096,
        "caption_projection_dim": 1152,
        "pooled_projection_dim": 2048,
        "pos_embed_max_size": 96,
    }  # SD3Transformer2DModel's own defaults
    shape = {key: value if value is not None else defaults[key] for key, value in shape.items()}
    qk_norm = config.get("qk_norm")
    if qk_norm not in (None, "rms_norm"):
        raise CheckpointError(f"{file}: qk_norm = {json.dumps(qk_norm)[:40]}; benchc models none or rms_norm")
    shape["qk_norm"] = qk_norm or "none"
    expected = expected_mmdit_tensors(**shape, out_channels=shape["in_channels"])
    tensors = check_tensors(folder, where, DIFFUSERS_WEIGHTS, expected)
    return Checkpoint(path, "mmdit", shape, tensors)


def _read_pipeline(folder: Path, path: str) -> Checkpoint:
    if not (folder / "model_index.json").exists() and (folder / "config.json").exists():
        raise CheckpointError(
            f"'{path}' has no model_index.json: it holds one model, not a pipeline",
            hint="name the pipeline's folder (the one holding model_index.json); "
            "to train the transformer alone write model mmdit",
        )
    index = read_config(folder / "model_index.json", path, "model_index.json")
    if index.get("_class_name") != "StableDiffusion3Pipeline":
        raise CheckpointError(
            f"{path}/model_index.json is for {index.get('_class_name') or 'no pipeline'}, "
            "not StableDiffusion3Pipeline",
            hint="name the folder StableDiffusion3Pipeline.save_pretrained wrote",
        )
    found = []
    checkpoint = None
    for part, (library, name) in SD3_PARTS.items():
        entry = index.get(part)
        if part == "text_encoder_3" and (entry is None or entry == [None, None]):
            continue  # saved without T5: the pipeline then conditions on zeros
        if not (isinstance(entry, list) and entry == [library, name]):
            raise CheckpointError(
                f'{path}/model_index.json: {part} is {json.dumps(entry)[:60]}, not ["{library}", "{name}"]'
            )
        sub = folder / part
        where = f"{path}/{part}"
        must_be_folder(sub, where)
        config = read_config(sub / "config.json", where)
        if part == "transformer":
            checkpoint = _read_mmdit(sub, path, config, where)
        else:
            weights = TRANSFORMERS_WEIGHTS if library == "transformers" else DIFFUSERS_WEIGHTS
            check_tensors(sub, where, weights, None)
        found.append(part)
    return Checkpoint(path, "sd3", checkpoint.shape, checkpoint.tensors, tuple(found))
