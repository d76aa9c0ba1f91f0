"""Checkpoint tensors: a causal LM's tensor list as benchc counts it (the model its config builds,
on the meta device, plan/census.py) and the closed-form MMDiT list against the real transformers and
diffusers models (meta device), round trips through files save_pretrained really writes (one file
and sharded), hostile safetensors headers refused in plain words, and the comparison's report.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
import tracemalloc

import pytest

from benchc.checkpoints.tensors import (
    HeaderError,
    compare_tensors,
    expected_mmdit_tensors,
    read_safetensors_header,
)

from helpers import HEAVY, REPO


def expected_llama_tensors(hidden, layers, heads, kv_heads, head_dim, intermediate, vocab, **config):
    """The tensors benchc expects in a Llama checkpoint: counted from the model on the meta device."""
    from benchc.plan.census import checkpoint_tensors

    return checkpoint_tensors({"model_type": "llama", "hidden_size": hidden, "num_hidden_layers": layers,
                               "num_attention_heads": heads, "num_key_value_heads": kv_heads,
                               "head_dim": head_dim, "intermediate_size": intermediate, "vocab_size": vocab,
                               **config})  # fmt: skip


LLAMAS = {
    "grouped-query": dict(hidden=64, layers=2, heads=4, kv_heads=2, head_dim=16, intermediate=96, vocab=128),
    "head_dim-not-hidden/heads": dict(
        hidden=48, layers=1, heads=4, kv_heads=1, head_dim=24, intermediate=80, vocab=100,
    ),
    "tied": dict(
        hidden=32, layers=3, heads=2, kv_heads=2, head_dim=16, intermediate=64, vocab=64,
        tie_word_embeddings=True,
    ),
}  # fmt: skip
MMDITS = {
    "depth1-no-qk-norm": dict(
        depth=1, heads=2, head_dim=8, patch=2, in_channels=4, out_channels=4, joint_attention_dim=24,
        caption_projection_dim=16, pooled_projection_dim=12, pos_embed_max_size=8, qk_norm="none",
    ),
    "depth2-rms-caption-not-hidden-in-not-out": dict(
        depth=2, heads=3, head_dim=8, patch=1, in_channels=4, out_channels=8, joint_attention_dim=20,
        caption_projection_dim=40, pooled_projection_dim=10, pos_embed_max_size=6, qk_norm="rms_norm",
    ),
    "depth3-rms": dict(
        depth=3, heads=2, head_dim=16, patch=2, in_channels=16, out_channels=16, joint_attention_dim=32,
        caption_projection_dim=32, pooled_projection_dim=24, pos_embed_max_size=12, qk_norm="rms_norm",
    ),
}  # fmt: skip


def _llama(hidden, layers, heads, kv_heads, head_dim, intermediate, vocab, tie_word_embeddings=False):
    from transformers import LlamaConfig, LlamaForCausalLM

    config = LlamaConfig(
        hidden_size=hidden, num_hidden_layers=layers, num_attention_heads=heads, num_key_value_heads=kv_heads,
        head_dim=head_dim, intermediate_size=intermediate, vocab_size=vocab,
        tie_word_embeddings=tie_word_embeddings, attention_bias=False, mlp_bias=False,
    )  # fmt: skip
    return LlamaForCausalLM(config)


def _mmdit(depth, heads, head_dim, patch, qk_norm, sample_size=32, **rest):
    from diffusers import SD3Transformer2DModel

    return SD3Transformer2DModel(
        sample_size=sample_size, patch_size=patch, num_layers=depth, attention_head_dim=head_dim,
        num_attention_heads=heads, qk_norm=None if qk_norm == "none" else qk_norm, **rest,
    )  # fmt: skip


def _shapes(model) -> dict[str, tuple[int, ...]]:
    return {k: tuple(v.shape) for k, v in model.state_dict().items()}


# ------------------------------------------------------------------ closed forms against the libraries


@pytest.mark.parametrize("name", LLAMAS)
def test_llama_counted_tensors_equal_transformers_state_dict(name):
    import torch

    with torch.device("meta"):
        model = _llama(**LLAMAS[name])
    real = _shapes(model)
    assert "model.rotary_emb.inv_freq" in dict(model.named_buffers())  # a buffer, but not persistent
    assert not any("rotary" in k for k in real)
    if LLAMAS[name].get("tie_word_embeddings"):
        # state_dict() lists the tied head (the embedding itself); save_pretrained drops it
        assert model.lm_head.weight is model.model.embed_tokens.weight
        assert real.pop("lm_head.weight") == real["model.embed_tokens.weight"]
    assert expected_llama_tensors(**LLAMAS[name]) == real


@pytest.mark.parametrize("name", MMDITS)
def test_mmdit_closed_form_equals_diffusers_state_dict(name):
    import torch

    with torch.device("meta"):
        model = _mmdit(**MMDITS[name])
    real = _shapes(model)
    assert expected_mmdit_tensors(**MMDITS[name]) == real
    assert list(expected_mmdit_tensors(**MMDITS[name])) == list(real)
    last = f"transformer_blocks.{MMDITS[name]['depth'] - 1}."
    assert not any(k.startswith((last + "ff_context", last + "attn.to_add_out")) for k in real)


def test_mmdit_sample_size_changes_no_shape_and_pos_embed_needs_max_size():
    import torch

    config = MMDITS["depth2-rms-caption-not-hidden-in-not-out"]
    with torch.device("meta"):
        small, large = _mmdit(**config, sample_size=16), _mmdit(**config, sample_size=96)
        unbounded = _mmdit(**{**config, "pos_embed_max_size": None}, sample_size=24)
    assert _shapes(small) == _shapes(large) == expected_mmdit_tensors(**config)
    assert "pos_embed.pos_embed" in dict(unbounded.named_buffers())  # kept, but not persistent
    assert _shapes(unbounded) == expected_mmdit_tensors(**{**config, "pos_embed_max_size": None})
    assert "pos_embed.pos_embed" not in expected_mmdit_tensors(**{**config, "pos_embed_max_size": None})


def test_mmdit_refuses_an_unknown_qk_norm():
    with pytest.raises(ValueError, match="rms_norm"):
        expected_mmdit_tensors(**{**MMDITS["depth3-rms"], "qk_norm": "layer_norm"})


# ------------------------------------------------------------------ round trips through real files

DTYPE_NAMES = {"torch.bfloat16": "BF16", "torch.float16": "F16", "torch.float32": "F32"}


def _read_folder(folder) -> dict[str, tuple[str, tuple[int, ...]]]:
    """Every shard's header merged; a name in two shards fails the test."""
    found: dict[str, tuple[str, tuple[int, ...]]] = {}
    for shard in sorted(folder.glob("*.safetensors")):
        header = read_safetensors_header(shard)
        assert not found.keys() & header.keys(), f"a tensor in two shards: {found.keys() & header.keys()}"
        found |= header
    return found


