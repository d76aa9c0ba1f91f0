"""The optimisation tier (optimize = plain | tuned) and the measurement rules it comes with:
programs differ only in the tier's knobs, record every knob, keep host synchronisation out of
measured steps, compile each repeated block once whatever the depth, and build models on
the device."""

from __future__ import annotations

import contextlib
import difflib
import json
import os
import subprocess
from pathlib import Path

import pytest
import torch
from codegen_helpers import in_repo, plan_literal, spec_files
from program_helpers import WORKLOADS, FrameCounter, compile_point, load_program
from warm_launch import warm_run

from benchc.pipeline import plan_spec

from helpers import REPO, run_cli


def code_outside_plan(program: str) -> list[str]:
    """The program's lines without its docstring's title and the PLAN literal."""
    lines = program.splitlines()
    start = lines.index("PLAN = {")
    end = start + lines[start:].index("}")
    return lines[:1] + lines[2:start] + lines[end + 1 :]


@pytest.mark.parametrize("spec", WORKLOADS)
@pytest.mark.parametrize("target", ["cpu", "h100", "gaudi2"])
def test_tuned_and_plain_programs_differ_only_in_the_knobs_of_the_tier(spec, target):
    tuned = spec_files(spec, target)["bench.py"]
    plain = spec_files(spec, target, overrides=["optimize=plain"])["bench.py"]
    tuned_plan, plain_plan = plan_literal(tuned), plan_literal(plain)
    assert tuned_plan["optimize"]["tier"] == "tuned" and plain_plan["optimize"]["tier"] == "plain"
    modes = {plan["optimize"]["knobs"].get("hpu_mode") for plan in (tuned_plan, plain_plan)}
    compiles = {plan["optimize"]["knobs"]["compile"] for plan in (tuned_plan, plain_plan)}
    # generation's decode bytes follow the tier's reading of the cache: up to the decode
    # bucket (tuned), the whole static cache (plain)
    decode = tuned_plan.pop("decode", None), plain_plan.pop("decode", None)
    if spec == "beluga-infer.bench":
        assert decode[0]["bytes_per_device"] < decode[1]["bytes_per_device"]
    # the same PLAN but for the tier, its knobs, the point's name and the memory estimate
    # recorded beside an out-of-memory ending (the tier's knobs change what a device holds)
    for key in ("optimize", "point", "point_values", "memory_estimate"):
        tuned_plan.pop(key), plain_plan.pop(key)
    assert tuned_plan == plain_plan
    # the same code, but Gaudi's choice of lazy or eager mode where the tiers' modes differ (it
    # must precede the imports; with infer.graphs both tiers run lazy: HPU graphs need it), and
    # the comment saying whether eager mode compiles (Habana's FSDP: tuned compiles each block)
    lines = difflib.unified_diff(code_outside_plan(tuned), code_outside_plan(plain), n=0, lineterm="")
    diff = [line for line in lines if line[:1] in "+-" and line[:3] not in ("+++", "---")]
    allowed = ("PT_HPU_LAZY_MODE", "# Lazy mode", "# Eager mode")
    assert all(any(word in line for word in allowed) for line in diff), diff
    assert bool(diff) == (target == "gaudi2" and (len(modes) == 2 or len(compiles) == 2))
    assert (len(modes) == 2) == (target == "gaudi2" and spec in ("sd3.bench", "beluga-train.bench"))


