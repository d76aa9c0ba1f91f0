"""benchc run, the results store, and how every kind of ending is recorded."""

from __future__ import annotations

import json
import os
import re
import signal
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest
from checkpoint_helpers import mmdit_checkpoint
from scripted_points import ok_metrics, ok_metrics_body, scripted_point

from benchc.pids import alive
from benchc.results.store import Store

from helpers import REPO, run_benchc, run_cli

# every test here starts processes (bash, shellcheck, torchrun, benchc)
pytestmark = pytest.mark.integration


def benchc(*args, db: Path, cwd: Path = REPO, timeout: int = 300) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "benchc", *args, "--db", str(db)], cwd=cwd,
                          capture_output=True, text=True, timeout=timeout)  # fmt: skip


def start_benchc(*args, db: Path) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-m", "benchc", *args, "--db", str(db)], cwd=REPO,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)  # fmt: skip


def wait_for(predicate, seconds: float = 60.0) -> None:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if predicate():
            return
        time.sleep(0.1)
    raise AssertionError("timed out waiting")


def only_run(db: Path):
    with Store(db) as store:
        (record,) = store.runs()
    return record


def test_program_raising_mid_run_is_recorded_with_its_exception(tmp_path):
    point = scripted_point(tmp_path, "step(1)\nstep(2)\nraise RuntimeError('rank 1 lost its device')\n")
    result = benchc("run", str(point), db=tmp_path / "r.db")
    assert result.returncode == 1, result.stdout + result.stderr
    record = only_run(tmp_path / "r.db")
    assert record.status == "failed"
    assert "RuntimeError: rank 1 lost its device" in record.cause
    assert "step 2/5" in record.log_tail and Path(record.log_path).exists()


def test_nan_loss_in_the_real_program_is_recorded_as_failed(tmp_path):
    db = tmp_path / "r.db"
    result = benchc("run", "specs/sd3.bench", "--smoke", "-o", str(tmp_path / "build"),
                    "--set", "train.batch=16", "--set", "train.optimizer=sgd(lr = 1000)",
                    "--set", "train.precision=fp32", db=db)  # fmt: skip
    assert result.returncode == 1
    record = only_run(db)
    assert record.status == "failed" and record.cause.startswith("non-finite loss on rank")
    assert record.metrics["status"] == "failed" and "loss is" in record.metrics["error"]["message"]
    assert record.metrics["error"]["type"] == "FloatingPointError"
    assert (Path(record.log_path).parent / "metrics.rank1.json").exists()  # every failing rank's record


def test_a_crashing_real_program_names_the_rank_and_error(tmp_path):
    """Two real ranks whose weights folder lost its file between compile and run."""
    db = tmp_path / "r.db"
    folder = mmdit_checkpoint(tmp_path / "sd3-weights")
    spec = tmp_path / "tiny.bench"
    spec.write_text('experiment tiny {\n  model mmdit { weights = "sd3-weights" }\n'
                    "  train { batch = 2; resolution = 128; steps = 4; warmup = 1; precision = fp32 }\n"
                    "  cluster { nodes = 1; devices_per_node = 2 }\n  targets = [cpu]\n}\n")  # fmt: skip
    assert run_cli("compile", str(spec), "-o", str(tmp_path / "b")).code == 0
    (folder / "diffusion_pytorch_model.safetensors").unlink()
    (point,) = {p.parent for p in (tmp_path / "b").glob("**/bench.py")}
    result = benchc("run", str(point), db=db)
    assert result.returncode == 1
    record = only_run(db)
    # both ranks lose the file; the first to raise is named, the other stopped by its launcher
    assert record.status == "failed" and re.search(r"rank [01] raised", record.cause), record.cause
    assert "sd3-weights" in record.cause and "missing" in record.cause


