"""A local weights folder read as the model it holds: its config, the spec settings that config
implies, and the names and shapes of the tensors its safetensors files hold (headers only).

One job: read and judge a folder, without torch. Everything a user can get wrong comes out as
a `CheckpointError` (a message and a hint, in the user's terms); the caller locates it at the
spec's `weights` setting. Layouts, as `save_pretrained` writes them:

- llama: `config.json` (model_type "llama") and `model.safetensors` or its index
  `model.safetensors.index.json` naming the shards;
- mmdit: `config.json` (_class_name "SD3Transformer2DModel") and
  `diffusion_pytorch_model.safetensors` or its index;
- sd3: a pipeline folder, `model_index.json` (_class_name "StableDiffusion3Pipeline") and one
  folder per part (transformer, vae, text_encoder, text_encoder_2, text_encoder_3), each laid
  out as above.
"""

from __future__ import annotations

import json
import os
import stat
from dataclasses import dataclass, field
from functools import lru_cache
from importlib import resources
from pathlib import Path

from ..diagnostics import BenchError
from ..files import read_bounded
from .tensors import (
    HeaderError,
    compare_tensors,
    expected_llama_tensors,
    expected_mmdit_tensors,
    read_safetensors_header,
)

CONFIG_LIMIT = 1 * 2**20
MAX_SHARDS = 10_000
TRANSFORMERS_WEIGHTS = "model.safetensors"
DIFFUSERS_WEIGHTS = "diffusion_pytorch_model.safetensors"
# spec setting <- config key, with the config's default where transformers / diffusers has one
LLAMA_SHAPE = {
    "hidden": "hidden_size",
    "layers": "num_hidden_layers",
    "heads": "num_attention_heads",
    "kv_heads": "num_key_value_heads",
    "head_dim": "head_dim",
    "intermediate": "intermediate_size",
    "vocab": "vocab_size",
    "max_positions": "max_position_embeddings",
}
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
SAVE_HINT = "write it with save_pretrained(folder) (safetensors, the default)"


class CheckpointError(Exception):
    def __init__(self, message: str, hint: str | None = None):
        super().__init__(message)
        self.message, self.hint = message, hint


@dataclass
class Checkpoint:
    """What a folder holds: the spec settings its config implies, and how many tensors were
    checked against the model that config builds."""

    path: str
    kind: str
    shape: dict = field(default_factory=dict)
    tensors: int = 0
    parts: tuple[str, ...] = ()  # sd3: the parts found (text_encoder_3 may be absent)


def read_checkpoint(path: str, kind: str) -> Checkpoint:
    """The folder at `path` (absolute) for model `kind`, checked; CheckpointError otherwise."""
    folder = Path(path)
    _must_be_folder(folder, path)
    if kind == "sd3":
        return _read_pipeline(folder, path)
    if (folder / "model_index.json").is_file() and not (folder / "config.json").exists():
        hint = (
            "for model mmdit name its transformer/ subfolder"
            if kind == "mmdit"
            else "name the folder LlamaForCausalLM.save_pretrained wrote"
        )
        raise CheckpointError(f"'{path}' is a pipeline folder (model_index.json), not one model's", hint=hint)
    config = _config(folder / "config.json", path)
    if kind == "llama":
        return _read_llama(folder, path, config)
    return _read_mmdit(folder, path, config)


def _must_be_folder(folder: Path, path: str) -> None:
    try:
        mode = folder.stat().st_mode
    except FileNotFoundError:
        raise CheckpointError(
            f"no such folder: '{path}'",
            hint="weights names a local folder written by save_pretrained; "
            "benchc never downloads (a Hub id is not a path)",
        ) from None
    except OSError as exc:
        raise CheckpointError(f"cannot read '{path}': {exc.strerror or exc}") from None
    if not stat.S_ISDIR(mode):
        raise CheckpointError(
            f"'{path}' is a file, not a folder",
            hint="name the folder save_pretrained wrote, which holds config.json and the .safetensors files",
        )


