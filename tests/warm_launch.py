"""A test instrument, not part of benchc: runs a build's ranks as forks of a warm process.

launch.sh starts torchrun, and torchrun each rank: three interpreters for a two-rank run, each
importing torch and then diffusers or transformers afresh, 10 to 12 s of CPU a process on CI's
cores, most of a smoke run's cost and most of the suite's. Tests whose subject is what the
program does (its numerics, memory, weight reading, tokens) run it here instead: each rank is
still a process of its own running the build's bench.py as __main__, meeting the others over
real gloo, with what torchrun gives a rank (RANK, LOCAL_RANK, WORLD_SIZE, LOCAL_WORLD_SIZE,
GROUP_RANK, MASTER_ADDR, MASTER_PORT, ...) and what launch.sh sets (the build folder as working
directory, TORCHINDUCTOR_CACHE_DIR, OMP_NUM_THREADS); a multi-node build's ranks run on this
host, as on loopback. What it skips is the launcher itself, launch.sh and torchrun, which the
tests of launchers, signals, Slurm, `benchc run` and the CPU smoke runs (test_run_cpu's first
test, .ci/newest-libraries) run for real. One warm process per test worker (tests/warm_zygote.py),
started at its first use; a failing rank's peers are stopped as torchrun stops them.
"""

from __future__ import annotations

import atexit
import json
import os
import selectors
import subprocess
import sys
import threading
from pathlib import Path

from helpers import REPO, free_port

ZYGOTE = REPO / "tests" / "warm_zygote.py"
READCOUNT = REPO / "tests" / "readcount"  # armed in the warm process, so every library sees it
LAUNCHERS = ("torchrun", "python")  # what launch.sh runs on the CPU; accelerate's runs for real
IMPORTS_S = 180  # the most a loaded machine may take to import torch and a program's libraries

_lock = threading.Lock()
_zygote: subprocess.Popen | None = None


def _warm_process() -> subprocess.Popen:
    global _zygote
    if _zygote is None or _zygote.poll() is not None:
        env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": str(READCOUNT),
               "BENCHC_TEST_READCOUNT": "-", "PYTHONUNBUFFERED": "1"}  # fmt: skip
        pipes = {"stdin": subprocess.PIPE, "stdout": subprocess.PIPE, "stderr": subprocess.DEVNULL}
        _zygote = subprocess.Popen([sys.executable, str(ZYGOTE)], text=True, env=env, **pipes)
        atexit.register(_zygote.kill)
    return _zygote


def warm_launch(point: Path, env: dict, timeout: float = 300,
                args: tuple[str, ...] = ()) -> subprocess.CompletedProcess:  # fmt: skip
    """Run the build at `point` as its launch.sh would, every node's ranks here: a process result
    (return code: the status of the rank that failed first), the ranks' outputs joined."""
    run = json.loads((point / "manifest.json").read_text())["run"]
    if run["launcher"] not in LAUNCHERS:
        raise ValueError(f"warm_launch runs torchrun's and lone programs' builds, not {run['launcher']}'s")
    env = {**env}
    env.setdefault("TORCHINDUCTOR_CACHE_DIR", str(point / "compile-cache"))
    cores = os.cpu_count() or 1
    env.setdefault("OMP_NUM_THREADS", str(max(cores // run["processes_per_node"], 1)))
    program = str(point / "bench.py")
    return _serve({"script": program, "args": list(args), "cwd": str(point), "preload": [program], "env": env,
                   "launcher": run["launcher"], "processes": run["processes"], "nodes": run["nodes"],
                   "port": free_port(), "run_id": point.name, "timeout": timeout})  # fmt: skip


def warm_run(script: Path, args: list, env: dict, cwd: Path, preload: list[Path], timeout: float = 300,
             processes: int = 1) -> subprocess.CompletedProcess:  # fmt: skip
    """`python SCRIPT ARGS` in `cwd` forked from the warm process, the imports of the `preload`
    files made there first (a probe that runs a build's program in-process); processes > 1:
    that many ranks, each with torchrun's variables, as `torchrun --nproc-per-node` starts them."""
    launcher = "torchrun" if processes > 1 else "python"
    return _serve({"script": str(script), "args": [str(a) for a in args], "cwd": str(cwd),
                   "preload": [str(p) for p in (script, *preload)], "env": env, "launcher": launcher,
                   "processes": processes, "nodes": 1, "port": free_port(), "run_id": "warm",
                   "timeout": timeout})  # fmt: skip


def _serve(request: dict) -> subprocess.CompletedProcess:
    timeout = request["timeout"]
    with _lock:
        zygote = _warm_process()
        zygote.stdin.write(json.dumps(request) + "\n")
        zygote.stdin.flush()
        with selectors.DefaultSelector() as waiting:
            waiting.register(zygote.stdout, selectors.EVENT_READ)
            # the run's own limit, and the warm process's imports before it (its start, the preloads)
            if not waiting.select(timeout + IMPORTS_S):
                zygote.kill()
                raise TimeoutError(f"the warm process did not answer in {timeout + IMPORTS_S} s")
        line = zygote.stdout.readline()
    if not line:
        raise RuntimeError(f"the warm process ended (status {zygote.wait()})")
    reply = json.loads(line)
    command = [request["script"], *request["args"]]
    if reply["timed_out"]:  # as subprocess.run and launch_nodes' communicate end a run past its limit
        raise subprocess.TimeoutExpired(command, timeout, reply["out"], reply["err"])
    first = reply["first_failed"]  # as torchrun: the status of the rank that failed first
    code = 0 if first is None else reply["codes"][first]
    return subprocess.CompletedProcess(command, code, reply["out"], reply["err"])
