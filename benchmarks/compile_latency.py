"""Compile latency as a user sees it: `benchc compile SPEC` (a new process, every target of the
spec) of every reference spec, against `python -c "import lark, jinja2, jsonschema"` (the
libraries the compiler needs, nothing of benchc) run as many times.

    python benchmarks/compile_latency.py [--rounds N]

Each round runs the 5 compiles (A) and the 5 bare imports (B) back to back, alternating which
goes first (A B, B A, ...), and takes A / B. Printed: the median of those ratios over the
rounds and their spread (interquartile range, min-max), in four settings:

  cache     benchc's cache folder (compiler/cache.py) warm, Python bytecode cached (the usual case)
  no-cache  BENCHC_CACHE_DIR=off: the Lark tables and the Jinja templates built in every process
  cold-pyc  cache warm, but no cached Python bytecode for either side (a fresh install)
  cold-all  neither cache nor Python bytecode (the first run after installing)

Python bytecode goes to a temporary PYTHONPYCACHEPREFIX (warmed first, or fresh for every
process), so the repository's __pycache__ folders play no part. Goal: "cache" at most 1.3.

Then where a compile's time goes: one new process per sample (the median of 5), timing each
phase of `benchc compile` in turn (the libraries, benchc's command-line modules, the pipeline
and code generation modules, planning, writing the build), with the cache and without; and the
in-process plan and plan + compile time of each spec.
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import header, spread  # noqa: E402

REPO = Path(__file__).resolve().parent.parent
SPECS = sorted((REPO / "specs").glob("*.bench"))
BENCHC = Path(sys.executable).parent / "benchc"  # the console script, as a user runs it
BASELINE = [sys.executable, "-c", "import lark, jinja2, jsonschema"]


def _env(pycache: Path | None, cache: str) -> dict:
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONDONTWRITEBYTECODE",)}
    env["BENCHC_CACHE_DIR"] = cache
    if pycache is None:  # no bytecode: a fresh empty prefix, and nothing written to it
        env["PYTHONDONTWRITEBYTECODE"] = "1"
        env["PYTHONPYCACHEPREFIX"] = tempfile.mkdtemp(prefix="pyc-none-")
    else:
        env["PYTHONPYCACHEPREFIX"] = str(pycache)
    return env


def _timed(commands: list[list[str]], pycache: Path | None, cache: str) -> float:
    total = 0.0
    for command in commands:
        env = _env(pycache, cache)
        start = time.perf_counter()
        subprocess.run(command, check=True, env=env, stdout=subprocess.DEVNULL, cwd=REPO)
        total += time.perf_counter() - start
        if pycache is None:
            shutil.rmtree(env["PYTHONPYCACHEPREFIX"], ignore_errors=True)
    return total


def measure(rounds: int, work: Path) -> dict[str, list[float]]:
    out = work / "build"
    compiles = [[str(BENCHC), "compile", str(spec), "-o", str(out)] for spec in SPECS]
    baseline = [BASELINE] * len(SPECS)
    pycache = work / "pycache"
    cache = str(work / "cache")
    settings = {
        "cache": (pycache, cache),
        "no-cache": (pycache, "off"),
        "cold-pyc": (None, cache),
        "cold-all": (None, "off"),
    }
    _timed(compiles + baseline, pycache, cache)  # warm both caches and the page cache
    ratios: dict[str, list[float]] = {name: [] for name in settings}
    seconds: dict[str, list[float]] = {name: [] for name in settings}
    for i in range(rounds):
        for name, (pyc, benchc_cache) in settings.items():
            if i % 2 == 0:
                a = _timed(compiles, pyc, benchc_cache)
                b = _timed(baseline, pyc, benchc_cache)
            else:
                b = _timed(baseline, pyc, benchc_cache)
                a = _timed(compiles, pyc, benchc_cache)
            ratios[name].append(a / b)
            seconds[name].append(a)
    return {"ratios": ratios, "seconds": seconds}


# One `benchc compile` in phases, in a new process: the seconds of each, as JSON.
PHASES = """
import json, sys, time
from pathlib import Path
t = [time.perf_counter()]
import lark, jinja2, jsonschema
t.append(time.perf_counter())
import benchc.cli
benchc.cli._parser(benchc.cli._groups_for(["compile"]))  # the compile command's group, as `benchc` does
t.append(time.perf_counter())
from benchc.codegen.build import compile_plans
from benchc.pipeline import plan_spec
t.append(time.perf_counter())
plans = plan_spec(sys.argv[1]).plans
t.append(time.perf_counter())
compile_plans(plans, Path(sys.argv[2]))
t.append(time.perf_counter())
print(json.dumps([b - a for a, b in zip(t, t[1:])]))
"""
PHASE_NAMES = ("lark+jinja2+jsonschema", "benchc cli + commands", "pipeline + codegen modules", "plan",
               "compile (render, write)")  # fmt: skip


def phases(work: Path, spec: Path, cache: str, samples: int = 5) -> list[float]:
    import json

    found = []
    for i in range(samples):
        command = [sys.executable, "-c", PHASES, str(spec), str(work / f"phases-{i}")]
        env = _env(work / "pycache", cache)
        out = subprocess.run(command, check=True, capture_output=True, text=True, env=env, cwd=REPO)
        found.append(json.loads(out.stdout))
    return [sorted(column)[samples // 2] for column in zip(*found)]


def in_process(work: Path, repeat: int = 5) -> list[tuple[str, int, float, float]]:
    import statistics

    os.environ["BENCHC_CACHE_DIR"] = str(work / "cache")  # warmed by measure()
    from benchc.codegen.build import compile_plans
    from benchc.pipeline import plan_spec

    rows = []
    for spec in SPECS:
        plan_s, both_s, points = [], [], 0
        for i in range(repeat):
            begin = time.perf_counter()
            plans = plan_spec(spec).plans
            plan_s.append(time.perf_counter() - begin)
            compile_plans(plans, work / f"in-process-{spec.stem}-{i}")
            both_s.append(time.perf_counter() - begin)
            points = len(plans)
        rows.append((spec.name, points, statistics.median(plan_s), statistics.median(both_s)))
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=9)
    args = parser.parse_args()
    print(header("compile latency"))
    with tempfile.TemporaryDirectory(prefix="benchc-latency-") as work:
        found = measure(args.rounds, Path(work))
        warm = phases(Path(work), SPECS[-1], str(Path(work) / "cache"))
        cold = phases(Path(work), SPECS[-1], "off")
        table = in_process(Path(work))
    print(f"{len(SPECS)} specs, every target each; {args.rounds} interleaved rounds")
    print(f"{'setting':10} {'ratio median':>12} {'IQR':>7} {'min-max':>13} {'5 compiles (s)':>15}")
    for name, ratios in found["ratios"].items():
        median, iqr, low, high = spread(ratios)
        compile_s = sorted(found["seconds"][name])[len(ratios) // 2]
        print(f"{name:10} {median:12.3f} {iqr:7.3f} {low:6.3f}-{high:<6.3f} {compile_s:15.3f}")
    print("goal: cache <= 1.3")
    print(f"one `benchc compile {SPECS[-1].name}` (all targets), phase by phase (ms, median of 5 processes):")
    print(f"  {'phase':30} {'cache':>7} {'no cache':>9}")
    for name, a, b in zip(PHASE_NAMES, warm, cold):
        print(f"  {name:30} {a * 1e3:7.1f} {b * 1e3:9.1f}")
    print(f"  {'total':30} {sum(warm) * 1e3:7.1f} {sum(cold) * 1e3:9.1f}")
    print("in-process, cache warm (ms, median of 5): spec, build points, plan, plan + compile")
    for name, points, plan_s, both_s in table:
        print(f"  {name:22} {points:3} {plan_s * 1e3:7.1f} {both_s * 1e3:7.1f}")


if __name__ == "__main__":
    main()
