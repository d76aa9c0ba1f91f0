"""Generation (S5): grouped-query attention without repeated keys and values, benchc's decode
loop (a fixed number of tokens, greedy on the device, no host synchronisation per token,
its decode step compiled whole) under the tuned tier, transformers' generate under plain,
and the same tokens either way."""

from __future__ import annotations

import json
import os

import pytest
import torch
from codegen_helpers import plan_literal
from program_helpers import FrameCounter, compile_point, load_program
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_leaves
from warm_launch import warm_run

from helpers import REPO, run_cli

ONE_DEVICE = ("parallel.tensor=1", "infer.precision=fp32")


class ShapeRecorder(TorchDispatchMode):
    """Every tensor shape the operators below it produce."""

    def __init__(self) -> None:
        super().__init__()
        self.shapes = set()

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        for tensor in tree_leaves(out):
            if isinstance(tensor, torch.Tensor):
                self.shapes.add(tuple(tensor.shape))
        return out


@pytest.mark.integration
def test_generation_attends_to_grouped_heads_without_repeating_the_cache(tmp_path):
    """S5's grouped-query attention (model_llama.py.j2's grouped_sdpa, registered through
    transformers' attention interface): decoding with a static cache creates no tensor of the
    query-head count over the whole cache length (transformers' SDPA path does: the check can
    fail), and its tokens equal transformers' own greedy generate."""
    from transformers import LlamaConfig, LlamaForCausalLM

    point = compile_point(tmp_path, "beluga-infer.bench", "parallel.tensor=1", "infer.precision=fp32")
    module = load_program(point / "bench.py")
    model_plan, run = module.PLAN["model"], module.PLAN["infer"]
    config = model_plan["config"]
    heads, kv_heads = config["num_attention_heads"], config["num_key_value_heads"]
    assert kv_heads < heads and config["attn_implementation"] == "benchc_grouped_sdpa"
    prompt = torch.randint(0, config["vocab_size"], (run["batch"], run["input_tokens"]))
    cache = run["input_tokens"] + run["output_tokens"] - 1  # the last token is never attended from
    head_dim = config["hidden_size"] // heads
    repeated, cached = (run["batch"], heads, cache, head_dim), (run["batch"], kv_heads, cache, head_dim)

    def generate(model):
        recorder = ShapeRecorder()
        with torch.no_grad(), recorder:
            tokens = model.generate(
                input_ids=prompt, attention_mask=torch.ones_like(prompt), do_sample=False, pad_token_id=0,
                max_new_tokens=run["output_tokens"], min_new_tokens=run["output_tokens"],
                cache_implementation="static",
            )  # fmt: skip
        return tokens, recorder.shapes

    torch.manual_seed(0)
    grouped = module.build_model(model_plan).eval()
    torch.manual_seed(0)
    reference = LlamaForCausalLM(LlamaConfig(**{**config, "attn_implementation": "sdpa"})).eval()
    tokens, shapes = generate(grouped)
    expected, reference_shapes = generate(reference)
    assert cached in shapes and cached in reference_shapes  # the static cache: the length is right
    assert repeated in reference_shapes  # transformers repeats the cache's K/V for every query head
    assert repeated not in shapes
    assert torch.equal(tokens, expected)


def probe(tmp_path, tier: str) -> tuple[dict, dict, dict]:
    """S5 shrunk under `tier`, run in this process's interpreter by tests/window_probe.py:
    the metrics, the host syncs counted in each timed call, and the plan."""
    point = compile_point(tmp_path / tier, "beluga-infer.bench", *ONE_DEVICE, f"optimize={tier}")
    metrics_path, counts_path = tmp_path / f"{tier}.json", tmp_path / f"{tier}-counts.json"
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    done = warm_run(REPO / "tests" / "window_probe.py", [point / "bench.py", metrics_path, counts_path], env,
                    REPO, [point / "bench.py"])  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    plan = plan_literal((point / "bench.py").read_text())
    return json.loads(metrics_path.read_text()), json.loads(counts_path.read_text()), plan


