"""Fixtures shared by the tests. Helpers (paths, running benchc) are in tests/helpers/; each
test module marks its own integration tests (`pytestmark` or `@pytest.mark.integration`)."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest


@pytest.fixture
def write(tmp_path):
    """write('name.bench', text) -> path under a fresh temp dir."""

    def _write(name: str, text: str) -> Path:
        path = tmp_path / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
        return path

    return _write


# ---------------------------------------------------------------- Ctrl-C heard wherever the suite starts

# A shell without job control starts a command it runs in the background (`cmd &` in a script)
# with SIGINT ignored, and every process started from it inherits that: the tests that stop
# benchc, launch.sh or a program with Ctrl-C would see it ignored. The tests' processes hear it.
if signal.getsignal(signal.SIGINT) == signal.SIG_IGN:
    signal.signal(signal.SIGINT, signal.default_int_handler)


# ---------------------------------------------------------------- one thread a process

# The suite runs three workers on two cores (-n 3), each with its warm python and the programs
# it starts. torch's default is a thread per core in every process: oversubscribed, each
# parallel op waits at its barrier for a thread the scheduler has parked, and in-process model
# work under load took four times as long (tests/test_decode_buckets.py beside two busy loops:
# 405 s with two threads a process, 106 s with one). Every process of the suite inherits one
# thread; a test that wants another count sets it in the environment it passes.
os.environ["OMP_NUM_THREADS"] = "1"
if "torch" in sys.modules:
    sys.modules["torch"].set_num_threads(1)


# ---------------------------------------------------------------- the programs' interpreter

TESTS = Path(__file__).resolve().parent


@pytest.fixture(scope="session", autouse=True)
def warm_python():
    """The interpreter of the programs this worker's tests run through launch.sh: PYTHON, in the
    environment that `benchc run` and the tests' own launches inherit, is tests/warm_python/python,
    served by this worker's warm process (tests/warm_server.py), which imports torch and each
    program's libraries once. A test whose subject is the launch itself (signals, Slurm, the
    first CPU smoke run) names the real interpreter (PYTHON=sys.executable)."""
    folder = tempfile.mkdtemp(prefix="benchc-warm-")
    address = os.path.join(folder, "socket")
    env = {**os.environ, "PYTHONPATH": str(TESTS / "readcount"), "BENCHC_TEST_READCOUNT": "-"}
    server = subprocess.Popen([sys.executable, str(TESTS / "warm_server.py"), address], stdin=subprocess.PIPE,
                              stdout=subprocess.DEVNULL, env=env)  # fmt: skip
    from warm_launch import WARM_PYTHON

    os.environ.update(
        PYTHON=str(WARM_PYTHON), BENCHC_TEST_WARM_SOCKET=address, BENCHC_TEST_WARM_REAL=sys.executable
    )
    try:
        yield
    finally:
        server.stdin.close()
        try:
            server.wait(timeout=30)
        except subprocess.TimeoutExpired:
            server.kill()
        shutil.rmtree(folder, ignore_errors=True)


# ---------------------------------------------------------------- timing-dependent tests under load


@pytest.fixture(autouse=True)
def under_load(request):
    """A test marked `timing` (its outcome depends on when things happen: a signal's moment,
    a launcher's shutdown, a compile racing a stop) runs beside a CPU burner pinned to one
    core, as on a loaded CI machine or a busy node: every run of the suite holds it to that."""
    if request.node.get_closest_marker("timing") is None:
        yield
        return
    loop = ["sh", "-c", "while :; do :; done"]
    command = ["taskset", "-c", "0", *loop] if shutil.which("taskset") else loop
    burner = subprocess.Popen(command, start_new_session=True)
    try:
        yield
    finally:
        os.killpg(burner.pid, signal.SIGKILL)
        burner.wait()


# ---------------------------------------------------------------- the order modules run in

# Seconds each of the longest modules takes on one worker (the whole suite, -n 3 on 2 cores,
# 2026-12-07, with tests/warm_launch.py). They are collected first, so that `pytest -n 3 --dist
# loadfile` hands them out first and the workers end together; every other module keeps its
# place. A scheduling hint.
HEAVY_MODULES = {
    "test_tiers.py": 340,
    "test_causal_lm.py": 340,
    "test_slurm.py": 280,  # mostly waiting for the scheduler: a worker of its own
    "test_signals.py": 190,
    "test_accelerate_runtime.py": 150,
    "test_gpu_check.py": 140,
    "test_run_cpu.py": 130,
    "test_flux.py": 120,
    "test_decode_buckets.py": 110,
    "test_gaudi_first_contact.py": 100,
    "test_fuzz.py": 100,
    "test_report.py": 85,
    "test_run_command.py": 75,
    "test_memory_estimate.py": 65,
}


def pytest_collection_modifyitems(session, config, items):
    weight = {name: -seconds for name, seconds in HEAVY_MODULES.items()}
    items.sort(key=lambda item: weight.get(item.path.name, 0))  # stable: each module's own order
