"""How `benchc check` grows with its input: time and peak memory over generated specs of
growing size (10 KB to 1 MiB), one shape of hostile or odd input at a time, each size run as
a new process, the growth exponent fitted on a log-log scale.

    python benchmarks/input_scaling.py [--sizes 10,30,100,300,1024] [--shapes NAME,...]

Goal (issue 14): every shape checked in under 2 s and 200 MB at 1 MiB, exponent at most 1.2.
The exponent is the slope of log(time) over log(size) between the smallest and the largest
sizes, after subtracting the cost of an empty check (interpreter and imports), so it shows the
growth of benchc's own work. Exit status 2 (a located error) is what most shapes should get.
"""

from __future__ import annotations

import argparse
import math
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import header  # noqa: E402

HEAD = "experiment e {\n  model mmdit { depth = 2 }\n  targets = [cpu]\n"


def _repeat(unit: str, size: int, head: str = HEAD, tail: str = "}\n") -> str:
    count = max(1, (size - len(head) - len(tail)) // len(unit))
    return head + unit * count + tail


SHAPES = {
    # one dotted key of many parts: `a.a.a...a = 1`
    "dotted key": lambda size: HEAD + "  " + ".".join(["a"] * max(1, (size - 60) // 2)) + " = 1\n}\n",
    # many unknown keys, each its own diagnostic
    "unknown keys": lambda size: _repeat("  train.unknown_key_number = 1\n", size),
    # many unknown blocks
    "unknown blocks": lambda size: _repeat("  nonsense { x = 1 }\n", size),
    # many dotted keys into an unknown section
    "bad dotted keys": lambda size: _repeat("  zzz.yyy.xxx = 1\n", size),
    # empty statements
    "semicolons": lambda size: _repeat(";", size),
    # one valid setting written again and again: a duplicate-key diagnostic each
    "duplicate settings": lambda size: _repeat('  description = "a benchmark of the S1 workload"\n', size),
    # deep lists, refused at the nesting limit
    "nesting": lambda size: HEAD + "  x = " + "[" * (size // 2) + "]" * (size // 2) + "\n}\n",
    # one huge comment: nothing to do but skip it
    "comment": lambda size: HEAD + "  # " + "x" * size + "\n}\n",
}


def measure(path: Path) -> tuple[float, float, int]:
    """(seconds, peak MiB, exit status) of `benchc check path` as a new process."""
    started = time.perf_counter()
    process = subprocess.Popen([sys.executable, "-m", "benchc", "check", str(path)],
                               stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)  # fmt: skip
    _, status, usage = os.wait4(process.pid, 0)
    elapsed = time.perf_counter() - started
    process.returncode = os.waitstatus_to_exitcode(status)
    return elapsed, usage.ru_maxrss / 1024, process.returncode


def best_of(path: Path, rounds: int) -> tuple[float, float, int]:
    runs = [measure(path) for _ in range(rounds)]
    return min(r[0] for r in runs), max(r[1] for r in runs), runs[0][2]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", default="10,30,100,300,1024", help="sizes in KiB")
    parser.add_argument("--shapes", default=",".join(SHAPES))
    parser.add_argument("--rounds", type=int, default=3, help="runs per size; the fastest is kept")
    args = parser.parse_args()
    sizes = [int(s) * 1024 for s in args.sizes.split(",")]
    sizes[-1] = min(sizes[-1], 1024 * 1024 - 64)  # just under the 1 MiB file limit
    print(header("benchc check over growing input"))
    with tempfile.TemporaryDirectory() as folder:
        empty = Path(folder) / "empty.bench"
        empty.write_text(HEAD + "}\n")
        measure(empty)  # warm the parser and template caches and the page cache
        base, base_mb, _ = best_of(empty, 2 * args.rounds)
        print(f"baseline (a 3-line spec): {base:.3f} s, {base_mb:.0f} MiB")
        print(f"{'shape':16} {'size':>8} {'seconds':>8} {'MiB':>6} {'exit':>4}")
        for name in args.shapes.split(","):
            points = []
            for size in sizes:
                path = Path(folder) / "s.bench"
                path.write_text(SHAPES[name](size))
                seconds, mb, code = best_of(path, args.rounds)
                points.append((path.stat().st_size, seconds, mb, code))
                print(f"{name:16} {points[-1][0] // 1024:>6}KB {seconds:>8.3f} {mb:>6.0f} {code:>4}")
            (small, t_small, _, _), (large, t_large, _, _) = points[0], points[-1]
            own_small, own_large = max(t_small - base, 1e-3), max(t_large - base, 1e-3)
            exponent = math.log(own_large / own_small) / math.log(large / small)
            verdict = "ok" if t_large < 2 and points[-1][2] < 200 and exponent <= 1.2 else "ABOVE GOAL"
            at_limit = f"at 1 MiB {t_large:.2f} s, {points[-1][2]:.0f} MiB"
            print(f"{name:16} growth exponent {exponent:.2f} (own work {own_small:.3f} -> "
                  f"{own_large:.3f} s); {at_limit}: {verdict}")  # fmt: skip


if __name__ == "__main__":
    main()
