"""Bucketed decode (issue 33, item 6): benchc's decode loop reads the static KV cache only up to
the filled length rounded up to the plan's decode bucket, not the whole cache every token; the
decode step compiles at most twice (the bucket's length symbolic), not once per token or per
bucket; the tokens are still transformers' greedy generate's. The bucket is a plan fact (128,
16 under --smoke), shown by `benchc plan` and passed to the program."""

from __future__ import annotations

import pytest
import torch
from codegen_helpers import plan_literal, spec_files
from program_helpers import FrameCounter, compile_point, load_program
from torch.utils._python_dispatch import TorchDispatchMode

from benchc.figures import sig

from helpers import REPO, run_cli

ONE_DEVICE = ("parallel.tensor=1", "infer.precision=fp32")
INPUT, OUTPUT = 64, 400  # a long decode: the cache is 464 keys
BUCKET = 128  # the full-size plan's bucket (the smoke plan's is 16)


class KeysRead(TorchDispatchMode):
    """The key length of every attention (SDPA) call below it, in order."""

    def __init__(self) -> None:
        super().__init__()
        self.lengths = []

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        if "scaled_dot_product" in str(func):
            self.lengths.append(args[1].shape[-2])  # query, key, value: [batch, heads, length, dim]
        return func(*args, **(kwargs or {}))


@pytest.fixture(scope="module")
def program(tmp_path_factory):
    """S5 shrunk for one CPU process in fp32: its module, a model and a 64-token prompt."""
    point = compile_point(tmp_path_factory.mktemp("buckets"), "beluga-infer.bench", *ONE_DEVICE)
    module = load_program(point / "bench.py")
    config = module.PLAN["model"]["config"]
    torch.manual_seed(0)
    model = module.build_model(module.PLAN["model"]).eval()
    prompt = torch.randint(0, config["vocab_size"], (2, INPUT))
    with torch.no_grad():
        expected = model.generate(
            input_ids=prompt, attention_mask=torch.ones_like(prompt), do_sample=False, pad_token_id=0,
            max_new_tokens=OUTPUT, min_new_tokens=OUTPUT, cache_implementation="static",
        )  # fmt: skip
    return module, model, prompt, expected