def test_the_knobs_of_each_tier_are_those_the_docs_list():
    def knobs(target, *overrides, spec="sd3.bench"):
        return plan_literal(spec_files(spec, target, overrides=list(overrides))["bench.py"])["optimize"][
            "knobs"
        ]

    assert knobs("h100") == {"compile": "regional", "attention": "cudnn>flash>efficient", "qkv": "fused",
                             "optimizer": "fused", "cudnn_benchmark": "on"}  # fmt: skip
    assert knobs("h100", "optimize=plain") == {"compile": "off", "attention": "sdpa default",
                                               "qkv": "separate", "optimizer": "default",
                                               "cudnn_benchmark": "off"}  # fmt: skip
    # settings that overlap the tier win over it
    assert knobs("h100", "train.compile=false")["compile"] == "off"
    assert knobs("h100", "optimize=plain", "train.compile=true")["compile"] == "regional"
    assert knobs("h100", "train.attention=flash")["attention"] == "flash"
    # Gaudi: today's lazy-mode path is tuned; plain runs eager, torch's own optimizer
    assert knobs("gaudi2") == {"compile": "off", "attention": "FusedSDPA", "qkv": "separate",
                               "optimizer": "fused", "hpu_mode": "lazy"}  # fmt: skip
    assert knobs("gaudi2", "optimize=plain")["hpu_mode"] == "eager"
    assert knobs("gaudi2", "optimize=plain")["optimizer"] == "default"
    # the CPU: the same structure as CUDA, compile optional (off unless written)
    assert knobs("cpu")["compile"] == "off" and knobs("cpu")["qkv"] == "fused"
    # diffusers' fused projections apply no q/k norm: not offered for an MMDiT with qk_norm
    assert knobs("h100", "model.mmdit.qk_norm=rms_norm")["qkv"] == "separate"
    # generation brings a mask: no flash kernel in its list; tuned runs benchc's decode loop,
    # its step compiled (a dynamic cache keeps generate); plain transformers' generate
    assert knobs("h100", spec="beluga-infer.bench") == {
        "compile": "on", "attention": "cudnn>efficient", "cudnn_benchmark": "on", "decode": "loop",
    }  # fmt: skip
    assert knobs("h100", "optimize=plain", spec="beluga-infer.bench")["decode"] == "generate"
    assert knobs("h100", "optimize=plain", spec="beluga-infer.bench")["compile"] == "off"
    dynamic = knobs("h100", "infer.kv_cache=dynamic", "infer.graphs=false", spec="beluga-infer.bench")
    assert dynamic["decode"] == "generate" and dynamic["compile"] == "off"
    assert knobs("cpu", spec="beluga-infer.bench")["decode"] == "loop"
    assert knobs("cpu", spec="beluga-infer.bench")["compile"] == "off"
    assert knobs("gaudi2", spec="beluga-infer.bench")["decode"] == "generate"
    # the SD3 pipeline's MMDiT: with infer.graphs on CUDA compiled whole under CUDA graphs in
    # either tier (the setting wins); without graphs block by block under tuned, not under plain
    assert knobs("h100", spec="sd3-infer.bench")["compile"] == "whole"
    assert knobs("h100", "optimize=plain", spec="sd3-infer.bench")["compile"] == "whole"
    assert knobs("h100", "infer.graphs=false", spec="sd3-infer.bench")["compile"] == "regional"
    assert knobs("h100", "optimize=plain", "infer.graphs=false", spec="sd3-infer.bench")["compile"] == "off"
    assert knobs("cpu", spec="sd3-infer.bench")["compile"] == "off"


def test_the_plan_shows_the_tier_and_a_point_under_plain_is_named_for_it():
    result = run_cli("plan", "specs/sd3.bench", "--target", "h100", "--set", "optimize=plain", cwd=REPO)
    assert result.code == 0, result.err
    assert "sd3_mmdit_train / h100 / batch-16_optimize-plain" in result.out
    assert "optimize  plain: compile=off, attention=sdpa default" in result.out
    with in_repo():
        swept = plan_spec(Path("specs/sd3.bench"), targets=["h100"],
                          overrides=["train.batch=16"], smoke=False).plans  # fmt: skip
    assert [p.point for p in swept] == ["batch-16"] and swept[0].tuning.tier == "tuned"
    bad = run_cli("check", "specs/sd3.bench", "--set", "optimize=fastest", cwd=REPO)
    assert bad.code == 2 and "--set[1]:1:10" in bad.err and "plain, tuned" in bad.err


