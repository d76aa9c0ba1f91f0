"""The pre-flight estimator: parameters and memory against real models built on the meta device,
the roofline's arithmetic on hand-computed cases, `benchc estimate` on every reference spec
(snapshots), references beyond their roofline flagged, and `check` on a point that cannot fit.

Regenerate the snapshots after an intended change with BENCHC_UPDATE_GOLDEN=1.
"""

from __future__ import annotations

import json
import os
import re

import pytest

from benchc.catalog.targets import TARGETS
from benchc.pipeline import plan_spec
from benchc.plan.memory import estimate_memory, kv_cache, parameters, training_phases
from benchc.plan.roofline import optimizer_bytes, roofline

from helpers import GOLDEN, REPO, SPECS, heavy_modules_imported_by, run_cli

GOLDEN_DIR = GOLDEN / "estimate"
UPDATE = os.environ.get("BENCHC_UPDATE_GOLDEN") == "1"
REFERENCE_SPECS = sorted(p.name for p in SPECS.glob("*.bench"))

SMALL_LLAMA = dict(hidden=256, layers=4, heads=4, kv_heads=2, intermediate=512, vocab=1000)


def _plan(spec, *overrides, target=None):
    (plan,) = plan_spec(spec, [target] if target else [], overrides).plans
    return plan


def _size(tensors) -> int:
    return sum(t.numel() * t.element_size() for t in tensors)


def _llama_config(hidden, layers, heads, kv_heads, intermediate, vocab):
    from transformers import LlamaConfig

    return LlamaConfig(
        hidden_size=hidden, num_hidden_layers=layers, num_attention_heads=heads, num_key_value_heads=kv_heads,
        intermediate_size=intermediate, vocab_size=vocab,
    )  # fmt: skip


def _small_spec(write, workload: str) -> str:
    model = "; ".join(f"{k} = {v}" for k, v in SMALL_LLAMA.items())
    return str(
        write(
            "small.bench",
            f"""experiment small {{
  model llama {{ {model} }}
  {workload}
  cluster {{ nodes = 1; devices_per_node = 8 }}
  targets = [h100]
}}
""",
        )
    )


# ------------------------------------------------------------------ parameters


@pytest.mark.parametrize("spec, depth", [("sd3.bench", 24), ("sd3-infer.bench", 38)])
def test_mmdit_parameters_equal_diffusers_on_meta(spec, depth):
    import torch
    from diffusers import SD3Transformer2DModel

    plan = (
        _plan(SPECS / spec, target="gaudi2")
        if spec == "sd3-infer.bench"
        else plan_spec(SPECS / spec).plans[0]
    )
    with torch.device("meta"):
        model = SD3Transformer2DModel(num_layers=depth, num_attention_heads=depth, attention_head_dim=64,
                                      caption_projection_dim=64 * depth, pos_embed_max_size=192,
                                      qk_norm="rms_norm" if depth == 38 else None)  # fmt: skip
    assert parameters(plan)["transformer"] == sum(p.numel() for p in model.parameters())
    if depth == 24:
        assert plan.cost.params == 2_028_328_000


def test_sd3_pipeline_parts_equal_transformers_and_diffusers_on_meta():
    import torch
    from diffusers import AutoencoderKL
    from transformers import CLIPTextConfig, CLIPTextModelWithProjection, T5Config, T5EncoderModel

    from benchc.catalog.sd3_components import FULL

    counts = parameters(_plan(SPECS / "sd3-infer.bench", target="h100"))
    with torch.device("meta"):
        real = {
            "clip_l": CLIPTextModelWithProjection(CLIPTextConfig(**FULL["clip_l"])),
            "clip_g": CLIPTextModelWithProjection(CLIPTextConfig(**FULL["clip_g"])),
            "t5": T5EncoderModel(T5Config(**FULL["t5"])),
            "vae": AutoencoderKL(**FULL["vae"]),
        }
    for name, model in real.items():
        assert counts[name] == sum(p.numel() for p in model.parameters()), name


