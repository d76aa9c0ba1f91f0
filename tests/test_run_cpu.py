"""The generated CPU program runs for real: 2 processes over gloo, a tiny SD3 MMDiT.

This is the same device-neutral core as the Gaudi and CUDA programs (test_codegen.py checks
that the text is identical); only the adapter differs. The first test runs the build as a user
does, two launch.sh meeting at torchrun's rendezvous; the others, whose subject is what the
program does, run its ranks from a warm process (tests/warm_launch.py says what that skips).
"""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
from importlib import resources
from pathlib import Path

import jsonschema
import pytest
from energy_checks import assert_energy
from memory_checks import MEMTRACE, assert_within_estimate, smoke_plan, traced_env
from warm_launch import LAUNCHERS, warm_launch

from helpers import REPO, free_port, point_in, run_cli, warm_python_env

pytestmark = pytest.mark.integration


def metrics_schema() -> dict:
    return json.loads(resources.files("benchc.schemas").joinpath("metrics.schema.json").read_text())


def launch_nodes(point, env: dict, timeout: float = 300, warm: bool = False) -> subprocess.CompletedProcess:
    """The build's own launch.sh, once per node of its plan (several nodes meet on loopback,
    as cluster nodes do over their network): one process result, outputs joined. warm: the
    ranks forked from a warm process instead (tests/warm_launch.py), where the build's
    launcher is torchrun or the program alone (accelerate's launcher always runs for real)."""
    run = json.loads((point / "manifest.json").read_text())["run"]
    if warm and run["launcher"] in LAUNCHERS:
        return warm_launch(point, env, timeout)
    if warm:  # accelerate's or DeepSpeed's launcher, for real, its interpreters the tests' warm ones
        env = {**env, **warm_python_env()}
    nodes = run["nodes"]
    if nodes > 1:
        env = {**env, "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(free_port()), "RDZV_ID": point.name,
               "OMP_NUM_THREADS": "1"}  # fmt: skip
    procs = [subprocess.Popen(["bash", str(point / "launch.sh")], stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, text=True, env=env) for _ in range(nodes)]  # fmt: skip
    outputs = [p.communicate(timeout=timeout) for p in procs]
    code = next((p.returncode for p in procs if p.returncode), 0)
    return subprocess.CompletedProcess(procs[0].args, code, "".join(o[0] for o in outputs),
                                       "".join(o[1] for o in outputs))  # fmt: skip


def compile_smoke(tmp_path, spec: str, experiment: str, *overrides: str) -> Path:
    """`benchc compile SPEC --smoke`: the build point."""
    sets = [arg for o in overrides for arg in ("--set", o)]
    result = run_cli("compile", f"specs/{spec}", "--smoke", "-o", str(tmp_path), *sets, cwd=REPO)
    assert result.code == 0, result.err
    (point,) = {p.parent for p in (tmp_path / experiment / "cpu").glob("*/bench.py")}
    return point


def compile_smoke_and_launch(tmp_path, spec: str, experiment: str, *overrides: str, traced: bool = False,
                             warm: bool = True):  # fmt: skip
    """`benchc compile SPEC --smoke`, then its ranks run: (process, metrics, point). warm=False:
    the build's own launch.sh. traced: with tests/memtrace on, each rank's peak tensor memory in
    tmp_path/mem.<rank>.json (memory_checks.py holds it to benchc's estimate)."""
    point = compile_smoke(tmp_path, spec, experiment, *overrides)
    world = smoke_plan(spec, list(overrides)).cluster.world_size
    env = traced_env(tmp_path / "mem", world) if traced else {**os.environ, "PYTHON": sys.executable}
    proc = launch_nodes(point, env, warm=warm)
    metrics = json.loads((point / "metrics.json").read_text()) if (point / "metrics.json").exists() else {}
    if metrics:
        jsonschema.validate(metrics, metrics_schema())
    return proc, metrics, point


def compile_and_run(tmp_path, *overrides: str, traced: bool = False, warm: bool = True):
    """S1 at one point (batch 16 -> 2 per process), shrunk."""
    return compile_smoke_and_launch(tmp_path, "sd3.bench", "sd3_mmdit_train", "train.batch=16", *overrides,
                                    traced=traced, warm=warm)  # fmt: skip


