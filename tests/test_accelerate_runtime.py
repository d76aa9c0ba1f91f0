"""runtime = accelerate (templates/runtime_accelerate.py.j2): the training programs driven by
accelerate's Accelerator, launched by `accelerate launch` with a generated accelerate.yaml.

What runs for real here, on the CPU: S1 under both runtimes through `benchc run` (as 2 nodes
x 1 on loopback, the multi-node branch of accelerate launch) and reported side by side; S4
under accelerate's FSDP plugin and its DeepSpeed plugin (tests/test_slurm.py runs S1 as a real
two-node Slurm job). What is checked statically: the cuda and hpu programs' calls bound to the
installed accelerate and to optimum-habana's source (its GaudiAccelerator), the settings
handed to the Accelerator as a dict, accelerate.yaml read by accelerate's own loader, and each
launcher's command parsed by accelerate's own argument parser.
"""

from __future__ import annotations

import ast
import inspect
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from codegen_helpers import core_text, spec_files
from static_checks import _source_signature, check_program
from system_tools import Unavailable, ensure
from test_launchers import dry_run

from benchc.results.store import Store

from helpers import REPO, run_cli

BF16 = ["train.precision=bf16"]  # S4 asks for fp16, which accelerate cannot run on the CPU
VARIANTS = [  # (spec, target, overrides)
    ("sd3.bench", "cpu", []),
    ("sd3.bench", "h100", ["train.grad_clip=1.0", "parallel.activation_checkpointing=true"]),
    ("sd3.bench", "gaudi2", ["train.grad_clip=1.0"]),
    ("sd3.bench", "a100", ["parallel.sharding=fsdp"]),
    ("beluga-train.bench", "cpu", BF16),
    ("beluga-train.bench", "h100", []),
    ("beluga-train.bench", "h100", ["parallel.sharding=zero2"]),
    ("beluga-train.bench", "gaudi2", []),  # ZeRO-3 on Gaudi (the spec's on gaudi2 block)
    ("beluga-train.bench", "cpu", [*BF16, "parallel.sharding=zero3"]),
]


def files(spec: str, target: str, overrides=(), smoke=False) -> dict:
    return spec_files(spec, target, smoke=smoke, overrides=["runtime=accelerate", *overrides])


def test_the_core_is_the_same_text_under_both_runtimes():
    for spec, target, overrides in VARIANTS:
        torch_program = spec_files(spec, target, overrides=overrides)["bench.py"]
        accelerate_program = files(spec, target, overrides)["bench.py"]
        assert core_text(accelerate_program) == core_text(torch_program), (spec, target)
        assert "# ==== benchc: runtime layer (accelerate) ====" in accelerate_program
        assert "# ==== benchc: runtime layer (torch) ====" in torch_program
        assert "accelerator.prepare(model, optimizer)" not in torch_program


def _settings_keys(program: str) -> set[str]:
    """The keys accelerate_settings() puts in `settings`, the dict handed to the Accelerator."""
    tree = ast.parse(program)
    function = next(
        n for n in ast.walk(tree) if isinstance(n, ast.FunctionDef) and n.name == "accelerate_settings"
    )
    keys = set()
    for node in ast.walk(function):
        if isinstance(node, ast.Assign) and [getattr(t, "id", None) for t in node.targets] == ["settings"]:
            keys |= {k.value for k in node.value.keys}
        if isinstance(node, ast.Subscript) and isinstance(node.ctx, ast.Store):
            if isinstance(node.value, ast.Name) and node.value.id == "settings":
                keys.add(node.slice.value)
    assert "mixed_precision" in keys and "gradient_accumulation_steps" in keys
    return keys


