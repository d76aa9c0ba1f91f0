"""benchmarks/gpu_check.sh in parts (training, inference), each fitting one 8-minute call on one
GPU, dry-run (every program compiled, each launcher parsed, the budget summed) and with its
runs failing at once; the hand-written tuned training loop it measures the generated program
against (benchmarks/handwritten_train.py). The summary's arithmetic: tests/test_gpu_summary.py.
Nothing here needs a GPU."""

from __future__ import annotations

import ast
import importlib.util
import json
import math
import os
import re
import subprocess
from pathlib import Path

import pytest
from warm_launch import warm_run

from helpers import REPO

CALL_S = 480  # one call of the device tool: 8 minutes, startup and compilation included
SCRIPT = REPO / "benchmarks/gpu_check.sh"


def load(name: str):
    spec = importlib.util.spec_from_file_location(name, REPO / "benchmarks" / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def gpu_check(out: Path, *args: str, env: dict | None = None, timeout: int = 180):
    env = {**os.environ, "OUT": str(out), **(env or {})}
    return subprocess.run(["bash", str(SCRIPT), *args], cwd=REPO, capture_output=True, text=True,
                          timeout=timeout, env=env)  # fmt: skip


def point(out: Path, name: str, experiment: str) -> tuple[dict, dict]:
    """The manifest's plan of a compiled point, and the PLAN its bench.py runs."""
    (folder,) = [launch.parent for launch in (out / "build" / name / experiment / "h200").glob("*/launch.sh")]
    manifest = json.loads((folder / "manifest.json").read_text())["plan"]
    assigned = [n for n in ast.parse((folder / "bench.py").read_text()).body if isinstance(n, ast.Assign)]
    program = next(ast.literal_eval(n.value) for n in assigned if getattr(n.targets[0], "id", "") == "PLAN")
    return manifest, program


def optimize_tier(plan: dict):
    """The plan's `optimize` tier, wherever the plan keeps it."""
    for where in (plan, plan.get("train") or {}):
        if "optimize" in where:
            value = where["optimize"]
            return value.get("tier", value.get("name")) if isinstance(value, dict) else value
    raise AssertionError("no optimize setting in the plan")


def header_total(part: str) -> int:
    """The part's total stated in the script's header: `part:  15 + ... = TOTAL <= 480`."""
    match = re.search(rf"^#   {part}: +15 \+ .*= (\d+) <= 480$", SCRIPT.read_text(), re.M)
    assert match, f"no budget line for {part} in the header"
    return int(match.group(1))


def check_budget(out: Path, part: str, stdout: str) -> dict:
    """Every run's limit as planned, printed and summed; the sum with the fixed costs and the
    SIGKILL grace fits one call, and so does the hard stop."""
    summary = json.loads((out / "summary.json").read_text())
    budget = summary["budget"]
    assert summary["part"] == part and summary["mode"] == "dry-run" and summary["target"] == "h200"
    limits = {row["run"]: row["planned_limit_s"] for row in summary["runs"]}
    for name, limit in limits.items():
        assert f"{name} (up to {limit} s): " in stdout
    required = [row["planned_limit_s"] for row in summary["runs"] if row["required"]]
    assert budget["required_limits_s"] == required
    total = sum(required) + budget["kill_after_s"] * len(required) + budget["fixed_s"]
    assert total == budget["planned_total_s"] == header_total(part) <= CALL_S
    assert budget["part_budget_s"] + budget["kill_after_s"] <= CALL_S  # no run outlasts the call
    assert all(0 < limit <= budget["part_budget_s"] for limit in limits.values())
    return summary


@pytest.mark.integration
def test_the_training_part_dry_run_compiles_its_programs_and_fits_8_minutes(tmp_path):
    """S1 batch 16 tuned and plain, batch 32 tuned, S4 if time is left, and the hand-written
    loop (run here on the CPU, tiny): each program compiled for one GPU, each launcher parsed."""
    proc = gpu_check(tmp_path, "training", "--dry-run")
    assert proc.returncode == 0, proc.stderr
    summary = check_budget(tmp_path, "training", proc.stdout)
    runs = {row["run"]: row for row in summary["runs"]}
    assert list(runs) == ["s1_b16_tuned", "s1_b16_plain", "hand_b16", "s1_b32_tuned", "s4"]
    assert [name for name, row in runs.items() if not row["required"]] == ["s4"]
    assert all(row["status"] == "dry run: compiled, not run" for row in runs.values())
    assert proc.stdout.count("  starts: python") + proc.stdout.count(f"  starts: {os.environ['PYTHON']}") == 4
    for name, batch, tier in (("s1_b16_tuned", 16, "tuned"), ("s1_b16_plain", 16, "plain"),
                              ("s1_b32_tuned", 32, "tuned")):  # fmt: skip
        manifest, plan = point(tmp_path, name, "sd3_mmdit_train")
        assert manifest["cluster"]["world_size"] == plan["world_size"] == 1 and plan["smoke"] is False
        assert plan["target"] == "h200" and plan["train"]["micro_batch"] == batch
        assert plan["train"]["latent_size"] == 32
        assert (plan["train"]["steps"], plan["train"]["warmup"]) == (
            60,
            10,
        )  # 50 measured, as the program's floor
        assert optimize_tier(plan) == tier
        estimate = json.loads((tmp_path / f"{name}.estimate.json").read_text())["estimates"]
        assert len(estimate) == 1 and estimate[0]["roofline"]["seconds"] > 0
    s4, _ = point(tmp_path, "s4", "beluga_70b_train")
    assert s4["cluster"]["world_size"] == 1 and s4["model"]["layers"] == 2 and s4["model"]["hidden"] == 8192
    # the hand-written loop: S1's shape and measurement, and its roofline is S1 batch 16's
    hand = r"hand_b16 \(up to 120 s\): \S+python\S* \S+/benchmarks/handwritten_train.py --batch 16 "
    assert re.search(hand + r"--latent-size 32 --warmup 10 --steps 50 --peak-flops 9.89e\+14 ", proc.stdout)
    estimates = [(tmp_path / f"{name}.estimate.json").read_text() for name in ("hand_b16", "s1_b16_tuned")]
    assert estimates[0] == estimates[1]
    smoke = json.loads((tmp_path / "hand_smoke.json").read_text())
    assert smoke["status"] == "ok" and smoke["config"]["smoke"] is True
    ratios = {r["ratio"]: (r["numerator"], r["denominator"], r["op"], r["bound"]) for r in summary["ratios"]}
    assert ratios == {"tuned/plain": ("s1_b16_plain", "s1_b16_tuned", ">=", 1.8),
                      "generated/hand-written": ("s1_b16_tuned", "hand_b16", "<=", 1.02)}  # fmt: skip
    checks = {(c["run"], c["field"]): (c["op"], c["bound"]) for c in summary["checks"]}
    assert checks[("s1_b16_tuned", "mfu")] == (">=", 0.35)
    assert checks[("s1_b16_tuned", "startup_s")] == ("<=", 20)
    assert checks[("s1_b16_tuned", "compile_s")] == ("<=", 90)
    assert "| tuned/plain |  | >= 1.8 | not measured |" in (tmp_path / "summary.md").read_text()


S5_RUNS = {"s5_l40_tuned": (40, "tuned"), "s5_l40_plain": (40, "plain"), "s5_l2_tuned": (2, "tuned"),
           "s5_l10_tuned": (10, "tuned")}  # fmt: skip
INFERENCE_RUNS = ["s5_l40_tuned", "s3", "s5_l40_plain", "s5_l2_tuned", "s5_l10_tuned"]


@pytest.mark.integration
def test_the_inference_part_dry_run_compiles_s5_and_s3_and_fits_8_minutes(tmp_path):
    """S5 as one tensor-parallel-8 rank of Llama-2-70B on one GPU at 40 layers (tuned first,
    then plain), 2 and 10 layers (the fit), S3 at full size with 3 timed images: each program
    compiled for one GPU, each launcher parsed, its estimate written; the targets, the ratio
    and the fit planned in the summary."""
    proc = gpu_check(tmp_path, "--dry-run", "inference")
    assert proc.returncode == 0, proc.stderr
    summary = check_budget(tmp_path, "inference", proc.stdout)
    runs = {row["run"]: row for row in summary["runs"]}
    assert list(runs) == INFERENCE_RUNS
    assert [name for name, row in runs.items() if not row["required"]] == ["s5_l10_tuned"]
    assert all(row["status"] == "dry run: compiled, not run" for row in runs.values())
    assert proc.stdout.count("  starts: ") == 5
    started = [line.split(" (up to")[0] for line in proc.stdout.splitlines() if " (up to " in line]
    assert started == INFERENCE_RUNS  # in this order
    for name, (layers, tier) in S5_RUNS.items():
        s5, program = point(tmp_path, name, "beluga_70b_infer")
        model = s5["model"]
        assert s5["cluster"]["world_size"] == program["world_size"] == 1 and s5["parallel"]["tensor"] == 1
        assert (model["hidden"], model["heads"], model["kv_heads"], model["head_dim"], model["intermediate"],
                model["layers"]) == (8192, 8, 1, 128, 3584, layers)  # fmt: skip
        config = program["model"]["config"]
        assert (config["head_dim"], config["num_attention_heads"], config["hidden_size"]) == (128, 8, 8192)
        run = program["infer"]
        assert run["graphs"] is True and run["kv_cache"] == "static"
        assert (run["steps"], run["warmup"]) == (2, 1)
        assert (run["batch"], run["input_tokens"], run["output_tokens"]) == (128, 128, 2048)
        assert optimize_tier(program) == tier and program["smoke"] is False
        (estimate,) = json.loads((tmp_path / f"{name}.estimate.json").read_text())["estimates"]
        phases = {p["name"]: p for p in estimate["roofline"]["phases"]}
        assert list(phases) == ["prefill", "decode"] and phases["decode"]["binding"] == "memory"
    rank = json.loads((tmp_path / "s5_l40_tuned.estimate.json").read_text())["estimates"][0]
    assert rank["parameters"] == 4_803_141_632 and rank["memory"]["fits"] is True
    s3, program = point(tmp_path, "s3", "sd3_large_infer")
    assert s3["cluster"]["world_size"] == program["world_size"] == 1 and program["smoke"] is False
    assert (program["infer"]["steps"], program["infer"]["warmup"], program["infer"]["batch"]) == (4, 1, 1)
    assert program["infer"]["resolution"] == 1024 and optimize_tier(program) == "tuned"
    assert not (tmp_path / "hand_smoke.json").exists()
    checks = {(c["run"], c["field"]): (c["op"], c["bound"]) for c in summary["checks"]}
    assert checks == {("s5_l40_tuned", "decode_hbm_utilisation"): (">=", 0.6),
                      ("s5_l40_tuned", "decode_roofline_fraction"): (">=", 0.6),
                      ("s3", "startup_s"): ("<=", 20), ("s3", "compile_s"): ("<=", 120),
                      ("s3", "s_per_image"): ("<=", 3.8)}  # fmt: skip
    (ratio,) = summary["ratios"]
    assert (ratio["numerator"], ratio["denominator"], ratio["field"], ratio["bound"]) == (
        "s5_l40_plain", "s5_l40_tuned", "tpot_s", None)  # fmt: skip
    (fit,) = summary["fits"]
    assert fit["y"] == "tpot_s" and fit["runs"] == ["s5_l2_tuned", "s5_l10_tuned", "s5_l40_tuned"]
    assert fit["a"] is None and fit["note"] == "not enough runs finished (0 of 3; 2 needed)"


@pytest.mark.integration
@pytest.mark.parametrize("args", [[], ["train"], ["training", "inference"], ["training", "--dry"],
                                  ["--dry-run"]])  # fmt: skip
def test_a_usage_error_prints_the_usage_and_exits_2(tmp_path, args):
    proc = gpu_check(tmp_path, *args, timeout=30)
    assert proc.returncode == 2 and "usage: bash benchmarks/gpu_check.sh training|inference" in proc.stderr
    assert not (tmp_path / "build").exists()


@pytest.mark.integration
def test_a_part_whose_runs_all_fail_still_reports_each_in_its_summary(tmp_path):
    """The inference part as on a GPU machine (the CUDA check and nvidia-smi stubbed): each
    program stops at once here (no CUDA device) and the summary says so, run by run."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "python").write_text(
        "#!/usr/bin/env bash\n"
        'if [ "${1:-}" = -c ] && [[ "${2:-}" == *cuda.is_available* ]]; then exit 0; fi\n'
        f'exec {os.environ["PYTHON"]} "$@"\n'
    )
    (bin_dir / "nvidia-smi").write_text(
        "#!/usr/bin/env bash\necho 'name, memory.total [MiB], driver_version'\n"
        "echo 'Stub H200, 143771 MiB, 0'\n"
    )
    for stub in bin_dir.iterdir():
        stub.chmod(0o755)
    out = tmp_path / "out"
    # the stub answers the CUDA check, then hands everything else to the tests' own PYTHON
    env = {"PATH": f"{bin_dir}:{os.environ['PATH']}", "PYTHON": str(bin_dir / "python")}
    proc = gpu_check(out, "inference", env=env, timeout=400)
    assert proc.returncode == 0, proc.stderr
    assert "== s5_l40_tuned (up to 105 s)" in proc.stdout and "s3 ended with status 1" in proc.stdout
    summary = json.loads((out / "summary.json").read_text())
    assert summary["mode"] == "gpu" and summary["gpu"] == ["Stub H200, 143771 MiB, 0"]
    assert [row["run"] for row in summary["runs"]] == INFERENCE_RUNS  # the optional one too: time was left
    for row in summary["runs"]:
        assert row["status"].startswith("failed: this program is built for CUDA (h200)"), row
        assert row["exit_status"] == 1 and row["limit_s"] == row["planned_limit_s"]
    assert all(c["result"] == "not measured" for c in summary["checks"] + summary["ratios"])
    events = [line.split("\t")[0] for line in (out / "events.tsv").read_text().splitlines()]
    assert events == ["part"] + ["plan"] * 5 + ["ratio"] + ["check"] * 5 + ["fit"] + ["start", "end"] * 5


# ---- the hand-written loop ---------------------------------------------------------------


@pytest.mark.integration
def test_the_hand_written_loop_runs_on_the_cpu_and_reports_sane_numbers(tmp_path):
    out = tmp_path / "hand.json"
    args = ["--device", "cpu", "--smoke", "--peak-flops", "1e12", "--metrics", out]
    proc = warm_run(REPO / "benchmarks/handwritten_train.py", args, dict(os.environ), REPO, [], timeout=180)
    assert proc.returncode == 0, proc.stderr
    line = json.loads(proc.stdout.strip().splitlines()[-1])
    assert line == json.loads(out.read_text())
    assert line["status"] == "ok" and line["error"] is None
    steps = line["step_time_s"]
    numbers = [steps["median"], steps["p10"], steps["p90"], steps["mean"], *steps["all"],
               line["throughput"]["job"], line["flops"]["achieved_per_device"], line["flops"]["mfu"],
               line["startup_s"], line["warmup_s"], line["wall_s"], line["peak_memory_bytes"]]  # fmt: skip
    assert all(isinstance(x, (int, float)) and math.isfinite(x) and x > 0 for x in numbers), numbers
    assert steps["p10"] <= steps["median"] <= steps["p90"]
    assert len(steps["all"]) == line["steps"]["measured"] == 3
    assert line["throughput"]["job"] == pytest.approx(2 * 3 / sum(steps["all"]))
    assert line["flops"]["mfu"] == pytest.approx(line["flops"]["achieved_per_device"] / 1e12)
    assert line["compile_s"] is None and line["optimize_detail"]["fused_qkv"] is True
    assert math.isfinite(line["loss"]["first"]) and math.isfinite(line["loss"]["last"])
    # benchc's --smoke MMDiT: the same parameters and model FLOPs per image
    assert line["config"]["params"] == 294_592
    assert line["flops"]["model_flops_per_sample"] == 57_729_024.0


def test_the_hand_written_loop_builds_s1s_model_and_counts_its_flops_as_benchc_does():
    from compiler.plan.flops import mmdit_cost

    hand = load("handwritten_train")
    golden = (REPO / "tests/golden/programs/h100/bench.py").read_text()
    assigned = [node for node in ast.parse(golden).body if isinstance(node, ast.Assign)]
    plan = next(ast.literal_eval(n.value) for n in assigned if getattr(n.targets[0], "id", "") == "PLAN")
    assert hand.D24 == plan["model"]["config"] and hand.TEXT_TOKENS == plan["model"]["text_tokens"]
    assert plan["train"]["optimizer"]["args"] == {"lr": 0.0001, "weight_decay": 0.0}
    assert hand.train_flops_per_sample(hand.D24, 32, 154) == plan["train_flops_per_sample"]
    for latent in (32, 64):
        benchc = mmdit_cost(24, 1536, 2, 16, 4096, 2048, 64, None, (latent // 2) ** 2, 154)
        assert hand.train_flops_per_sample(hand.D24, latent, 154) == benchc.train_flops_per_sample
    source = (REPO / "benchmarks/handwritten_train.py").read_text()
    assert not re.search(r"^\s*(from|import) (compiler|benchc)\b", source, re.M)  # independent of benchc
