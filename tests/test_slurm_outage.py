"""Slurm failing soft (issue 34, cause 4; M5): a fake Slurm (scripts on PATH standing for
sbatch, squeue, scontrol, sacct and scancel, driven by a mode file) that answers, goes down
altogether, goes down in the middle of a `status` (squeue answers, scontrol does not), has its
accounting down, or hangs. Only a definite answer changes a run's state: an outage leaves
every run as it was, says the controller could not be asked, and exits 3; `status --wait`
waits the outage out; the real Slurm's answers are tested in test_slurm.py."""

from __future__ import annotations

import os
import stat
from pathlib import Path

import pytest

from benchc.cluster import jobs, slurm
from benchc.results.store import Store

from helpers import REPO, run_cli

DOWN = "slurm_load_jobs error: Unable to contact slurm controller (connect failure)"
FAKE = {
    "sbatch": "echo 4242\n",
    "squeue": """case "$(cat "$FAKE_SLURM/mode")" in
  down) echo "{down}" >&2; exit 1 ;;
  hang) sleep 5 ;;
  running) echo "4242|RUNNING|node1" ;;
  *) ;;  # not queued: ended, or the controller half there
esac""",
    "scontrol": """if [ "$1" = show ] && [ "$2" = config ]; then echo "ClusterName = fake"; exit 0; fi
case "$(cat "$FAKE_SLURM/mode")" in
  down|midway) echo "{down}" >&2; exit 1 ;;
  completed) echo "JobId=4242 JobState=COMPLETED Reason=None ExitCode=0:0" ;;
  forgotten|accounting) echo "slurm_load_jobs error: Invalid job id specified" >&2; exit 1 ;;
  *) echo "JobId=4242 JobState=RUNNING Reason=None ExitCode=0:0" ;;
esac""",
    "sacct": """case "$(cat "$FAKE_SLURM/mode")" in
  forgotten) exit 0 ;;
  *) echo "sacct: error: Problem talking to the database: Connection refused" >&2; exit 1 ;;
esac""",
    "scancel": """case "$(cat "$FAKE_SLURM/mode")" in
  down|midway) echo "scancel: error: Unable to contact slurm controller (connect failure)" >&2; exit 1 ;;
esac""",
}


@pytest.fixture()
def fake_slurm(tmp_path, monkeypatch):
    """PATH with the fake Slurm first; the mode file's word is what it does."""
    bin_dir, state = tmp_path / "fake-bin", tmp_path / "fake-state"
    bin_dir.mkdir()
    state.mkdir()
    for name, body in FAKE.items():
        script = bin_dir / name
        script.write_text("#!/bin/sh\n" + body.replace("{down}", DOWN) + "\n")
        script.chmod(script.stat().st_mode | stat.S_IXUSR)
    monkeypatch.setenv("PATH", f"{bin_dir}:{os.environ['PATH']}")
    monkeypatch.setenv("FAKE_SLURM", str(state))

    def mode(word: str) -> None:
        (state / "mode").write_text(word + "\n")

    mode("running")
    return mode


def submitted(tmp_path: Path) -> tuple[Path, str]:
    db = tmp_path / "r.db"
    result = run_cli("submit", "specs/beluga-infer.bench", "-t", "cpu", "--smoke", "-o", str(tmp_path / "b"),
                     "--db", str(db), cwd=REPO)  # fmt: skip
    assert result.code == 0, result.err
    with Store(db) as store:
        (record,) = store.submitted()
    return db, record.id


def state_of(db: Path, run_id: str) -> tuple[str, str]:
    with Store(db) as store:
        record = store.get(run_id)
    return record.status, record.job_state


@pytest.mark.parametrize("outage", ["down", "midway", "accounting"])
def test_an_outage_during_status_changes_no_run_and_says_so(tmp_path, fake_slurm, outage):
    db, run_id = submitted(tmp_path)
    assert run_cli("status", "--db", str(db), cwd=REPO).code == 0
    assert state_of(db, run_id) == ("running", "RUNNING")
    fake_slurm(outage)
    for _ in range(2):  # asked again and again: never 'unknown'
        result = run_cli("status", "--db", str(db), cwd=REPO)
        assert result.code == 3, result.err
        assert (
            "the Slurm controller could not be asked" in result.err
            and "keep the state they had" in result.err
        )
        assert "Traceback" not in result.err
        assert state_of(db, run_id) == ("running", "RUNNING")
        assert run_id in result.out  # the table, as stored
    fake_slurm("completed")  # a definite answer: the job ended without metrics
    assert run_cli("status", "--db", str(db), cwd=REPO).code == 0
    assert state_of(db, run_id) == ("failed", "COMPLETED")


def test_a_job_slurm_definitely_forgot_is_unknown(tmp_path, fake_slurm):
    db, run_id = submitted(tmp_path)
    fake_slurm("forgotten")
    assert run_cli("status", "--db", str(db), cwd=REPO).code == 0
    assert state_of(db, run_id)[1] == "UNKNOWN"


def test_a_controller_that_hangs_is_an_outage(tmp_path, fake_slurm, monkeypatch):
    db, run_id = submitted(tmp_path)
    monkeypatch.setattr(slurm, "TIMEOUT_S", 0.5)
    fake_slurm("hang")
    result = run_cli("status", "--db", str(db), cwd=REPO)
    assert result.code == 3 and "did not answer within 0.5 s" in result.err
    assert state_of(db, run_id) == ("pending", "PENDING")


def test_cancel_during_an_outage_changes_no_run(tmp_path, fake_slurm):
    db, run_id = submitted(tmp_path)
    fake_slurm("down")
    result = run_cli("cancel", run_id, "--db", str(db), cwd=REPO)
    assert result.code == 3 and "could not be asked" in result.err and "Traceback" not in result.err
    assert state_of(db, run_id) == ("pending", "PENDING")


def test_status_wait_waits_an_outage_out(tmp_path, fake_slurm, monkeypatch):
    db, run_id = submitted(tmp_path)
    fake_slurm("down")
    calls = []
    real = jobs.refresh

    def refresh(store, records):
        calls.append(1)
        if len(calls) == 3:
            fake_slurm("completed")  # the controller is back, and the job has ended
        return real(store, records)

    monkeypatch.setattr(jobs, "refresh", refresh)  # asked every 2 s (jobs.POLL_S)
    result = run_cli("status", "--wait", "--db", str(db), cwd=REPO)
    assert result.code == 1  # it waited on a run that did not end ok
    assert result.out.count("could not be asked") == 1 and "answers again" in result.out
    assert state_of(db, run_id) == ("failed", "COMPLETED")
