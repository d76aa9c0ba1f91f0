"""How long `benchc calibrate --target cpu` takes as a user starts it (a new process, a store of
its own, 2 processes over gloo), at smoke sizes and at full size, against the issue's budget of
30 s on 2 cores (and 60 s on one GPU, which this script cannot measure here).

    python benchmarks/calibrate_time.py [--rounds N]

Each round runs the smoke and the full calibration back to back, alternating which goes first.
Printed: the median wall time of each over the rounds, its spread (interquartile range,
min-max) and its share of the budget; and the figures of the last full calibration, so the
time can be read beside what was measured.
"""

from __future__ import annotations

import argparse
import json
import os
import sqlite3
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import header, spread  # noqa: E402

REPO = Path(__file__).resolve().parent.parent
BUDGET_S = 30.0


def calibrate(smoke: bool, folder: Path) -> tuple[float, dict]:
    """Seconds of one `benchc calibrate --target cpu` and the calibration it stored."""
    db = folder / "results.db"
    command = [sys.executable, "-m", "benchc", "calibrate", "--target", "cpu", "-o", str(folder / "build"),
               "--db", str(db), *(["--smoke"] if smoke else [])]  # fmt: skip
    started = time.perf_counter()
    subprocess.run(command, cwd=REPO, check=True, capture_output=True, env=dict(os.environ))
    seconds = time.perf_counter() - started
    with sqlite3.connect(db) as store:
        (data,) = store.execute("SELECT data FROM calibrations WHERE status = 'ok'").fetchone()
    return seconds, json.loads(data)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args()
    print(header("benchc calibrate --target cpu: wall time"))
    times: dict[str, list[float]] = {"smoke": [], "full": []}
    last = None
    for round_ in range(args.rounds):
        order = ("smoke", "full") if round_ % 2 == 0 else ("full", "smoke")
        for kind in order:
            with tempfile.TemporaryDirectory(prefix="benchc-calibrate-") as folder:
                seconds, data = calibrate(kind == "smoke", Path(folder))
            times[kind].append(seconds)
            if kind == "full":
                last = data
    for kind, values in times.items():
        median, iqr, low, high = spread(values)
        print(f"  {kind:5}  median {median:6.2f} s  IQR {iqr:5.2f}  min-max {low:.2f}-{high:.2f}  "
              f"({median / BUDGET_S:.0%} of the {BUDGET_S:.0f} s budget; {len(values)} rounds)")  # fmt: skip
    if last:
        tflops = ", ".join(f"{p} {v:.3g}" for p, v in sorted(last["matmul_tflops"].items()))
        buses = ", ".join(f"{n} {c['bus_gb_s']:.3g}" for n, c in sorted(last["collectives"].items()))
        print(f"  last full calibration: matmul TFLOP/s {tflops}; copy {last['memory_tb_s'] * 1e3:.3g} GB/s; "
              f"bus GB/s {buses}; launch {last['launch_us']:.3g} us")  # fmt: skip


if __name__ == "__main__":
    main()