@pytest.mark.parametrize("preset", ["llama-2-7b", "llama-2-70b"])
def test_llama_parameters_equal_transformers_on_meta(preset):
    import torch
    from transformers import LlamaForCausalLM

    plan = _plan(SPECS / "beluga-train.bench", f'model.llama.preset="{preset}"', target="h100")
    m = plan.model
    with torch.device("meta"):
        model = LlamaForCausalLM(
            _llama_config(m.hidden, m.layers, m.heads, m.kv_heads, m.intermediate, m.vocab)
        )
    assert parameters(plan)["transformer"] == sum(p.numel() for p in model.parameters())
    assert plan.cost.params == {"llama-2-7b": 6_738_415_616, "llama-2-70b": 68_976_648_192}[preset]


# ------------------------------------------------------------------ memory


@pytest.mark.parametrize("sharding", ["none", "fsdp", "zero1", "zero2", "zero3"])
def test_training_states_equal_real_tensors_on_meta(write, sharding):
    """Weights, gradients and AdamW state as the programs keep them, built for real on meta:
    fp32 model, gradients and moments (DDP, FSDP2's fp32 shards); DeepSpeed's 16-bit model and
    gradients, fp32 master copy with its gradient and moments, as the optimizer step holds them.
    Sharded states are / N."""
    import torch
    from transformers import LlamaForCausalLM

    spec = _small_spec(write, "train { precision = bf16; seq_len = 64; batch = 2 }")
    plan = _plan(spec, f"parallel.sharding={sharding}")
    n = plan.parallel.data
    assert n == 8
    with torch.device("meta"):
        model = LlamaForCausalLM(_llama_config(**SMALL_LLAMA))
    zero = sharding.startswith("zero")
    if zero:
        model = model.to(torch.bfloat16)
    params = list(model.parameters())
    grads = [torch.zeros_like(p) for p in params]
    master = [torch.nn.Parameter(p.detach().float()) for p in params] if zero else params
    for p, g in zip(master, grads):
        p.grad = g.float() if zero else g
    optimizer = torch.optim.AdamW(master)
    optimizer.step()
    states = [v for state in optimizer.state.values() for k, v in state.items() if k != "step"]
    fp32_grads = [p.grad for p in master]
    if sharding == "none":
        expected = (_size(params), _size(grads), _size(states))
    elif sharding == "fsdp":
        expected = (_size(params) / n, _size(grads) / n, _size(states) / n)
    elif sharding == "zero2":  # the 16-bit gradients reduced bucket by bucket into the fp32
        # partition; the parameter straddling the partition's end is kept whole
        largest = max(p.numel() for p in params)
        expected = (_size(params), _size(fp32_grads) / n + 4 * largest, (_size(master) + _size(states)) / n)
    else:
        stage = int(sharding[-1])
        expected = (
            _size(params) / (n if stage == 3 else 1),
            _size(grads) / (n if stage == 3 else 1) + _size(fp32_grads) / n,
            (_size(master) + _size(states)) / n,
        )
    # at the optimizer step every gradient is made; the fp32 partition ZeRO-1 and 3 make then
    step = dict(training_phases(plan))["the optimizer step"]
    partition = [p for p in step if p.formula.startswith("the step's fp32 gradient partition")]
    got = (
        sum(p.bytes for p in step if p.name == "weights"),
        sum(p.bytes for p in step if p.name == "gradients") + sum(p.bytes for p in partition),
        sum(p.bytes for p in step if p.name == "optimizer"),
    )
    assert got == pytest.approx(expected, rel=1e-12)
    assert params[0].dtype == (torch.bfloat16 if zero else torch.float32)


