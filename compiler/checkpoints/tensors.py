"""Does a local weights folder hold the tensors the spec's model has? Read safetensors headers, compare.

Pure standard library: `benchc check` uses this, and check must never import torch, diffusers or
transformers. A .safetensors file is 8 bytes (little-endian u64 header length N), N bytes of UTF-8
JSON `{name: {"dtype", "shape", "data_offsets"}, "__metadata__": {...}}`, then the tensor data;
only the header is read. A causal LM's expected names and shapes are counted from the model its
config builds (plan/census.py: save_pretrained's state_dict, without a tied head); the MMDiT's
are a closed form of what diffusers builds and saves (tests/test_checkpoint_tensors.py holds
both to the real libraries):

- MMDiT: diffusers' `SD3Transformer2DModel` with no dual-attention layers. The last block is
  `context_pre_only` (its norm1_context is an AdaLayerNormContinuous, it has no to_add_out and no
  ff_context). `pos_embed.pos_embed` is saved only when pos_embed_max_size is set; sample_size then
  changes no shape. caption_projection_dim sets only the context_embedder's output.
"""

from __future__ import annotations

import json
import math
import os
import re
import stat
from collections.abc import Mapping
from pathlib import Path

Shape = tuple[int, ...]
HEADER_LIMIT = 100 * 2**20  # real headers are well under 1 MB; refuse to read more than this


class HeaderError(ValueError):
    """A file that is not a well-formed safetensors file; the message says why, in plain words."""


def _name(text: str, width: int = 80) -> str:
    return repr(text) if len(text) <= width else repr(text[:width]) + "..."