TRAINING = [("sd3.bench", "torch", "tuned"), ("sd3.bench", "torch", "plain"),
            ("beluga-train.bench", "torch", "tuned"), ("beluga-train.bench", "torch", "plain"),
            ("sd3.bench", "accelerate", "tuned"), ("beluga-train.bench", "accelerate", "tuned")]  # fmt: skip


@pytest.mark.integration
@pytest.mark.parametrize("spec, runtime, tier", TRAINING, ids=["-".join(t) for t in TRAINING])
def test_no_host_synchronisation_inside_the_measured_steps(tmp_path, spec, runtime, tier):
    """Every training program on the CPU, run in-process with a counter of host syncs
    (aten._local_scalar_dense) over its measured window: none; the window's losses are read
    once after it, and every knob of the tier is in the metrics."""
    point = compile_point(tmp_path, spec, f"runtime={runtime}", f"optimize={tier}", "parallel.sharding=none")
    metrics_path, counts_path = tmp_path / "metrics.json", tmp_path / "counts.json"
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    probe = REPO / "tests" / "window_probe.py"
    done = warm_run(probe, [point / "bench.py", metrics_path, counts_path], env, REPO, [point / "bench.py"])
    assert done.returncode == 0, done.stderr[-3000:]
    counts = json.loads(counts_path.read_text())
    assert counts["windows"] == 1 and counts["ops"] > 100  # the steps ran under the counter
    assert counts["syncs"] == 0
    if tier == "tuned":  # fused AdamW keeps its step counts on the device too
        assert counts["host_step_counts"] == 0
    metrics = json.loads(metrics_path.read_text())
    plan = plan_literal((point / "bench.py").read_text())
    steps, warmup = plan["train"]["steps"], plan["train"]["warmup"]
    assert metrics["status"] == "ok" and metrics["steps"]["measured"] == steps - warmup > 1
    assert len(metrics["loss"]["all"]) == steps and len(metrics["step_time_s"]["all"]) == steps - warmup
    assert metrics["optimize"] == tier
    assert metrics["optimize_detail"] == plan["optimize"]["knobs"]
    assert set(metrics["numerics"]) == {"tf32_matmul", "tf32_cudnn", "cudnn_benchmark"}
    assert metrics["device_state"] == {"start": None, "end": None}  # the CPU has no vendor tool
    assert metrics["phase"] == "measuring"
    # the first-step check ran (its reads of the loss are before the window): an eager forward
    # of the first step's batch and draws gives the first step's loss
    check = metrics["first_step_check"]
    assert check["passed"] and check["first_loss"] == metrics["loss"]["first"]
    assert check["compiled"] is (plan["optimize"]["knobs"]["compile"] != "off")
    assert check["relative_difference"] <= 1e-3, check


@pytest.mark.integration
@pytest.mark.parametrize("spec, settings", [
    ("sd3.bench", ("num_layers",)), ("beluga-train.bench", ("num_hidden_layers",)),
    ("flux-train.bench", ("num_layers", "num_single_layers")),  # both kinds of block
])  # fmt: skip
def test_regional_compilation_does_not_grow_with_depth(tmp_path, spec, settings):
    """compile_blocks compiles each repeated block whole (fullgraph: a graph break fails) and
    the blocks share their code: the graphs compiled and their sizes are the same for 2, 4
    and 8 layers (of each kind of block, for Flux)."""
    module = load_program(compile_point(tmp_path, spec, "train.compile=true") / "bench.py")
    seen = {}
    for depth in (2, 4, 8):
        model_plan = json.loads(json.dumps(module.PLAN["model"]))
        model_plan["config"].update(dict.fromkeys(settings, depth))
        torch.manual_seed(0)
        model = module.build_model(model_plan)
        counter = FrameCounter()
        for blocks in module.block_lists(model):
            module.compile_blocks(blocks, {"backend": counter})
        batch = module.synthetic_batch(module.PLAN["train"], model_plan, torch.device("cpu"))
        loss = module.compute_loss(model, batch, torch.autocast("cpu", dtype=torch.bfloat16), {})
        loss.backward()
        compiled = [type(b).__name__ for blocks in module.block_lists(model) for b in blocks]
        assert compiled == ["OptimizedModule"] * depth * len(settings)
        seen[depth] = sorted(counter.graphs)
    assert seen[2] and seen[2] == seen[4] == seen[8], seen