def _config(file: Path, folder: str, what: str = "config.json") -> dict:
    if not file.exists():
        raise CheckpointError(f"'{folder}' has no {what}", hint=SAVE_HINT)
    try:
        raw = read_bounded(file, str(file), f"a model's {what}", CONFIG_LIMIT)
    except BenchError as exc:
        raise CheckpointError(exc.diagnostics[0].message) from None
    try:
        config = json.loads(raw.decode("utf-8"))
    except (UnicodeDecodeError, ValueError, RecursionError) as exc:
        raise CheckpointError(f"{file} is not valid JSON ({type(exc).__name__})", hint=SAVE_HINT) from None
    if not isinstance(config, dict):
        raise CheckpointError(f"{file} is not a JSON object", hint=SAVE_HINT)
    return config


@lru_cache(maxsize=1)
def _spec_bounds() -> dict[str, dict[str, int]]:
    """model kind -> setting -> the largest value a spec may give it (bench.schema.json)."""
    text = resources.files("benchc.validate").joinpath("bench.schema.json").read_text("utf-8")
    kinds = json.loads(text)["$defs"]["model"]["properties"]
    bounds = {}
    for kind, spec in kinds.items():
        rules = spec.get("properties", {})
        bounds[kind] = {name: rule["maximum"] for name, rule in rules.items() if "maximum" in rule}
    return bounds


def _integer(config: dict, key: str, file: str, kind: str | None = None, name: str | None = None):
    """A config's size, bounded as the spec bounds the setting it stands for (model.KIND.NAME),
    before any arithmetic is done with it: a config saying 20,000,000 layers is refused here,
    not planned for minutes."""
    value = config.get(key)
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or not 0 < value < 2**31:
        raise CheckpointError(f"{file}: {key} = {json.dumps(value)[:40]} is not a positive whole number")
    bound = _spec_bounds().get(kind or "", {}).get(name or "")
    if bound is not None and value > bound:
        raise CheckpointError(f"{file}: {key} = {value:,} is more than benchc plans for: model.{kind}.{name} "
                              f"is at most {bound:,} in a spec")  # fmt: skip
    return value