@pytest.mark.parametrize("spec, target, overrides", VARIANTS)
def test_accelerate_programs_bind_to_the_installed_libraries(spec, target, overrides):
    from accelerate import Accelerator

    program = files(spec, target, overrides)["bench.py"]
    report = check_program(program)
    assert report.problems == [], report.problems
    checked = set(report.checked)
    deepspeed = "zero" in str(overrides) or (spec == "beluga-train.bench" and target == "gaudi2")
    plugin = "accelerate.DeepSpeedPlugin" if deepspeed else "accelerate.FullyShardedDataParallelPlugin"
    assert plugin in checked
    if target.startswith("gaudi"):
        accelerator = "optimum.habana.accelerate.accelerator.GaudiAccelerator"
        if not deepspeed:
            assert "accelerate.utils.DistributedDataParallelKwargs" in checked
        parameters = set(_source_signature(accelerator).parameters)
    else:
        accelerator = "accelerate.Accelerator"
        parameters = set(inspect.signature(Accelerator.__init__).parameters)
    assert accelerator in checked
    assert _settings_keys(program) <= parameters  # handed over as **settings
    assert "optimum.habana" not in program or target.startswith("gaudi")  # never imported off Gaudi


def accelerate_config(point: Path):
    from accelerate.commands.config.config_args import load_config_from_file

    return load_config_from_file(str(point / "accelerate.yaml"))


def test_accelerate_yaml_is_read_by_accelerate_and_agrees_with_the_plan(tmp_path):
    cases = {  # (spec, target, overrides): (distributed_type, mixed precision, processes, machines)
        ("sd3.bench", "cpu", ("train.batch=16",)): ("MULTI_GPU", "bf16", 16, 2),
        ("sd3.bench", "h100", ("train.batch=16", "parallel.activation_checkpointing=true",
                               "parallel.sharding=fsdp")): ("FSDP", "bf16", 16, 2),
        ("sd3.bench", "gaudi2", ("train.batch=16",)): ("MULTI_HPU", "bf16", 16, 2),
        ("beluga-train.bench", "gaudi2", ()): ("DEEPSPEED", "none", 256, 32),  # in DeepSpeed's config
        ("beluga-train.bench", "cpu", (*BF16, "cluster.nodes=1", "cluster.devices_per_node=1",
                                       "parallel.data=1", "train.global_batch=4")): ("NO", "bf16", 1, 1),
    }  # fmt: skip
    for (spec, target, overrides), (kind, precision, processes, machines) in cases.items():
        out = tmp_path / f"{spec}-{target}-{len(overrides)}"
        sets = [a for o in ("runtime=accelerate", *overrides) for a in ("--set", o)]
        assert run_cli("compile", f"specs/{spec}", "-t", target, *sets, "-o", str(out), cwd=REPO).code == 0
        (point,) = [p.parent for p in out.rglob("accelerate.yaml")]
        config = accelerate_config(point)
        plan = json.loads((point / "manifest.json").read_text())["plan"]
        assert str(config.distributed_type).split(".")[-1] == kind, (spec, target)
        assert (config.num_processes, config.num_machines) == (processes, machines)
        assert plan["cluster"]["world_size"] == processes and plan["runtime"] == "accelerate"
        assert str(config.mixed_precision).split(".")[-1].lower() == precision
        assert config.use_cpu == (target == "cpu")
        if kind == "FSDP":
            fsdp = config.fsdp_config
            assert fsdp["fsdp_version"] == 2 and fsdp["fsdp_activation_checkpointing"] is True
            assert fsdp["fsdp_transformer_layer_cls_to_wrap"] == "JointTransformerBlock"
        if kind == "DEEPSPEED":  # the stage is bench.py's DeepSpeed config; accelerate refuses it here
            assert set(config.deepspeed_config) == {"zero3_init_flag", "deepspeed_multinode_launcher"}
            assert config.deepspeed_config["zero3_init_flag"] is (plan["parallel"]["sharding"] == "zero3")
            assert "mixed precision: bf16" in (point / "accelerate.yaml").read_text()


def test_the_wrapped_block_classes_are_the_models_own():
    import torch
    from diffusers import SD3Transformer2DModel
    from transformers import LlamaConfig, LlamaForCausalLM

    from benchc.codegen.launchers import BLOCK_CLASSES
    from benchc.pipeline import plan_spec

    with torch.device("meta"):
        mmdit = SD3Transformer2DModel(num_layers=1, num_attention_heads=2, attention_head_dim=8,
                                      joint_attention_dim=16, caption_projection_dim=16, sample_size=8,
                                      pooled_projection_dim=16, pos_embed_max_size=8)  # fmt: skip
        llama = LlamaForCausalLM(LlamaConfig(hidden_size=16, num_hidden_layers=1, num_attention_heads=2,
                                             intermediate_size=32, vocab_size=32))  # fmt: skip
    assert {type(b).__name__ for b in mmdit.transformer_blocks} == {BLOCK_CLASSES["mmdit"]}
    plan = plan_spec(REPO / "specs" / "beluga-train.bench", ["h100"]).plans[0]
    assert {type(b).__name__ for b in llama.model.layers} == {plan.model.census.layer_class}