def test_a_real_program_stopped_by_sigterm_from_elsewhere_is_recorded_at_its_step(tmp_path):
    """SIGTERM to the program itself (a scheduler's or an operator's, not benchc's): its record
    matches the metrics schema and the run is stored as cancelled at the step it reached."""
    db = tmp_path / "r.db"
    mmdit_checkpoint(tmp_path / "sd3-weights")  # a tiny model, its run long enough to stop
    spec = tmp_path / "tiny.bench"
    spec.write_text('experiment tiny {\n  model mmdit { weights = "sd3-weights" }\n'
                    "  train { batch = 2; resolution = 128; steps = 2000; warmup = 1; precision = fp32 }\n"
                    "  cluster { nodes = 1; devices_per_node = 1 }\n  targets = [cpu]\n}\n")  # fmt: skip
    env = {**os.environ, "PYTHON": sys.executable}  # the program's own process, as a user's
    runner = subprocess.Popen([sys.executable, "-m", "benchc", "run", str(spec), "-o", str(tmp_path / "b"),
                               "--db", str(db)], cwd=REPO, env=env, stdout=subprocess.PIPE,
                              stderr=subprocess.STDOUT, text=True)  # fmt: skip
    try:

        def measuring() -> bool:
            runs = db.exists() and Store(db).runs()
            log = Path(runs[0].log_path) if runs else None
            return bool(log and log.exists() and "phase measuring" in log.read_text())

        wait_for(measuring, seconds=240)
        (program,) = [p for p in psutil.Process(runner.pid).children(recursive=True)
                      if "bench.py" in p.cmdline()]  # fmt: skip
        program.send_signal(signal.SIGTERM)
        output, _ = runner.communicate(timeout=120)
    finally:
        if runner.poll() is None:
            runner.kill()
    assert runner.returncode == 1, output
    record = only_run(db)
    assert record.status == "cancelled", record.cause
    assert re.fullmatch(r"the program received SIGTERM at step \d+ of \d+, not from benchc", record.cause)
    assert record.metrics["error"]["type"] == "Stopped" and record.metrics["error"]["traceback"] == ""


PEER_RAISED = f"""
step(1)
run = os.path.dirname(metrics_path)
# what the real program writes when rank 1 raises and its launcher then stops rank 0
stopped = {{**{ok_metrics()!r}, "status": "cancelled", "error": {{"type": "Stopped",
           "message": "received SIGTERM (cancelled) in phase measuring", "rank": 0, "traceback": ""}}}}
raised = {{"status": "failed", "error": {{"type": "RuntimeError", "message": "rank 1 lost its device",
          "rank": 1, "traceback": "Traceback ..."}}}}
json.dump(raised, open(os.path.join(run, "metrics.rank1.json"), "w"))
json.dump(stopped, open(metrics_path, "w"))
sys.exit(143)
"""


def test_rank_0_stopped_after_another_rank_raised_is_that_rank_s_failure(tmp_path):
    point = scripted_point(tmp_path, PEER_RAISED)
    result = benchc("run", str(point), db=tmp_path / "r.db")
    assert result.returncode == 1, result.stdout + result.stderr
    record = only_run(tmp_path / "r.db")
    assert record.status == "failed", record.cause
    assert record.cause == "rank 1 raised RuntimeError: rank 1 lost its device"


def test_timeout_stops_the_whole_process_group(tmp_path):
    point = scripted_point(tmp_path, "step(1)\ntime.sleep(120)\n")
    started = time.monotonic()
    result = benchc("run", str(point), "--timeout", "2", db=tmp_path / "r.db")
    assert time.monotonic() - started < 30
    assert result.returncode == 1
    record = only_run(tmp_path / "r.db")
    assert record.status == "timeout" and "2 s" in record.cause
    pid = int((Path(record.log_path).parent / "pid").read_text())
    assert not alive(pid)


def test_sigint_interrupts_cleanly_and_is_recorded(tmp_path):
    point = scripted_point(tmp_path, "step(1)\ntime.sleep(120)\n")
    db = tmp_path / "r.db"
    runner = start_benchc("run", str(point), db=db)
    wait_for(lambda: db.exists() and Store(db).runs() and Path(Store(db).runs()[0].log_path).exists()
             and "step 1/5" in Path(Store(db).runs()[0].log_path).read_text())  # fmt: skip
    runner.send_signal(signal.SIGINT)
    output, _ = runner.communicate(timeout=60)
    assert runner.returncode == 130, output
    record = only_run(db)
    assert record.status == "interrupted" and "Ctrl-C" in record.cause
    assert not alive(int((Path(record.log_path).parent / "pid").read_text()))


