"""Runs submitted to Slurm: submit a build point as one job (its trials run one after another
inside it), follow the job's state, and once it ends store each trial's metrics, or the job's
state, exit code and log tail where a trial wrote none."""

from __future__ import annotations

import re
import time
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path

from ..diagnostics import BenchError
from ..files import refuse_linked_runs
from ..records import frozen
from ..results.ingest import metrics_sha256, outcome
from ..results.metrics import load_metrics
from ..results.store import RunRecord, Store, new_id
from ..runner.execute import BuildPoint, failure_cause
from ..runner.progress import STEP_LINE
from . import slurm

JOB_FILE = "job.sbatch"
LOG = "log.txt"
LOG_TAIL_LINES = 40
POLL_S = 2.0
CANCEL_WAIT_S = 30.0
# How a job's end reads for the runs that wrote no (successful) metrics.
STATUS_OF_STATE = {"COMPLETED": "failed", "TIMEOUT": "timeout", "DEADLINE": "timeout",
                   "CANCELLED": "cancelled", slurm.UNKNOWN: "unknown"}  # fmt: skip
TRIAL_LINE = re.compile(r"benchc: trial (\d+) of (\d+)")  # job.sbatch, before each trial


@frozen
class Change:
    record: RunRecord
    status: str
    job_state: str


def submit_point(store: Store, point: BuildPoint, *, trials: int, options: list[str], env: dict,
                 cluster: str | None, environment: dict,
                 profile: bool = False) -> tuple[str, list[str]]:  # fmt: skip
    """sbatch one point; its trials are recorded as pending in the same transaction, so the
    store never holds a job that sbatch refused. (job id, run ids) `profile`: every trial
    profiles a few more steps (job.sbatch's --profile, passed to the program)."""
    refuse_linked_runs(point.path)
    series = new_id()
    run_dir = (point.path / "runs" / series).resolve()
    run_dir.mkdir(parents=True)
    manifest, plan = point.manifest, point.manifest.plan
    script_args = ["--run-dir", str(run_dir), "--trials", str(trials), *(["--profile"] if profile else [])]
    try:
        with store.batch():
            job_id, named = slurm.sbatch(
                point.path.resolve() / JOB_FILE, chdir=point.path.resolve(), output=run_dir / LOG,
                options=options, script_args=script_args, env=env,
            )  # fmt: skip
            run_ids = [
                store.start(
                    experiment=manifest.experiment,
                    target=manifest.target,
                    point=manifest.point,
                    point_values=plan.point_values,
                    smoke=manifest.smoke,
                    spec_path=manifest.spec_path,
                    spec_sha256=manifest.spec_sha256,
                    build_path=str(point.path.resolve()),
                    log_path=str(run_dir / LOG),
                    environment=environment,
                    plan=plan.raw,
                    series=series,
                    trial=trial,
                    source="submit",
                    status="pending",
                    job_id=job_id,
                    cluster=named or cluster,
                    job_state="PENDING",
                    run_dir=str(run_dir),
                )  # fmt: skip
                for trial in range(1, trials + 1)
            ]
    except BaseException:
        if not any(run_dir.iterdir()):
            run_dir.rmdir()
        raise
    return job_id, run_ids


def _jobs(records: list[RunRecord]) -> dict[str, list[RunRecord]]:
    jobs: dict[str, list[RunRecord]] = {}
    for record in records:
        if record.job_id and record.status in ("pending", "running"):
            jobs.setdefault(record.job_id, []).append(record)
    return jobs


def refresh(store: Store, records: list[RunRecord]) -> list[Change]:
    """Ask Slurm about the jobs of `records` that have not ended; store what changed."""
    jobs = _jobs(records)
    changes = []
    for job_id, state in slurm.states(list(jobs)).items():
        trials = jobs[job_id]
        if state.ended:
            changes += collect(store, trials, state)
            continue
        current = current_trial(trials[0]) if state.state != "PENDING" else 0
        for record in trials:
            # a running job runs its trials one after another: the later ones are still pending
            status = "running" if 0 < record.trial <= current else "pending"
            if (record.status, record.job_state) != (status, state.state):
                store.follow_job(record.id, status, state.state)
                changes.append(Change(record, status, state.state))
    return changes


def current_trial(record: RunRecord) -> int:
    """The trial a running job is at: job.sbatch's last "benchc: trial N of M" line in the log
    (1 until it has written one)."""
    if record.log_path:
        for line in reversed(log_tail(Path(record.log_path), 200).splitlines()):
            match = TRIAL_LINE.search(line)
            if match:
                return int(match.group(1))
    return 1


def log_tail(path: Path, lines: int = LOG_TAIL_LINES) -> str:
    try:
        with path.open("rb") as stream:
            stream.seek(0, 2)
            stream.seek(max(0, stream.tell() - 64 * 1024))
            text = stream.read().decode("utf-8", errors="replace")
    except OSError:
        return ""
    return "\n".join(text.splitlines()[-lines:])


