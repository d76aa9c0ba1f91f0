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

from helpers import REPO, point_in, run_cli

pytestmark = pytest.mark.integration

TRIALS = int(os.environ.get("BENCHC_SIGNAL_TRIALS", "1"))  # per signal; BENCHC_SIGNAL_TRIALS=50 for long runs


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


@pytest.fixture(scope="module")
def point(tmp_path_factory) -> Path:
    """One point of the S1 smoke, two nodes on loopback (torchrun starts each rank in a session
    of its own). The tiers differ in knobs that change nothing here: one is enough."""
    out = tmp_path_factory.mktemp("signals")
    result = run_cli("compile", "specs/sd3.bench", "--smoke", "--set", "train.batch=16", "-o", str(out),
                     cwd=REPO)  # fmt: skip
    assert result.code == 0, result.err
    (found,) = (out / "sd3_mmdit_train/cpu").iterdir()
    return found


@pytest.fixture(scope="module")
def moments(point, tmp_path_factory) -> tuple[float, float]:
    """(seconds from `benchc run`'s start to its first measured step, to its end) on this
    machine now, from one run left alone (it must end ok): the signals' moments are drawn
    over that span, however loaded the machine is."""
    db = tmp_path_factory.mktemp("unsignalled") / "r.db"
    started = time.monotonic()
    runner = subprocess.Popen([sys.executable, "-m", "benchc", "run", str(point), "--db", str(db)],
                              cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                              env={**os.environ, "OMP_NUM_THREADS": "1"})  # fmt: skip
    measuring = None
    for line in runner.stdout:
        if measuring is None and re.search(r"step \d+/\d+ (?!warmup)", line):
            measuring = time.monotonic() - started
    assert runner.wait(timeout=300) == 0
    ended = time.monotonic() - started
    (record,) = Store(db).runs()
    assert record.status == "ok" and measuring is not None, record.cause
    return measuring, ended


@pytest.mark.timing
@pytest.mark.parametrize("sig, status, code", [(signal.SIGINT, "interrupted", 130),
                                               (signal.SIGTERM, "terminated", 143),
                                               (signal.SIGHUP, "terminated", 129),
                                               (signal.SIGQUIT, "terminated", 131)])  # fmt: skip
def test_a_signal_at_any_moment_ends_everything_and_is_recorded(point, moments, tmp_path, sig, status, code):
    """Each trial's signal lands at a moment drawn from benchc's start to a little past the
    first measured step of an unsignalled run (measured here, so the span fits the machine's
    load); each signal's moments differ."""
    measuring, ended = moments
    chance = random.Random(f"{sig}-{TRIALS}")
    for trial in range(TRIALS):
        db = tmp_path / f"r{trial}.db"
        runner = subprocess.Popen([sys.executable, "-m", "benchc", "run", str(point), "--db", str(db)],
                                  cwd=REPO, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                                  env={**os.environ, "OMP_NUM_THREADS": "1"})  # fmt: skip
        time.sleep(chance.uniform(0.3, measuring + (ended - measuring) / 4))
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
    return point_in(out / "sd3_mmdit_train/cpu")


@pytest.mark.parametrize("job_end, status", [("past", "timeout")])
def test_the_generated_program_records_sigterm_with_the_step_it_reached(one_process_point, tmp_path,
                                                                        job_end, status):  # fmt: skip
    """Slurm's cancel and time limit both send SIGTERM to the ranks: the program itself writes
    metrics saying which (job.sbatch exports the job's end time) and how far it got. The time
    limit here, mid-run; a cancel is what every other stop in this file records."""
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
    point = point_in(out / "sd3_mmdit_train/cpu")
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


@pytest.mark.timing
@pytest.mark.parametrize("moment", [
    "tracing",  # Dynamo tracing the first block (torch's dispatch under a FakeTensorMode)
    "inductor",  # g++ building Inductor's kernels in child processes
])  # fmt: skip
def test_sigterm_during_torch_compile_is_recorded_cancelled_and_ends_the_whole_group(
    compiled_point, tmp_path, moment
):
    """The stop that a real H200 run recorded as failed ("Stopped: received SIGTERM", wrapped
    by Dynamo), or not at all (SIGKILL 8 s later), and that a loaded 2-core machine saw abort
    the program (an exception raised from the handler inside torch's dispatch: c10::Error,
    exit 134). SIGTERM goes to launch.sh alone, as a scheduler or `benchc run` sends it: the
    launcher passes it to the program's group."""
    point = tmp_path / "point"
    shutil.copytree(compiled_point, point)
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
    # the main thread reached no safe point inside the compile: the watchdog ended it
    assert any(line.startswith("bench.py: rank 0 stopped by SIGTERM (cancelled) in phase compiling")
               for line in output.lines), "\n".join(output.lines[-30:])  # fmt: skip
    assert not any("terminate called" in line or "Aborted" in line for line in output.lines)
    # nothing left: the program, its compilers and compile workers, anything of the session
    assert not [pid for pid in started if live(pid)]
    assert not survivors(tmp_path)
    assert not in_session(launcher.pid)


