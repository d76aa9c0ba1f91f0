"""The low-level reading of a weights folder, without torch: its JSON configs (bounded), its
safetensors headers against the tensors a model holds, and the one error every mistake becomes.

One job: the file-level rules every model kind's folder shares (checkpoints/folder.py and
checkpoints/flux.py read the kinds). Everything a user can get wrong comes out as a
`CheckpointError` (a message and a hint, in the user's terms).
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
from .tensors import HeaderError, compare_tensors, read_safetensors_header

CONFIG_LIMIT = 1 * 2**20
MAX_SHARDS = 10_000
TRANSFORMERS_WEIGHTS = "model.safetensors"
DIFFUSERS_WEIGHTS = "diffusion_pytorch_model.safetensors"
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
    model_type: str | None = None  # a causal LM's family
    extra: dict = field(default_factory=dict)  # a causal LM's config keys beyond the settings


def must_be_folder(folder: Path, path: str) -> None:
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


def read_config(file: Path, folder: str, what: str = "config.json") -> dict:
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


def config_integer(config: dict, key: str, file: str, kind: str | None = None, name: str | None = None):
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


def check_tensors(folder: Path, where: str, weights: str, expected: dict | None) -> int:
    """The tensors the folder's files hold, against `expected` (None: the headers are read and
    must be sound, but the part's model is not modelled here)."""
    files = weight_files(folder, where, weights)
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


def weight_files(folder: Path, where: str, weights: str) -> list[str]:
    """The safetensors files: the one file, or those its index names (plain names in the folder)."""
    index = folder / f"{weights}.index.json"
    if index.exists():
        weight_map = read_config(index, where, index.name).get("weight_map")
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
