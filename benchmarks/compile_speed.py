"""How fast the compiler is: check, plan and compile of every reference spec, in-process.

    python benchmarks/compile_speed.py [--repeat N]

Prints the median wall time per spec for each stage, side by side in one run, and the cold
start of `benchc check` as a process (interpreter + imports). Record figures in README.md.
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from benchc.codegen.build import compile_plans
from benchc.codegen.programs import unsupported
from benchc.pipeline import plan_spec

REPO = Path(__file__).resolve().parent.parent


def timed(function, repeat: int) -> float:
    times = []
    for _ in range(repeat):
        start = time.perf_counter()
        function()
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--repeat", type=int, default=20)
    args = parser.parse_args()
    print(f"{'spec':22} {'points':>6} {'plan ms':>8} {'compile ms':>11}")
    for spec in sorted((REPO / "specs").glob("*.bench")):
        plans = plan_spec(spec).plans
        plan_ms = timed(lambda: plan_spec(spec), args.repeat) * 1e3
        if any(unsupported(p) for p in plans):
            compile_ms = "n/a"
        else:
            with tempfile.TemporaryDirectory() as out:
                seconds = timed(lambda: compile_plans(plan_spec(spec).plans, Path(out)), args.repeat)
            compile_ms = f"{seconds * 1e3:.1f}"
        print(f"{spec.name:22} {len(plans):>6} {plan_ms:>8.1f} {compile_ms:>11}")
    cold = timed(
        lambda: subprocess.run(
            [sys.executable, "-m", "benchc", "check", *map(str, (REPO / "specs").glob("*.bench"))],
            check=True, capture_output=True,
        ),
        5,
    )  # fmt: skip
    print(f"cold `benchc check specs/*.bench` as a process: {cold * 1e3:.0f} ms")


if __name__ == "__main__":
    main()