def bucket_end(filled: int, bucket: int) -> int:
    return min(-(-filled // bucket) * bucket, INPUT + OUTPUT)


@pytest.mark.integration
@pytest.mark.parametrize("bucket", [BUCKET, 16])
def test_each_decode_step_reads_the_cache_up_to_its_bucket_not_the_whole_cache(program, bucket):
    """64 input and 400 output tokens: each token's attention reads the keys up to the filled
    length rounded up to the bucket (the prefill up to the prompt's bucket), on average at
    most 0.75 of the 464-key cache (0.68 with buckets of 128; today's loop read all of it,
    1.0), and the tokens equal transformers' greedy generate's, which reads the whole cache."""
    module, model, prompt, expected = program
    layers = module.PLAN["model"]["config"]["num_hidden_layers"]
    loop = module.DecodeLoop(model, prompt, OUTPUT, None, bucket)
    recorder = KeysRead()
    with torch.no_grad(), recorder:
        tokens = loop(OUTPUT)
    assert torch.equal(tokens, expected)
    filled = [INPUT, *range(INPUT + 1, INPUT + OUTPUT)]  # the prefill, then each decode step
    assert recorder.lengths == [bucket_end(n, bucket) for n in filled for _ in range(layers)]
    decode = recorder.lengths[layers:]
    share = sum(decode) / len(decode) / (INPUT + OUTPUT)
    assert share <= 0.75
    if bucket == BUCKET:
        assert share == pytest.approx(0.685, abs=0.005)  # 128, 256, 384 and 464 keys


@pytest.mark.integration
def test_the_decode_step_compiles_at_most_twice_whatever_the_buckets(program):
    """The decode step under torch.compile (a counting backend, fullgraph): the 399 decode
    steps pass through 4 buckets (128, 256, 384 and 464 keys after the 64-token prompt); the
    step compiles for the first, then once with the bucket's length symbolic for all the
    others (it comes in as an input's length), none more on a second call (its position is a
    device tensor: no recompilation per token either), and the same tokens as the eager loop
    and transformers' greedy generate. A graph per bucket would compile the full-size S5's
    80-layer step 16 times for its 16 buckets."""
    module, model, prompt, expected = program
    counter = FrameCounter()
    compiled = module.DecodeLoop(model, prompt, OUTPUT, {"backend": counter}, BUCKET)
    with torch.no_grad():
        first = compiled(OUTPUT)
        graphs = len(counter.graphs)
        again = compiled(OUTPUT)
    buckets = {bucket_end(n, BUCKET) for n in range(INPUT + 1, INPUT + OUTPUT)}
    assert buckets == {128, 256, 384, 464}
    assert graphs == len(counter.graphs) == 2
    assert all(nodes > 50 for nodes in counter.graphs)  # the whole step, in each
    assert torch.equal(first, expected) and torch.equal(again, expected)


def test_the_decode_bucket_is_a_plan_fact_passed_to_the_program():
    """128 keys for a full-size plan (optimum-habana's figure), 16 under --smoke (S5's smoke
    16 + 32 tokens span 3 buckets), none for a dynamic cache; `benchc plan` says how the
    decode reads the cache, and the program's PLAN carries the bucket to its DecodeLoop."""
    full = plan_literal(spec_files("beluga-infer.bench", "h100")["bench.py"])
    assert full["infer"]["decode_bucket"] == 128
    dynamic = spec_files("beluga-infer.bench", "h100", overrides=["infer.kv_cache=dynamic",
                                                                  "infer.graphs=false"])  # fmt: skip
    assert plan_literal(dynamic["bench.py"])["infer"]["decode_bucket"] is None
    shown = run_cli("plan", "specs/beluga-infer.bench", "--target", "h100", cwd=REPO)
    assert shown.code == 0, shown.err
    rule = "decode    attention reads the KV cache up to the filled length rounded up to 128 keys"
    assert rule in shown.out
    smoke = run_cli("plan", "specs/beluga-infer.bench", "--target", "cpu", "--smoke", cwd=REPO)
    assert "rounded up to 16 keys" in smoke.out
    plain = run_cli("plan", "specs/beluga-infer.bench", "--target", "h100", "--set", "optimize=plain",
                    cwd=REPO)  # fmt: skip
    assert "the whole static cache every step (transformers' generate)" in plain.out


@pytest.mark.integration
def test_a_calibrated_cpu_decode_run_is_reported_as_bytes_per_second_against_the_copy_bandwidth(tmp_path):
    """One smoke S5 run on the CPU (one process), `benchc calibrate`, then the report and
    estimate: decode is shown as its achieved bytes/s per device and its share of the measured
    copy bandwidth (in the table and the explaining sentence), not as an MFU against the
    matmul peak; the run's metrics record the decode bucket (16 under --smoke)."""
    import json
    import os
    import subprocess
    import sys

    def benchc(*args: str) -> str:
        done = subprocess.run([sys.executable, "-m", "benchc", *args], cwd=REPO, capture_output=True,
                              text=True, timeout=600, env=dict(os.environ))  # fmt: skip
        assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
        return done.stdout

    db = str(tmp_path / "results.db")
    one = [arg for s in ("cluster.devices_per_node=1", "parallel.tensor=1") for arg in ("--set", s)]
    benchc("run", "specs/beluga-infer.bench", "--target", "cpu", "--smoke", *one, "-o", str(tmp_path / "b"),
           "--db", db)  # fmt: skip
    (metrics_path,) = (tmp_path / "b").glob("beluga_70b_infer/cpu/*/runs/*/metrics.json")
    generation = json.loads(metrics_path.read_text())["generation"]
    assert generation["decode_bucket"] == 16 and generation["decode_bytes_per_s"] > 0
    benchc("calibrate", "--target", "cpu", "--smoke", "-o", str(tmp_path / "cal"), "--db", db)
    benchc("report", "--db", db, "-o", str(tmp_path / "out"))
    page = (tmp_path / "out" / "report.md").read_text()
    lines = [line for line in page.splitlines() if line.startswith("| ")]
    header = [c.strip() for c in lines[0].strip("|").split("|")]
    row = dict(zip(header, (c.strip() for c in lines[1].strip("|").split("|"))))
    assert "MFU (measured)" not in header
    moved = generation["decode_bytes_per_s"]
    assert row["decode (GB/s per device)"] == sig(moved / 1e9)
    assert row["decode / HBM"] == "-"  # the cpu states no HBM bandwidth
    share = row["decode / copy (measured)"]
    assert share.endswith("%") and float(share.rstrip("%")) > 0
    sentence = next(line for line in page.splitlines() if line.startswith("- cpu at ") and "copy" in line)
    assert "decode moved " in sentence and f"{share} of the measured " in sentence, sentence
    assert "copy bandwidth; the datasheet states no HBM bandwidth" in sentence
    assert "decode is bound by memory, not by the matmul peak" in sentence
    assert "TFLOP/s" not in sentence  # no MFU against the matmul peak for decode
    estimate = benchc("estimate", "specs/beluga-infer.bench", "--target", "cpu", "--smoke", *one, "--db", db)
    decode = next(line for line in estimate.splitlines() if line.startswith("  decode      "))
    assert "cpu states no HBM bandwidth; measured: at the " in decode and "copy bandwidth at least" in decode


@pytest.mark.integration
def test_a_sliding_window_layer_reads_only_the_buckets_its_window_reaches(write, tmp_path):
    """A Mistral (every layer windowed, 40 keys), 64 input and 150 output tokens, buckets of 32:
    each decode step's attention reads from the window's oldest key rounded down to the bucket,
    never the whole filled cache (at most window + 2 buckets, against up to 214), the tokens
    equal transformers' greedy generate's, and the step compiles at most three times (the
    window's start becomes symbolic as the bucket's end did)."""
    window, bucket, output = 40, 32, 150
    model = (
        'model_type = "mistral"; hidden = 64; layers = 2; heads = 4; kv_heads = 2; intermediate = 96; '
        f"vocab = 256; max_positions = 1024; sliding_window = {window}"
    )
    infer = f"precision = fp32; input_tokens = {INPUT}; output_tokens = {output}"
    path = write("m.bench", f"experiment m {{\n  model causal_lm {{ {model} }}\n  infer {{ {infer} }}\n"
                 "  targets = [cpu]\n}\n")  # fmt: skip
    assert run_cli("compile", str(path), "-o", str(tmp_path / "out")).code == 0
    module = load_program(tmp_path / "out/m/cpu/default/bench.py")
    torch.manual_seed(0)
    model = module.build_model(module.PLAN["model"]).eval()
    prompt = torch.randint(0, 256, (2, INPUT))
    with torch.no_grad():
        expected = model.generate(
            input_ids=prompt, attention_mask=torch.ones_like(prompt), do_sample=False, pad_token_id=0,
            max_new_tokens=output, min_new_tokens=output,
        )  # fmt: skip
    recorder = KeysRead()
    with torch.no_grad(), recorder:
        assert torch.equal(module.DecodeLoop(model, prompt, output, None, bucket)(output), expected)
    decode = recorder.lengths[2:]  # after the prefill's two layers
    assert max(decode) <= window + 2 * bucket < INPUT + output
    for step, filled in enumerate(range(INPUT + 1, INPUT + output)):
        start = max(0, (filled - window) // bucket * bucket)
        assert decode[2 * step] == min(-(-filled // bucket) * bucket, INPUT + output) - start
    counter = FrameCounter()
    compiled = module.DecodeLoop(model, prompt, output, {"backend": counter}, bucket)
    with torch.no_grad():
        assert torch.equal(compiled(output), expected)
    assert len(counter.graphs) <= 3
