"""A test instrument, not part of benchc: runs a build's ranks without its launcher, each with the
tests' warm python (tests/warm_python/python, served by the worker's warm process).

launch.sh starts torchrun, and torchrun each rank. Tests whose subject is what the program does
(its numerics, memory, weight reading, tokens) run the ranks here instead: each rank is still a
process of its own running the build's bench.py as __main__, meeting the others over real gloo,
with what torchrun gives a rank (RANK, LOCAL_RANK, WORLD_SIZE, LOCAL_WORLD_SIZE, GROUP_RANK,
MASTER_ADDR, MASTER_PORT, ...) and what launch.sh sets (the build folder as working directory,
TORCHINDUCTOR_CACHE_DIR, OMP_NUM_THREADS); a multi-node build's ranks run on this host, as on
loopback. What it skips is the launcher itself, launch.sh and torchrun, which the tests of
launchers, signals, Slurm, `benchc run` and the CPU smoke runs run (test_run_cpu's first test
and .ci/newest-libraries with a fresh interpreter). The status is that of the rank that failed
first, and its peers are stopped as torchrun stops them (SIGTERM, then SIGKILL).
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import tempfile
import time
from pathlib import Path

from helpers import REPO, free_port, warm_python_env

WARM_PYTHON = REPO / "tests" / "warm_python" / "python"
LAUNCHERS = ("torchrun", "python")  # what launch.sh runs on the CPU; accelerate's runs for real
IMPORTS_S = 180  # the most a loaded machine may take to import torch and a program's libraries
GRACE_S = 10  # after a rank fails, the others' time to end before SIGTERM (torchrun stops them too)


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
    program = point / "bench.py"
    return _launch(program, list(args), point, [program], env, run["launcher"], run["processes"],
                   run["nodes"], point.name, timeout)  # fmt: skip


def warm_run(script: Path, args: list, env: dict, cwd: Path, preload: list[Path], timeout: float = 300,
             processes: int = 1) -> subprocess.CompletedProcess:  # fmt: skip
    """`python SCRIPT ARGS` in `cwd` with the warm python, the imports of the `preload` files made
    first (a probe that runs a build's program in-process); processes > 1: that many ranks,
    each with torchrun's variables, as `torchrun --nproc-per-node` starts them."""
    launcher = "torchrun" if processes > 1 else "python"
    return _launch(script, [str(a) for a in args], cwd, [script, *preload], env, launcher, processes, 1,
                   "warm", timeout)  # fmt: skip


def rank_environment(
    env: dict, launcher: str, rank: int, world: int, nodes: int, port: int, run_id: str
) -> dict:
    """`env` with what torchrun gives a rank (none for a one-process build, whose launch.sh runs
    the program alone), and what the warm python needs."""
    env = {**env, **warm_python_env()}
    if launcher == "torchrun":
        per_node = world // nodes
        env.update(RANK=str(rank), LOCAL_RANK=str(rank % per_node), WORLD_SIZE=str(world),
                   LOCAL_WORLD_SIZE=str(per_node), GROUP_RANK=str(rank // per_node),
                   GROUP_WORLD_SIZE=str(nodes), ROLE_RANK=str(rank), ROLE_WORLD_SIZE=str(world),
                   ROLE_NAME="default", MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port),
                   TORCHELASTIC_RUN_ID=run_id, TORCHELASTIC_RESTART_COUNT="0",
                   TORCHELASTIC_MAX_RESTARTS="0")  # fmt: skip
    return env


def preload(paths: list[Path]) -> None:
    """The warm process imports what these programs import at their top, before any rank starts
    (so that the run's limit counts the run alone)."""
    address = os.environ["BENCHC_TEST_WARM_SOCKET"]
    started = time.monotonic()
    while not os.path.exists(address) and time.monotonic() < started + 60:  # the server starting
        time.sleep(0.05)
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as server:
        server.settimeout(IMPORTS_S)
        server.connect(address)
        socket.send_fds(server, [b"!"], [])
        server.sendall(json.dumps({"preload": [str(p) for p in paths]}).encode() + b"\n")
        if not server.makefile("rb").readline():
            raise RuntimeError("the warm process ended")


def _launch(script: Path, args: list, cwd: Path, imports: list[Path], env: dict, launcher: str, world: int,
            nodes: int, run_id: str, timeout: float) -> subprocess.CompletedProcess:  # fmt: skip
    preload(imports)
    command = [str(WARM_PYTHON), str(script), *args]
    port = free_port()
    with tempfile.TemporaryDirectory(prefix="warm-") as folder:
        outputs = [(Path(folder) / f"{rank}.out", Path(folder) / f"{rank}.err") for rank in range(world)]
        ranks = []
        for rank, (out, err) in enumerate(outputs):
            rank_env = rank_environment(env, launcher, rank, world, nodes, port, run_id)
            with open(out, "w") as stdout, open(err, "w") as stderr:
                ranks.append(subprocess.Popen(command, cwd=cwd, stdin=subprocess.DEVNULL, stdout=stdout,
                                              stderr=stderr, env=rank_env))  # fmt: skip
        first_failed, timed_out = _wait(ranks, time.monotonic() + timeout)
        out, err = ("".join(path.read_text(errors="replace") for path in paths) for paths in zip(*outputs))
    if timed_out:  # as subprocess.run and launch_nodes' communicate end a run past its limit
        raise subprocess.TimeoutExpired(command, timeout, out, err)
    code = 0 if first_failed is None else ranks[first_failed].returncode  # as torchrun reports it
    return subprocess.CompletedProcess(command, code, out, err)


def _wait(ranks: list[subprocess.Popen], deadline: float) -> tuple[int | None, bool]:
    """Wait for every rank; once one fails, the others get GRACE_S to end, then SIGTERM, then
    SIGKILL. (the rank that failed first, whether the deadline passed)"""
    failed_at, first_failed, termed = None, None, False
    while [rank.poll() for rank in ranks].count(None):
        for number, rank in enumerate(ranks):
            if rank.returncode not in (None, 0) and failed_at is None:
                failed_at, first_failed = time.monotonic(), number
        now = time.monotonic()
        stop = None
        if now > deadline or (failed_at is not None and now > failed_at + 2 * GRACE_S):
            stop = signal.SIGKILL  # the warm process then kills what the rank's python ran
        elif failed_at is not None and now > failed_at + GRACE_S and not termed:
            stop, termed = signal.SIGTERM, True
        for rank in ranks:
            if stop is not None and rank.poll() is None:
                rank.send_signal(stop)
        time.sleep(0.05)
    if first_failed is None:
        first_failed = next((n for n, rank in enumerate(ranks) if rank.returncode != 0), None)
    return first_failed, time.monotonic() > deadline
