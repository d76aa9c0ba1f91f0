"""`benchc submit`, `status`, `cancel` and the hand-made path (`sbatch job.sbatch`, then
`benchc ingest`) through a real two-node Slurm cluster on this machine (slurm_cluster.py).

The reference programs run for real as two-node jobs: one rank on each node, gloo across the
bridge between them. Jobs that fail, end without metrics, time out or are cancelled use a
scripted bench.py (scripted_points.py) behind the generated launch.sh and job.sbatch, so
they take seconds (a time limit is at least a minute in Slurm).
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from scripted_points import scripted_job_point
from slurm_cluster import NODES, TwoNodeSlurm
from system_tools import Unavailable

from benchc.results.store import Store

from helpers import REPO

pytestmark = pytest.mark.integration


@pytest.fixture(scope="module")
def cluster():
    slurm = TwoNodeSlurm()
    try:
        slurm.up()
    except Unavailable as exc:  # a fail, not a skip: CI and this project's machines run Slurm
        slurm.down()
        pytest.fail(f"the two-node Slurm cluster cannot start here: {exc}")
    except BaseException:
        slurm.down()
        raise
    try:
        yield slurm
    finally:
        slurm.down()


@pytest.fixture
def benchc(cluster, tmp_path):
    """Run benchc against the test cluster and a store of this test's own."""
    db = tmp_path / "results.db"

    def run(*args: str, timeout: float = 240, check: bool = True) -> subprocess.CompletedProcess:
        proc = subprocess.run([sys.executable, "-m", "benchc", *args, "--db", str(db)], cwd=REPO,
                              capture_output=True, text=True, timeout=timeout,
                              env={**os.environ, **cluster.env})  # fmt: skip
        if check:
            why = proc.stdout[-3000:] + proc.stderr[-3000:] + cluster.log("slurmctld.log")
            assert proc.returncode == 0, why
        return proc

    run.db = db
    run.env = {**os.environ, **cluster.env}
    return run


def stored(db: Path):
    with Store(db) as store:
        return store.runs()


def test_s1_runs_as_a_two_node_job_and_is_reported(benchc, tmp_path):
    build = str(tmp_path / "b")
    out = benchc("submit", "specs/sd3.bench", "--target", "cpu", "--smoke", "--wait", "-o", build)
    assert "submitted sd3_mmdit_train / cpu / batch-16-smoke: job" in out.stdout
    records = stored(benchc.db)
    assert sorted(r.point for r in records) == ["batch-16", "batch-32"]
    for r in records:
        assert (r.status, r.job_state, r.exit_code, r.source) == ("ok", "COMPLETED", "0:0", "submit")
        assert r.metrics["world_size"] == 2 and r.metrics["hosts"] == list(NODES)
        assert r.metrics["job"]["id"] == r.job_id and r.cluster == "benchc-test"
        assert r.started_at.startswith(r.metrics["started_at"][:19])  # when it ran, not when collected
    listed = benchc("runs").stdout
    assert listed.count(" ok ") == 2
    report_dir = tmp_path / "reports"
    benchc("report", "-o", str(report_dir))
    page = (report_dir / "report.md").read_text()
    assert "| batch-16 | cpu |" in page and "2 on 2 hosts" in page
    status = benchc("status").stdout
    assert status.count("COMPLETED") == 2


def test_s1_under_the_accelerate_runtime_runs_as_a_two_node_job(benchc, tmp_path):
    """accelerate launch on each node (srun), its machine rank from SLURM_NODEID and the
    first node of the allocation as the main process's address."""
    build = str(tmp_path / "b")
    benchc("submit", "specs/sd3.bench", "--target", "cpu", "--smoke", "--set", "runtime=accelerate",
           "--set", "train.batch=16", "--wait", "-o", build)  # fmt: skip
    (record,) = stored(benchc.db)
    point = "batch-16_runtime-accelerate"  # the --set values name it, the swept key's first
    assert (record.status, record.job_state, record.point) == ("ok", "COMPLETED", point), record.log_tail
    metrics = record.metrics
    assert metrics["runtime"] == "accelerate" and metrics["world_size"] == 2
    assert metrics["hosts"] == list(NODES) and metrics["nodes"] == 2
    assert metrics["runtime_detail"]["wrapper"] == "DistributedDataParallel"
    assert "--machine_rank" in (Path(build) / f"sd3_mmdit_train/cpu/{point}-smoke/launch.sh").read_text()


