"""Build points whose program is a short script instead of a generated benchmark program.

They exercise `benchc run`'s handling of how a program ends (raising mid-run, hanging past
the timeout, being interrupted or left behind by a killed runner) in a second or two each,
without torch. They prove the runner's behaviour only; the generated programs themselves
are run for real in test_run_cpu.py and test_run_command.py. The manifest is a real one,
produced by compiling S1, so the store and the reports see genuine plans.
"""

from __future__ import annotations

import json
import textwrap
from pathlib import Path

from benchc.codegen.build import compile_plans
from benchc.pipeline import plan_spec

from helpers import SPECS

LAUNCHER = '#!/usr/bin/env bash\nset -euo pipefail\ncd "$(dirname "$0")"\nexec "$PYTHON" bench.py "$@"\n'

# The program's side of the contract: print step lines, write metrics with --metrics.
PRELUDE = textwrap.dedent(
    """
    import json, os, sys, time
    metrics_path = sys.argv[sys.argv.index("--metrics") + 1]
    with open(os.path.join(os.path.dirname(metrics_path), "pid"), "w") as f:
        f.write(str(os.getpid()))
    def step(n, total=5, seconds=0.01):
        time.sleep(seconds)
        print(f"step {n}/{total} loss 1.0 time {seconds:.3f}s", flush=True)
    """
)


def scripted_point(root: Path, body: str, name: str = "scripted") -> Path:
    """A build point under root whose bench.py runs PRELUDE + body."""
    one_node = ["cluster.nodes=1", "cluster.devices_per_node=16"]  # S1's 16 devices, on one node
    overrides = ["train.batch=16", *one_node]
    (plan,) = plan_spec(SPECS / "sd3.bench", targets=["cpu"], overrides=overrides, smoke=True).plans
    (built,) = compile_plans((plan,), root / name)
    (built.path / "bench.py").write_text(PRELUDE + textwrap.dedent(body))
    (built.path / "launch.sh").write_text(LAUNCHER)
    return built.path


def scripted_job_point(root: Path, body: str, name: str = "job", overrides=()) -> Path:
    """A one-process build point with its generated launch.sh and job.sbatch, whose bench.py
    runs PRELUDE + body: Slurm jobs that fail, hang or end in a second, as a program may."""
    one = ["cluster.nodes=1", "cluster.devices_per_node=1", "parallel.data=1", "train.batch=16", *overrides]
    (plan,) = plan_spec(SPECS / "sd3.bench", targets=["cpu"], overrides=one, smoke=True).plans
    (built,) = compile_plans((plan,), root / name, sbatch=True)
    (built.path / "bench.py").write_text(PRELUDE + textwrap.dedent(body))
    return built.path


def ok_metrics(throughput: float = 100.0, target: str = "cpu", point: str = "default") -> dict:
    """Metrics that satisfy the metrics schema, as a finished run writes them."""
    metrics = {
        "schema": "benchc-metrics", "schema_version": 1, "status": "ok",
        "experiment": "sd3_mmdit_train", "target": target, "point": point, "point_values": {},
        "smoke": True, "spec_sha256": "0" * 64, "workload": "train", "metric": "images_per_s",
        "host": "h", "error": None, "world_size": 2, "device_name": "cpu", "versions": {},
        "steps": {"total": 5, "warmup": 2, "measured": 3}, "warmup_s": 0.02,
        "step_time_s": {"median": 0.04, "p10": 0.04, "p90": 0.04, "mean": 0.04, "all": [0.04] * 3},
        "throughput": {"unit": "images/s", "job": throughput, "per_device": throughput / 2,
                       "samples_per_step": 4},
        "loss": {"first": 1.0, "last": 1.0, "all": [1.0] * 5}, "peak_memory_bytes": 1024,
        "flops": {"model_flops_per_sample": 1.0, "achieved_per_device": 1.0,
                  "peak_per_device": None, "mfu": None},
    }  # fmt: skip
    return metrics


def ok_metrics_body(throughput: float = 100.0) -> str:
    """A script that finishes and writes metrics that satisfy the metrics schema."""
    metrics = ok_metrics(throughput)
    return (
        "for n in range(1, 6):\n    step(n)\n"
        f"json.dump(json.loads({json.dumps(metrics)!r}), open(metrics_path, 'w'))\n"
    )