def _is_int(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def read_safetensors_header(path: Path, limit: int = HEADER_LIMIT) -> dict[str, tuple[str, Shape]]:
    """The tensors of one .safetensors file: name -> (dtype, shape), read from its header only.

    Raises HeaderError when the file is not a regular file or its header is malformed.
    """
    path = Path(path)
    try:
        info = os.stat(path)
    except OSError as exc:
        raise HeaderError(f"{path}: cannot be read ({exc.strerror or exc})") from None
    if not stat.S_ISREG(info.st_mode):  # a FIFO or device would block or never end: never open it
        raise HeaderError(f"{path}: is not a regular file, so it cannot be a safetensors file")
    size = info.st_size
    if size < 8:
        raise HeaderError(
            f"{path}: is {size} bytes long, too short for a safetensors file "
            "(the header length alone takes 8 bytes)"
        )
    try:
        with open(path, "rb") as file:
            length = int.from_bytes(file.read(8), "little")
            if length > limit:
                raise HeaderError(
                    f"{path}: its header claims {length:,} bytes, more than the {limit:,} bytes "
                    "a safetensors header may take here; the file is damaged or not a safetensors file"
                )
            if length > size - 8:
                raise HeaderError(
                    f"{path}: its header claims {length:,} bytes but the file holds only {size - 8:,} "
                    "after the length; the file is truncated or not a safetensors file"
                )
            raw = file.read(length)
    except OSError as exc:
        raise HeaderError(f"{path}: cannot be read ({exc.strerror or exc})") from None
    if len(raw) != length:
        raise HeaderError(f"{path}: ended before its header did (was it changed while being read?)")
    try:
        header = json.loads(raw.decode("utf-8"))
    except UnicodeDecodeError:
        raise HeaderError(f"{path}: its header is not UTF-8 text; this is not a safetensors file") from None
    except (ValueError, RecursionError):
        raise HeaderError(f"{path}: its header is not valid JSON; this is not a safetensors file") from None
    if not isinstance(header, dict):
        raise HeaderError(f"{path}: its header is a JSON {type(header).__name__}, not an object of tensors")
    data_size = size - 8 - length
    tensors: dict[str, tuple[str, Shape]] = {}
    for name, entry in header.items():
        if name == "__metadata__":
            continue
        tensors[name] = _entry(path, name, entry, data_size)
    return tensors


# bytes per element of safetensors' dtypes (its Dtype enum); another name is taken on trust
DTYPE_BYTES = {"BOOL": 1, "U8": 1, "I8": 1, "F8_E4M3": 1, "F8_E5M2": 1, "I16": 2, "U16": 2, "F16": 2,
               "BF16": 2, "I32": 4, "U32": 4, "F32": 4, "I64": 8, "U64": 8, "F64": 8}  # fmt: skip


def _entry(path: Path, name: str, entry: object, data_size: int) -> tuple[str, Shape]:
    """One header entry checked: (dtype, shape), or HeaderError naming the tensor and the fault."""

    def bad(why: str) -> HeaderError:
        return HeaderError(f"{path}: the header entry for tensor {_name(name)} {why}")

    if not isinstance(entry, dict):
        raise bad("is not an object with a dtype, a shape and data offsets")
    dtype, shape, offsets = entry.get("dtype"), entry.get("shape"), entry.get("data_offsets")
    if not isinstance(dtype, str) or not dtype:
        raise bad("has no dtype name")
    if not isinstance(shape, list) or not all(_is_int(d) and d >= 0 for d in shape):
        raise bad("has a shape that is not a list of non-negative whole numbers")
    if not (isinstance(offsets, list) and len(offsets) == 2 and all(_is_int(o) for o in offsets)):
        raise bad("has data offsets that are not two whole numbers")
    begin, end = offsets
    if not 0 <= begin <= end <= data_size:
        raise bad(
            f"places its data at bytes {begin:,} to {end:,}, outside the {data_size:,} data bytes "
            "the file holds; the file is truncated or damaged"
        )
    width = DTYPE_BYTES.get(dtype)
    if width is not None:
        elements = math.prod(shape)
        if end - begin != elements * width:
            raise bad(
                f"holds {end - begin:,} bytes of data, where its shape {list(shape)} in {dtype} takes "
                f"{elements * width:,}; the file is damaged or was not written by safetensors"
            )
    return dtype, tuple(shape)


def _linear(prefix: str, out_features: int, in_features: int) -> dict[str, Shape]:
    return {prefix + ".weight": (out_features, in_features), prefix + ".bias": (out_features,)}


def expected_mmdit_tensors(
    depth: int,
    heads: int,
    head_dim: int,
    patch: int,
    in_channels: int,
    out_channels: int,
    joint_attention_dim: int,
    caption_projection_dim: int,
    pooled_projection_dim: int,
    pos_embed_max_size: int | None,
    qk_norm: str,
) -> dict[str, Shape]:
    """The tensors of diffusers' SD3Transformer2DModel (no dual-attention layers): name -> shape.

    qk_norm is "none" or "rms_norm".
    """
    if qk_norm not in ("none", "rms_norm"):
        raise ValueError(f"qk_norm must be 'none' or 'rms_norm', not {qk_norm!r}")
    dim = heads * head_dim
    tensors: dict[str, Shape] = {}
    if pos_embed_max_size:  # a persistent buffer only when the max size is set
        tensors["pos_embed.pos_embed"] = (1, pos_embed_max_size * pos_embed_max_size, dim)
    tensors |= {"pos_embed.proj.weight": (dim, in_channels, patch, patch), "pos_embed.proj.bias": (dim,)}
    tensors |= _linear("time_text_embed.timestep_embedder.linear_1", dim, 256)  # 256 sinusoid channels
    tensors |= _linear("time_text_embed.timestep_embedder.linear_2", dim, dim)
    tensors |= _linear("time_text_embed.text_embedder.linear_1", dim, pooled_projection_dim)
    tensors |= _linear("time_text_embed.text_embedder.linear_2", dim, dim)
    tensors |= _linear("context_embedder", caption_projection_dim, joint_attention_dim)
    for i in range(depth):
        last = i == depth - 1  # context_pre_only: the text stream ends here
        p = f"transformer_blocks.{i}."
        tensors |= _linear(p + "norm1.linear", 6 * dim, dim)
        tensors |= _linear(p + "norm1_context.linear", (2 if last else 6) * dim, dim)
        if qk_norm == "rms_norm":
            tensors |= {p + "attn.norm_q.weight": (head_dim,), p + "attn.norm_k.weight": (head_dim,)}
        for proj in ("to_q", "to_k", "to_v", "add_k_proj", "add_v_proj", "add_q_proj", "to_out.0"):
            tensors |= _linear(p + "attn." + proj, dim, dim)
        if not last:
            tensors |= _linear(p + "attn.to_add_out", dim, dim)
        if qk_norm == "rms_norm":
            tensors |= {
                p + "attn.norm_added_q.weight": (head_dim,),
                p + "attn.norm_added_k.weight": (head_dim,),
            }
        for ff in ("ff",) if last else ("ff", "ff_context"):
            tensors |= _linear(p + ff + ".net.0.proj", 4 * dim, dim)
            tensors |= _linear(p + ff + ".net.2", dim, 4 * dim)
    tensors |= _linear("norm_out.linear", 2 * dim, dim)
    tensors |= _linear("proj_out", patch * patch * out_channels, dim)
    return tensors


def _natural(name: str) -> list[str | int]:
    """Sort key: layers.2 before layers.10 (split parts alternate text and digits, so they compare)."""
    return [int(part) if i % 2 else part for i, part in enumerate(re.split(r"(\d+)", name))]


def compare_tensors(
    expected: Mapping[str, Shape], found: Mapping[str, Shape | tuple[str, Shape]], shown: int = 5
) -> list[str]:
    """What differs between the model's tensors and the files', one line each; [] when they agree.

    found maps names to shapes, or to (dtype, shape) as read_safetensors_header gives them. Each
    category (missing, unexpected, shape mismatch) shows at most `shown` names, then "and N more".
    """
    shapes = {
        name: value[1] if value and isinstance(value[0], str) else value for name, value in found.items()
    }
    missing = sorted(expected.keys() - shapes.keys(), key=_natural)
    unexpected = sorted(shapes.keys() - expected.keys(), key=_natural)
    both = sorted(expected.keys() & shapes.keys(), key=_natural)
    mismatched = [n for n in both if tuple(expected[n]) != tuple(shapes[n])]
    spec = "the model"
    gone = [f"{n}: {spec} has it {list(expected[n])}, the files do not" for n in missing]
    extra = [f"{n}: the files hold it {list(shapes[n])}, {spec} has no such tensor" for n in unexpected]
    wrong = [f"{n}: the files hold {list(shapes[n])}, {spec} has {list(expected[n])}" for n in mismatched]
    return (
        _capped(gone, "tensors missing from the files", shown)
        + _capped(extra, "tensors the model does not have", shown)
        + _capped(wrong, "shape mismatches", shown)
    )


def _capped(lines: list[str], label: str, shown: int) -> list[str]:
    """The first `shown` lines, then one line counting the rest."""
    return lines if len(lines) <= shown else [*lines[:shown], f"and {len(lines) - shown} more {label}"]