def test_s4_fsdp_and_s5_tensor_parallel_run_on_two_nodes(benchc, tmp_path):
    out = str(tmp_path / "b")
    benchc("submit", "specs/beluga-train.bench", "--smoke", "-o", out)
    benchc("submit", "specs/beluga-infer.bench", "--smoke", "-o", out,
           "--set", "cluster.nodes=2", "--set", "cluster.devices_per_node=4")  # fmt: skip
    pending = benchc("status").stdout
    assert "PENDING" in pending or "RUNNING" in pending
    benchc("status", "--wait", timeout=300)
    by_experiment = {r.experiment: r for r in stored(benchc.db)}
    train, infer = by_experiment["beluga_70b_train"], by_experiment["beluga_70b_infer"]
    assert train.status == "ok" and train.plan["parallel"]["sharding"] == "fsdp"
    assert infer.status == "ok" and infer.plan["parallel"]["tensor"] == 2
    for r in (train, infer):
        assert r.metrics["world_size"] == 2 and r.metrics["nodes"] == 2, r.log_tail
    losses = train.metrics["loss"]["all"]
    assert losses[-1] < losses[0]


def test_a_failed_job_is_stored_with_its_state_exit_code_and_log_tail(benchc, tmp_path):
    point = scripted_job_point(tmp_path, "step(1)\nstep(2)\nraise RuntimeError('lost the device')\n")
    proc = benchc("submit", str(point), "--wait", check=False)
    assert proc.returncode == 1, proc.stdout + proc.stderr
    (record,) = stored(benchc.db)
    assert (record.status, record.job_state) == ("failed", "FAILED")
    assert record.exit_code.startswith("1:")
    assert "RuntimeError: lost the device" in record.cause and "step 2/5" in record.log_tail


def test_status_wait_exits_non_zero_only_for_the_runs_it_waited_on(benchc, tmp_path):
    """`submit && status --wait && report` keeps working after one failed job: status --wait
    answers for the runs that were pending or running when it started."""
    from scripted_points import ok_metrics

    failing = scripted_job_point(tmp_path, "step(1)\nraise RuntimeError('lost the device')\n", name="bad")
    assert benchc("submit", str(failing), "--wait", check=False).returncode == 1
    nothing = benchc("status", "--wait")
    assert nothing.returncode == 0 and "no submitted run is pending or running" in nothing.stdout
    metrics = json.dumps(json.dumps(ok_metrics(10.0)))
    body = f"step(1)\njson.dump(json.loads({metrics}), open(metrics_path, 'w'))\n"
    passing = scripted_job_point(tmp_path, body, name="good")
    benchc("submit", str(passing))
    waited = benchc("status", "--wait", check=False, timeout=120)
    assert waited.returncode == 0, waited.stdout + waited.stderr  # the failed job of before: not its
    assert sorted(r.status for r in stored(benchc.db)) == ["failed", "ok"]
    again = scripted_job_point(tmp_path, "step(1)\nraise RuntimeError('again')\n", name="again")
    benchc("submit", str(again))
    assert benchc("status", "--wait", check=False, timeout=120).returncode == 1  # one it waited on


