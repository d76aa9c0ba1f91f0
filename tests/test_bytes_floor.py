"""The roofline's bytes are the bytes the program moves (issue 33, items 11 and 12): a decode
step reads the keys and values up to what its attention reads (the bucket-rounded length, the
whole static cache, or a dynamic cache's filled keys) and only the batch's rows of the input
embedding (a gather; the output head is a matmul over its whole matrix); the optimizer step's
bytes per parameter follow the program's path (fused kernel or torch's unfused passes, weight
decay, momentum, clipping, fp16's GradScaler, DeepSpeed's casts), each against its closed
form in docs/estimate.md."""

from __future__ import annotations

import pytest

from benchc.pipeline import plan_spec
from benchc.plan.roofline import roofline

from helpers import REPO, run_cli

LLAMA = dict(hidden=256, layers=4, heads=4, kv_heads=2, intermediate=512, vocab=1000)
HEAD_DIM = 256 // 4


def _spec(write, workload: str, target: str = "h100", devices: int = 1) -> str:
    model = "; ".join(f"{k} = {v}" for k, v in LLAMA.items())
    return str(write("floor.bench", f"""experiment floor {{
  model llama {{ {model} }}
  {workload}
  cluster {{ nodes = 1; devices_per_node = {devices} }}
  targets = [{target}]
}}
"""))  # fmt: skip


def _plan(spec, *overrides, smoke=False):
    (plan,) = plan_spec(spec, [], list(overrides), smoke=smoke).plans
    return plan


def _memory(phase) -> float:
    return next(b.amount for b in phase.bounds if b.name == "memory")


# ------------------------------------------------------------------ decode