@pytest.mark.parametrize("name, shard", [("tied", None), ("grouped-query", "40KB")])
def test_llama_saved_files_hold_the_closed_form(tmp_path, name, shard):
    import torch

    torch.manual_seed(0)
    model = _llama(**LLAMAS[name]).to(torch.bfloat16)
    model.model.norm.weight.data = model.model.norm.weight.data.float()  # one F32 among the BF16
    model.save_pretrained(tmp_path, safe_serialization=True, **({"max_shard_size": shard} if shard else {}))
    shards = sorted(tmp_path.glob("*.safetensors"))
    assert (len(shards) > 2) == bool(shard), [p.name for p in shards]
    found = _read_folder(tmp_path)
    expected = expected_llama_tensors(**LLAMAS[name])
    assert {k: shape for k, (_, shape) in found.items()} == expected
    saved = model.state_dict()
    assert {k: dtype for k, (dtype, _) in found.items()} == {
        k: DTYPE_NAMES[str(saved[k].dtype)] for k in found
    }
    assert found["model.norm.weight"][0] == "F32" and found["model.embed_tokens.weight"][0] == "BF16"
    if shard:
        index = json.loads((tmp_path / "model.safetensors.index.json").read_text())
        assert set(index["weight_map"]) == set(found)
    assert compare_tensors(expected, found) == []
    wrong = expected_llama_tensors(**{**LLAMAS[name], "intermediate": LLAMAS[name]["intermediate"] // 2})
    assert len(compare_tensors(wrong, found)) == 5 + 1  # 3 per layer, at least 2 layers: capped


@pytest.mark.parametrize(
    "name, shard", [("depth3-rms", None), ("depth2-rms-caption-not-hidden-in-not-out", "8KB")]
)
def test_mmdit_saved_files_hold_the_closed_form(tmp_path, name, shard):
    import torch

    torch.manual_seed(0)
    model = _mmdit(**MMDITS[name]).to(torch.float16)
    model.save_pretrained(tmp_path, safe_serialization=True, **({"max_shard_size": shard} if shard else {}))
    shards = sorted(tmp_path.glob("*.safetensors"))
    assert (len(shards) > 2) == bool(shard), [p.name for p in shards]
    found = _read_folder(tmp_path)
    assert {k: shape for k, (_, shape) in found.items()} == expected_mmdit_tensors(**MMDITS[name])
    assert {dtype for dtype, _ in found.values()} == {"F16"}
    assert compare_tensors(expected_mmdit_tensors(**MMDITS[name]), found) == []


# ------------------------------------------------------------------ hostile headers


def _safetensors(header: bytes, length: int | None = None, data: bytes = b"") -> bytes:
    """A file's bytes: the header length (the true one unless given), the header, the data."""
    return (len(header) if length is None else length).to_bytes(8, "little") + header + data


def _entry(**fields) -> bytes:
    """A header of one tensor 'w' (8 data bytes) with some fields changed."""
    entry = {"dtype": "F32", "shape": [2], "data_offsets": [0, 8]} | fields
    return json.dumps({"__metadata__": {"format": "pt"}, "w": entry}).encode()


DATA = bytes(8)
HOSTILE = {  # the file's bytes, and what the message must say
    "empty": (b"", "0 bytes long"),
    "4 bytes": (b"\x10\x00\x00\x00", "4 bytes long"),
    "length 2**63": (_safetensors(b"{}", length=2**63), "claims 9,223,372,036,854,775,808 bytes, more than"),
    "length past the end": (_safetensors(b"{}", length=1000), "holds only 2 after the length"),
    "garbage JSON": (_safetensors(b"{not json"), "not valid JSON"),
    "deeply nested JSON": (_safetensors(b"[" * 200_000), "not valid JSON"),
    "not UTF-8": (_safetensors(b'{"\xff": 1}'), "not UTF-8"),
    "JSON list": (_safetensors(b"[1, 2]"), "is a JSON list, not an object"),
    "entry not an object": (_safetensors(b'{"w": [1]}'), "'w' is not an object"),
    "no dtype": (_safetensors(_entry(dtype=7), data=DATA), "'w' has no dtype"),
    "shape [-1]": (_safetensors(_entry(shape=[-1]), data=DATA), "non-negative whole numbers"),
    "shape of bools": (_safetensors(_entry(shape=[True]), data=DATA), "non-negative whole numbers"),
    "one offset": (_safetensors(_entry(data_offsets=[0]), data=DATA), "not two whole numbers"),
    "offsets reversed": (_safetensors(_entry(data_offsets=[8, 0]), data=DATA), "bytes 8 to 0, outside"),
    "offsets past the end": (
        _safetensors(_entry(data_offsets=[0, 16]), data=DATA),
        "bytes 0 to 16, outside the 8 data bytes",
    ),
    # issue 34: offsets that hold no data, or less or more than the shape takes
    "offsets [0, 0]": (
        _safetensors(_entry(data_offsets=[0, 0]), data=DATA),
        "holds 0 bytes of data, where its shape [2] in F32 takes 8",
    ),
    "offsets short": (_safetensors(_entry(data_offsets=[0, 4]), data=DATA), "holds 4 bytes of data"),
    "a bf16 shape over f32 bytes": (
        _safetensors(_entry(dtype="BF16"), data=DATA),
        "its shape [2] in BF16 takes 4",
    ),
}


@pytest.mark.parametrize("case", HOSTILE)
def test_hostile_header_is_refused_in_plain_words(tmp_path, case):
    content, message = HOSTILE[case]
    path = tmp_path / "model.safetensors"
    path.write_bytes(content)
    with pytest.raises(HeaderError) as caught:
        read_safetensors_header(path)
    text = str(caught.value)
    assert text.startswith(f"{path}: ") and message in text
    assert "Traceback" not in text and "Error" not in text.removeprefix(str(path))
    assert caught.value.__cause__ is None and isinstance(caught.value, ValueError)


def test_a_well_formed_header_is_read_and_metadata_skipped(tmp_path):
    path = tmp_path / "ok.safetensors"
    path.write_bytes(_safetensors(_entry(shape=[2, 1]), data=DATA))
    link = tmp_path / "link.safetensors"  # the Hugging Face cache links snapshots to blobs
    link.symlink_to(path)
    assert read_safetensors_header(path) == read_safetensors_header(link) == {"w": ("F32", (2, 1))}
    with pytest.raises(HeaderError, match="more than the 10 bytes"):
        read_safetensors_header(path, limit=10)


def test_only_the_header_is_read(tmp_path):
    path = tmp_path / "big.safetensors"
    path.write_bytes(_safetensors(_entry(shape=[2**24], data_offsets=[0, 2**26])))
    os.truncate(path, path.stat().st_size + 2**26)  # 64 MiB of (sparse) tensor data
    tracemalloc.start()
    try:
        assert read_safetensors_header(path) == {"w": ("F32", (2**24,))}
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < 2**20, f"reading the header allocated {peak:,} bytes"


def test_a_fifo_a_folder_and_a_missing_file_are_refused_without_blocking(tmp_path):
    fifo = tmp_path / "model.safetensors"
    os.mkfifo(fifo)
    outcome: list[object] = []

    def read() -> None:
        try:
            outcome.append(read_safetensors_header(fifo))
        except Exception as exc:  # kept for the assertions below
            outcome.append(exc)

    thread = threading.Thread(target=read, daemon=True)
    thread.start()
    thread.join(timeout=5)
    if thread.is_alive():  # it opened the FIFO: give it a writer so the thread ends, then fail
        os.close(os.open(fifo, os.O_WRONLY | os.O_NONBLOCK))
        pytest.fail("read_safetensors_header blocked on a FIFO")
    assert isinstance(outcome[0], HeaderError) and "not a regular file" in str(outcome[0])
    with pytest.raises(HeaderError, match="not a regular file"):
        read_safetensors_header(tmp_path)
    with pytest.raises(HeaderError, match="cannot be read"):
        read_safetensors_header(tmp_path / "absent.safetensors")


# ------------------------------------------------------------------ the comparison


def test_compare_reports_missing_unexpected_and_mismatched_in_order():
    expected = {"a.weight": (4, 2), "model.layers.0.mlp.up_proj.weight": (352, 128), "b.weight": (3,)}
    found = {"model.layers.0.mlp.up_proj.weight": ("BF16", (512, 256)), "b.weight": (3,), "c.bias": (9,)}
    assert compare_tensors(expected, found) == [
        "a.weight: the model has it [4, 2], the files do not",
        "c.bias: the files hold it [9], the model has no such tensor",
        "model.layers.0.mlp.up_proj.weight: the files hold [512, 256], the model has [352, 128]",
    ]
    assert compare_tensors(expected, {k: ("F16", v) for k, v in expected.items()}) == []


def test_compare_truncates_each_category_in_natural_order():
    expected = {f"model.layers.{i}.w": (2,) for i in range(12)} | {f"x{i}": (1,) for i in range(3)}
    found = {f"extra.{i}": (1,) for i in range(7)} | {f"x{i}": (2,) for i in range(3)}
    problems = compare_tensors(expected, found)
    assert [p.split(":")[0] for p in problems[:5]] == [f"model.layers.{i}.w" for i in (0, 1, 2, 3, 4)]
    assert problems[5] == "and 7 more tensors missing from the files"
    assert [p.split(":")[0] for p in problems[6:11]] == [f"extra.{i}" for i in range(5)]
    assert problems[11] == "and 2 more tensors the model does not have"
    assert [p.split(":")[0] for p in problems[12:]] == ["x0", "x1", "x2"]  # 3 mismatches: not capped
    assert len(compare_tensors(expected, found, shown=20)) == 12 + 7 + 3


@pytest.mark.integration
def test_the_module_imports_no_heavy_library():
    code = (
        "import sys, benchc.checkpoints.tensors\n"
        f"print(sorted(m for m in sys.modules if m.split('.')[0] in {HEAVY!r}))"
    )
    proc = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == "[]"
