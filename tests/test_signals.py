"""Every ending recorded, whatever the moment: real signals to a real `benchc run` of the
S1 smoke (two torchrun nodes on this machine, each rank in a session of its own), at
random moments from before the launch to the measured steps. benchc must exit soon, leave
no process of the run behind (found by the marker every one of them inherits, wherever it
was re-parented) and record the run as interrupted or terminated, never running.

And under compilation: SIGTERM to a generated launch.sh while torch.compile traces the
model (Dynamo) or while Inductor's compilers run in child processes is recorded as
cancelled at once, and the launcher ends the program's whole process group; a stop that a
compiler wraps is classified by the program's flag, and one that is swallowed is ended by
its watchdog."""

from __future__ import annotations

import json
import os
import random
import re
import shutil
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import psutil
import pytest

from benchc.results.store import Store

from helpers import REPO, run_cli

pytestmark = pytest.mark.integration

TRIALS = int(os.environ.get("BENCHC_SIGNAL_TRIALS", "3"))  # per signal; BENCHC_SIGNAL_TRIALS=50 for long runs


def survivors(build: Path) -> list[int]:
    """Live processes whose environment names a run under `build` (BENCHC_RUN=...)."""
    needle = f"BENCHC_RUN={build}".encode()
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                environ = (entry / "environ").read_bytes()
                state = (entry / "stat").read_text().rsplit(")", 1)[1].split()[0]
            except OSError:
                continue
            if state != "Z" and any(v.startswith(needle) for v in environ.split(b"\0")):
                found.append(int(entry.name))
    return found


@pytest.fixture(scope="module", params=["tuned", "plain"])
def point(tmp_path_factory, request) -> Path:
    """The S1 smoke under each optimisation tier."""
    out = tmp_path_factory.mktemp("signals")
    result = run_cli("compile", "specs/sd3.bench", "--smoke", "--set", "train.batch=16",
                     "--set", "train.steps=40", "--set", f"optimize={request.param}", "-o", str(out),
                     cwd=REPO)  # fmt: skip
    assert result.code == 0, result.err
    (found,) = (out / "sd3_mmdit_train/cpu").iterdir()
    return found


@pytest.mark.parametrize("sig, status, code", [(signal.SIGINT, "interrupted", 130),
                                               (signal.SIGTERM, "terminated", 143),
                                               (signal.SIGHUP, "terminated", 129),
                                               (signal.SIGQUIT, "terminated", 131)])  # fmt: skip
def test_a_signal_at_any_moment_ends_everything_and_is_recorded(point, tmp_path, sig, status, code):
    chance = random.Random(f"{sig}-{TRIALS}")
    for trial in range(TRIALS):
        db = tmp_path / f"r{trial}.db"
        runner = subprocess.Popen([sys.executable, "-m", "benchc", "run", str(point), "--db", str(db)],
                                  cwd=REPO, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                                  env={**os.environ, "OMP_NUM_THREADS": "1"})  # fmt: skip
        time.sleep(chance.uniform(0.3, 8.0))  # from interpreter start-up to the measured steps
        runner.send_signal(sig)
        sent = time.monotonic()
        returncode = runner.wait(timeout=60)
        assert time.monotonic() - sent < 30, "benchc took too long to stop"
        assert not survivors(point.resolve() / "runs"), f"trial {trial}: processes of the run survive"
        if not db.exists() or not Store(db).runs():
            assert returncode in (code, -sig), returncode  # before the store was written: no row
            continue
        (record,) = Store(db).runs()
        if record.status == "ok":  # the run finished just before the signal
            continue
        assert returncode == code, (trial, returncode, record.status, record.cause)
        assert record.status == status and record.ended_at is not None, record


