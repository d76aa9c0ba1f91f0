"""Profiling's cost to the headline: S1's CPU smoke program run with `--profile` and without,
side by side, its measured step time compared.

    python benchmarks/profile_overhead.py [--rounds N] [--ranks 1|2]

The program is compiled once (`benchc compile specs/sd3.bench --smoke`, one point); each round
runs it twice through `benchc run` (its 2 nodes of one rank each on this machine, gloo),
profiled and not, alternating which goes first (on off, off on, ...), and takes the ratio of
their headline step times (the median of the measured steps). `--ranks 1`: the same program
for one process (cluster 1 x 1), without gloo's noise on a small machine. Printed:
the median of those ratios over the rounds minus 1 (the headline's change with profiling on),
their spread, and what the profiled steps themselves cost (their wall time, outside the
headline). The fastest measured step's ratio is printed too: it is the least moved by other
work on a shared machine. Target: at most 1%: the profiler starts only after the measured
window has ended.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import header, spread  # noqa: E402

REPO = Path(__file__).resolve().parent.parent


ONE_RANK = ["--set", "cluster.nodes=1", "--set", "cluster.devices_per_node=1", "--set", "parallel.data=1"]


def compile_point(out: Path, ranks: int, steps: int | None = None) -> Path:
    sets = ["--set", "train.batch=16", *(ONE_RANK if ranks == 1 else [])]  # one point of the sweep
    if steps:  # a longer measured window: its median step moves less from run to run
        sets += ["--set", f"train.steps={steps}"]
    subprocess.run(
        [sys.executable, "-m", "benchc", "compile", "specs/sd3.bench", "--smoke", *sets, "-o", str(out)],
        cwd=REPO, check=True, capture_output=True, text=True,
    )  # fmt: skip
    (launcher,) = out.rglob("launch.sh")
    return launcher.parent


def run_once(point: Path, db: Path, profile: bool) -> dict:
    """One trial through `benchc run` (it starts both nodes' launchers here); its metrics."""
    before = set(point.glob("runs/*/metrics.json"))
    command = [
        sys.executable,
        "-m",
        "benchc",
        "run",
        str(point),
        "--db",
        str(db),
        *(["--profile"] if profile else []),
    ]
    done = subprocess.run(command, cwd=REPO, capture_output=True, text=True, timeout=600)
    if done.returncode != 0:
        raise SystemExit(f"the run failed:\n{done.stdout[-2000:]}\n{done.stderr[-2000:]}")
    (metrics,) = set(point.glob("runs/*/metrics.json")) - before
    return json.loads(metrics.read_text())


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=8)
    parser.add_argument("--ranks", type=int, choices=(1, 2), default=2)
    parser.add_argument("--steps", type=int, default=None, help="train.steps (default: the smoke plan's)")
    args = parser.parse_args()
    print(header(f"profile overhead (S1 smoke, cpu, {args.ranks} rank(s))"))
    with tempfile.TemporaryDirectory() as folder:
        point = compile_point(Path(folder) / "build", args.ranks, args.steps)
        ratios, fastest, profiled_s, extra_wall = [], [], [], []
        for index in range(args.rounds):
            order = (True, False) if index % 2 == 0 else (False, True)
            step, low, wall = {}, {}, {}
            for profile in order:
                metrics = run_once(point, Path(folder) / "results.db", profile)
                step[profile] = metrics["step_time_s"]["median"]
                low[profile] = min(metrics["step_time_s"]["all"])
                wall[profile] = metrics["wall_s"]
                if profile:
                    assert "profile" in metrics
                    profiled_s.append(metrics["profile"]["profiled_s"])
            ratios.append(step[True] / step[False])
            fastest.append(low[True] / low[False])
            extra_wall.append(wall[True] - wall[False])
            print(f"  round {index + 1}: step off {step[False] * 1e3:.2f} ms, on {step[True] * 1e3:.2f} ms, "
                  f"on/off {ratios[-1]:.4f}", flush=True)  # fmt: skip
    for what, values in (("headline (median) step", ratios), ("fastest measured step", fastest)):
        median, iqr, least, most = spread(values)
        print(f"{what}, profiling on / off: median {median:.4f} ({(median - 1) * 100:+.2f}%), "
              f"IQR {iqr:.4f}, min {least:.4f}, max {most:.4f}, {args.rounds} rounds")  # fmt: skip
    wall_median = spread(extra_wall)[0]
    print(f"the profiled steps (outside the headline): {spread(profiled_s)[0] * 1e3:.1f} ms of steps, "
          f"{wall_median:+.2f} s of program wall time (profiler start, stop, trace written)")  # fmt: skip
    return 0


if __name__ == "__main__":
    sys.exit(main())
