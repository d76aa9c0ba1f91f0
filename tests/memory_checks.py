"""benchc estimate's memory per device, and its roofline, held to what a real CPU smoke run of a
generated program does: each rank's peak of live tensor storage measured by tests/memtrace (the
resident set the CPU programs report is too coarse: hundreds of MB of interpreter and
allocator). The estimate (plan/memory.py, the one `benchc estimate` and `check` use) must be
within TOLERANCE of the measured peak, on both sides. The smoke models are small, so what the
formulas leave out (docs/estimate.md: RNG state, small buffers, allocator rounding) weighs more
here than at full size.

The roofline (plan/roofline.py) claims a floor: the cpu target states no peak, so it is drawn
for a CPU with figures far above any two-core machine's (GENEROUS), and no run may beat it. A
bound a real run beats means FLOPs or bytes counted that the program does not do.

Used by tests/test_memory_estimate.py and by the runs of tests/test_run_cpu.py that check a
program's behaviour on the same plan (one run serves both)."""

from __future__ import annotations

import dataclasses
import json
import os
import sys
from pathlib import Path

from benchc.pipeline import plan_spec
from benchc.plan.memory import ZERO_REDUCE_BUCKET, estimate_memory
from benchc.plan.roofline import roofline

from helpers import REPO

MEMTRACE = Path(__file__).resolve().parent / "memtrace"
TOLERANCE = 0.25  # measured / estimated within [1 - 0.25, 1 + 0.25]
# above any two vCPUs: 20 TFLOP/s (AMX bf16 at 5 GHz on 2 cores gives 20), 1 TB/s, 1 TB/s links
GENEROUS = {"peak_tflops": {"fp32": 20.0, "bf16": 20.0, "fp16": 20.0}, "hbm_tb_s": 1.0,
            "scale_up_gb_s": 1000.0, "scale_out_gb_s": 1000.0}  # fmt: skip


def smoke_plan(spec: str, overrides: list[str]):
    """The one cpu --smoke plan of `spec` with `overrides` (as `benchc compile` makes it)."""
    (plan,) = plan_spec(REPO / "specs" / spec, targets=["cpu"], overrides=overrides, smoke=True).plans
    return plan


def traced_env(prefix: Path, world_size: int) -> dict:
    """The environment a launch needs for tests/memtrace to write <prefix>.<rank>.json."""
    env = {**os.environ, "PYTHON": sys.executable, "OMP_NUM_THREADS": "1", "PYTHONPATH": str(MEMTRACE),
           "BENCHC_TEST_MEMTRACE": str(prefix)}  # fmt: skip
    if world_size == 1:  # one process: no launcher sets these for the tracer
        env.update(RANK="0", WORLD_SIZE="1")
    return env


def assert_within_estimate(case: str, plan, metrics: dict, prefix: Path) -> None:
    """The run's step is no faster than the roofline's floor, and every rank's traced peak is
    within TOLERANCE of the memory estimate (and, under ZeRO, the rest beside its buckets)."""
    line = roofline(dataclasses.replace(plan, target=dataclasses.replace(plan.target, **GENEROUS)))
    assert line.seconds is not None and line.seconds > 0
    measured = metrics["step_time_s"]["p10"]  # a step, a pipeline call, or a whole generate
    assert line.seconds <= measured, (case, line.seconds, measured)
    estimate = estimate_memory(plan)
    traces = sorted(prefix.parent.glob(f"{prefix.name}.*.json"))
    assert len(traces) == plan.cluster.world_size
    for trace in traces:
        peak = json.loads(trace.read_text())["peak_bytes"]
        ratio = peak / estimate.total
        parts = {p.name: round(p.bytes / 1e6, 3) for p in estimate.parts}
        assert 1 - TOLERANCE <= ratio <= 1 + TOLERANCE, (case, peak / 1e6, estimate.total / 1e6, parts)
        if plan.parallel.sharding.startswith("zero"):  # the rest, beside DeepSpeed's 1 GB bucket
            bucket = estimate.part("buckets")
            assert bucket == 2 * ZERO_REDUCE_BUCKET  # allocated whole, whatever the model's size
            rest = (peak - bucket) / (estimate.total - bucket)
            assert 1 - TOLERANCE <= rest <= 1 + TOLERANCE, (case, rest, parts)