# What node 0's torchrun agent printed under load after every step of a finished run: the
# other node's agent had ended, and with it the rendezvous store they shared.
RENDEZVOUS_LOST = """
print("Traceback (most recent call last):", flush=True)
print('  File "torch/distributed/elastic/agent/server/api.py", line 958, in _exit_barrier', flush=True)
print("torch.distributed.elastic.rendezvous.api.RendezvousConnectionError: "
      "The connection to the C10d store has failed. See inner exception for details.", flush=True)
sys.exit(1)
"""


def test_a_launcher_failing_after_complete_metrics_is_ok_with_a_warning(tmp_path):
    """The program wrote its whole measurement, then the launcher's agent lost the rendezvous
    store on its way out (exit 1): the run is ok, with a warning naming the error."""
    point = scripted_point(tmp_path, ok_metrics_body(150.0) + RENDEZVOUS_LOST)
    result = benchc("run", str(point), db=tmp_path / "r.db")
    assert result.returncode == 0, result.stdout + result.stderr
    record = only_run(tmp_path / "r.db")
    assert record.status == "ok" and record.metrics["throughput"]["job"] == 150.0
    assert record.cause.startswith(
        "warning: the launcher failed after the metrics were complete (exit code 1): "
    )
    assert "RendezvousConnectionError: The connection to the C10d store has failed" in record.cause
    assert "warning: the launcher failed after the metrics were complete" in result.stdout


def test_a_launcher_failing_before_complete_metrics_is_still_a_failure(tmp_path):
    body = "step(1)\n" + RENDEZVOUS_LOST
    result = benchc("run", str(scripted_point(tmp_path, body)), db=tmp_path / "r.db")
    assert result.returncode == 1
    record = only_run(tmp_path / "r.db")
    assert record.status == "failed" and "RendezvousConnectionError" in record.cause
    assert "no metrics written" in record.cause


def marked_processes(marker: str, *needles: bytes) -> list[int]:
    """Live processes whose environment holds BENCHC_RUN=marker and whose command line holds
    every needle."""
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                environ = (entry / "environ").read_bytes().split(b"\0")
                command = (entry / "cmdline").read_bytes()
            except OSError:
                continue
            if f"BENCHC_RUN={marker}".encode() in environ and all(n in command for n in needles):
                found.append(int(entry.name))
    return found


def finished_metrics(point: Path) -> Path | None:
    """A run's metrics file under `point` once it says ok (written whole: atomically)."""
    for path in point.glob("runs/*/metrics.json"):
        if json.loads(path.read_text()).get("status") == "ok":
            return path
    return None


def test_a_node_lost_after_the_metrics_are_written_leaves_the_run_ok(tmp_path):
    """Two real nodes on loopback (the S1 smoke, a rank each, torchrun's c10d rendezvous);
    each rank lingers 3 s on its way out (a slow shutdown, as under load), and node 0's
    torchrun agent is killed as soon as rank 0's metrics are on disk. The measurement was
    complete: the run is ok, with a warning naming how node 0's launcher ended."""
    build = tmp_path / "build"
    assert run_cli("compile", "specs/sd3.bench", "--smoke", "--set", "train.batch=16", "-o", str(build),
                   cwd=REPO).code == 0  # fmt: skip
    (point,) = (build / "sd3_mmdit_train/cpu").iterdir()
    program = (point / "bench.py").read_text()
    ending = "    end_process_group()\n    return 0\n"
    assert program.count(ending) == 1
    (point / "bench.py").write_text(
        program.replace(ending, "    end_process_group()\n    time.sleep(3)\n    return 0\n")
    )
    db = tmp_path / "r.db"
    runner = start_benchc("run", str(point), db=db)
    deadline = time.monotonic() + 240
    while (metrics := finished_metrics(point)) is None:
        assert time.monotonic() < deadline and runner.poll() is None, "no metrics"
        time.sleep(0.02)
    marker = str(metrics.parent.resolve())
    (agent,) = [pid for pid in marked_processes(marker, b"torch.distributed.run")
                if b"MACHINE_RANK=0" in (Path(f"/proc/{pid}/environ").read_bytes().split(b"\0"))]  # fmt: skip
    os.kill(agent, signal.SIGKILL)
    output, _ = runner.communicate(timeout=120)
    assert runner.returncode == 0, output
    record = only_run(db)
    assert record.status == "ok" and record.metrics["status"] == "ok", record.cause
    assert record.metrics["world_size"] == 2 and record.metrics["steps"]["measured"] >= 1
    assert record.cause.startswith(
        "warning: the launcher failed after the metrics were complete (exit code 137)"
    )
    assert not marked_processes(marker)