def test_inference_weights_and_kv_cache_equal_real_tensors_on_meta(write):
    """Tensor parallel 2: each layer's projections split, the rest whole; transformers'
    StaticCache for this rank's share of the KV heads."""
    import torch
    from transformers import LlamaForCausalLM
    from transformers.cache_utils import StaticCache

    spec = _small_spec(write, "infer { batch = 3; input_tokens = 16; output_tokens = 24 }")
    plan = _plan(spec, "cluster.devices_per_node=2", "parallel.tensor=2")
    config = _llama_config(**SMALL_LLAMA)
    with torch.device("meta"):
        model = LlamaForCausalLM(config).to(torch.bfloat16)
    split = re.compile(r"\.(q|k|v|o|gate|up|down)_proj\.")
    local = sum(
        p.numel() * p.element_size() / (2 if split.search(n) else 1) for n, p in model.named_parameters()
    )
    memory = estimate_memory(plan)
    assert memory.part("weights") == local
    config.num_key_value_heads //= 2
    cache = StaticCache(
        config=config, max_batch_size=3, max_cache_len=16 + 24, device="meta", dtype=torch.bfloat16
    )
    assert (
        kv_cache(plan)
        == memory.part("kv_cache")
        == _size([t for layer in cache.layers for t in (layer.keys, layer.values)])
    )


def test_checkpointing_shrinks_activations_and_a_huge_batch_does_not_fit():
    plan = _plan(SPECS / "sd3.bench", "train.batch=16", target="h100")
    memory = estimate_memory(plan)
    assert memory.fits and memory.activations_on < memory.activations_off / 5
    # the spec does not checkpoint; checkpointing lowers what the peak holds and the peak
    on = "parallel.activation_checkpointing=true"
    checkpointed = estimate_memory(_plan(SPECS / "sd3.bench", "train.batch=16", on, target="h100"))
    assert checkpointed.part("activations") < memory.part("activations") / 2
    assert checkpointed.total < memory.total
    big = estimate_memory(_plan(SPECS / "sd3.bench", "train.batch=64", target="h100"))
    assert big.fits is False and big.total > big.capacity == 80e9


# ------------------------------------------------------------------ roofline


def test_training_roofline_arithmetic_by_hand(write):
    """Llama h 1024, 2 layers, 8 heads, MLP 4096, vocab 1000, seq 128, batch 4 on 8 H100s (DDP)."""
    spec = str(
        write(
            "hand.bench",
            """experiment hand {
  model llama { hidden = 1024; layers = 2; heads = 8; intermediate = 4096; vocab = 1000 }
  train { precision = bf16; seq_len = 128; batch = 4 }
  cluster { nodes = 1; devices_per_node = 8 }
  targets = [h100]
  measure { metric = tokens_per_s }
}
""",
        )
    )
    plan = _plan(spec)
    params = 2 * (4 * 1024**2 + 3 * 1024 * 4096 + 2 * 1024) + 1024 + 2 * 1000 * 1024
    assert plan.cost.params == params == 35_607_552
    matmul = 2 * (4 * 1024**2 + 3 * 1024 * 4096) + 1000 * 1024  # every token's weights
    train = 3 * (2 * matmul * 128 + 2 * 4 * 128**2 * 1024)  # per sequence
    assert train == 26_958_888_960
    passes, optimizer = roofline(plan).phases
    bounds = {b.name: b.seconds for b in passes.bounds}
    assert bounds["compute"] == pytest.approx(train * 32 / 8 / 989e12)  # global batch 32 / 8 devices
    assert bounds["memory"] == pytest.approx(3 * 2 * params / 3.35e12)  # 2 weight reads, 1 gradient write
    assert bounds["interconnect"] == pytest.approx(2 * 7 / 8 * 4 * params / 450e9)  # fp32 all-reduce
    assert passes.binding.name == "interconnect"
    assert optimizer.seconds == pytest.approx(28 * params / 3.35e12)  # AdamW, after the backward
    line = roofline(plan)
    assert line.best == pytest.approx(32 * 128 / (bounds["interconnect"] + optimizer.seconds))  # tokens/s