@pytest.mark.integration
def test_the_pipelines_mmdit_is_compiled_block_by_block_whatever_its_depth(tmp_path):
    """S3: the program's prepare_pipeline compiles the MMDiT's blocks (infer.compile on the
    CPU), each whole; the graphs compiled are the same for 2, 4 and 8 layers."""
    module = load_program(compile_point(tmp_path, "sd3-infer.bench", "infer.compile=true") / "bench.py")
    assert module.PLAN["optimize"]["knobs"]["compile"] == "regional"
    seen = {}
    for depth in (2, 4, 8):
        model_plan = json.loads(json.dumps(module.PLAN["model"]))
        model_plan["config"]["num_layers"] = depth
        torch.manual_seed(0)
        transformer = module.build_parts(model_plan)["transformer"].eval()
        counter = FrameCounter()
        module.compile_blocks(transformer.transformer_blocks, {"backend": counter})
        config, size = model_plan["config"], 8
        with torch.no_grad():
            transformer(hidden_states=torch.randn(1, config["in_channels"], size, size),
                        encoder_hidden_states=torch.randn(1, 12, config["joint_attention_dim"]),
                        pooled_projections=torch.randn(1, config["pooled_projection_dim"]),
                        timestep=torch.tensor([500.0]))  # fmt: skip
        seen[depth] = sorted(counter.graphs)
    assert seen[2] and seen[2] == seen[4] == seen[8], seen
    source = next((tmp_path / "sd3_large_infer").rglob("bench.py")).read_text()
    indent = "\n" + " " * 16
    regional = f"for blocks in block_lists(pipe.transformer):{indent}compile_blocks(blocks, {{}}, True)"
    assert regional in source
    assert module.block_lists(transformer) == [transformer.transformer_blocks]


@pytest.mark.integration
def test_a_second_run_reuses_the_compile_cache_beside_the_program(tmp_path):
    """Where anything is compiled, launch.sh keeps Inductor's cache beside the program (the
    metrics record it) and a second run adds no compiled graph to it: it reuses the first's.
    Both runs' first compiled bf16 step equals an eager forward's (the first-step check), the
    blocks called with contiguous inputs (the workaround for Inductor's AVX-512 bf16 NaN)."""
    point = compile_point(tmp_path, "sd3.bench", "train.compile=true")
    env = {k: v for k, v in os.environ.items() if k != "TORCHINDUCTOR_CACHE_DIR"}
    env["OMP_NUM_THREADS"] = "1"
    files = []
    for run in (1, 2):
        metrics = tmp_path / f"m{run}.json"
        command = ["bash", str(point / "launch.sh"), "--metrics", str(metrics)]
        done = subprocess.run(command, capture_output=True, text=True, env=env, timeout=600)
        assert done.returncode == 0, done.stderr[-3000:]
        recorded = json.loads(metrics.read_text())
        assert recorded["status"] == "ok" and recorded["compile_cache"] == str(point / "compile-cache")
        check = recorded["first_step_check"]
        assert check["passed"] and check["compiled"] and check["relative_difference"] < 1e-2, check
        assert recorded["workarounds"] == ["contiguous inputs to compiled blocks"]
        files.append({p.relative_to(point) for p in (point / "compile-cache").rglob("*") if p.is_file()})
    graphs = {p for p in files[0] if "fxgraph" in str(p)}
    assert graphs, sorted(map(str, files[0]))[:20]
    assert {p for p in files[1] if "fxgraph" in str(p)} == graphs


FULL_SIZE = [("sd3.bench", None), ("beluga-train.bench", None), ("beluga-infer.bench", torch.bfloat16)]