def launch_args(argv: list[str]):
    from accelerate.commands.launch import launch_command_parser

    assert argv[:3] == ["python3", "-m", "accelerate.commands.launch"], argv
    return launch_command_parser().parse_args(argv[3:])


@pytest.mark.integration
def test_launchers_follow_accelerates_conventions_and_parse(tmp_path):
    try:
        ensure({"scontrol": "slurm-client", "shellcheck": "shellcheck"})
    except Unavailable as exc:
        pytest.fail(f"the Slurm client and shellcheck are required here: {exc}")
    slurm_conf = tmp_path / "slurm.conf"
    slurm_conf.write_text("ClusterName=dry\nSlurmctldHost=localhost\n")
    sets = ["--set", "runtime=accelerate", "--set", "train.batch=16"]
    for target in ("cpu", "h100", "gaudi2"):
        assert run_cli("compile", "specs/sd3.bench", "-t", target, *sets, "--sbatch", "-o", str(tmp_path),
                       cwd=REPO).code == 0  # fmt: skip
    points = sorted(p.parent for p in tmp_path.rglob("accelerate.yaml"))
    assert len(points) == 3
    shells = [p / name for p in points for name in ("launch.sh", "job.sbatch")]
    for path in shells:
        assert subprocess.run(["bash", "-n", str(path)]).returncode == 0, path
    lint = subprocess.run(["shellcheck", "-S", "warning", *map(str, shells)], capture_output=True, text=True)
    assert lint.returncode == 0, lint.stdout[-3000:]
    h100 = tmp_path / "sd3_mmdit_train/h100/batch-16_runtime-accelerate"  # named for the --set values
    # by hand: the machine rank and the first node's address, as accelerate asks
    args = launch_args(dry_run(h100, MACHINE_RANK="1", MASTER_ADDR="node0.example", MASTER_PORT="29555"))
    assert (args.config_file, args.machine_rank, args.main_process_ip) == (
        "accelerate.yaml",
        1,
        "node0.example",
    )
    assert args.main_process_port == 29555 and args.training_script == "bench.py"
    assert args.training_script_args == ["--metrics", "m.json"]
    # under Slurm: the node's SLURM_NODEID, the first node of the allocation
    args = launch_args(dry_run(h100, SLURM_CONF=str(slurm_conf), SLURM_JOB_NODELIST="gpu[07-08]",
                               SLURM_JOB_NUM_NODES="2", SLURM_NODEID="1"))  # fmt: skip
    assert (args.machine_rank, args.main_process_ip, args.main_process_port) == (1, "gpu07", 29500)
    # without a rank outside Slurm, the message says what to set
    bare = {k: v for k, v in os.environ.items() if not k.startswith(("SLURM", "MASTER", "MACHINE"))}
    proc = subprocess.run(["bash", str(h100 / "launch.sh")], capture_output=True, text=True,
                          env={**bare, "MASTER_ADDR": "n0"})  # fmt: skip
    assert proc.returncode != 0 and "set MACHINE_RANK to the number of this node, 0 to 1" in proc.stderr
    assert "srun --ntasks-per-node=1" in (h100 / "job.sbatch").read_text()  # one launcher per node


def test_check_refuses_what_the_accelerate_runtime_cannot_honour():
    cases = [
        ("sd3-infer.bench", [], "runtime = accelerate applies to training programs"),
        ("beluga-infer.bench", [], "runtime = accelerate applies to training programs"),
        ("sd3.bench", ["train.compile=true"], "train.compile under runtime = accelerate is not generated"),
        ("beluga-train.bench", ["train.precision=fp16"], "accelerate has no fp16 on the CPU"),
    ]
    for spec, overrides, message in cases:
        sets = [a for o in ("runtime=accelerate", *overrides) for a in ("--set", o)]
        result = run_cli("check", f"specs/{spec}", "-t", "cpu", *sets, cwd=REPO)
        assert result.code == 2 and message in result.err and "Traceback" not in result.err, result.err
        assert result.err.startswith("--set["), result.err  # located at the setting
    bad = run_cli("check", "specs/sd3.bench", "--set", "runtime=jax", cwd=REPO)
    assert bad.code == 2 and "runtime" in bad.err and "accelerate" in bad.err