def bucket_read(filled: int, bucket: int | None, cache: int) -> int:
    """What attention reads with `filled` keys in a cache of `cache`: bucketed, or all of it."""
    if bucket is None:
        return cache
    return min(-(-filled // bucket) * bucket, cache)


GENERATION = "infer { batch = 3; input_tokens = 100; output_tokens = 300; kv_cache = %s }"


@pytest.mark.parametrize(
    "target, cache, overrides, bucket",
    [
        ("h100", "static", (), 128),  # tuned: benchc's decode loop, buckets of 128
        ("cpu", "static", (), 128),  # the CPU runs the same loop, eagerly
        ("h100", "static", ("optimize=plain",), None),  # transformers' generate: the whole cache
        ("gaudi2", "static", (), 128),  # optimum-habana's generate, bucket_internal (tuned)
        ("gaudi2", "static", ("optimize=plain",), None),  # optimum-habana's, padded to the full length
        ("h100", "dynamic", ("optimize=plain",), 1),  # a dynamic cache: the filled keys
    ],
)
def test_the_decode_floor_reads_what_the_program_reads(write, target, cache, overrides, bucket):
    """Batch 3, 100 -> 300 tokens (a 400-key cache), one device: each of the 299 decode steps
    reads the weights but the input embedding's table (its 3 rows instead), the keys and
    values up to bucket_read(100 + j), and writes one token's; the prefill reads the weights
    but the table (its 300 rows), writes the input's keys and values and reads them up to
    bucket_read(100) (on Gaudi with buckets the prompt's 100: the cache is padded after it)."""
    plan = _plan(_spec(write, GENERATION % cache, target), *overrides)
    assert plan.workload.decode_bucket == (128 if cache == "static" else None)
    prefill, decode = roofline(plan).phases
    b, h, v, p = 2, LLAMA["hidden"], LLAMA["vocab"], plan.cost.params
    per_token = 2 * LLAMA["layers"] * LLAMA["kv_heads"] * HEAD_DIM * b  # keys and values, all layers
    read = sum(bucket_read(100 + j, bucket, 400) for j in range(1, 300))
    assert _memory(decode) == pytest.approx(299 * b * (p - v * h + 3 * h) + 3 * (read + 299) * per_token)
    first = 100 if target == "gaudi2" and bucket else bucket_read(100, bucket, 400)
    assert _memory(prefill) == pytest.approx(b * (p - v * h + 300 * h) + 3 * (100 + first) * per_token)


def test_the_bucketed_floor_lies_between_the_filled_keys_and_the_whole_cache(write):
    """The three ways of reading the cache, on one shape: the filled keys (the old floor's
    count) < buckets of 128 < the whole static cache every step (transformers' generate)."""
    spec = _spec(write, GENERATION % "static")
    tuned = _memory(roofline(_plan(spec)).phases[1])
    plain = _memory(roofline(_plan(spec, "optimize=plain")).phases[1])
    dynamic = _memory(roofline(_plan(_spec(write, GENERATION % "dynamic"), "optimize=plain")).phases[1])
    assert dynamic < tuned < plain


def test_a_smoke_plan_decodes_in_buckets_of_16(write):
    """--smoke: 16 -> 32 tokens in buckets of 16, so the CPU's smoke run passes through 2 decode
    buckets (32 and 48 keys); its floor counts them."""
    one = ["cluster.devices_per_node=1", "parallel.tensor=1"]
    (plan,) = plan_spec(REPO / "specs" / "beluga-infer.bench", ["cpu"], one, smoke=True).plans
    w, m = plan.workload, plan.model
    assert (w.decode_bucket, w.input_tokens, w.output_tokens) == (16, 16, 32)
    _, decode = roofline(plan).phases
    per_token = 2 * m.layers * m.kv_heads * m.head_dim * 2
    read = sum(bucket_read(16 + j, 16, 48) for j in range(1, 32))
    assert read == 16 * 32 + 15 * 48  # 17 .. 32 keys filled read 32; 33 .. 47 read 48
    weights = 2 * (plan.cost.params - m.vocab * m.hidden + w.batch * m.hidden)
    assert _memory(decode) == pytest.approx(31 * weights + w.batch * (read + 31) * per_token)


def test_the_decode_detail_says_how_the_cache_is_read(write):
    spec = _spec(write, GENERATION % "static")
    tuned = next(b for b in roofline(_plan(spec)).phases[1].bounds if b.name == "memory")
    plain = next(b for b in roofline(_plan(spec, "optimize=plain")).phases[1].bounds if b.name == "memory")
    assert "up to the filled length rounded up to 128 keys" in tuned.detail
    assert "the embedding's 3 rows" in tuned.detail
    assert "the whole static cache every step" in plain.detail


# ------------------------------------------------------------------ the optimizer step


TRAIN = "train {{ precision = {precision}; seq_len = 64; batch = 2; optimizer = {optimizer}{clip} }}"


@pytest.mark.parametrize(
    "target, precision, optimizer, clip, overrides, per_parameter",
    [
        # torch's fused Adam(W) (tuned on CUDA and the CPU): 4 + 4 + 8 read, 4 + 8 written
        ("h100", "bf16", "adamw", False, (), 28),
        ("cpu", "bf16", "adam", False, (), 28),
        # clipping: the norm reads the gradients (4), the scaling reads and writes them (8)
        ("h100", "bf16", "adamw", True, (), 28 + 12),
        # fp16's GradScaler: its pass reads and writes the gradients (the inf check with it)
        ("h100", "fp16", "adamw", False, (), 28 + 8),
        ("h100", "fp16", "adamw", True, (), 28 + 12 + 8),  # the issue's ~48 B
        # torch's unfused Adam(W) (plain): 72, AdamW's decoupled decay (default 0.01) 8 more
        ("h100", "bf16", "adamw", False, ("optimize=plain",), 72 + 8),
        ("h100", "bf16", "adamw(lr = 1e-4, weight_decay = 0.0)", False, ("optimize=plain",), 72),
        ("h100", "bf16", "adam", False, ("optimize=plain",), 72),
        ("h100", "bf16", "adam(lr = 1e-4, weight_decay = 0.1)", False, ("optimize=plain",), 72 + 12),
        # FSDP2 with fp16: torch's foreach kernels (the fused ones fail with ShardedGradScaler)
        ("h100", "fp16", "adamw", True, ("parallel.sharding=fsdp",), 80 + 12 + 8),
        # SGD is always torch's unfused step: 12, momentum 20 more, nesterov 12 more, decay 12
        ("h100", "bf16", "sgd(lr = 0.1)", False, (), 12),
        ("h100", "bf16", "sgd(lr = 0.1, momentum = 0.9)", False, (), 12 + 20),
        ("h100", "bf16", "sgd(lr = 0.1, momentum = 0.9, nesterov = true)", False, (), 12 + 20 + 12),
        ("h100", "bf16", "sgd(lr = 0.1, weight_decay = 0.01)", False, (), 12 + 12),
        # DeepSpeed: its b-byte gradients cast to the fp32 partition and the partition copied
        # back, 2 (b + 4); clipping reads the b-byte gradients' norm; fp16 checks them for
        # overflow (b) and unscales the fp32 partition (8)
        ("h100", "bf16", "adamw", False, ("parallel.sharding=zero2",), 28 + 12),
        ("h100", "bf16", "adamw", True, ("parallel.sharding=zero1",), 28 + 12 + 2),
        ("h100", "fp16", "adamw", True, ("parallel.sharding=zero3",), 28 + 12 + 2 + 2 + 8),
        # Gaudi: Habana's FusedAdamW for AdamW, torch's unfused Adam
        ("gaudi2", "bf16", "adamw", True, (), 28 + 12),
        ("gaudi2", "bf16", "adam", False, (), 72),
    ],
)
def test_the_optimizer_bytes_follow_the_program_s_path(write, target, precision, optimizer, clip, overrides,
                                                        per_parameter):  # fmt: skip
    """The optimizer phase's bytes: per_parameter x the parameters this device updates (P, or
    P / 8 where the states are sharded), at the HBM bandwidth, with the sum in its detail."""
    clipping = "; grad_clip = 1.0" if clip else ""
    workload = TRAIN.format(precision=precision, optimizer=optimizer, clip=clipping)
    plan = _plan(_spec(write, workload, target, devices=8), *overrides)
    _, step = roofline(plan).phases
    (memory,) = step.bounds
    shards = 8 if plan.dims.effective_sharding != "none" else 1
    assert memory.amount == pytest.approx(per_parameter * plan.cost.params / shards)
    assert f"{per_parameter} B x P" + (" / N" if shards > 1 else "") in memory.detail
    if plan.target.hbm_tb_s is not None:  # the cpu states none
        assert memory.seconds == pytest.approx(memory.amount / (plan.target.hbm_tb_s * 1e12))


def test_estimate_shows_the_optimizer_s_parts(write):
    """`benchc estimate` spells the fp16 path's sum: the fused kernel, clipping and the scaler."""
    spec = _spec(write, TRAIN.format(precision="fp16", optimizer="adamw", clip="; grad_clip = 1.0"))
    result = run_cli("estimate", spec, cwd=REPO)
    assert result.code == 0, result.err
    assert "28 + 12 + 8 = 48 B x P" in result.out
    assert "fp16 GradScaler" in result.out and "clipping: the norm" in result.out