@pytest.mark.parametrize(
    "optimizer, per_parameter",
    [("adamw", 28), ("adam", 28), ("sgd(lr = 0.1, momentum = 0.9)", 32), ("sgd(lr = 0.1)", 12)],
)
@pytest.mark.parametrize("sharding, shards", [("none", 1), ("fsdp", 8), ("zero1", 8), ("zero3", 8)])
def test_the_optimizer_phase_closed_form(write, optimizer, per_parameter, sharding, shards):
    """The optimizer step, a phase of its own after the backward: torch's fused Adam(W) pass
    reads the fp32 weight, the fp32 gradient and both fp32 moments and writes the weight and
    the moments, 4 + 4 + 8 + 4 + 8 = 28 bytes per parameter; torch's SGD is unfused: 12 (the
    weight and its step read, the weight written), + 20 with momentum (the buffer scaled, the
    gradient added); DeepSpeed adds its casts between the fp32 partition and the bf16 model,
    2 x (2 + 4) = 12 (tests/test_bytes_floor.py has every path). Over the P / shards
    parameters this device updates, at the HBM bandwidth; the step's bound is the forward and
    backward's plus it."""
    train = f"train {{ precision = bf16; seq_len = 64; batch = 2; optimizer = {optimizer} }}"
    spec = _small_spec(write, train)
    plan = _plan(spec, f"parallel.sharding={sharding}")
    line = roofline(plan)
    passes, step = line.phases
    assert (passes.name, step.name) == ("forward+backward", "optimizer")
    assert optimizer_bytes(2) == 28
    if sharding.startswith("zero"):
        per_parameter += 2 * (2 + 4)
    (memory,) = step.bounds
    nbytes = per_parameter * plan.cost.params / shards
    assert memory.name == "memory" and memory.amount == pytest.approx(nbytes)
    assert step.seconds == memory.seconds == pytest.approx(nbytes / 3.35e12)  # H100: 3.35 TB/s
    assert f"{per_parameter} B x P" + (" / N" if shards > 1 else "") in memory.detail
    assert line.seconds == pytest.approx(passes.seconds + step.seconds)
    assert line.best == pytest.approx(8 * 2 * 64 / line.seconds)  # tokens/s of the job
    # the optimizer's bytes are no longer in the forward and backward's memory bound
    fwd_bwd = next(b for b in passes.bounds if b.name == "memory")
    assert fwd_bwd.amount == pytest.approx(plan.workload.grad_accum * 3 * 2 * plan.cost.params)


def test_s1_on_h200_adds_the_optimizer_step_to_the_forward_and_backward():
    """S1 at batch 16 on 16 H200s (DDP, 2,028,328,000 parameters): the forward and backward are
    28.1 ms compute-bound (31.6 ms with the overlapping gradient all-reduce), then AdamW moves
    28 B x P = 56.8 GB at 4.8 TB/s, 11.8 ms: the step takes about 40 ms at best, not 28."""
    plan = _plan(SPECS / "sd3.bench", "train.batch=16", target="h200")
    line = roofline(plan)
    passes, optimizer = line.phases
    bounds = {b.name: b.seconds for b in passes.bounds}
    params = plan.cost.params
    assert params == 2_028_328_000
    assert bounds["compute"] == pytest.approx(plan.cost.train_flops_per_sample * 256 / 16 / 989e12)
    assert bounds["compute"] == pytest.approx(28.1e-3, abs=0.05e-3)
    assert optimizer.seconds == pytest.approx(28 * params / 4.8e12) == pytest.approx(11.83e-3, abs=0.01e-3)
    assert bounds["compute"] + optimizer.seconds == pytest.approx(39.9e-3, abs=0.1e-3)
    assert line.seconds == pytest.approx(max(bounds.values()) + optimizer.seconds)  # 31.6 + 11.8 ms
    assert line.seconds == pytest.approx(43.4e-3, abs=0.1e-3)
    assert line.best == pytest.approx(256 / line.seconds)  # images/s for the job


@pytest.mark.parametrize("spec, phases", [("sd3-infer.bench", ["call"]),
                                          ("beluga-infer.bench", ["prefill", "decode"])])  # fmt: skip