@pytest.mark.integration
def test_tuned_decoding_waits_for_the_device_at_no_token_and_plain_generate_at_every_one(tmp_path):
    """The timed calls alternate a one-token call and a full call (TTFT, then TPOT from the
    rest). Tuned (benchc's loop): no host sync in any of them. Plain (transformers'
    generate, as users call it): a known number per token, 2 with the pinned transformers
    (its mask builder checks the padding mask, and its loop reads the finished flag), so the
    counter sees syncs where there are some. The two tiers make the same tokens."""
    tuned, tuned_counts, plan = probe(tmp_path, "tuned")
    plain, plain_counts, _ = probe(tmp_path, "plain")
    run = plan["infer"]
    tokens = run["output_tokens"]
    assert tuned["optimize_detail"]["decode"] == "loop" and plain["optimize_detail"]["decode"] == "generate"
    calls = 2 * run["steps"]
    assert tuned_counts["windows"] == plain_counts["windows"] == calls and tuned_counts["ops"] > 1000
    assert tuned_counts["syncs_per_window"] == [0] * calls
    one_token, full = plain_counts["syncs_per_window"][0::2], plain_counts["syncs_per_window"][1::2]
    assert len(set(one_token)) == len(set(full)) == 1  # the same in every call
    assert (full[0] - one_token[0]) == 2 * (tokens - 1)
    assert tuned["generation"]["first_sequence"] == plain["generation"]["first_sequence"]
    assert len(tuned["generation"]["first_sequence"]) == tokens
    for metrics in (tuned, plain):  # timed the same way
        assert metrics["status"] == "ok" and metrics["generation"]["tpot_s"] > 0
        # the distributions (issue 36, item 1): TTFT over the measured one-token calls,
        # inter-token latency from a time mark after every token of the measured full calls
        # (the marks add no host sync: the counts above are with them on)
        latency, measured = metrics["generation"]["latency_s"], run["steps"] - run["warmup"]
        assert latency["ttft"]["samples"] == measured and latency["itl_missing"] is None
        assert latency["itl"]["samples"] == measured * (tokens - 1)
        for kind in ("ttft", "itl"):
            d = latency[kind]
            assert 0 < d["p50"] <= d["p90"] <= d["p99"] and d["mean"] > 0
        # the marks and the call's clock agree: the mean gap is the time per output token
        assert latency["itl"]["mean"] == pytest.approx(metrics["generation"]["tpot_s"], rel=0.5)


@pytest.mark.integration
def test_the_decode_step_compiles_whole_and_never_per_token(tmp_path):
    """The loop's decode step under torch.compile (fullgraph: a graph break would fail): one
    graph for the first bucket and one with the bucket's length symbolic for the rest (the
    smoke plan's 16 + 32 tokens span buckets of 32 and 48 keys), reused for every token (the
    position is a device tensor, so no recompilation per token); the tokens equal the eager
    loop's and transformers' greedy generate's; and no tensor repeats the cached keys and
    values for every query head."""
    point = compile_point(tmp_path, "beluga-infer.bench", *ONE_DEVICE)
    module = load_program(point / "bench.py")
    model_plan, run = module.PLAN["model"], module.PLAN["infer"]
    config = model_plan["config"]
    assert config["num_key_value_heads"] < config["num_attention_heads"]
    torch.manual_seed(0)
    model = module.build_model(model_plan).eval()
    prompt = torch.randint(0, config["vocab_size"], (run["batch"], run["input_tokens"]))
    tokens = run["output_tokens"]
    counter = FrameCounter()
    compiled = module.DecodeLoop(model, prompt, tokens, {"backend": counter})
    eager = module.DecodeLoop(model, prompt, tokens, None)
    recorder = ShapeRecorder()
    with torch.no_grad():
        first = compiled(tokens)
        again = compiled(tokens)  # a second call: the cache reset, nothing recompiled
        with recorder:
            expected = eager(tokens)
        reference = model.generate(
            input_ids=prompt, attention_mask=torch.ones_like(prompt), do_sample=False, pad_token_id=0,
            max_new_tokens=tokens, min_new_tokens=tokens, cache_implementation="static",
        )  # fmt: skip
    assert len(counter.graphs) == 2 and min(counter.graphs) > 50
    assert torch.equal(first, expected) and torch.equal(again, expected) and torch.equal(expected, reference)
    assert first.shape == (run["batch"], run["input_tokens"] + tokens)
    heads, kv_heads = config["num_attention_heads"], config["num_key_value_heads"]
    head_dim = config["hidden_size"] // heads
    cache = run["input_tokens"] + tokens
    assert (run["batch"], kv_heads, cache, head_dim) in recorder.shapes  # the static cache
    assert (run["batch"], heads, cache, head_dim) not in recorder.shapes