def test_a_running_job_shows_only_its_current_trial_running_and_submit_names_the_run_folder(benchc, tmp_path):
    """Trials of one job run one after another: while trial 1 runs, trial 2 is pending; the
    follow line has no stray space; submit prints where the job's log and metrics go."""
    point = scripted_job_point(tmp_path, "for n in range(1, 200):\n    step(n, 200, 0.1)\n")
    out = benchc("submit", str(point), "--repeat", "2").stdout
    job = re.search(r"job (\d+)", out).group(1)
    folder = re.search(r"its log and metrics: (\S+)", out).group(1)
    assert Path(folder).parent == point / "runs"
    deadline, by_trial = time.monotonic() + 60, {}
    while time.monotonic() < deadline and by_trial.get(1) != "running":
        benchc("status")
        by_trial = {r.trial: r.status for r in stored(benchc.db)}
        time.sleep(0.5)
    assert by_trial == {1: "running", 2: "pending"}, by_trial
    assert (Path(folder) / "log.txt").exists()
    subprocess.run(["scancel", job], env=benchc.env, check=True)
    followed = benchc("status", "--wait", check=False, timeout=120).stdout
    assert " ," not in followed and "RUNNING ," not in followed


def test_a_job_that_writes_no_metrics_says_so(benchc, tmp_path):
    point = scripted_job_point(tmp_path, "step(1)\nos._exit(3)\n")
    assert benchc("submit", str(point), "--wait", check=False).returncode == 1
    (record,) = stored(benchc.db)
    assert (record.status, record.job_state, record.exit_code) == ("failed", "FAILED", "3:0")
    assert "before trial 1 wrote metrics" in record.cause and "step 1/5" in record.log_tail


SLOW = "for n in range(1, 10_000):\n    step(n, 10_000, 0.2)\n"


def wait_running(benchc, seconds: float = 60) -> None:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if "RUNNING" in benchc("status").stdout:
            return
        time.sleep(0.5)
    raise AssertionError("the job did not start")


def test_ctrl_c_leaves_the_job_running_and_cancel_records_it(benchc, tmp_path):
    point = scripted_job_point(tmp_path, SLOW)
    follower = subprocess.Popen([sys.executable, "-m", "benchc", "submit", str(point), "--wait",
                                 "--db", str(benchc.db)], cwd=REPO, env=benchc.env,
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)  # fmt: skip
    wait_running(benchc)
    follower.send_signal(signal.SIGINT)
    out, err = follower.communicate(timeout=30)
    assert follower.returncode == 130, out + err
    assert "the jobs keep running" in err and "benchc status --wait" in err
    (record,) = stored(benchc.db)
    assert record.status == "running" and record.job_state == "RUNNING"
    time.sleep(1.5)  # a step line or more in the log
    began = time.monotonic()
    result = benchc("cancel", record.id)
    assert time.monotonic() - began < 10  # back as soon as Slurm has acted, not after 30 s
    (record,) = stored(benchc.db)
    assert (record.status, record.job_state) == ("cancelled", "CANCELLED"), result.stdout
    assert "step 1/10000" in record.log_tail and "CANCELLED" in record.cause
    # what Slurm reports, without contradiction: its exit code, and the cancel as the cause.
    # Slurm reports the batch script killed by SIGTERM (0:15), or, as the fresh-clone CI met once
    # on a loaded machine, ended with status 0 after it (0:0): either is recorded as Slurm says.
    assert record.exit_code in ("0:15", "0:0"), record.cause
    assert f"(exit code {record.exit_code})" in record.cause, record.cause
    assert "cancelled by benchc cancel" in record.cause and "not ended" not in record.cause
    assert "CANCELLED" in benchc("status").stdout


def test_a_job_past_its_time_limit_is_stored_as_timeout(benchc, tmp_path):
    point = scripted_job_point(tmp_path, SLOW)
    proc = benchc("submit", str(point), "--time", "1", "--wait", check=False, timeout=240)
    assert proc.returncode == 1, proc.stdout + proc.stderr
    (record,) = stored(benchc.db)
    assert (record.status, record.job_state) == ("timeout", "TIMEOUT"), record.cause
    assert "/10000 loss" in record.log_tail and "TIMEOUT" in record.cause
    assert "TIMEOUT" in benchc("status").stdout