def test_inference_has_no_optimizer_phase(spec, phases):
    assert [p.name for p in roofline(_plan(SPECS / spec, target="h100")).phases] == phases


def test_decode_roofline_arithmetic_by_hand(write):
    """One H100, batch 3, 16 -> 24 tokens: each of 23 decode steps reads the weights (of the
    input embedding only the batch's 3 rows: a gather) and the KV cache up to the filled length
    rounded up to the decode bucket (128 keys: the whole 40-key cache here), and writes its
    token's keys and values; under plain, transformers' generate reads the whole static cache
    too. tokens/s at best = batch x outputs / (prefill + decode)."""
    spec = _small_spec(write, "infer { batch = 3; input_tokens = 16; output_tokens = 24 }")
    for tier in ("tuned", "plain"):
        plan = _plan(spec, "cluster.devices_per_node=1", f"optimize={tier}")
        prefill, decode = roofline(plan).phases
        h, vocab = SMALL_LLAMA["hidden"], SMALL_LLAMA["vocab"]
        weights = 2 * (plan.cost.params - vocab * h + 3 * h)
        per_token = 2 * 4 * 2 * 64 * 2  # keys and values x layers x KV heads x head_dim x bf16
        read = 23 * 40
        memory = {b.name: b.seconds for b in decode.bounds}["memory"]
        assert memory == pytest.approx((23 * weights + 3 * (read + 23) * per_token) / 3.35e12)
        assert decode.binding.name == "memory"
        assert {b.name for b in prefill.bounds} == {"compute", "memory"}  # one device: no collective
        assert roofline(plan).best == pytest.approx(3 * 24 / (prefill.seconds + decode.seconds))


def test_every_target_but_cpu_states_its_interconnect_and_where_from():
    for name, target in TARGETS.items():
        if name == "cpu":
            assert target.scale_up_gb_s is None and target.scale_out_gb_s is None
            continue
        assert target.scale_up_gb_s > target.scale_out_gb_s > 0, name
        assert "assumed typical node" in target.interconnect_source, name


# ------------------------------------------------------------------ the command


def test_estimate_sd3_prints_parameters_and_every_target_and_batch():
    result = run_cli("estimate", "specs/sd3.bench", cwd=REPO)
    assert result.code == 0, result.err
    assert result.out.count("parameters  2,028,328,000") == 6
    headers = re.findall(r"^sd3_mmdit_train / (\w+) / (\S+)$", result.out, flags=re.M)
    assert headers == [(t, p) for t in ("gaudi2", "h100", "a100") for p in ("batch-16", "batch-32")]
    phases = ("roofline    per step: ", "roofline    forward+backward: ", "roofline    optimizer: ")
    for needle in ("per device: fits", "activations", "binds", "at most", "images/s", "MFU", *phases):
        assert needle in result.out, needle


@pytest.mark.parametrize("spec", REFERENCE_SPECS)
def test_estimate_of_every_reference_spec_matches_its_snapshot(spec):
    result = run_cli("estimate", f"specs/{spec}", cwd=REPO)
    assert result.code == 0, result.err
    assert result.err == "" and "Traceback" not in result.out
    golden = GOLDEN_DIR / (spec.removesuffix(".bench") + ".txt")
    if UPDATE:
        golden.parent.mkdir(parents=True, exist_ok=True)
        golden.write_text(result.out)
    assert golden.exists(), f"no snapshot {golden.name}; run with BENCHC_UPDATE_GOLDEN=1"
    assert result.out == golden.read_text()
    data = json.loads(run_cli("estimate", f"specs/{spec}", "--json", cwd=REPO).out)
    assert all(e["memory"]["fits"] for e in data["estimates"])


def test_no_orphan_snapshots():
    assert {p.name for p in GOLDEN_DIR.glob("*.txt")} == {
        s.removesuffix(".bench") + ".txt" for s in REFERENCE_SPECS
    }