# ---------------------------------------------------------------- the handler raises nothing

HANDLER_DRIVER = """
import importlib.util, json, os, signal, sys, faulthandler

spec = importlib.util.spec_from_file_location("bench", sys.argv[1])
bench = importlib.util.module_from_spec(spec)
spec.loader.exec_module(bench)
metrics = {"status": "failed", "phase": "compiling", "progress": {"step": 1, "of": 5}}
bench.ENDING.update(metrics=metrics, path=sys.argv[2], rank=0)
signal.signal(signal.SIGTERM, bench.stop_on_signal)
raised = None
try:
    os.kill(os.getpid(), signal.SIGTERM)  # the handler runs here, as inside any call
    for _ in range(1000):  # bytecodes after the signal: any of them could be torch's dispatch
        pass
except BaseException as error:
    raised = error
faulthandler.cancel_dump_traceback_later()
print("raised:", type(raised).__name__ if raised else None)
print("flag:", bench.ENDING["signum"], bench.STOP_SEEN.is_set())
print("recorded:", json.load(open(sys.argv[2]))["status"])
try:
    bench.stop_if_asked()
except BaseException as error:
    print("safe point:", type(error).__name__, error)
"""


def test_the_signal_handler_raises_nothing_and_the_next_safe_point_stops(one_process_point, tmp_path):
    """The handler records the ending and sets the flag; it never raises into whatever the
    main thread runs (torch's dispatch included). The program's own code stops at its next
    safe point (between steps and phases) by raising Stopped there."""
    driver = tmp_path / "driver.py"
    driver.write_text(HANDLER_DRIVER)
    metrics = tmp_path / "metrics.json"
    done = subprocess.run([sys.executable, str(driver), str(one_process_point / "bench.py"), str(metrics)],
                          capture_output=True, text=True, timeout=120)  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    lines = done.stdout.splitlines()
    assert "raised: None" in lines
    assert f"flag: {int(signal.SIGTERM)} True" in lines
    assert "recorded: cancelled" in lines
    assert "safe point: Stopped received SIGTERM (cancelled)" in lines


# ---------------------------------------------------------------- a stop with no safe point in reach

DRIVER = """
import importlib.util, subprocess, sys, time

spec = importlib.util.spec_from_file_location("bench", sys.argv[1])
bench = importlib.util.module_from_spec(spec)
spec.loader.exec_module(bench)
bench.SAFE_POINT_S = float(sys.argv[3])


def compiling(metrics, started):
    # a compile that runs on (and catches whatever reaches it): no safe point in reach; its
    # compile worker, a child process
    bench.set_phase(metrics, "compiling")
    metrics["progress"] = {"step": 1, "of": 5}
    worker = subprocess.Popen(["sleep", "300"])
    print(f"worker {worker.pid}", flush=True)
    print("ready", flush=True)
    while True:
        try:
            time.sleep(3600)
        except BaseException:
            pass


bench.train = compiling
sys.exit(bench.main(["--metrics", sys.argv[2]]))
"""


def test_a_stop_with_no_safe_point_in_reach_is_ended_by_the_watchdog_recorded(one_process_point, tmp_path):
    """The generated program imported, its training replaced by code that never reaches a safe
    point (a long compile; it also swallows anything raised): the watchdog ends the process
    SAFE_POINT_S after the signal (shortened to 1 s here; 3 s as generated), killing its
    children, with exit 143 and the record the handler wrote at once. Two SIGTERMs, as a
    launcher's and a scheduler's: one record, one watchdog."""
    driver = tmp_path / "driver.py"
    driver.write_text(DRIVER)
    metrics = tmp_path / "metrics.json"
    grace = 1.0
    bench = one_process_point / "bench.py"
    assert "SAFE_POINT_S = 3.0" in bench.read_text()
    command = [sys.executable, str(driver), str(bench), str(metrics), str(grace)]
    program = subprocess.Popen(command, cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                               text=True, env={**os.environ, "OMP_NUM_THREADS": "1"})  # fmt: skip
    try:
        output = Lines(program.stdout)
        output.wait(r"ready$", timeout=120)
        (worker,) = [int(line.split()[1]) for line in output.lines if line.startswith("worker ")]
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
    assert grace <= ended < grace + 5, ended
    assert text.count("stopped by SIGTERM (cancelled) in phase compiling, between safe points") == 1, text
    assert not live(worker)  # the watchdog ended the program's children with it