@pytest.mark.parametrize("spec, dtype", FULL_SIZE, ids=[s for s, _ in FULL_SIZE])
def test_full_size_models_are_built_where_they_run_never_on_the_host_first(tmp_path, spec, dtype):
    """The program's own build (build_on_meta without sharding -> build_on_device) of the
    full-size model, with the meta device standing for the accelerator: every parameter and
    buffer is made there (none on the host), in the target precision, in seconds."""
    files = spec_files(spec, "h100")
    program = tmp_path / "bench.py"
    # the CUDA program's core, with its adapter's CUDA check out of the way: only the core's
    # build functions are called, never the Device
    program.write_text(files["bench.py"])
    module = load_program_without_main(program)
    model, buffers = module.build_on_meta(module.PLAN["model"], False, torch.device("meta"), dtype)
    assert buffers == {}
    tensors = list(model.parameters()) + list(model.buffers())
    assert sum(p.numel() for p in model.parameters()) > 10**9
    on_host = [
        name for name, t in [*model.named_parameters(), *model.named_buffers()] if t.device.type != "meta"
    ]
    assert not on_host, on_host[:5]
    expected = dtype or torch.float32
    assert {p.dtype for p in model.parameters()} == {expected}
    assert tensors


def test_the_sd3_pipeline_parts_are_built_on_the_device_in_its_precision(tmp_path):
    files = spec_files("sd3-infer.bench", "h100")
    program = tmp_path / "bench.py"
    program.write_text(files["bench.py"])
    module = load_program_without_main(program)
    with module.made_on(torch.device("meta"), torch.bfloat16):
        parts = module.build_parts(module.PLAN["model"])
    assert set(parts) == {"transformer", "vae", "clip_l", "clip_g", "t5"}
    params = [p for part in parts.values() for p in part.parameters()]
    assert sum(p.numel() for p in params) > 10**10  # SD3 8B with T5-XXL: full size
    assert {p.device.type for p in params} == {"meta"}
    assert {p.dtype for p in params} == {torch.bfloat16}
    assert torch.get_default_dtype() == torch.float32  # made_on restores it


def test_local_sd3_weights_load_in_the_precision_onto_the_device_through_device_map(tmp_path):
    """With `weights`, the pipeline is diffusers' from_pretrained with torch_dtype and the
    adapter's device_map: the CPU program's own build_pipeline loads a saved tiny pipeline in
    bf16 on its device, weights equal to those saved. The CUDA adapter's device_map is
    "cuda", the value diffusers accepts on a CUDA machine (its supported maps are "balanced"
    and get_device(), which names "cuda" where torch finds a GPU); Gaudi's loads on the host."""
    import inspect

    from diffusers import StableDiffusion3Pipeline
    from diffusers.pipelines import pipeline_utils
    from diffusers.utils import torch_utils

    module = load_program(compile_point(tmp_path / "build", "sd3-infer.bench") / "bench.py")
    model_plan, device = module.PLAN["model"], module.Device(0)
    assert device.weights_options() == {"device_map": "cpu"}
    cpu = torch.device("cpu")
    saved = module.build_pipeline(model_plan, StableDiffusion3Pipeline, {}, {}, torch.float32, cpu)
    saved.save_pretrained(tmp_path / "weights")
    local = {**model_plan, "weights": str(tmp_path / "weights")}
    pipe = module.build_pipeline(
        local, StableDiffusion3Pipeline, {}, device.weights_options(), torch.bfloat16, cpu
    )
    for name in ("transformer", "vae", "text_encoder", "text_encoder_2", "text_encoder_3"):
        params = list(getattr(pipe, name).parameters())
        assert {p.dtype for p in params} == {torch.bfloat16} and {p.device for p in params} == {cpu}, name
    original = saved.transformer.state_dict()
    for key, value in pipe.transformer.state_dict().items():
        assert torch.equal(value, original[key].to(torch.bfloat16)), key
    assert '"device_map": "cuda"' in spec_files("sd3-infer.bench", "h100")["bench.py"]
    gaudi = spec_files("sd3-infer.bench", "gaudi2")["bench.py"].split("def weights_options(self) -> dict:")[1]
    assert gaudi.split("def ")[0].rstrip().endswith("return {}")
    assert 'SUPPORTED_DEVICE_MAP = ["balanced"] + [get_device()]' in inspect.getsource(pipeline_utils)
    assert 'if torch.cuda.is_available():\n        return "cuda"' in inspect.getsource(torch_utils.get_device)