def test_references_beyond_their_roofline_are_flagged_with_the_arithmetic():
    data = json.loads(run_cli("estimate", "specs/sd3-infer.bench", "--json", cwd=REPO).out)
    (gaudi2,) = [e for e in data["estimates"] if e["target"] == "gaudi2"]
    (ref,) = gaudi2["references"]
    assert ref["impossible"] and ref["mfu"] == pytest.approx(1.867e15 / 3.2 / 432e12, rel=1e-3)
    assert "584 TFLOP/s per device" in ref["arithmetic"] and "432 TFLOP/s peak" in ref["arithmetic"]
    text = run_cli("estimate", "specs/sd3-infer.bench", "-t", "gaudi2", cwd=REPO).out
    assert 'reference   "gaudi2" 3.2 s/image: IMPOSSIBLE' in text
    # a figure under its roofline is not flagged, and shows its utilisation
    s1 = json.loads(run_cli("estimate", "specs/sd3.bench", "--json", cwd=REPO).out)
    refs = [r for e in s1["estimates"] for r in e["references"]]
    assert refs and not any(r["impossible"] for r in refs) and all(0 < r["mfu"] < 1 for r in refs)
    s5 = json.loads(run_cli("estimate", "specs/beluga-infer.bench", "--json", "-t", "gaudi2", cwd=REPO).out)
    (ref,) = s5["estimates"][0]["references"]
    assert ref["per_device"] and 0 < ref["bandwidth_share"] < 1


TOO_BIG = ("--set", "train.batch=64", "--set", "train.global_batch=32768")  # S4: 64 x 2 x 256


def test_check_warns_of_a_point_that_cannot_fit_and_strict_refuses_it():
    plain = run_cli("check", "specs/beluga-train.bench", "-t", "h100", *TOO_BIG, cwd=REPO)
    assert plain.code == 0, plain.err
    assert plain.out.startswith("ok: ")
    assert re.match(r"^--set\[1\]:1:13: warning: h100 / batch-64_global_batch-32768 will not fit in memory: "
                    r"[\d.,]+ GB per device, [\d.,]+ GB over the 80 GB of one h100", plain.err)  # fmt: skip
    assert "^^" in plain.err and "train.batch = 17 or less fits" in plain.err
    strict = run_cli("check", "--strict", "specs/beluga-train.bench", "-t", "h100", *TOO_BIG, cwd=REPO)
    assert strict.code == 2 and strict.out == ""
    assert re.match(r"^--set\[1\]:1:13: error: h100 / batch-64_global_batch-32768 will not fit", strict.err)
    # the model overflows: at the model (inference builds in its precision, so no build peak)
    states = run_cli("check", "specs/sd3-infer.bench", "-t", "h100", "--set", "model.sd3.depth=120", cwd=REPO)
    assert states.code == 0
    assert states.err.startswith("--set[1]:1:17: warning: ")
    assert "warning: h100 / depth-120 will not fit" in states.err
    assert "the peak is the build" not in states.err
    # an MMDiT built whole in fp32 before FSDP2 shards it: the build is the peak, at the model
    sets = ["--set", "model.mmdit.depth=96", "--set", "parallel.sharding=fsdp", "--set", "train.batch=16"]
    built = run_cli("check", "specs/sd3.bench", "-t", "h100", *sets, cwd=REPO)
    assert built.code == 0 and built.err.startswith("--set[1]:1:19: warning: ")
    assert "the peak is the build: the whole model (609.1 GB) before it is sharded or split" in built.err
    # a Llama too large for one device: tensor parallelism (built on the meta device) fits
    shape = ["model.llama.hidden=8192", "model.llama.layers=48", "model.llama.heads=64",
             "model.llama.kv_heads=8", "model.llama.intermediate=28672", "parallel.tensor=1",
             "cluster.devices_per_node=1", "cluster.nodes=1"]  # fmt: skip
    sets = [a for s in shape for a in ("--set", s)]
    split = run_cli("check", "specs/beluga-infer.bench", "-t", "h100", *sets, cwd=REPO)
    assert "parallel.tensor = 2 on as many devices" in split.err and "fits)" in split.err, split.err
    # where weights, not the build, overflow, the warning says so
    weights = run_cli("check", "specs/beluga-infer.bench", "-t", "a100", "--set", "model.llama.layers=400",
                      cwd=REPO)  # fmt: skip
    assert "the model's weights" in weights.err, weights.err
    assert "hint: a target with more memory (benchc targets)" in weights.err, weights.err
    assert run_cli("check", "--strict", *(str(SPECS / s) for s in REFERENCE_SPECS)).code == 0


