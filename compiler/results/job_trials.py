"""The trials of one scheduler job, stored as one series: the series' key, and the rules its
metrics files keep. A job of N trials writes trial 1 to N, each once, every file saying N; a set
of files that breaks this (a file of another job under the same id, an edited file, a file
written twice with other numbers) would be reported as one series of impossible trials, with a
confidence interval, so `ingest` refuses it, naming the files."""

from __future__ import annotations

import hashlib
from collections import defaultdict

from ..records import frozen
from .run_record import RunRecord


@frozen
class Trial:
    """One file, or one stored run, that says it is a trial of a job."""

    where: str  # for messages: 'path', or run ID (from 'path')
    trial: int
    trials: int | None  # None: a stored run whose metrics do not say


def job_series(metrics: dict) -> str | None:
    """One series per (scheduler job, build point): every trial of the job joins it, in
    whichever ingest command it arrives."""
    job = metrics.get("job")
    if not job:
        return None
    key = "\0".join(str(x) for x in (job.get("cluster"), job["id"], metrics["experiment"],
                                      metrics["target"], metrics["point"], metrics["smoke"]))  # fmt: skip
    return "job-" + hashlib.sha256(key.encode("utf-8")).hexdigest()[:12]


def job_label(metrics: dict) -> str:
    """'job 4711 on cluster c1 (sd3_mmdit_train / cpu / default, smoke)' (names are checked)."""
    job = metrics["job"]
    cluster = f" on cluster {ascii(job['cluster'])}" if job.get("cluster") else ""
    names = " / ".join(metrics[key] for key in ("experiment", "target", "point"))
    return f"job {job['id']}{cluster} ({names}{', smoke' if metrics['smoke'] else ''})"


def file_trial(path: str, metrics: dict) -> Trial:
    job = metrics["job"]
    return Trial(f"'{path}'", job["trial"], job["trials"])


def stored_trial(run: RunRecord) -> Trial:
    job = run.metrics.get("job") if isinstance(run.metrics, dict) else None
    trials = job.get("trials") if isinstance(job, dict) else None
    source = run.environment.get("ingested_from") if isinstance(run.environment, dict) else None
    where = f"run {run.id} in the store" + (f" (from '{source}')" if isinstance(source, str) else "")
    return Trial(where, run.trial, trials if isinstance(trials, int) else None)


def _listed(places: list[str]) -> str:
    return places[0] if len(places) == 1 else ", ".join(places[:-1]) + " and " + places[-1]


def series_problems(job: str, new: list[Trial], stored: list[Trial]) -> list[str]:
    """What is impossible in the series of `job` once the `new` files join the `stored` runs:
    a trial number past the job's trials, two totals of trials, one trial number twice."""
    found = []
    for trial in new:
        if trial.trials is not None and trial.trial > trial.trials:
            found.append(f"{trial.where} is trial {trial.trial} of {trial.trials} of {job}: a job's trials "
                         f"are numbered 1 to {trial.trials}")  # fmt: skip
    totals: dict[int, list[str]] = defaultdict(list)
    for trial in [*stored, *new]:
        if trial.trials is not None:
            totals[trial.trials].append(trial.where)
    if len(totals) > 1:
        says = "; ".join(f"{_listed(places)} {'say' if len(places) > 1 else 'says'} {total}"
                         for total, places in sorted(totals.items()))  # fmt: skip
        found.append(f"the files of {job} disagree on its number of trials: {says}")
    first: dict[int, Trial] = {trial.trial: trial for trial in reversed(stored)}
    for trial in new:
        earlier = first.setdefault(trial.trial, trial)
        if earlier is not trial:
            found.append(f"{trial.where} is trial {trial.trial} of {job}, as {earlier.where} is: a job runs "
                         "each trial once")  # fmt: skip
    return found


SERIES_HINT = ("each metrics file of a job is one of its trials (metrics-<trial>.json): were files of two "
               "jobs, or an edited file, mixed? nothing was stored")  # fmt: skip