def store_runs(db: Path):
    with Store(db) as store:
        return store.runs()


@pytest.mark.integration
@pytest.mark.timing  # two nodes' launchers end together: the race a loaded machine lost once
def test_s1_runs_under_both_runtimes_and_the_report_sets_them_side_by_side(tmp_path):
    """`benchc run specs/sd3.bench --target cpu --smoke --set runtime=accelerate` passes (2 nodes
    x 1 on loopback: accelerate launch's multi-node branch), and a report shows the point
    under both runtimes with the ratio (the first batch of the sweep: both points take the
    same paths, the README's main job runs both under torch)."""
    db, out = tmp_path / "r.db", tmp_path / "build"
    for extra in ([], ["--set", "runtime=accelerate"]):
        proc = subprocess.run([sys.executable, "-m", "benchc", "run", "specs/sd3.bench", "--target", "cpu",
                               "--smoke", "--set", "train.batch=16", *extra, "--db", str(db), "-o", str(out)],
                              cwd=REPO, capture_output=True, text=True, timeout=600)  # fmt: skip
        assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    runs = store_runs(db)
    accelerate = [r for r in runs if r.metrics.get("runtime") == "accelerate"]
    assert len(accelerate) == 1 and len(runs) == 2 and all(r.status == "ok" for r in runs)
    assert all(r.cause is None for r in runs), [r.cause for r in runs]  # not even a warning
    for run in accelerate:
        assert run.point.endswith("runtime-accelerate")
        assert run.metrics["runtime_detail"]["distributed_type"] == "MULTI_CPU"  # DDP over gloo
        assert run.metrics["runtime_detail"]["wrapper"] == "DistributedDataParallel"
        assert run.metrics["world_size"] == 2 and run.metrics["versions"]["accelerate"]
    report = subprocess.run([sys.executable, "-m", "benchc", "report", "--db", str(db), "-o",
                             str(tmp_path / "rep")], cwd=REPO, capture_output=True, text=True,
                            timeout=300)  # fmt: skip
    assert report.returncode == 0, report.stderr
    page = (tmp_path / "rep" / "report.md").read_text()
    assert "| point | target | runtime |" in page
    line = next(x for x in page.splitlines() if x.startswith("- cpu at ") and ": accelerate " in x)
    assert "x torch (throughput" in line and "step p50" in line, line


@pytest.mark.integration
@pytest.mark.parametrize("sharding, detail", [("fsdp", ("FSDP", "FSDPLlamaForCausalLM")),
                                              ("zero3", ("DEEPSPEED", "DeepSpeedEngine"))])  # fmt: skip
def test_s4_trains_under_accelerates_fsdp_and_deepspeed_plugins(tmp_path, sharding, detail):
    db = tmp_path / "r.db"
    sets = ["runtime=accelerate", "train.precision=bf16", f"parallel.sharding={sharding}",
            "train.grad_clip=1.0"]  # fmt: skip
    proc = subprocess.run([sys.executable, "-m", "benchc", "run", "specs/beluga-train.bench", "--target",
                           "cpu", "--smoke", *(a for s in sets for a in ("--set", s)), "--db", str(db),
                           "-o", str(tmp_path / "build")], cwd=REPO, capture_output=True, text=True,
                          timeout=900)  # fmt: skip
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    (run,) = store_runs(db)
    metrics = run.metrics
    assert run.status == "ok" and metrics["runtime"] == "accelerate"
    detail_seen = (metrics["runtime_detail"]["distributed_type"], metrics["runtime_detail"]["wrapper"])
    assert detail_seen == detail
    assert metrics["runtime_detail"]["mixed_precision"] == "bf16"
    losses = metrics["loss"]["all"]
    assert losses[-1] < losses[0], losses  # it learns