@pytest.mark.integration
def test_estimate_and_strict_check_never_import_torch():
    assert heavy_modules_imported_by(
        ["estimate", "specs/sd3.bench"], ["estimate", "--json", "specs/beluga-infer.bench"],
        ["check", "--strict", "specs/beluga-train.bench"],
    ) == []  # fmt: skip


# ------------------------------------------------------------------ measured ceilings


def _calibrated_store(tmp_path, target: str, tflops: dict, memory_tb_s: float, bus: dict, nodes: int = 1,
                      world: int = 2):  # fmt: skip
    """A real store holding one finished calibration of `target`, as benchc calibrate stores it,
    its collectives measured on `nodes` x `world` / `nodes` processes."""
    from benchc.results.calibrations import finish_calibration, start_calibration
    from benchc.results.store import Store

    db = tmp_path / "r.db"
    data = {"schema": "benchc-calibration", "schema_version": 1, "status": "ok", "target": target,
            "host": "node-7", "smoke": False, "nodes": nodes, "world_size": world, "device_name": None,
            "matmul_tflops": tflops, "memory_tb_s": memory_tb_s, "host_to_device_gb_s": None,
            "collectives": {k: {"bus_gb_s": v, "bytes": 1 << 20} for k, v in bus.items()},
            "launch_us": 4.0}  # fmt: skip
    with Store(db) as store:
        calibration_id = start_calibration(store, target=target, host="node-7", smoke=False, world_size=world,
                                           build_path=None, environment={})  # fmt: skip
        finish_calibration(store, calibration_id, "ok", None, data)
    return db


def _without_measured(text: str) -> str:
    """The estimate's text as it is without a calibration: each line's measured part removed."""
    kept = [line.split("; measured")[0].split("; at the measured ceilings")[0] for line in text.splitlines()]
    return "\n".join(line for line in kept if not line.startswith("  calibration ")) + "\n"


def test_estimate_gives_the_measured_figure_after_the_datasheets_on_every_roofline_line(tmp_path):
    from benchc.figures import sig
    from benchc.plan.roofline import Ceilings

    # measured on S1's layout, 2 nodes x 8: its collectives bound S1's links too
    db = _calibrated_store(tmp_path, "h100", {"bf16": 790.0}, 3.0, {"all_reduce": 360.0}, nodes=2, world=16)
    plain = run_cli("estimate", "specs/sd3.bench", "-t", "h100", cwd=REPO)
    calibrated = run_cli("estimate", "specs/sd3.bench", "-t", "h100", "--db", str(db), cwd=REPO)
    assert plain.code == calibrated.code == 0, calibrated.err
    assert _without_measured(calibrated.out) == plain.out  # the datasheet's figures, unchanged
    assert "  calibration measured ceilings (benchc calibrate, node-7, " in calibrated.out
    plan = _plan(SPECS / "sd3.bench", "train.batch=16", target="h100")
    measured = roofline(plan, Ceilings({"bf16": 790e12}, 3.0, {"all_reduce": 360.0}))
    compute = measured.phases[0].bounds[0]
    assert compute.seconds == pytest.approx(roofline(plan).phases[0].bounds[0].seconds * 989 / 790)
    block = calibrated.out.split("\n\n")[0]
    line = next(x for x in block.splitlines() if x.startswith("    compute "))
    assert line.endswith(f"; measured {sig(compute.seconds * 1e3)} ms at 790 TFLOP/s bf16"), line
    bound = next(x for x in block.splitlines() if x.startswith("  bound "))
    assert bound.endswith(f"at the measured ceilings at most {sig(measured.best)} images/s "
                          f"({sig(measured.best / measured.world)} per device)"), bound  # fmt: skip
    assert measured.best < roofline(plan).best  # lower ceilings, a lower bound