def load_program_without_main(path: Path):
    """Import a generated program as a module (its main() does not run on import)."""
    return load_program(path)


def test_a_compiled_program_must_warm_up_before_it_measures():
    refused = run_cli("check", "specs/sd3.bench", "--target", "h100", "--set", "train.warmup=0", cwd=REPO)
    assert refused.code == 2 and "--set[1]:1:14" in refused.err
    assert "the first step compiles (optimize = tuned compiles on h100)" in refused.err
    for allowed in (["--set", "train.compile=false"], ["--set", "optimize=plain"]):
        result = run_cli("check", "specs/sd3.bench", "--target", "h100", "--set", "train.warmup=0", *allowed,
                         cwd=REPO)  # fmt: skip
        assert result.code == 0, result.err


# One rank of the agreement test: join a gloo group of 2, ask the program how long its window
# is at this rank's pace, write the answer, and leave without the interpreter's teardown.
AGREE = """
import importlib.util, json, os, sys
import torch.distributed as dist
rank, program = int(os.environ["RANK"]), sys.argv[1]
pace, out = float(sys.argv[2].split(",")[rank]), f"{sys.argv[3]}.{rank}.json"
dist.init_process_group("gloo")
spec = importlib.util.spec_from_file_location("bench", program)
module = importlib.util.module_from_spec(spec)
spec.loader.exec_module(module)
steps = module.window_steps(5, pace, 2, module.Device(rank))
with open(out, "w") as stream:
    json.dump(steps, stream)
dist.barrier()
dist.destroy_process_group()
sys.stdout.flush()
os._exit(0)
"""


@pytest.mark.integration
def test_the_measured_window_is_the_same_length_on_every_rank(tmp_path):
    """At full size a window shorter than 50 steps runs on until 50 steps or 20 s at the last
    warmup step's pace; ranks must agree on the count (a rank that stopped early would leave
    the others waiting in a collective), so the slowest rank's pace decides, before the
    window. Smoke runs and plans without warmup run what they ask."""
    full = tmp_path / "full.py"
    full.write_text(spec_files("sd3.bench", "cpu", overrides=["train.batch=16"])["bench.py"])
    module = load_program(full)
    device = module.Device(0)
    assert module.window_steps(10, 0.1, 1, device) == 50  # 50 steps come before 20 s
    assert module.window_steps(10, 1.0, 1, device) == 20  # 20 s come before 50 steps
    assert module.window_steps(10, 5.0, 1, device) == 10  # the plan asks more than 20 s holds
    assert module.window_steps(60, 0.1, 1, device) == 60  # the plan's when it asks 50 or more
    assert module.window_steps(10, None, 1, device) == 10  # no warmup step: no pace
    smoke = tmp_path / "smoke.py"
    smoke.write_text(spec_files("sd3.bench", "cpu", smoke=True, overrides=["train.batch=16"])["bench.py"])
    assert load_program(smoke).window_steps(3, 0.01, 1, device) == 3
    agree = tmp_path / "agree.py"
    agree.write_text(AGREE)
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    done = warm_run(agree, [full, "0.1,2.0", tmp_path / "steps"], env, tmp_path, [full], processes=2)
    assert done.returncode == 0, done.stderr[-3000:]
    assert [json.loads((tmp_path / f"steps.{r}.json").read_text()) for r in (0, 1)] == [10, 10]


S3_CUDA_COMPILE = [((), "whole"), (("infer.graphs=false",), "regional"), (("optimize=plain",), "whole"),
                   (("optimize=plain", "infer.graphs=false"), "off")]  # fmt: skip