def test_smoke_build_runs_with_two_processes_and_writes_valid_metrics(tmp_path):
    """The multi-node branch for real, without Slurm: node 0 and node 1 are two launch.sh on
    this machine meeting at a c10d rendezvous on 127.0.0.1 (launch_nodes). DDP's memory and
    step are held to benchc's estimate and roofline on the same run (memory_checks.py)."""
    proc, metrics, point = compile_and_run(tmp_path, traced=True, warm=False)
    assert json.loads((point / "manifest.json").read_text())["run"]["nodes"] == 2
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    jsonschema.validate(metrics, metrics_schema())
    assert metrics["status"] == "ok" and metrics["error"] is None
    assert metrics["world_size"] == 2 and metrics["target"] == "cpu" and metrics["smoke"] is True
    assert metrics["hosts"] == [os.uname().nodename] and metrics["nodes"] == 1  # two nodes, one machine
    assert_within_estimate("s1-ddp", smoke_plan("sd3.bench", ["train.batch=16"]), metrics, tmp_path / "mem")
    assert all(math.isfinite(x) for x in metrics["loss"]["all"])
    assert metrics["steps"] == {"total": 5, "warmup": 2, "measured": 3}
    assert len(metrics["step_time_s"]["all"]) == 3
    t = metrics["throughput"]
    assert t["samples_per_step"] == 2 * 2  # micro batch 2 (16 / 8) x data 2
    assert t["job"] == pytest.approx(t["samples_per_step"] * 3 / sum(metrics["step_time_s"]["all"]))
    assert t["per_device"] == pytest.approx(t["job"] / 2)
    assert metrics["flops"]["mfu"] is None  # the cpu has no peak in the target table
    assert metrics["flops"]["model_flops_per_sample"] > 0
    assert metrics["versions"]["torch"].startswith("2.") and "diffusers" in metrics["versions"]
    assert "step 5/5" in proc.stdout
    assert_energy(metrics)  # two ranks, one host: the host's first rank reads its counter
    check = metrics["first_step_check"]
    assert check["passed"] and not check["compiled"] and check["relative_difference"] < 1e-2
    # On a shared cluster another account collects the metrics: the file gets the mode a
    # plain open() would (0644 under the usual umask), not mkstemp's 0600.
    mode = (point / "metrics.json").stat().st_mode & 0o777
    umask = os.umask(0)
    os.umask(umask)
    assert mode == 0o666 & ~umask


def test_fsdp_checkpointing_clipping_and_accumulation_run(tmp_path):
    proc, metrics, _ = compile_and_run(
        tmp_path,
        "parallel.sharding=fsdp",
        "parallel.activation_checkpointing=true",
        "train.grad_clip=1.0",
        "train.grad_accum=2",
        "train.precision=fp32",
    )
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    jsonschema.validate(metrics, metrics_schema())
    assert metrics["status"] == "ok"
    assert metrics["throughput"]["samples_per_step"] == 2 * 2 * 2  # micro 2 x accum 2 x data 2


def test_llama_training_loss_falls_under_fsdp_with_two_processes(tmp_path):
    """S4 shrunk: Llama with grouped-query attention, FSDP2 over 2 processes, activation
    checkpointing, accumulation 2, fp16 with loss scaling (the spec's CUDA precision). Its memory
    and step are held to benchc's estimate and roofline (memory_checks.py)."""
    proc, metrics, point = compile_smoke_and_launch(tmp_path, "beluga-train.bench", "beluga_70b_train",
                                                    traced=True)  # fmt: skip
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    assert_within_estimate("s4-fsdp", smoke_plan("beluga-train.bench", []), metrics, tmp_path / "mem")
    plan = json.loads((point / "manifest.json").read_text())["plan"]
    assert plan["parallel"]["sharding"] == "fsdp" and plan["workload"]["grad_accum"] == 2
    assert metrics["world_size"] == 2 and metrics["throughput"]["unit"] == "tokens/s"
    losses = metrics["loss"]["all"]
    assert all(math.isfinite(x) for x in losses) and losses[-1] < losses[0]
    seq_len, global_batch = plan["workload"]["seq_len"], plan["workload"]["global_batch"]
    measured = metrics["step_time_s"]["all"]
    assert metrics["throughput"]["job"] == pytest.approx(
        global_batch * seq_len * len(measured) / sum(measured)
    )