def test_the_cpu_gets_a_bound_only_from_a_calibration(tmp_path):
    from benchc.figures import sig
    from benchc.plan.roofline import Ceilings
    from benchc.results.store import Store

    empty = tmp_path / "none.db"
    Store(empty).close()  # a store with no calibration: the output is today's
    before = run_cli("estimate", "specs/sd3.bench", "--smoke", "-t", "cpu", "--db", str(empty), cwd=REPO)
    assert before.code == 0 and before.out == run_cli("estimate", "specs/sd3.bench", "--smoke", "-t", "cpu",
                                                      cwd=REPO).out  # fmt: skip
    assert "bound       none: the target lacks the figures\n" in before.out and "measured" not in before.out
    smoke = plan_spec(SPECS / "sd3.bench", ["cpu"], ["train.batch=16"], smoke=True).plans[0]
    tflops = {smoke.workload.precision: 0.2}
    db = _calibrated_store(tmp_path, "cpu", tflops, 0.018, {"all_reduce": 3.0})
    after = run_cli("estimate", "specs/sd3.bench", "--smoke", "-t", "cpu", "--db", str(db), cwd=REPO)
    assert after.code == 0, after.err
    measured = roofline(smoke, Ceilings({k: v * 1e12 for k, v in tflops.items()}, 0.018, {"all_reduce": 3.0}))
    assert measured.best is not None and roofline(smoke).best is None
    bound = next(x for x in after.out.split("\n\n")[0].splitlines() if x.startswith("  bound "))
    per_device = sig(measured.best / measured.world)
    assert bound == (f"  bound       none: the target lacks the figures; at the measured ceilings at most "
                     f"{sig(measured.best)} images/s ({per_device} per device)")  # fmt: skip


def test_estimate_json_says_which_calibration_it_used(tmp_path):
    db = _calibrated_store(tmp_path, "h100", {"bf16": 790.0}, 3.0, {"all_reduce": 360.0})
    data = json.loads(run_cli("estimate", "specs/sd3.bench", "--json", "--db", str(db), cwd=REPO).out)
    by_target = {e["target"]: e["calibration"] for e in data["estimates"]}
    assert by_target["gaudi2"] is None and by_target["a100"] is None
    used = by_target["h100"]
    assert used["host"] == "node-7" and used["matmul_tflops"] == {"bf16": 790.0}
    assert used["roofline"]["peak_flops_per_device"] == 790e12 and used["roofline"]["hbm_tb_s"] == 3.0


def test_a_ceiling_the_calibration_did_not_measure_is_the_datasheets_and_says_so():
    from benchc.plan.roofline import Ceilings

    plan = _plan(SPECS / "sd3.bench", "train.batch=16", target="h100")  # bf16, DDP over 16 devices
    datasheet = roofline(plan)
    unmeasured = roofline(plan, Ceilings({"fp32": 50e12}, None, {}))  # no bf16, no copy, no collective
    assert [b.seconds for p in unmeasured.phases for b in p.bounds] == [
        b.seconds for p in datasheet.phases for b in p.bounds
    ]
    assert unmeasured.best == datasheet.best and unmeasured.peak_flops == datasheet.peak_flops
    compute, memory, link = unmeasured.phases[0].bounds
    assert compute.ceiling == "989 TFLOP/s bf16 (datasheet)" and memory.ceiling == "3.35 TB/s (datasheet)"
    assert link.ceiling == "450 GB/s scale-up (datasheet), 50 GB/s scale-out (datasheet)"
    measured = roofline(plan, Ceilings({"bf16": 790e12}, 3.0, {"all_reduce": 360.0}))
    assert link.seconds < measured.phases[0].bounds[2].seconds  # 360 GB/s bus is slower than 450