def test_two_runs_write_to_the_store_at_once(tmp_path):
    db = tmp_path / "r.db"
    first = scripted_point(tmp_path, ok_metrics_body(100.0), name="one")
    second = scripted_point(tmp_path, ok_metrics_body(200.0), name="two")
    runners = [start_benchc("run", str(p), "--repeat", "3", db=db) for p in (first, second)]
    for runner in runners:
        output, _ = runner.communicate(timeout=120)
        assert runner.returncode == 0, output
    with Store(db) as store:
        records = store.runs()
    assert len(records) == 6 and {r.status for r in records} == {"ok"}
    assert sorted({r.metrics["throughput"]["job"] for r in records}) == [100.0, 200.0]
    check = sqlite3.connect(db).execute("PRAGMA integrity_check").fetchone()[0]
    assert check == "ok"


def test_a_killed_runner_leaves_a_readable_store_and_an_unknown_run(tmp_path):
    point = scripted_point(tmp_path, "step(1)\ntime.sleep(120)\n")
    db = tmp_path / "r.db"
    runner = start_benchc("run", str(point), db=db)
    wait_for(
        lambda: (
            db.exists() and Store(db).runs() and (Path(Store(db).runs()[0].log_path).parent / "pid").exists()
        )
    )
    program_pid = int((Path(Store(db).runs()[0].log_path).parent / "pid").read_text())
    runner.kill()  # SIGKILL: benchc gets no chance to record anything
    runner.wait(timeout=30)
    # the launcher it started gets SIGTERM as benchc dies (PR_SET_PDEATHSIG), and so the program
    ended = time.monotonic() + 10
    while alive(program_pid) and time.monotonic() < ended:
        time.sleep(0.1)
    left = alive(program_pid)
    if left:
        os.kill(program_pid, signal.SIGKILL)  # clean up before failing
    assert not left, "the program outlived its killed runner by 10 s"
    listing = benchc("runs", db=db)
    assert listing.returncode == 0
    record = only_run(db)
    assert record.status == "unknown" and "ended without recording" in record.cause
    assert "unknown" in listing.stdout


def test_ingest_metrics_from_another_build(tmp_path):
    point = scripted_point(tmp_path, ok_metrics_body(321.0))
    assert benchc("run", str(point), db=tmp_path / "elsewhere.db").returncode == 0
    (metrics_file,) = point.glob("runs/*/metrics.json")
    db = tmp_path / "here.db"
    result = benchc("ingest", str(metrics_file), db=db)
    assert result.returncode == 0, result.stderr
    record = only_run(db)
    assert record.source == "ingest" and record.status == "ok"
    assert record.metrics["throughput"]["job"] == 321.0
    assert record.plan["experiment"] == "sd3_mmdit_train"  # the manifest beside it was found