@pytest.mark.integration
def test_a_sweep_over_both_runtimes_is_reported_side_by_side(tmp_path):
    """`sweep runtime = [torch, accelerate]`: one point per runtime, each with the runtime in its
    name and values; the report pairs them (metrics as the two programs write them)."""
    from scripted_points import ok_metrics

    spec = tmp_path / "both.bench"
    spec.write_text(
        'experiment both {\n  model mmdit { preset = "sd3-medium" }\n  train { batch = 16 }\n'
        "  cluster { nodes = 2; devices_per_node = 8 }\n  targets = [h100, gaudi2]\n"
        "  sweep runtime = [torch, accelerate]\n  on gaudi2 { runtime = accelerate }\n}\n"
    )  # fmt: skip
    result = run_cli("compile", str(spec), "-t", "h100", "-o", str(tmp_path / "b"), cwd=REPO)
    assert result.code == 0, result.err
    points = sorted(p.parent for p in (tmp_path / "b").rglob("manifest.json"))
    assert [p.name for p in points] == ["runtime-accelerate", "runtime-torch"]
    assert (points[0] / "accelerate.yaml").exists() and not (points[1] / "accelerate.yaml").exists()
    paths = []
    for point, throughput in zip(points, (110.0, 100.0)):
        plan = json.loads((point / "manifest.json").read_text())["plan"]
        m = ok_metrics(throughput, target="h100", point=point.name)
        m.update(experiment="both", smoke=False, runtime=plan["runtime"], point_values=plan["point_values"])
        (point / "metrics.json").write_text(json.dumps(m))
        paths.append(str(point / "metrics.json"))
    db = tmp_path / "r.db"
    benchc = [sys.executable, "-m", "benchc"]
    assert subprocess.run([*benchc, "ingest", *paths, "--db", str(db)], cwd=REPO).returncode == 0
    proc = subprocess.run([*benchc, "report", "--db", str(db), "-o", str(tmp_path / "rep")], cwd=REPO,
                          capture_output=True, text=True)  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    page = (tmp_path / "rep" / "report.md").read_text()
    assert "- h100 at the same point: accelerate 1.10x torch (throughput 110 vs 100 images/s" in page, page
    # without the sweep, `on gaudi2 { runtime = accelerate }` sets it for gaudi2 only
    spec.write_text(spec.read_text().replace("  sweep runtime = [torch, accelerate]\n", ""))
    plans = json.loads(run_cli("plan", str(spec), "--json", cwd=REPO).out)["plans"]
    assert {(p["target"]["name"], p["runtime"], p["point"]) for p in plans} == {
        ("h100", "torch", "default"), ("gaudi2", "accelerate", "runtime-accelerate"),
    }  # fmt: skip


def test_the_roofline_counts_a_reduce_scatter_on_every_micro_batch_under_both_runtimes():
    """Under FSDP2 neither runtime skips a reduction: accelerate's accumulate() cannot (FSDP2
    modules have no no_sync), and the torch program reduce-scatters every micro batch so that
    it never holds the unsharded fp32 gradients. The interconnect bound counts one
    reduce-scatter per micro batch for both, the same bytes."""
    from benchc.pipeline import plan_spec
    from benchc.plan.roofline import roofline

    def link(runtime: str):
        (plan,) = plan_spec(REPO / "specs" / "beluga-train.bench", targets=["h100"],
                            overrides=[f"runtime={runtime}"]).plans  # fmt: skip
        assert plan.workload.grad_accum == 2 and plan.parallel.sharding == "fsdp"
        step, _ = roofline(plan).phases
        return next(b for b in step.bounds if b.name == "interconnect"), plan

    torch_link, plan = link("torch")
    accelerate_link, _ = link("accelerate")
    n, g = plan.cluster.nodes, plan.cluster.devices_per_node
    one_reduce = 4 * plan.cost.params * ((g - 1) / g + (n - 1) / n / g)  # fp32, per device, both links
    assert accelerate_link.amount == pytest.approx(torch_link.amount)
    assert accelerate_link.amount > 2 * one_reduce  # two reduce-scatters and the all-gathers
    assert "2 x reduce-scatter of fp32 gradients" in torch_link.detail
    assert "2 x reduce-scatter of fp32 gradients" in accelerate_link.detail