def collect(store: Store, trials: list[RunRecord], state: slurm.JobState, note: str = "",
            cancelled: bool = False) -> list[Change]:  # fmt: skip
    """The job has ended: store each trial's metrics, or how the job ended where it wrote none.
    `cancelled`: benchc cancel ended it, which is the cause of a trial that wrote no metrics."""
    changes = []
    run_dir = Path(trials[0].run_dir or ".")
    tail = log_tail(run_dir / LOG)
    exit_code = state.exit_code or "?"
    ended = f"Slurm job {state.job_id} ended {state.state} (exit code {exit_code}){note}"
    with store.batch():
        for record in trials:
            path = run_dir / f"metrics-{record.trial}.json"
            metrics, invalid = None, None
            if path.exists():
                try:
                    metrics = load_metrics(path)
                except BenchError as exc:
                    invalid = exc.diagnostics[0].message
            ranks = sorted(run_dir.glob(f"metrics-{record.trial}.rank*.json"))
            if metrics is not None:
                status, cause = outcome(metrics)
                if status != "ok" and state.state != "COMPLETED":
                    status = STATUS_OF_STATE.get(state.state, "failed")
                    cause = f"{ended}: {cause or failure_cause(metrics, ranks, None, tail)}"
                elif state.state != "COMPLETED":  # the measurement was whole before the job failed
                    cause = f"warning: {ended} after trial {record.trial}'s metrics were complete"
                store.finish(record.id, status, cause, metrics, tail, ended_at=metrics.get("ended_at"),
                             job_state=state.state, exit_code=state.exit_code,
                             metrics_sha256=metrics_sha256(metrics),
                             started_at=metrics.get("started_at"))  # fmt: skip
            else:
                status = STATUS_OF_STATE.get(state.state, "failed")
                why = f"invalid metrics: {invalid}" if invalid else failure_cause(None, ranks, None, tail)
                if cancelled and not invalid:
                    why = "cancelled by benchc cancel"
                cause = f"{ended} before trial {record.trial} wrote metrics; {why}"
                store.finish(record.id, status, cause, None, tail, job_state=state.state,
                             exit_code=state.exit_code)  # fmt: skip
            changes.append(Change(record, status, state.state))
    return changes


def last_step(record: RunRecord) -> str:
    """The last `step N/M` line in the job's log: how far a running trial has got."""
    if not record.log_path:
        return ""
    for line in reversed(log_tail(Path(record.log_path), 20).splitlines()):
        match = STEP_LINE.search(line)
        if match:
            return f"step {match.group(1)}/{match.group(2)}"
    return ""


def follow(store: Store, run_ids: set[str] | None, say: Callable[[str], None],
           poll_s: float = POLL_S) -> list[RunRecord]:  # fmt: skip
    """Refresh until every run of `run_ids` (all submitted runs when None) has ended; say each
    change and, every ~30 s or when it changes, one line of where the jobs stand."""
    started, last_line, last_said, unreachable = time.monotonic(), "", 0.0, None
    while True:
        active = [r for r in store.submitted(active_only=True) if run_ids is None or r.id in run_ids]
        if not active:
            break
        try:
            changes = refresh(store, active)
        except slurm.Unreachable as exc:  # an outage: the runs keep their state, ask again
            if str(exc) != unreachable:
                say(f"the Slurm controller could not be asked ({exc}); asking again every {poll_s:g} s")
            unreachable, changes = str(exc), []
        else:
            if unreachable is not None:
                say("the Slurm controller answers again")
            unreachable = None
        for change in changes:
            r = change.record
            say(f"{change.status:9} {r.experiment} / {r.target} / {r.point} [trial {r.trial}]  "
                f"job {r.job_id} {change.job_state}  [run {r.id}]")  # fmt: skip
        active = [r for r in store.submitted(active_only=True) if run_ids is None or r.id in run_ids]
        if active:
            jobs = {}  # each job's running trial (else its first): the one whose step is shown
            for record in active:
                shown = jobs.get(record.job_id)
                if shown is None or (record.status == "running" and shown.status != "running"):
                    jobs[record.job_id] = record
            parts = []
            for job_id, record in sorted(jobs.items()):
                step = last_step(record) if record.status == "running" else ""
                parts.append(" ".join(word for word in (f"job {job_id}", record.job_state, step) if word))
            line = "waiting: " + ", ".join(parts)
            now = time.monotonic()
            if line != last_line or now - last_said > 30:
                say(f"{line}  ({now - started:.0f} s)")
                last_line, last_said = line, now
            time.sleep(poll_s)
    return [r for r in store.submitted() if run_ids is None or r.id in run_ids]


def cancel(store: Store, records: list[RunRecord], say: Callable[[str], None]) -> list[RunRecord]:
    """scancel the jobs of `records` and store how they ended, as soon as Slurm has acted on the
    cancel: a job still completing (its processes being stopped) is CANCELLED already, with
    the exit code Slurm reports for it; one Slurm has not acted on within CANCEL_WAIT_S is
    recorded cancelled with what Slurm says of it then."""
    jobs = _jobs(records)
    if not jobs:
        return []
    slurm.scancel(list(jobs))
    say(f"cancelled job{'s' if len(jobs) > 1 else ''} {', '.join(sorted(jobs))}")
    ids = {r.id for trials in jobs.values() for r in trials}
    deadline = time.monotonic() + CANCEL_WAIT_S
    while jobs and time.monotonic() < deadline:
        for job_id, state in slurm.states(list(jobs)).items():
            if state.state in ("COMPLETING", slurm.UNKNOWN, *slurm.ENDED):
                final = slurm.job_state(job_id) or state  # scontrol has the exit code
                stopping = final.state in ("COMPLETING", "CANCELLED", slurm.UNKNOWN)
                ended = "CANCELLED" if stopping else final.state  # or what it ended as just before
                collect(store, jobs.pop(job_id), replace(final, state=ended), cancelled=ended == "CANCELLED")
        if jobs:
            time.sleep(0.5)
    for job_id, trials in jobs.items():  # Slurm has not acted on the cancel yet
        final = slurm.job_state(job_id) or slurm.JobState(job_id, "CANCELLED", None, None)
        note = f" (benchc cancel; Slurm still reported {final.state} after {CANCEL_WAIT_S:g} s)"
        collect(store, trials, replace(final, state="CANCELLED"), note=note, cancelled=True)
    return [r for r in store.submitted() if r.id in ids]