def test_llama_inference_tokens_equal_transformers_greedy_generate(tmp_path):
    """S5 shrunk: tensor parallel over 2 processes (DTensor), static KV cache; the first
    sequence's tokens equal transformers' own greedy generate of the same tiny model, prompt
    and seed in one process with a dynamic cache."""
    import ast

    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    proc, metrics, point = compile_smoke_and_launch(
        tmp_path, "beluga-infer.bench", "beluga_70b_infer", "infer.precision=fp32"
    )
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    program = ast.parse((point / "bench.py").read_text())
    plan = next(ast.literal_eval(n.value) for n in program.body
                if isinstance(n, ast.Assign) and n.targets[0].id == "PLAN")  # fmt: skip
    assert plan["parallel"]["tensor"] == 2 and plan["infer"]["kv_cache"] == "static"
    run = plan["infer"]

    torch.manual_seed(run["seed"])  # the program's: the weights drawn from the seed
    # transformers' own attention (SDPA) for the reference; the program runs grouped_sdpa
    assert plan["model"]["config"]["attn_implementation"] == "benchc_grouped_sdpa"
    config = {**plan["model"]["config"], "attn_implementation": "sdpa"}
    model = LlamaForCausalLM(LlamaConfig(**config)).eval()
    prompts = torch.Generator().manual_seed(run["seed"])  # the program's: a generator of its own
    vocab = plan["model"]["config"]["vocab_size"]
    prompt = torch.randint(0, vocab, (run["batch"], run["input_tokens"]), generator=prompts)
    with torch.no_grad():
        reference = model.generate(input_ids=prompt, attention_mask=torch.ones_like(prompt),
                                   max_new_tokens=run["output_tokens"], min_new_tokens=run["output_tokens"],
                                   do_sample=False, pad_token_id=0)  # fmt: skip
    expected = reference[0, run["input_tokens"] :].tolist()
    generation = metrics["generation"]
    assert generation["first_sequence"] == expected
    assert len(expected) == run["output_tokens"] == generation["output_tokens"]
    assert generation["ttft_s"] > 0 and generation["tpot_s"] > 0
    # measured the same way on every target: a one-token call, then the rest of a full call
    text = (point / "bench.py").read_text()
    assert "streamer" not in text and "_, prefill = timed(1, measured)" in text
    step = metrics["step_time_s"]["median"]
    estimate = generation["ttft_s"] + (run["output_tokens"] - 1) * generation["tpot_s"]
    assert estimate == pytest.approx(step, rel=0.25)
    assert metrics["throughput"]["unit"] == "output tokens/s"
    assert_energy(metrics)
    # profiled neither by the spec nor by a flag: no profile recorded, no trace left
    assert "profile" not in metrics and not list(point.glob("*trace*"))


def test_sd3_pipeline_makes_images_and_times_the_denoising_loop(tmp_path):
    """S3 shrunk: the whole pipeline (tiny MMDiT, VAE, CLIP-L, CLIP-G, T5), one device. Its
    memory and call time are held to benchc's estimate and roofline (memory_checks.py)."""
    proc, metrics, _ = compile_smoke_and_launch(tmp_path, "sd3-infer.bench", "sd3_large_infer", traced=True)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    assert_within_estimate("s3-pipeline", smoke_plan("sd3-infer.bench", []), metrics, tmp_path / "mem")
    pipeline = metrics["pipeline"]
    assert pipeline["resolution"] == 128 and pipeline["denoising_steps"] == 2
    assert 0 < pipeline["denoise_s_per_image"] < pipeline["s_per_image"]
    assert metrics["throughput"]["job"] == pytest.approx(1 / pipeline["s_per_image"], rel=0.5)
    assert metrics["world_size"] == 1
    assert f"s_per_image: {pipeline['s_per_image']:.4g} s/image" in proc.stdout  # not images/s
    # each image's latency is its call's (issue 36, item 1): over the measured calls
    latency, calls = pipeline["image_latency_s"], metrics["step_time_s"]["all"]
    assert latency["samples"] == len(calls) == metrics["steps"]["measured"]
    assert min(calls) <= latency["p50"] <= latency["p90"] <= latency["p99"] <= max(calls)
    per_call = pipeline["s_per_image"] * metrics["throughput"]["samples_per_step"]
    assert latency["p50"] == pytest.approx(per_call)
    assert_energy(metrics)