@pytest.mark.parametrize("target", ["h100", "gaudi2"])
def test_each_target_decodes_the_way_its_tier_says(target):
    """Tuned on CUDA: benchc's loop with its decode step compiled (under CUDA graphs, as the
    spec asks graphs); plain: transformers' generate. Gaudi: optimum-habana's generate in
    both tiers (already a fixed-length loop with ignore_eos and HPU graphs there)."""
    from codegen_helpers import spec_files

    for tier in ("tuned", "plain"):
        files = spec_files("beluga-infer.bench", target, overrides=[f"optimize={tier}"])
        knobs = plan_literal(files["bench.py"])["optimize"]["knobs"]
        if target == "gaudi2":
            assert knobs["decode"] == "generate"
        else:
            assert knobs["decode"] == ("loop" if tier == "tuned" else "generate")
            assert knobs["compile"] == ("on" if tier == "tuned" else "off")


def test_a_compiled_or_graphed_generation_must_warm_up_before_it_measures():
    """The first call of tuned generation on CUDA compiles its decode step; under plain with
    graphs it captures them: either would be measured with infer.warmup = 0."""

    def check(*sets):
        args = [arg for s in ("infer.warmup=0", *sets) for arg in ("--set", s)]
        return run_cli("check", "specs/beluga-infer.bench", "--target", "h100", *args, cwd=REPO)

    tuned = check()
    assert tuned.code == 2 and "--set[1]:1:14" in tuned.err
    assert "the first call compiles (optimize = tuned compiles on h100)" in tuned.err
    graphed = check("optimize=plain")
    assert graphed.code == 2 and "the first call captures its graphs (infer.graphs = true)" in graphed.err
    eager = check("optimize=plain", "infer.graphs=false")
    assert eager.code == 0, eager.err


def _habana_function(module: str, qualname: str) -> str:
    """The source text of a function in optimum-habana's installed source (importing it needs
    Habana's plugin): module relative to optimum/habana, qualname Class.method or function."""
    import ast
    import importlib.util
    from pathlib import Path

    spec = importlib.util.find_spec("optimum")
    base = Path(next(iter(spec.submodule_search_locations))) / "habana"
    path = base / module
    text = path.read_text()
    body = ast.parse(text).body
    for name in qualname.split("."):
        node = next(n for n in body if isinstance(n, (ast.ClassDef, ast.FunctionDef)) and n.name == name)
        body = node.body
    return ast.get_source_segment(text, node)


def test_gaudi_generate_with_ignore_eos_reads_nothing_from_the_device_per_token():
    """Gaudi keeps optimum-habana's generate in both tiers: the program passes ignore_eos and
    static shapes, and in optimum-habana's source that makes the greedy loop's stop a host
    comparison (the step counter against the length), with no end-of-sequence criterion
    (whose check reads the device). Bound to the installed source, which CI pins."""
    from codegen_helpers import spec_files

    program = spec_files("beluga-infer.bench", "gaudi2")["bench.py"]
    assert '"ignore_eos": True' in program and '"static_shapes": static' in program
    utils = "transformers/generation/utils.py"
    criteria = _habana_function(utils, "GaudiGenerationMixin._get_stopping_criteria")
    eos_unless_ignored = "if not generation_config.ignore_eos and generation_config._eos_token_tensor"
    assert eos_unless_ignored in criteria
    sample = _habana_function(utils, "GaudiGenerationMixin._sample")
    loop = sample[sample.index("while self._has_unfinished_sequences") :]
    assert "cur_len = cur_len + 1" in loop and "token_idx=cur_len" in loop
    assert "if ignore_eos:\n                this_peer_finished = stopping_criteria(" in loop
    reads = [line.strip() for line in loop.splitlines() if ".item()" in line or ".cpu()" in line]
    assert reads == ["streamer.put(next_tokens.cpu())"]  # only with a streamer, which is not passed
    length = _habana_function("transformers/generation/stopping_criteria.py", "gaudi_MaxLengthCriteria_call")
    host_comparison = 'if not kwargs["needs_tensor_output"]:\n            return token_idx >= self.max_length'
    assert host_comparison in length