@pytest.fixture(scope="module")
def one_process_point(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("sigterm")
    result = run_cli("compile", "specs/sd3.bench", "--smoke", "--set", "cluster.nodes=1",
                     "--set", "cluster.devices_per_node=1", "--set", "parallel.data=1",
                     "--set", "train.batch=16", "-o", str(out), cwd=REPO)  # fmt: skip
    assert result.code == 0, result.err
    return out / "sd3_mmdit_train/cpu/default-smoke"


@pytest.mark.parametrize("job_end, status", [(None, "cancelled"), ("past", "timeout")])
def test_the_generated_program_records_sigterm_with_the_step_it_reached(one_process_point, tmp_path,
                                                                        job_end, status):  # fmt: skip
    """Slurm's cancel and time limit both send SIGTERM to the ranks: the program itself writes
    metrics saying which (job.sbatch exports the job's end time) and how far it got."""
    plan = json.loads((one_process_point / "manifest.json").read_text())["plan"]
    assert plan["workload"]["steps"] == 5
    bench = one_process_point / "bench.py"
    slow = tmp_path / "bench.py"  # the same program with more steps, so the signal lands mid-run
    slow.write_text(bench.read_text().replace('"steps": 5,', '"steps": 400,', 1))
    assert slow.read_text() != bench.read_text()
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    if job_end == "past":
        env["BENCHC_JOB_END_TIME"] = str(int(time.time()) - 5)
    metrics = tmp_path / "metrics.json"
    command = [sys.executable, str(slow), "--metrics", str(metrics)]
    program = subprocess.Popen(command, cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                               text=True, env=env)  # fmt: skip
    for line in program.stdout:  # the measured steps print about once a second
        if (reached := re.match(r"step (\d+)/400", line)) and int(reached[1]) >= 4:
            break
    program.send_signal(signal.SIGTERM)
    program.stdout.read()
    assert program.wait(timeout=60) == 128 + signal.SIGTERM
    written = json.loads(metrics.read_text())
    assert written["status"] == status, written.get("error")
    assert written["error"]["type"] == "Stopped" and "SIGTERM" in written["error"]["message"]
    assert written["progress"]["of"] == 400 and 4 <= written["progress"]["step"] < 400
    assert written["phase"] in ("warmup", "measuring")
    assert written["ended_at"]
    assert not list(tmp_path.glob(".metrics-*"))  # no temporary file left beside it


# ---------------------------------------------------------------- SIGTERM under torch.compile


@pytest.fixture(scope="module")
def compiled_point(tmp_path_factory) -> Path:
    """One process with train.compile = true: its first step runs torch.compile (Dynamo
    traces each block, then Inductor builds C++ kernels with g++ in child processes)."""
    out = tmp_path_factory.mktemp("compiled")
    result = run_cli("compile", "specs/sd3.bench", "--smoke", "--set", "cluster.nodes=1",
                     "--set", "cluster.devices_per_node=1", "--set", "parallel.data=1", "--set",
                     "train.batch=16", "--set", "train.compile=true", "-o", str(out), cwd=REPO)  # fmt: skip
    assert result.code == 0, result.err
    point = out / "sd3_mmdit_train/cpu/default-smoke"
    assert '"compile": "regional"' in (point / "bench.py").read_text()
    return point


def live(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


def in_session(sid: int) -> list[int]:
    """Live processes of session `sid` (the launcher's; the program's group is inside it)."""
    found = []
    for process in psutil.process_iter():
        try:
            if os.getsid(process.pid) == sid and process.status() != psutil.STATUS_ZOMBIE:
                found.append(process.pid)
        except (OSError, psutil.Error):
            continue
    return found


class Lines:
    """A process's output lines, read on a thread; wait() for one that matches."""

    def __init__(self, stream) -> None:
        self.lines: list[str] = []
        self._added = threading.Condition()
        threading.Thread(target=self._pump, args=(stream,), daemon=True).start()

    def _pump(self, stream) -> None:
        for line in stream:
            with self._added:
                self.lines.append(line.rstrip("\n"))
                self._added.notify_all()

    def wait(self, pattern: str, timeout: float) -> None:
        deadline = time.monotonic() + timeout
        with self._added:
            while not any(re.match(pattern, line) for line in self.lines):
                left = deadline - time.monotonic()
                assert left > 0, f"no line {pattern!r} in {timeout:g} s: " + "\n".join(self.lines[-20:])
                self._added.wait(left)


@pytest.mark.parametrize("moment, stopped_as", [
    ("tracing", "BaseException"),  # Dynamo tracing the first block
    ("inductor", "BaseException"),  # g++ building Inductor's kernels in child processes
    ("tracing", "Exception"),  # as before this fix: Dynamo wraps it (InternalTorchDynamoError)
])  # fmt: skip
def test_sigterm_during_torch_compile_is_recorded_cancelled_and_ends_the_whole_group(
    compiled_point, tmp_path, moment, stopped_as
):
    """The stop that a real H200 run recorded as failed ("Stopped: received SIGTERM", wrapped
    by Dynamo), or not at all (SIGKILL 8 s later). SIGTERM goes to launch.sh alone, as a
    scheduler or `benchc run` sends it: the launcher passes it to the program's group."""
    point = tmp_path / "point"
    shutil.copytree(compiled_point, point)
    if stopped_as == "Exception":  # the generated program as it was: Stopped an Exception
        program = (point / "bench.py").read_text()
        assert "class Stopped(BaseException):" in program
        program = program.replace("class Stopped(BaseException):", "class Stopped(Exception):")
        (point / "bench.py").write_text(program)
    metrics = tmp_path / "metrics.json"
    env = {**os.environ, "PYTHON": sys.executable, "OMP_NUM_THREADS": "1", "BENCHC_RUN": str(tmp_path),
           "TORCHINDUCTOR_CACHE_DIR": str(tmp_path / "inductor")}  # fmt: skip
    # (a cache of its own, empty: the compile takes its time, and the signal lands inside it)
    launcher = subprocess.Popen(["bash", "launch.sh", "--metrics", str(metrics)], cwd=point, env=env,
                                stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                                start_new_session=True)  # fmt: skip
    try:
        output = Lines(launcher.stdout)
        output.wait(r"phase compiling$", timeout=120)
        (program,) = psutil.Process(launcher.pid).children()  # bench.py, in a group of its own
        assert os.getpgid(program.pid) == program.pid != os.getpgid(launcher.pid)
        compilers = []
        if moment == "tracing":
            time.sleep(1.0)
        else:
            deadline = time.monotonic() + 120
            while not compilers:
                assert time.monotonic() < deadline and launcher.poll() is None, "no compiler process started"
                compilers = program.children(recursive=True)
                time.sleep(0.05)
        assert not any(re.match(r"step \d", line) for line in output.lines), "the compile was over already"
        started = [program.pid, *(c.pid for c in compilers + program.children(recursive=True))]
        launcher.send_signal(signal.SIGTERM)
        sent = time.monotonic()
        while not metrics.exists() and time.monotonic() - sent < 10:
            time.sleep(0.05)
        recorded = time.monotonic() - sent
        assert launcher.wait(timeout=60) == 128 + signal.SIGTERM, "\n".join(output.lines[-30:])
        ended = time.monotonic() - sent
    finally:
        if launcher.poll() is None:
            os.killpg(launcher.pid, signal.SIGKILL)
    written = json.loads(metrics.read_text())
    assert recorded < 10 and ended < 20, (recorded, ended)
    assert written["status"] == "cancelled", written["error"]
    assert written["error"]["type"] == "Stopped" and "SIGTERM" in written["error"]["message"]
    assert written["phase"] == "compiling" and written["progress"] == {"step": 1, "of": 5}
    assert written["ended_at"]
    assert "bench.py: rank 0 stopped by SIGTERM (cancelled)" in output.lines
    # nothing left: the program, its compilers and compile workers, anything of the session
    assert not [pid for pid in started if live(pid)]
    assert not survivors(tmp_path)
    assert not in_session(launcher.pid)


# ---------------------------------------------------------------- stops a program swallows or wraps

DRIVER = """
import importlib.util, sys, time

spec = importlib.util.spec_from_file_location("bench", sys.argv[1])
bench = importlib.util.module_from_spec(spec)
spec.loader.exec_module(bench)
bench.STOP_GRACE_S = float(sys.argv[3])


def swallowed(metrics, started):
    # a compile that catches everything and carries on
    bench.set_phase(metrics, "compiling")
    metrics["progress"] = {"step": 1, "of": 5}
    print("ready", flush=True)
    while True:
        try:
            time.sleep(3600)
        except BaseException:
            pass


def wrapped(metrics, started):
    # a compiler that raises its own error from the stop (Dynamo's BackendCompilerFailed)
    bench.set_phase(metrics, "compiling")
    metrics["progress"] = {"step": 1, "of": 5}
    print("ready", flush=True)
    try:
        time.sleep(3600)
    except BaseException as error:
        raise RuntimeError("backend='inductor' raised: Stopped") from error


bench.train = {"swallowed": swallowed, "wrapped": wrapped}[sys.argv[4]]
sys.exit(bench.main(["--metrics", sys.argv[2]]))
"""


@pytest.mark.parametrize("how", ["swallowed", "wrapped"])
def test_a_stop_the_program_swallows_or_wraps_still_ends_it_recorded(one_process_point, tmp_path, how):
    """The generated program imported, its training replaced by code that swallows the stop
    (the watchdog ends the process, its grace shortened to 2 s here; 20 s as generated) or
    wraps it in an error of its own (classified by the flag: cancelled, not failed). Two
    SIGTERMs, as a launcher's and a scheduler's: one record, one watchdog."""
    driver = tmp_path / "driver.py"
    driver.write_text(DRIVER)
    metrics = tmp_path / "metrics.json"
    grace = 2.0
    bench = one_process_point / "bench.py"
    assert "STOP_GRACE_S = 20.0" in bench.read_text()
    command = [sys.executable, str(driver), str(bench), str(metrics), str(grace), how]
    program = subprocess.Popen(command, cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                               text=True, env={**os.environ, "OMP_NUM_THREADS": "1"})  # fmt: skip
    try:
        output = Lines(program.stdout)
        output.wait(r"ready$", timeout=120)
        program.send_signal(signal.SIGTERM)
        sent = time.monotonic()
        time.sleep(0.3)
        if program.poll() is None:
            program.send_signal(signal.SIGTERM)
        returncode = program.wait(timeout=60)
        ended = time.monotonic() - sent
    finally:
        if program.poll() is None:
            program.kill()
    time.sleep(0.2)  # the last lines
    text = "\n".join(output.lines)
    assert returncode == 128 + signal.SIGTERM, text
    written = json.loads(metrics.read_text())
    assert written["status"] == "cancelled" and written["error"]["type"] == "Stopped", written["error"]
    assert written["phase"] == "compiling" and written["progress"] == {"step": 1, "of": 5}
    assert not list(tmp_path.glob(".metrics-*"))
    if how == "swallowed":
        assert grace <= ended < grace + 5, ended
        assert text.count("still running 2 s after SIGTERM; exiting") == 1, text
        assert "in swallowed" in text  # every thread's stack: where the stop was swallowed
    else:
        assert ended < grace, ended
        assert "bench.py: rank 0 stopped by SIGTERM (cancelled)" in text and "still running" not in text
