"""Runs submitted to Slurm: submit a build point as one job (its trials run one after another
inside it), follow the job's state, and once it ends store each trial's metrics, or the job's
state, exit code and log tail where a trial wrote none."""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path

from ..diagnostics import BenchError
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


@frozen
class Change:
    record: RunRecord
    status: str
    job_state: str


def submit_point(store: Store, point: BuildPoint, *, trials: int, options: list[str], env: dict,
                 cluster: str | None, environment: dict) -> tuple[str, list[str]]:  # fmt: skip
    """sbatch one point; its trials are recorded as pending in the same transaction, so the
    store never holds a job that sbatch refused. (job id, run ids)"""
    series = new_id()
    run_dir = (point.path / "runs" / series).resolve()
    run_dir.mkdir(parents=True)
    manifest, plan = point.manifest, point.plan
    try:
        with store.batch():
            job_id, named = slurm.sbatch(
                point.path.resolve() / JOB_FILE, chdir=point.path.resolve(), output=run_dir / LOG,
                options=options, script_args=["--run-dir", str(run_dir), "--trials", str(trials)], env=env,
            )  # fmt: skip
            run_ids = [
                store.start(
                    experiment=manifest["experiment"],
                    target=manifest["target"],
                    point=manifest["point"],
                    point_values=plan.get("point_values", {}),
                    smoke=bool(manifest.get("smoke")),
                    spec_path=manifest["spec"]["path"],
                    spec_sha256=manifest["spec"]["sha256"],
                    build_path=str(point.path.resolve()),
                    log_path=str(run_dir / LOG),
                    environment=environment,
                    plan=plan,
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
        status = "pending" if state.state == "PENDING" else "running"
        for record in trials:
            if (record.status, record.job_state) != (status, state.state):
                store.follow_job(record.id, status, state.state)
                changes.append(Change(record, status, state.state))
    return changes


def log_tail(path: Path, lines: int = LOG_TAIL_LINES) -> str:
    try:
        with path.open("rb") as stream:
            stream.seek(0, 2)
            stream.seek(max(0, stream.tell() - 64 * 1024))
            text = stream.read().decode("utf-8", errors="replace")
    except OSError:
        return ""
    return "\n".join(text.splitlines()[-lines:])


def collect(store: Store, trials: list[RunRecord], state: slurm.JobState, note: str = "") -> list[Change]:
    """The job has ended: store each trial's metrics, or how the job ended where it wrote none."""
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
                store.finish(record.id, status, cause, metrics, tail, ended_at=metrics.get("ended_at"),
                             job_state=state.state, exit_code=state.exit_code,
                             metrics_sha256=metrics_sha256(metrics),
                             started_at=metrics.get("started_at"))  # fmt: skip
            else:
                status = STATUS_OF_STATE.get(state.state, "failed")
                why = f"invalid metrics: {invalid}" if invalid else failure_cause(None, ranks, None, tail)
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
    started, last_line, last_said = time.monotonic(), "", 0.0
    while True:
        active = [r for r in store.submitted(active_only=True) if run_ids is None or r.id in run_ids]
        if not active:
            break
        for change in refresh(store, active):
            r = change.record
            say(f"{change.status:9} {r.experiment} / {r.target} / {r.point} [trial {r.trial}]  "
                f"job {r.job_id} {change.job_state}  [run {r.id}]")  # fmt: skip
        active = [r for r in store.submitted(active_only=True) if run_ids is None or r.id in run_ids]
        if active:
            jobs = {r.job_id: r for r in active}
            parts = [f"job {j} {r.job_state}" + (f" {last_step(r)}" if r.status == "running" else "")
                     for j, r in sorted(jobs.items())]  # fmt: skip
            line = "waiting: " + ", ".join(parts)
            now = time.monotonic()
            if line != last_line or now - last_said > 30:
                say(f"{line}  ({now - started:.0f} s)")
                last_line, last_said = line, now
            time.sleep(poll_s)
    return [r for r in store.submitted() if run_ids is None or r.id in run_ids]


def cancel(store: Store, records: list[RunRecord], say: Callable[[str], None]) -> list[RunRecord]:
    """scancel the jobs of `records`, wait for them to end, and store how they ended."""
    jobs = _jobs(records)
    if not jobs:
        return []
    slurm.scancel(list(jobs))
    say(f"cancelled job{'s' if len(jobs) > 1 else ''} {', '.join(sorted(jobs))}; waiting for "
        f"{'them' if len(jobs) > 1 else 'it'} to end")  # fmt: skip
    ids = {r.id for trials in jobs.values() for r in trials}
    deadline = time.monotonic() + CANCEL_WAIT_S
    while time.monotonic() < deadline:
        active = [r for r in store.submitted(active_only=True) if r.id in ids]
        if not active:
            break
        refresh(store, active)
        time.sleep(0.5)
    left = _jobs([r for r in store.submitted(active_only=True) if r.id in ids])
    for job_id, trials in left.items():  # still ending: record the cancel without waiting more
        state = slurm.JobState(job_id, "CANCELLED", None, None)
        collect(store, trials, state, note=f" (benchc cancel; not ended after {CANCEL_WAIT_S:g} s)")
    return [r for r in store.submitted() if r.id in ids]