@pytest.mark.integration
@pytest.mark.parametrize(("overrides", "expected"), S3_CUDA_COMPILE)
def test_s3_on_cuda_takes_cuda_graphs_over_the_whole_mmdit_never_per_block(tmp_path, monkeypatch, overrides,
                                                                          expected):  # fmt: skip
    """The CUDA program's prepare_pipeline, run on a real (tiny) MMDiT with torch.compile's
    options recorded: infer.graphs compiles the whole MMDiT once under CUDA graphs (mode
    reduce-overhead); regional compilation compiles each block without CUDA graphs (one graph
    shared by the blocks, replayed per block, would overwrite the output the next block reads);
    plain without graphs compiles nothing. The knob the metrics record says the same."""
    sets = [arg for o in overrides for arg in ("--set", o)]
    out = str(tmp_path / "h100")
    result = run_cli("compile", "specs/sd3-infer.bench", "--target", "h100", "-o", out, *sets, cwd=REPO)
    assert result.code == 0, result.err
    cuda = load_program(next((tmp_path / "h100").rglob("bench.py")))
    assert cuda.PLAN["optimize"]["knobs"]["compile"] == expected
    tiny = load_program(compile_point(tmp_path / "cpu", "sd3-infer.bench") / "bench.py")
    transformer = tiny.build_parts(tiny.PLAN["model"])["transformer"].eval()
    blocks = len(transformer.transformer_blocks)
    calls, real_compile = [], torch.compile

    def recorded(target, **options):
        calls.append((target, options))
        return real_compile(target, **options)

    monkeypatch.setattr(torch, "compile", recorded)
    device = object.__new__(cuda.Device)  # its __init__ needs a GPU; prepare_pipeline does not
    pipe = type("Pipe", (), {"transformer": transformer})()
    cuda.scope_attention(transformer, contextlib.nullcontext)
    assert device.prepare_pipeline(pipe, cuda.PLAN["infer"]) is pipe
    if expected == "whole":
        assert [options for _, options in calls] == [{"fullgraph": True, "mode": "reduce-overhead"}]
        assert calls[0][0] == transformer._call_impl
        # the whole MMDiT, attention scoped inside its forward, is one graph (no break)
        counter = FrameCounter()
        whole = real_compile(calls[0][0], fullgraph=True, backend=counter)
        config = tiny.PLAN["model"]["config"]
        with torch.no_grad():
            whole(hidden_states=torch.randn(2, config["in_channels"], 8, 8),
                  encoder_hidden_states=torch.randn(2, 12, config["joint_attention_dim"]),
                  pooled_projections=torch.randn(2, config["pooled_projection_dim"]),
                  timestep=torch.tensor([500.0, 500.0]))  # fmt: skip
        assert len(counter.graphs) == 1
    elif expected == "regional":
        assert len(calls) == blocks and all(options == {"fullgraph": True} for _, options in calls), calls
    else:
        assert calls == []


def test_check_refuses_graphs_with_compile_off_for_the_pipeline_on_cuda():
    refused = run_cli("check", "specs/sd3-infer.bench", "--target", "h100", "--set", "infer.compile=false",
                      cwd=REPO)  # fmt: skip
    assert refused.code == 2 and "--set[1]:1:15" in refused.err
    assert "captures the MMDiT through torch.compile" in refused.err
    allowed = run_cli("check", "specs/sd3-infer.bench", "--target", "h100", "--set", "infer.compile=false",
                      "--set", "infer.graphs=false", cwd=REPO)  # fmt: skip
    assert allowed.code == 0, allowed.err


KERNEL_ORDERS = [("sd3.bench", "tuned", ["cudnn", "flash", "efficient"]),
                 ("beluga-infer.bench", "tuned", ["cudnn", "efficient"]),
                 ("sd3.bench", "plain", None), ("beluga-infer.bench", "plain", None)]  # fmt: skip