def test_submit_repeat_extends_the_jobs_time_limit_as_measure_repeat_does(benchc, tmp_path):
    """One rule for both: every trial's timeout plus 10 minutes, the trials being
    measure.repeat (job.sbatch's #SBATCH --time) or submit --repeat N; --time wins."""
    from benchc.codegen.launchers import trials_time

    point = scripted_job_point(tmp_path, SLOW)
    timeout_s = json.loads((point / "manifest.json").read_text())["plan"]["measure"]["timeout_s"]
    limits = {}
    for args in (["--repeat", "3"], ["--repeat", "3", "--time", "45"], []):
        out = benchc("submit", str(point), *args).stdout
        job = re.search(r"job (\d+)", out).group(1)
        show = subprocess.run(["scontrol", "show", "job", job], env=benchc.env, capture_output=True,
                              text=True).stdout  # fmt: skip
        limits[" ".join(args)] = re.search(r"TimeLimit=(\S+)", show).group(1)
        subprocess.run(["scancel", job], env=benchc.env, check=True)
    assert limits["--repeat 3"] == trials_time(3, timeout_s)  # not one trial's
    assert limits["--repeat 3 --time 45"] == "00:45:00"
    assert limits[""] == trials_time(1, timeout_s)  # the spec's measure.repeat (1)


def test_by_hand_sbatch_writes_its_log_into_the_folder_slurm_log_names(benchc, cluster, tmp_path):
    """slurm { log = "logs/job-%j.out" }: Slurm creates no folder, so compile makes logs/ (and
    a recompile keeps it with its logs); sbatch by hand then writes the log there."""
    point = scripted_job_point(tmp_path, "step(1)\njson.dump({}, open(metrics_path, 'w'))\n",
                               overrides=['slurm.log="logs/job-%j.out"'])  # fmt: skip
    assert (point / "logs").is_dir() and not any((point / "logs").iterdir())
    env = {**benchc.env, "PYTHON": sys.executable}
    job = subprocess.run(["sbatch", "--parsable", "job.sbatch"], cwd=point, env=env,
                         capture_output=True, text=True, check=True).stdout.strip()  # fmt: skip
    deadline = time.monotonic() + 60
    state = ""
    while time.monotonic() < deadline and "JobState=COMPLETED" not in state:
        state = subprocess.run(
            ["scontrol", "show", "job", job], env=env, capture_output=True, text=True
        ).stdout
        assert "JobState=FAILED" not in state, state
        time.sleep(0.5)
    assert "JobState=COMPLETED" in state, state
    assert "trial 1 of 1" in (point / "logs" / f"job-{job}.out").read_text()


def test_by_hand_sbatch_then_ingest_groups_the_trials_of_the_job(benchc, cluster, tmp_path):
    """docs/clusters.md's path without submit: sbatch in the build point, then ingest."""
    from scripted_points import ok_metrics

    metrics = ok_metrics(120.0)
    body = (
        "for n in range(1, 6):\n    step(n)\n"
        f"m = json.loads({json.dumps(json.dumps(metrics))})\n"
        "e = os.environ\n"
        "m['job'] = {'scheduler': 'slurm', 'id': e['SLURM_JOB_ID'], 'cluster': e.get('SLURM_CLUSTER_NAME'),\n"
        "            'trial': int(e['BENCHC_TRIAL']), 'trials': int(e['BENCHC_TRIALS'])}\n"
        "m['throughput']['job'] += int(e['BENCHC_TRIAL'])\n"
        "json.dump(m, open(metrics_path, 'w'))\n"
    )
    point = scripted_job_point(tmp_path, body)
    env = {**benchc.env, "PYTHON": sys.executable}
    job = subprocess.run(["sbatch", "--parsable", "job.sbatch", "--trials", "2"], cwd=point, env=env,
                         capture_output=True, text=True, check=True).stdout.strip()  # fmt: skip
    deadline = time.monotonic() + 90
    while time.monotonic() < deadline:
        show = ["scontrol", "show", "job", job]
        state = subprocess.run(show, env=env, capture_output=True, text=True).stdout
        if "JobState=COMPLETED" in state:
            break
        assert "JobState=FAILED" not in state, (point / f"slurm-{job}.out").read_text()
        time.sleep(0.5)
    files = sorted((point / "runs" / f"slurm-{job}").glob("metrics-*.json"))
    assert [f.name for f in files] == ["metrics-1.json", "metrics-2.json"]
    assert (point / f"slurm-{job}.out").exists()
    out = benchc("ingest", *map(str, files)).stdout
    assert f"job {job} trial 1/2" in out and f"job {job} trial 2/2" in out
    records = stored(benchc.db)
    assert len({r.series for r in records}) == 1 and sorted(r.trial for r in records) == [1, 2]
    assert all(r.job_id == job and r.source == "ingest" for r in records)
    again = benchc("ingest", str(files[0]), check=False)
    assert again.returncode == 2 and "already in the results store" in again.stderr
    page_dir = tmp_path / "reports"
    benchc("report", "-o", str(page_dir))
    assert "| 2 |" in (page_dir / "report.md").read_text()  # two trials, one row


