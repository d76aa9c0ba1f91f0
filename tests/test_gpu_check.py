"""benchmarks/gpu_check.sh in parts (training, inference), each fitting one 8-minute call on one
GPU; its summary (benchmarks/gpu_summary.py); the hand-written tuned training loop it measures
the generated program against (benchmarks/handwritten_train.py). Nothing here needs a GPU."""

from __future__ import annotations

import ast
import importlib.util
import json
import math
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import REPO

CALL_S = 480  # one call of the device tool: 8 minutes, startup and compilation included
SCRIPT = REPO / "benchmarks/gpu_check.sh"


def load(name: str):
    spec = importlib.util.spec_from_file_location(name, REPO / "benchmarks" / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def gpu_check(out: Path, *args: str, env: dict | None = None, timeout: int = 180):
    env = {**os.environ, "PYTHON": sys.executable, "OUT": str(out), **(env or {})}
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
    assert proc.stdout.count("  starts: python") + proc.stdout.count(f"  starts: {sys.executable}") == 4
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


def test_the_inference_part_dry_run_compiles_s5_and_s3_and_fits_8_minutes(tmp_path):
    proc = gpu_check(tmp_path, "--dry-run", "inference")
    assert proc.returncode == 0, proc.stderr
    summary = check_budget(tmp_path, "inference", proc.stdout)
    assert [row["run"] for row in summary["runs"]] == ["s5", "s3"]
    assert summary["ratios"] == [] and proc.stdout.count("  starts: ") == 2
    s5, program = point(tmp_path, "s5", "beluga_70b_infer")
    assert s5["cluster"]["world_size"] == 1 and s5["model"]["layers"] == 2 and s5["model"]["hidden"] == 8192
    assert program["infer"]["graphs"] is True and program["infer"]["kv_cache"] == "static"
    s3, program = point(tmp_path, "s3", "sd3_large_infer")
    assert s3["cluster"]["world_size"] == program["world_size"] == 1 and program["smoke"] is False
    assert (program["infer"]["steps"], program["infer"]["warmup"]) == (3, 1)
    assert not (tmp_path / "hand_smoke.json").exists()


@pytest.mark.parametrize("args", [[], ["train"], ["training", "inference"], ["training", "--dry"],
                                  ["--dry-run"]])  # fmt: skip
def test_a_usage_error_prints_the_usage_and_exits_2(tmp_path, args):
    proc = gpu_check(tmp_path, *args, timeout=30)
    assert proc.returncode == 2 and "usage: bash benchmarks/gpu_check.sh training|inference" in proc.stderr
    assert not (tmp_path / "build").exists()


def test_a_part_whose_runs_all_fail_still_reports_each_in_its_summary(tmp_path):
    """The inference part as on a GPU machine (the CUDA check and nvidia-smi stubbed): each
    program stops at once here (no CUDA device) and the summary says so, run by run."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "python").write_text(
        "#!/usr/bin/env bash\n"
        'if [ "${1:-}" = -c ] && [[ "${2:-}" == *cuda.is_available* ]]; then exit 0; fi\n'
        f'exec {sys.executable} "$@"\n'
    )
    (bin_dir / "nvidia-smi").write_text(
        "#!/usr/bin/env bash\necho 'name, memory.total [MiB], driver_version'\n"
        "echo 'Stub H200, 143771 MiB, 0'\n"
    )
    for stub in bin_dir.iterdir():
        stub.chmod(0o755)
    out = tmp_path / "out"
    env = {"PATH": f"{bin_dir}:{os.environ['PATH']}", "PYTHON": str(bin_dir / "python")}
    proc = gpu_check(out, "inference", env=env, timeout=300)
    assert proc.returncode == 0, proc.stderr
    assert "== s5 (up to 180 s)" in proc.stdout and "s3 ended with status 1" in proc.stdout
    summary = json.loads((out / "summary.json").read_text())
    assert summary["mode"] == "gpu" and summary["gpu"] == ["Stub H200, 143771 MiB, 0"]
    for row in summary["runs"]:
        assert row["status"].startswith("failed: this program is built for CUDA (h200)"), row
        assert row["exit_status"] == 1 and row["limit_s"] == row["planned_limit_s"]
    events = [line.split("\t")[0] for line in (out / "events.tsv").read_text().splitlines()]
    assert events == ["part", "plan", "plan", "start", "end", "start", "end"]


# ---- the summary -------------------------------------------------------------------------


def metrics(median: float, spread: float = 0.02, **extra) -> dict:
    """A benchc metrics file of a finished run, as the generated programs write them."""
    times = [median * (1 - spread), median, median * (1 + spread)]
    flops = 1736469577728.0
    images = 16 / median
    return {
        "schema": "benchc-metrics", "schema_version": 1, "status": "ok", "experiment": "sd3_mmdit_train",
        "target": "h200", "point": "default", "smoke": False, "workload": "train", "error": None,
        "device_name": "NVIDIA H200", "startup_s": 12.5, "compile_s": None, "warmup_s": 40.0,
        "steps": {"total": 50, "warmup": 10, "measured": 40},
        "step_time_s": {"median": median, "p10": times[0], "p90": times[2], "mean": median, "all": times},
        "throughput": {"unit": "images/s", "job": images, "per_device": images, "samples_per_step": 16},
        "flops": {"model_flops_per_sample": flops, "achieved_per_device": flops * images,
                  "peak_per_device": 989e12, "mfu": flops * images / 989e12},
        "peak_memory_bytes": 40 * 2**30, **extra,
    }  # fmt: skip


def test_the_summary_turns_metrics_files_into_the_expected_ratios(tmp_path):
    """Tuned 50 ms, plain 100 ms, hand-written 49.5 ms, batch 32 failed, S4 timed out without
    metrics; a line cut short by a kill is ignored."""
    summary_module = load("gpu_summary")
    events = [
        "part\ttraining\th200\tgpu\t470\t480\t10\t15",
        "plan\ts1_b16_tuned\t150\t100\trequired\tS1 batch 16, tuned",
        "plan\ts1_b16_plain\t60\t45\trequired\tS1 batch 16, plain",
        "plan\thand_b16\t120\t60\trequired\thand-written tuned loop, batch 16",
        "plan\ts1_b32_tuned\t90\t60\trequired\tS1 batch 32, tuned",
        "plan\ts4\t120\t90\toptional\tS4",
        "ratio\ttuned/plain\ts1_b16_plain\ts1_b16_tuned\t>=\t1.8\tspeedup",
        "ratio\tgenerated/hand-written\ts1_b16_tuned\thand_b16\t<=\t1.02\tstep / step",
        "check\ts1_b16_tuned\tmfu\t>=\t0.35",
        "check\ts1_b16_tuned\tp90_p10\t<=\t1.05",
        "check\ts1_b16_tuned\tcompile_s\t<=\t90",
        "check\ts1_b32_tuned\tmfu\t>=\t0.35",
        "start\ts1_b16_tuned\t150", "end\ts1_b16_tuned\t0\t71",
        "start\ts1_b16_plain\t60", "end\ts1_b16_plain\t0\t29",
        "start\thand_b16\t120", "end\thand_b16\t0\t55",
        "start\ts1_b32_tuned\t90", "end\ts1_b32_tuned\t1\t33",
        "start\ts4\t120", "end\ts4\t124\t130",
        "end\ts4\t0",  # cut short by SIGKILL while being written
    ]  # fmt: skip
    (tmp_path / "events.tsv").write_text("\n".join(events) + "\n")
    tuned = metrics(0.050, optimize="tuned", compile_s=61.0, optimize_detail={"compile": "regional"})
    (tmp_path / "s1_b16_tuned.json").write_text(json.dumps(tuned))
    (tmp_path / "s1_b16_plain.json").write_text(json.dumps(metrics(0.100, spread=0.1, optimize="plain")))
    hand = metrics(0.0495, optimize="handwritten", compile_s=30.0)
    hand["schema"] = "handwritten-train"
    (tmp_path / "hand_b16.json").write_text(json.dumps(hand))
    failed = {**metrics(0.1), "status": "failed", "step_time_s": None, "throughput": None, "flops": None,
              "error": {"type": "OutOfMemoryError", "message": "CUDA out of memory.\nTried to allocate 2 GiB",
                        "rank": 0, "traceback": ""}}  # fmt: skip
    (tmp_path / "s1_b32_tuned.json").write_text(json.dumps(failed))
    estimate = {"estimates": [{"roofline": {"seconds": 0.0281, "peak_flops_per_device": 989e12}}]}
    (tmp_path / "s1_b16_tuned.estimate.json").write_text(json.dumps(estimate))

    assert summary_module.main(["write", str(tmp_path)]) == 0
    summary = json.loads((tmp_path / "summary.json").read_text())
    ratios = {r["ratio"]: r for r in summary["ratios"]}
    assert ratios["tuned/plain"]["value"] == pytest.approx(2.0) and ratios["tuned/plain"]["result"] == "met"
    gen = ratios["generated/hand-written"]
    assert gen["value"] == pytest.approx(0.050 / 0.0495) and gen["result"] == "met"
    runs = {row["run"]: row for row in summary["runs"]}
    t = runs["s1_b16_tuned"]
    assert t["status"] == "ok" and t["optimize"] == "tuned" and t["elapsed_s"] == 71
    assert t["mfu"] == pytest.approx(1736469577728.0 * 16 / 0.05 / 989e12)  # 56.2 %
    assert t["roofline_fraction"] == pytest.approx(0.0281 / 0.050)
    assert t["p90_p10"] == pytest.approx(1.02 / 0.98) and t["compile_s"] == 61.0 and t["startup_s"] == 12.5
    assert t["peak_memory_gib"] == pytest.approx(40.0) and t["throughput"] == pytest.approx(320.0)
    assert runs["s1_b16_plain"]["roofline_fraction"] is None  # no estimate file for it
    assert runs["s1_b32_tuned"]["status"] == "failed: CUDA out of memory. Tried to allocate 2 GiB"
    assert runs["s4"]["status"] == "timed out at 120 s, no metrics (see s4.log)"
    assert runs["s4"]["exit_status"] == 124
    checks = {(c["run"], c["field"]): (c["value"], c["result"]) for c in summary["checks"]}
    assert checks[("s1_b16_tuned", "mfu")][1] == "met" and checks[("s1_b16_tuned", "p90_p10")][1] == "met"
    assert checks[("s1_b16_tuned", "compile_s")] == (61.0, "met")
    assert checks[("s1_b32_tuned", "mfu")] == (None, "not measured")
    assert summary["budget"]["planned_total_s"] == 15 + 150 + 60 + 120 + 90 + 4 * 10
    text = (tmp_path / "summary.md").read_text()
    assert "| tuned/plain | 2.000 | >= 1.8 | met | speedup |" in text
    row = "| s1_b16_tuned: S1 batch 16, tuned | ok | 71 / 150 | 0.05 | 1.041 | 320 images/s | 56.2% | 56.2% |"
    assert row in text

    # cut short: hand_b16 still running when the part was killed, the rest never started
    (tmp_path / "events.tsv").write_text("\n".join(events[:17]) + "\n")
    (tmp_path / "hand_b16.json").unlink()
    summary = summary_module.summarize(tmp_path)
    runs = {row["run"]: row["status"] for row in summary["runs"]}
    assert runs["hand_b16"] == "running or cut short (limit 120 s), no metrics yet"
    assert runs["s4"] == "not run yet" and runs["s1_b16_tuned"] == "ok"
    ratios = {r["ratio"]: (r["value"], r["result"]) for r in summary["ratios"]}
    assert ratios["generated/hand-written"] == (None, "not measured")
    assert ratios["tuned/plain"][1] == "met"


def test_the_summary_reports_skipped_and_unreadable_runs(tmp_path):
    (tmp_path / "events.tsv").write_text(
        "part\tinference\th200\tgpu\t470\t480\t10\t15\n"
        "plan\ts5\t180\t120\trequired\tS5\nplan\ts3\t250\t150\trequired\tS3\n"
        "start\ts5\t180\nend\ts5\t137\t190\nskip\ts3\tonly 100 s left of the part's 470 s, it needs 150\n"
    )
    (tmp_path / "s5.json").write_text('{"status": "ok", "step_')
    assert load("gpu_summary").main(["write", str(tmp_path), "--print"]) == 0
    runs = json.loads((tmp_path / "summary.json").read_text())["runs"]
    assert [r["status"] for r in runs] == [
        "metrics file unreadable",
        "skipped: only 100 s left of the part's 470 s, it needs 150",
    ]


# ---- the hand-written loop ---------------------------------------------------------------


def test_the_hand_written_loop_runs_on_the_cpu_and_reports_sane_numbers(tmp_path):
    out = tmp_path / "hand.json"
    proc = subprocess.run([sys.executable, "benchmarks/handwritten_train.py", "--device", "cpu", "--smoke",
                           "--peak-flops", "1e12", "--metrics", str(out)],
                          cwd=REPO, capture_output=True, text=True, timeout=180)  # fmt: skip
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