@pytest.mark.parametrize(("spec", "tier", "expected"), KERNEL_ORDERS)
def test_cuda_attention_takes_the_tiers_kernel_order_and_plain_leaves_torch_its_own(tmp_path, spec, tier,
                                                                                   expected):  # fmt: skip
    """The CUDA program's attention context, entered on this machine (torch's SDPA switches
    exist in every build): tuned puts its kernels first, in its order, and turns the others
    off; plain enters no context, so torch chooses as shipped."""
    program = tmp_path / "bench.py"
    program.write_text(spec_files(spec, "h100", overrides=[f"optimize={tier}"])["bench.py"])
    cuda = load_program(program)
    backend, sdp = torch.nn.attention.SDPBackend, torch.backends.cuda
    names = {backend.CUDNN_ATTENTION: "cudnn", backend.MATH: "math", backend.FLASH_ATTENTION: "flash",
             backend.EFFICIENT_ATTENTION: "efficient"}  # fmt: skip
    as_shipped = torch._C._get_sdp_priority_order()
    with object.__new__(cuda.Device).attention("fused"):
        order = [names.get(backend(value)) for value in torch._C._get_sdp_priority_order()]
        enabled = {"cudnn": sdp.cudnn_sdp_enabled(), "math": sdp.math_sdp_enabled()}
        enabled.update(flash=sdp.flash_sdp_enabled(), efficient=sdp.mem_efficient_sdp_enabled())
    assert torch._C._get_sdp_priority_order() == as_shipped
    if expected is None:
        assert cuda.PLAN["optimize"]["knobs"]["attention"] == "sdpa default"
        assert order == [names.get(backend(v)) for v in as_shipped] and all(enabled.values())
    else:
        assert order[: len(expected)] == expected
        assert {name for name, on in enabled.items() if on} == set(expected)


def test_the_measured_window_watches_for_host_syncs_where_it_claims_none(tmp_path):
    """MeasuredWindow turns the device's host-sync watch on after its first boundary and off
    at its end (on CUDA torch's sync debug mode, which benchmarks/gpu_check.sh sets to error),
    and not at all where a step reads the device by design (fp16's gradient scaler)."""
    program = tmp_path / "bench.py"
    program.write_text(spec_files("sd3.bench", "cpu", smoke=True)["bench.py"])
    module = load_program(program)
    calls = []

    class Watched(module.Device):
        def time_mark(self):
            calls.append("mark")
            return super().time_mark()

        def watch_host_syncs(self, on: bool):
            calls.append(on)
            return "error"

    watched, unwatched = ["mark", True, "mark", "mark", False], ["mark", "mark", "mark"]
    for sync_free, expected in ((True, watched), (False, unwatched)):
        calls.clear()
        device = Watched(0)
        meter = module.EnergyMeter(device.energy_reader())
        window = module.MeasuredWindow(device, 2, meter, sync_free=sync_free)
        with window:
            while window.more():
                window.record(None)
        assert calls == expected and window.watched == ("error" if sync_free else None)
    cuda = spec_files("sd3.bench", "h100")["bench.py"]
    assert 'sync_free=run["precision"] != "fp16"' in cuda
    # the CUDA adapter's watch, run: BENCHC_SYNC_DEBUG (gpu_check.sh sets error) turns torch's
    # sync debug mode on over the window and back to default after it; unset, nothing is set
    (tmp_path / "cuda").mkdir()
    (tmp_path / "cuda" / "bench.py").write_text(cuda)
    device = load_program(tmp_path / "cuda" / "bench.py").Device
    modes = []
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(torch.cuda, "set_sync_debug_mode", modes.append)
        patch.setenv("BENCHC_SYNC_DEBUG", "error")
        assert [device.watch_host_syncs(None, True), device.watch_host_syncs(None, False)] == ["error"] * 2
        patch.delenv("BENCHC_SYNC_DEBUG")
        assert device.watch_host_syncs(None, True) is None
    assert modes == ["error", "default"]
    script = (REPO / "benchmarks" / "gpu_check.sh").read_text()
    assert "BENCHC_SYNC_DEBUG=error" in script  # every timed run of the GPU check
    # torch's own contract for the values the adapter passes
    contract = torch.cuda.set_sync_debug_mode.__doc__
    assert "warn" in contract and "error" in contract
