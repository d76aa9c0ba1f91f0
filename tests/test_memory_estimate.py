"""benchc estimate's memory per device and its roofline against what real runs do
(tests/memory_checks.py says how), for every sharding the programs run: DDP, FSDP2 (Llama),
activation checkpointing, DeepSpeed ZeRO-2, tensor-parallel generation and the SD3 pipeline.
S1 under DDP, S4 under FSDP2 and the SD3 pipeline are checked on the runs of
tests/test_run_cpu.py that check those programs' behaviour (one run serves both)."""

from __future__ import annotations

import json

import pytest
from memory_checks import assert_within_estimate, smoke_plan, traced_env
from test_run_cpu import launch_nodes

from benchc.codegen.build import compile_plans

pytestmark = pytest.mark.integration

CASES = {
    "s1-fsdp": ("sd3.bench", ["train.batch=16", "parallel.sharding=fsdp"]),
    "s1-checkpointing": ("sd3.bench", ["train.batch=16", "parallel.activation_checkpointing=true"]),
    "s4-ddp": ("beluga-train.bench", ["parallel.sharding=none"]),
    "s4-zero2": ("beluga-train.bench", ["parallel.sharding=zero2", "train.precision=bf16"]),
    "s5-tensor-parallel": ("beluga-infer.bench", []),
}


@pytest.mark.parametrize("case", CASES)
def test_the_memory_estimate_of_a_smoke_run_is_within_tolerance_of_its_measured_peak(tmp_path, case):
    spec, sets = CASES[case]
    plan = smoke_plan(spec, sets)
    (built,) = compile_plans((plan,), tmp_path / "build")
    proc = launch_nodes(built.path, traced_env(tmp_path / "mem", plan.cluster.world_size), timeout=600)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    metrics = json.loads((built.path / "metrics.json").read_text())
    assert_within_estimate(case, plan, metrics, tmp_path / "mem")