def _read_llama(folder: Path, path: str, config: dict) -> Checkpoint:
    file = f"{path}/config.json"
    model_type = config.get("model_type")
    if model_type != "llama":
        found = config.get("_class_name") or model_type or "no model_type"
        raise CheckpointError(
            f'{file} is for {found}, not a Llama (model_type "llama")',
            hint="name a folder saved from transformers' LlamaForCausalLM",
        )
    unsupported = [key for key in ("attention_bias", "mlp_bias", "tie_word_embeddings") if config.get(key)]
    if unsupported:
        raise CheckpointError(
            f"{file} sets {', '.join(unsupported)}: benchc models Llama without biases "
            "and with its own output matrix (parameters, FLOPs and memory would be wrong)"
        )
    shape = {name: _integer(config, key, file, "llama", name) for name, key in LLAMA_SHAPE.items()}
    for name in ("hidden", "layers", "heads", "intermediate", "vocab"):
        if shape[name] is None:
            raise CheckpointError(f"{file} has no {LLAMA_SHAPE[name]}", hint=SAVE_HINT)
    shape["kv_heads"] = shape["kv_heads"] or shape["heads"]
    if shape["head_dim"] is None and shape["hidden"] % shape["heads"]:
        raise CheckpointError(f"{file}: hidden_size {shape['hidden']:,} is not divisible by "
                              f"num_attention_heads {shape['heads']:,}, and it gives no head_dim",
                              hint=SAVE_HINT)  # fmt: skip
    shape["head_dim"] = shape["head_dim"] or shape["hidden"] // shape["heads"]
    if shape["head_dim"] % 2:
        raise CheckpointError(f"{file}: head_dim is {shape['head_dim']:,}, an odd number: rotary position "
                              "embeddings rotate pairs of dimensions")  # fmt: skip
    shape["max_positions"] = shape["max_positions"] or 2048  # LlamaConfig's default
    expected = expected_llama_tensors(**{k: v for k, v in shape.items() if k != "max_positions"})
    tensors = _check_tensors(folder, path, TRANSFORMERS_WEIGHTS, expected)
    return Checkpoint(path, "llama", shape, tensors)


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
    shape = {key: _integer(config, source, file, "mmdit", key) for key, source in MMDIT_SHAPE.items()
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
    tensors = _check_tensors(folder, where, DIFFUSERS_WEIGHTS, expected)
    return Checkpoint(path, "mmdit", shape, tensors)


def _read_pipeline(folder: Path, path: str) -> Checkpoint:
    if not (folder / "model_index.json").exists() and (folder / "config.json").exists():
        raise CheckpointError(
            f"'{path}' has no model_index.json: it holds one model, not a pipeline",
            hint="name the pipeline's folder (the one holding model_index.json); "
            "to train the transformer alone write model mmdit",
        )
    index = _config(folder / "model_index.json", path, "model_index.json")
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
        _must_be_folder(sub, where)
        config = _config(sub / "config.json", where)
        if part == "transformer":
            checkpoint = _read_mmdit(sub, path, config, where)
        else:
            weights = TRANSFORMERS_WEIGHTS if library == "transformers" else DIFFUSERS_WEIGHTS
            _check_tensors(sub, where, weights, None)
        found.append(part)
    return Checkpoint(path, "sd3", checkpoint.shape, checkpoint.tensors, tuple(found))


def _check_tensors(folder: Path, where: str, weights: str, expected: dict | None) -> int:
    """The tensors the folder's files hold, against `expected` (None: the headers are read and
    must be sound, but the part's model is not modelled here)."""
    files = _weight_files(folder, where, weights)
    found: dict[str, tuple] = {}
    for name in files:
        try:
            header = read_safetensors_header(folder / name)
        except HeaderError as exc:
            raise CheckpointError(f"{where}/{name}: {exc}", hint=SAVE_HINT) from None
        except OSError as exc:
            raise CheckpointError(f"cannot read {where}/{name}: {exc.strerror or exc}") from None
        found.update({tensor: shape for tensor, (_dtype, shape) in header.items()})
    if expected is None:
        return len(found)
    problems = compare_tensors(expected, found, shown=3)
    if problems:
        raise CheckpointError(
            f"the tensors in {where} do not match the model its config.json describes: "
            + "; ".join(problems),
            hint="the files and config.json come from different models: save both with save_pretrained",
        )
    return len(found)


def _weight_files(folder: Path, where: str, weights: str) -> list[str]:
    """The safetensors files: the one file, or those its index names (plain names in the folder)."""
    index = folder / f"{weights}.index.json"
    if index.exists():
        weight_map = _config(index, where, index.name).get("weight_map")
        if not isinstance(weight_map, dict) or not weight_map:
            raise CheckpointError(f"{where}/{index.name} has no weight_map", hint=SAVE_HINT)
        names = sorted({str(v) for v in weight_map.values()})
        if len(names) > MAX_SHARDS:
            raise CheckpointError(f"{where}/{index.name} names {len(names):,} files; at most {MAX_SHARDS:,}")
        for name in names:
            if os.sep in name or name in (".", "..") or "/" in name or not name.endswith(".safetensors"):
                raise CheckpointError(
                    f"{where}/{index.name} names '{name[:80]}', which is not a "
                    ".safetensors file in the folder"
                )
            if not (folder / name).is_file():
                raise CheckpointError(
                    f"{where} lacks {name}, which {index.name} names",
                    hint="copy every shard save_pretrained wrote",
                )
        return names
    if (folder / weights).is_file():
        return [weights]
    legacy = [p.name for p in folder.glob("*.bin")]
    hint = (
        ("benchc reads safetensors only: load it and save_pretrained it again (safetensors is the default)")
        if legacy
        else SAVE_HINT
    )
    raise CheckpointError(f"{where} has no {weights} (nor {weights}.index.json)", hint=hint)