def test_large_model_path_splits_before_allocating(tmp_path):
    """Tensor-parallel inference of a model of 2B+ parameters builds it on the meta device,
    splits it, then allocates each rank's part (the path S5's 70B takes on CPU and CUDA).
    The smoke model is small, so this test switches that path on in the generated PLAN."""
    point = compile_smoke(tmp_path, "beluga-infer.bench", "beluga_70b_infer")
    program = point / "bench.py"
    text = program.read_text()
    assert text.count('"meta_init": False') == 1
    program.write_text(text.replace('"meta_init": False', '"meta_init": True'))
    proc = launch_nodes(point, {**os.environ, "PYTHON": sys.executable}, warm=True)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    metrics = json.loads((point / "metrics.json").read_text())
    assert metrics["status"] == "ok"
    assert len(metrics["generation"]["first_sequence"]) == metrics["generation"]["output_tokens"]


def test_llama_training_under_deepspeed_zero3_with_two_processes(tmp_path):
    """The same program sharded by DeepSpeed ZeRO-3 (parameters partitioned as they are made)
    instead of FSDP2; bf16, as DeepSpeed has no fp16 on the CPU."""
    proc, metrics, point = compile_smoke_and_launch(
        tmp_path, "beluga-train.bench", "beluga_70b_train", "parallel.sharding=zero3", "train.precision=bf16"
    )
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    assert "deepspeed.initialize(" in (point / "bench.py").read_text()
    assert metrics["status"] == "ok" and metrics["world_size"] == 2
    losses = metrics["loss"]["all"]
    assert all(math.isfinite(x) for x in losses) and losses[-1] < losses[0]


def test_fsdp2_peak_memory_stays_near_the_shard_plus_one_block_bound(tmp_path):
    """S4's FSDP2 step, bf16, 2 ranks on this machine: each rank's peak tensor memory stays
    within its shard of parameters and gradients plus one block unsharded (in every form the
    step makes of it) and the next one prefetched. An outer autocast would cache a bf16 copy
    of every block's weights until the forward ends (77 MB more here: the peak measured 189 MB
    against a bound of 209 MB; at 8 ranks an outer autocast measured 131 MB against 92 MB);
    gradients are reduce-scattered in fp32."""
    from census_helpers import llama_params

    shape = {"hidden": 512, "layers": 12, "heads": 8, "kv_heads": 8, "intermediate": 1408, "vocab": 512}
    ranks = 2
    sets = [f"model.llama.{k}={v}" for k, v in shape.items()] + [
        "cluster.nodes=1", f"cluster.devices_per_node={ranks}", f"parallel.data={ranks}", "train.batch=1",
        f"train.global_batch={ranks}", "train.grad_accum=1", "train.seq_len=8", "train.steps=2",
        "train.warmup=1", "train.precision=bf16", "train.optimizer=sgd(lr = 0.01)",
    ]  # fmt: skip
    args = [a for s in sets for a in ("--set", s)]
    assert (
        run_cli("compile", "specs/beluga-train.bench", "-t", "cpu", "-o", str(tmp_path), *args, cwd=REPO).code
        == 0
    )
    point = point_in(tmp_path / "beluga_70b_train/cpu")
    env = {**os.environ, "PYTHON": sys.executable, "OMP_NUM_THREADS": "1", "PYTHONPATH": str(MEMTRACE),
           "BENCHC_TEST_MEMTRACE": str(tmp_path / "mem")}  # fmt: skip
    proc = launch_nodes(point, env, timeout=600, warm=True)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    params = llama_params(
        *(shape[k] for k in ("hidden", "layers", "heads", "kv_heads", "intermediate", "vocab"))
    )
    block = (params - 2 * shape["vocab"] * shape["hidden"] - shape["hidden"]) // shape["layers"]
    shard_state = (4 + 4) * params / ranks  # fp32 parameters and gradients (SGD keeps no state)
    # one block: bf16 parameters and gradients, fp32 gradients and their reduce-scatter copy;
    # the next block's bf16 parameters (prefetched); a few MB of activations
    bound = shard_state + (2 + 2 + 4 + 4) * block + 2 * block + 8e6
    for rank in range(ranks):
        trace = json.loads((tmp_path / f"mem.{rank}.json").read_text())
        assert trace["peak_bytes"] < bound, (rank, trace["peak_bytes"] / 1e6, bound / 1e6)
        assert trace["reduce_scatter_dtypes"] == ["torch.float32"], trace