def test_a_calibration_runs_as_a_two_node_job_and_its_file_is_stored(benchc, tmp_path):
    """docs/calibrate.md on a cluster: compile the calibration folder, sbatch its job.sbatch
    (one rank on each node, gloo across them), then store its file with calibrate --ingest."""
    out = tmp_path / "cal"
    benchc("calibrate", "--target", "cpu", "--smoke", "--nodes", "2", "--devices", "1",
           "--compile-only", "-o", str(out))  # fmt: skip
    (point,) = out.iterdir()
    env = {**benchc.env, "PYTHON": sys.executable}
    job = subprocess.run(["sbatch", "--parsable", "job.sbatch"], cwd=point, env=env,
                         capture_output=True, text=True, check=True).stdout.strip()  # fmt: skip
    deadline = time.monotonic() + 180
    state = ""
    while time.monotonic() < deadline and "JobState=COMPLETED" not in state:
        state = subprocess.run(["scontrol", "show", "job", job], env=env, capture_output=True,
                               text=True).stdout  # fmt: skip
        assert "JobState=FAILED" not in state, (point / f"slurm-{job}.out").read_text()
        time.sleep(0.5)
    assert "JobState=COMPLETED" in state, state
    (written,) = (point / "runs" / f"slurm-{job}").glob("metrics-*.json")
    data = json.loads(written.read_text())
    assert data["status"] == "ok" and data["world_size"] == 2 and data["nodes"] == 2
    hosts = set(NODES)
    assert data["host"] in hosts, data["host"]
    benchc("calibrate", "--ingest", str(written))
    from benchc.results.calibrations import latest_calibrations

    with Store(benchc.db) as store:
        found = latest_calibrations(store)["cpu"]
    assert found.world_size == 2 and set(found.bus_gb_s) == {"all_reduce", "all_gather", "reduce_scatter"}
    assert all(value > 0 for value in found.bus_gb_s.values()) and found.matmul_tflops["fp32"] > 0


def test_calibrate_submit_runs_the_calibration_as_a_job_waits_and_stores_it(benchc, tmp_path):
    """benchc calibrate --submit: the folder's job.sbatch submitted (the flags' options passed
    to sbatch), the job followed to its end, its file stored with the node it ran on."""
    result = benchc("calibrate", "--target", "cpu", "--smoke", "--nodes", "2", "--devices", "1",
                    "--submit", "--time", "5", "-o", str(tmp_path / "cal"))  # fmt: skip
    assert re.search(r"submitted job \d+", result.stdout) and "COMPLETED" in result.stdout, result.stdout
    from benchc.results.calibrations import calibration_rows, latest_calibrations

    with Store(benchc.db) as store:
        (row,) = calibration_rows(store)
        found = latest_calibrations(store)["cpu"]
    assert row["status"] == "ok" and row["host"] in NODES, row
    assert found.world_size == 2 and found.bus_gb_s["all_reduce"] > 0
    (job,) = re.findall(r"submitted job (\d+)", result.stdout)
    show = ["scontrol", "show", "job", job]
    state = subprocess.run(show, env=benchc.env, capture_output=True, text=True).stdout
    assert "TimeLimit=00:05:00" in state, state  # --time reached sbatch