def test_ingest_refuses_what_is_not_a_metrics_file(tmp_path):
    db = tmp_path / "r.db"
    (tmp_path / "plan.json").write_text(json.dumps({"plans": []}))
    (tmp_path / "broken.json").write_text('{"schema": "benchc-metrics",\n  "status": }')
    (tmp_path / "partial.json").write_text(json.dumps({"schema": "benchc-metrics", "status": "ok"}))
    for name, words in [("plan.json", "not a benchc metrics file"), ("broken.json", "is not JSON"),
                        ("partial.json", "does not match the benchc metrics schema"),
                        ("missing.json", "no such file")]:  # fmt: skip
        result = benchc("ingest", str(tmp_path / name), db=db)
        assert result.returncode == 2 and words in result.stderr, (name, result.stderr)
        assert "Traceback" not in result.stderr
    assert "broken.json:2:13: error" in benchc("ingest", str(tmp_path / "broken.json"), db=db).stderr
    assert Store(db).runs() == []


def test_show_and_export(tmp_path):
    db = tmp_path / "r.db"
    point = scripted_point(tmp_path, ok_metrics_body(150.0))
    assert benchc("run", str(point), "--repeat", "2", db=db).returncode == 0
    records = Store(db).runs()
    shown = json.loads(benchc("show", records[0].id[:6], db=db).stdout)
    assert shown["id"] == records[0].id and shown["metrics"]["throughput"]["job"] == 150.0
    missing = benchc("show", "nope", db=db)
    assert missing.returncode == 2 and "no run 'nope' in the results store" in missing.stderr
    exported = json.loads(benchc("export", "--format", "json", db=db).stdout)
    assert [r["id"] for r in exported] == [r.id for r in records]
    rows = benchc("export", "--format", "csv", db=db).stdout.splitlines()
    assert rows[0].startswith("id,experiment,target") and len(rows) == 3
    assert ",150.0,images/s," in rows[1]


def test_store_versions_and_bad_files(tmp_path):
    from benchc.results.migrations import SCHEMA_VERSION

    db = tmp_path / "r.db"
    with Store(db) as store:
        assert store.schema_version == SCHEMA_VERSION == 4
    with Store(db) as store:  # opening again migrates nothing
        assert store.schema_version == SCHEMA_VERSION
    newer = tmp_path / "newer.db"
    sqlite3.connect(newer).execute("PRAGMA user_version = 99").connection.commit()
    result = run_benchc("runs", "--db", str(newer))
    assert result.code == 2 and "newer than this benchc knows" in result.err
    junk = tmp_path / "junk.db"
    junk.write_bytes(b"this is not a database" * 100)
    result = run_benchc("runs", "--db", str(junk))
    assert result.code == 2 and "not a benchc results store" in result.err


def test_a_version_1_store_is_migrated_and_keeps_its_runs(tmp_path):
    from benchc.results.store import MIGRATIONS

    db = tmp_path / "old.db"
    old = sqlite3.connect(db)
    old.executescript(MIGRATIONS[0])
    old.execute(
        "INSERT INTO runs (id, experiment, target, point, point_values, smoke, status, environment,"
        " series, trial, source, started_at) VALUES ('r1', 'e', 'cpu', 'p', '{}', 1, 'ok', '{}',"
        " 's', 1, 'run', '2026-01-01T00:00:00.000+00:00')"
    )
    old.execute("PRAGMA user_version = 1")
    old.commit()
    old.close()
    with Store(db) as store:
        assert store.schema_version == 4  # migrated through every version
        (record,) = store.runs()
    assert (record.id, record.status, record.job_id, record.metrics_sha256) == ("r1", "ok", None, None)


@pytest.mark.parametrize("bad", [["--repeat", "0"], ["--timeout", "-1"]])
def test_run_option_errors(tmp_path, bad):
    result = benchc("run", "specs/sd3.bench", "--smoke", *bad, db=tmp_path / "r.db")
    assert result.returncode == 2 and "Traceback" not in result.stderr


def _store_writer(db: str) -> None:
    with Store(db) as store:
        for trial in range(5):
            run_id = store.start(experiment="e", target="cpu", point="p", point_values={}, smoke=True,
                                 spec_path=None, spec_sha256=None, build_path=None, log_path=None,
                                 environment={}, plan=None, series="s", trial=trial)  # fmt: skip
            store.finish(run_id, "ok", None, {"n": trial})