PROBE = """
import sys, time
import torch
sys.path.insert(0, sys.argv[1])
import bench

calls = []  # (component, math backend allowed) for every attention call
where = ["-"]
sdpa = torch.nn.functional.scaled_dot_product_attention

def probe(*args, **kwargs):
    calls.append((where[-1], torch.backends.cuda.math_sdp_enabled()))
    return sdpa(*args, **kwargs)

torch.nn.functional.scaled_dot_product_attention = probe
build = bench.build_pipeline

def hooked(*args, **kwargs):
    pipe = build(*args, **kwargs)
    for name in ("transformer", "text_encoder", "text_encoder_2", "text_encoder_3", "vae"):
        part = getattr(pipe, name)
        part.register_forward_pre_hook(lambda m, a, name=name: where.append(name))
        part.register_forward_hook(lambda m, a, o: where.pop() and None)
    pipe.vae.decoder.register_forward_pre_hook(lambda m, a: where.append("vae"))
    pipe.vae.decoder.register_forward_hook(lambda m, a, o: where.pop() and None)
    return pipe

bench.build_pipeline = hooked
bench.pipeline_benchmark({}, time.perf_counter())
print(sorted(set(calls)))
"""


def test_the_attention_kernel_applies_to_the_transformer_only(tmp_path):
    """The spec's kernel (fused: flash-only) scopes the MMDiT's attention; CLIP, T5 and the
    VAE run outside it with PyTorch's own choice, math included (CUDA has no flash kernel for
    CLIP's 4-D mask or the VAE's head dim 512). The program's own pipeline, probed."""
    assert run_cli("compile", "specs/sd3-infer.bench", "--smoke", "-o", str(tmp_path), cwd=REPO).code == 0
    point = tmp_path / "sd3_large_infer/cpu/default-smoke"
    script = tmp_path / "probe.py"
    script.write_text(PROBE)
    proc = subprocess.run([sys.executable, str(script), str(point)], capture_output=True, text=True,
                          timeout=300, env={**os.environ, "OMP_NUM_THREADS": "1"})  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-3000:]
    calls = dict(eval(proc.stdout.strip().splitlines()[-1]))  # [(component, math allowed)]
    assert calls["transformer"] is False  # flash only, as attention = fused asks
    # CLIP-L, CLIP-G and the VAE call SDPA outside the scope (T5 computes its own attention)
    assert {k: v for k, v in calls.items() if k != "transformer"} == {
        "text_encoder": True, "text_encoder_2": True, "vae": True,
    }  # fmt: skip


def test_gaudi_tensor_parallel_path_builds_on_meta_and_fills_its_shards_on_two_cpus(tmp_path):
    """The path S5's Gaudi program takes, run on the CPU: the model built on the meta device
    (no rank holds it whole), split by DeepSpeed inference (AutoTP), which materialises each
    rank's shards, then filled by the program. The Gaudi adapter's other lines (HPU graphs,
    scoped all-reduce) need a Gaudi; tests/test_target_programs.py checks them statically.
    The CPU program is switched onto that path: its adapter calls the core's DeepSpeed split."""
    point = compile_smoke(tmp_path, "beluga-infer.bench", "beluga_70b_infer")
    program = point / "bench.py"
    text = program.read_text()
    assert text.count('"meta_init": False') == 1
    text = text.replace('"meta_init": False', '"meta_init": True')
    dtensor = 'return tensor_parallel(model, "cpu", degree)'
    assert text.count(dtensor) == 1
    # DeepSpeed's shared-memory all-reduce for CPUs (a JIT-built kernel, never used on Gaudi,
    # whose all-reduce is HCCL's) crashes with SIGSEGV on some CPUs (seen on an AVX-512 Xeon,
    # fine on AMD EPYC): level 0 makes DeepSpeed take torch.distributed's all_reduce instead.
    cpu_all_reduce = (
        "import deepspeed.comm\n"
        "        deepspeed.init_distributed()\n"
        "        deepspeed.comm.comm.cdb.shm_vector_kernel_level = 0\n        "
    )
    split = "return deepspeed_tensor_parallel(model, degree, dtype, graphs)"
    text = text.replace(dtensor, cpu_all_reduce + split)
    program.write_text(text)
    proc = launch_nodes(point, {**os.environ, "PYTHON": sys.executable, "OMP_NUM_THREADS": "1"}, timeout=600,
                        warm=True)  # fmt: skip
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    metrics = json.loads((point / "metrics.json").read_text())
    assert metrics["status"] == "ok" and metrics["world_size"] == 2
    assert len(metrics["generation"]["first_sequence"]) == metrics["generation"]["output_tokens"]