def test_many_processes_create_and_write_one_new_store_at_once(tmp_path):
    import multiprocessing

    for attempt in range(5):
        db = str(tmp_path / f"fresh{attempt}.db")
        workers = [multiprocessing.Process(target=_store_writer, args=(db,)) for _ in range(6)]
        for worker in workers:
            worker.start()
        for worker in workers:
            worker.join(timeout=60)
        assert [w.exitcode for w in workers] == [0] * 6
        assert len(Store(db).runs()) == 30


def test_recompiling_keeps_the_records_of_earlier_runs(tmp_path):
    point = scripted_point(tmp_path, ok_metrics_body(100.0))
    assert benchc("run", str(point), db=tmp_path / "r.db").returncode == 0
    (log,) = point.glob("runs/*/log.txt")
    scripted_point(tmp_path, ok_metrics_body(100.0))  # compiles the same point again
    assert log.exists()


def test_a_leftover_process_is_stopped_with_its_group(tmp_path):
    body = (
        "import subprocess, signal\n"
        "child = subprocess.Popen([sys.executable, '-c', "
        "'import signal, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); time.sleep(120)'])\n"
        "open(os.path.join(os.path.dirname(metrics_path), 'child'), 'w').write(str(child.pid))\n"
        "step(1)\n"
    )
    point = scripted_point(tmp_path, body)
    started = time.monotonic()
    result = benchc("run", str(point), db=tmp_path / "r.db")
    assert time.monotonic() - started < 60
    assert result.returncode == 1 and "Traceback" not in result.stdout + result.stderr
    record = only_run(tmp_path / "r.db")
    child = int((Path(record.log_path).parent / "child").read_text())
    assert not alive(child)


def test_report_ignores_a_series_still_running(tmp_path):
    db = tmp_path / "r.db"
    point = scripted_point(tmp_path, ok_metrics_body(120.0))
    assert benchc("run", str(point), db=db).returncode == 0
    done = only_run(db)  # the same point, a series still running beside it
    with Store(db) as store:
        store.start(experiment="sd3_mmdit_train", target="cpu", point=done.point, point_values={},
                    smoke=True, spec_path=None, spec_sha256=None, build_path=None, log_path=None,
                    environment={}, plan=None, series="in-progress", trial=1)  # fmt: skip
    result = benchc("report", "-o", str(tmp_path / "out"), db=db)
    assert result.returncode == 0
    assert f"| {done.point} | cpu | 120 |" in (tmp_path / "out" / "report.md").read_text()


def test_user_mistakes_in_result_commands_are_clear_errors(tmp_path):
    db = tmp_path / "r.db"
    foreign = tmp_path / "foreign.db"
    sqlite3.connect(foreign).execute("CREATE TABLE users (name TEXT)").connection.commit()
    assert "another program's SQLite database" in benchc("runs", db=foreign).stderr
    assert sqlite3.connect(foreign).execute("PRAGMA user_version").fetchone()[0] == 0  # untouched
    point = scripted_point(tmp_path, ok_metrics_body(100.0))
    assert benchc("run", str(point), db=db).returncode == 0
    mistakes = [
        (["export", "--format", "csv", "-o", str(tmp_path)], "cannot write"),
        (["show", ""], "no run ''"),
        (["show", "%"], "no run '%'"),
        (["report", "--baseline", "h1000"], "no runs of baseline target"),
        (["run", str(point), "--target", "h100"], "no build point for target h100"),
    ]
    for args, words in mistakes:
        result = benchc(*args, db=db)
        assert result.returncode == 2 and words in result.stderr, (args, result.stderr)
        assert "Traceback" not in result.stderr


def test_run_refuses_a_multi_node_accelerator_build_before_starting_anything(tmp_path):
    db = tmp_path / "r.db"
    result = benchc("run", "specs/sd3.bench", "-t", "h100", "-o", str(tmp_path / "b"), db=db)
    assert result.returncode == 2 and "these points span several nodes" in result.stderr
    assert "benchc submit" in result.stderr and "docs/clusters.md" in result.stderr
    assert not db.exists()
