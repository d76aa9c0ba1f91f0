"""Store metrics files written elsewhere (a cluster job, a copied build): all files or none,
the trials of one scheduler job as one series, each run at the time it ran, and never the
same file twice.

Two steps: load_files() reads and checks every file without the store (a refused ingest creates
no store); store_files() then checks them against the store and stores them in one write
transaction, so two ingests at once never both store one file (a unique index guards it too)."""

from __future__ import annotations

import hashlib
import json
import sqlite3
from collections import defaultdict
from pathlib import Path

from ..diagnostics import BenchError, Diagnostic
from ..records import frozen
from .job_trials import SERIES_HINT, file_trial, job_label, job_series, series_problems, stored_trial
from .manifests import Build, manifest_near
from .metrics import load_metrics
from .store import Store, new_id


@frozen
class Loaded:
    """A metrics file that passed every check made without the store."""

    path: Path
    metrics: dict
    digest: str
    build: Build | None = None  # the plan of its build, or why there is none


@frozen
class Ingested:
    path: Path
    run_id: str
    status: str
    metrics: dict
    no_plan: str | None = None
    again: bool = False  # stored before: stored again (--force) as a run of its own


def metrics_sha256(metrics: dict) -> str:
    """The identity of a metrics file: its content, whatever its layout or location."""
    canonical = json.dumps(metrics, sort_keys=True, separators=(",", ":"), ensure_ascii=True)
    return hashlib.sha256(canonical.encode("ascii")).hexdigest()


def outcome(metrics: dict) -> tuple[str, str | None]:
    """(status, cause) from what the program recorded."""
    known = ("ok", "failed", "interrupted", "cancelled", "timeout")
    status = metrics["status"] if metrics["status"] in known else "failed"
    error = metrics.get("error") or {}
    kind = "numerics" if error.get("type") == "NumericsMismatch" else error.get("type")
    cause = f"{kind}: {error.get('message')}" if error else None
    return status, cause


def _duplicate(message: str) -> Diagnostic:
    return Diagnostic(message, None, hint="pass --force to store it again, as a run of its own")


def _series_diagnostics(files: list[Loaded], copies: set[int], stored_of=None) -> list[Diagnostic]:
    """The job rules (job_trials.py) over the files that join a job's series, with the runs
    the store already holds in it (stored_of(series); none before the store is opened)."""
    by_series: dict[str, list[Loaded]] = defaultdict(list)
    for index, item in enumerate(files):
        series = job_series(item.metrics)
        if series is not None and index not in copies:
            by_series[series].append(item)
    problems = []
    for series, members in by_series.items():
        stored = [stored_trial(run) for run in stored_of(series)] if stored_of else []
        new = [file_trial(str(item.path), item.metrics) for item in members]
        problems += [Diagnostic(text, None, hint=SERIES_HINT)
                     for text in series_problems(job_label(members[0].metrics), new, stored)]  # fmt: skip
    return problems


def load_files(paths: list[Path], force: bool = False) -> list[Loaded]:
    """Every file read and checked (schema, names, one file twice, the rules of a job's trials),
    with the plan of its build where one is beside it; a BenchError naming every refused file."""
    loaded, problems, seen = [], [], {}
    for path in paths:
        try:
            metrics = load_metrics(path)
        except BenchError as exc:
            problems.extend(_calibration_diagnostic(path) or exc.diagnostics)
            continue
        digest = metrics_sha256(metrics)
        if digest in seen and not force:
            problems.append(_duplicate(f"'{path}' is the same metrics as '{seen[digest]}'"))
            continue
        seen.setdefault(digest, path)
        loaded.append(Loaded(path, metrics, digest))
    problems += _series_diagnostics(loaded, _copies_within(loaded))
    if problems:
        raise BenchError(problems)  # all or nothing: no file is stored when one is refused
    manifests: dict = {}
    return [Loaded(item.path, item.metrics, item.digest, manifest_near(item.path, item.metrics, manifests))
            for item in loaded]  # fmt: skip


def _calibration_diagnostic(path: Path) -> list[Diagnostic]:
    """Where `path` is a calibration file (a calibration's Slurm job writes metrics-1.json), the
    one diagnostic that says how to store it; else none."""
    from .untrusted_json import read_json_file

    try:
        data, _ = read_json_file(path, "calibration file")
    except BenchError:
        return []
    if not isinstance(data, dict) or data.get("schema") != "benchc-calibration":
        return []
    return [Diagnostic(f"'{path}' is a calibration file, not a run's metrics", None,
                       hint=f"store it with: benchc calibrate --ingest {path}")]  # fmt: skip


def _copies_within(files: list[Loaded]) -> set[int]:
    """The files that repeat an earlier file of the same command (only with --force)."""
    firsts: dict[str, int] = {}
    return {index for index, item in enumerate(files) if firsts.setdefault(item.digest, index) != index}


def store_files(store: Store, files: list[Loaded], force: bool = False) -> list[Ingested]:
    """Check the files against the store and store them, in one write transaction: no other
    benchc stores anything between the check and the write. A file already stored is refused
    (with --force it is stored again, as a run of its own, outside its job's series)."""
    try:
        with store.batch():
            problems, copies = [], _copies_within(files)
            for index, item in enumerate(files):
                earlier = store.stored_metrics(item.digest)
                if earlier is None:
                    continue
                if not force:
                    problems.append(_duplicate(f"'{item.path}' is already in the results store as run "
                                               f"{earlier.id} ({earlier.status})"))  # fmt: skip
                copies.add(index)
            problems += _series_diagnostics(files, copies, store.series_runs)
            if problems:
                raise BenchError(problems)
            return [_store_one(store, item, again=index in copies) for index, item in enumerate(files)]
    except sqlite3.IntegrityError:  # the unique index: another benchc stored one of them first
        raise BenchError(_duplicate("another benchc stored one of these files at the same moment; nothing "
                                    "was stored: ingest them again to see which")) from None  # fmt: skip


def _store_one(store: Store, item: Loaded, again: bool) -> Ingested:
    metrics, path = item.metrics, item.path
    job = metrics.get("job") or {}
    status, cause = outcome(metrics)
    environment = {"host": metrics.get("host"), "hosts": metrics.get("hosts"),
                   "ingested_from": str(path.resolve())}  # fmt: skip
    build = item.build or Build(None, None)
    if build.no_plan:
        environment["no_plan"] = build.no_plan
    series = None if again else job_series(metrics)
    run_id = store.start(
        experiment=metrics["experiment"], target=metrics["target"], point=metrics["point"],
        point_values=metrics.get("point_values") or {}, smoke=metrics["smoke"],
        spec_path=build.spec_path,
        spec_sha256=metrics["spec_sha256"], build_path=str(path.parent.resolve()), log_path=None,
        environment=environment, plan=build.plan, series=series or new_id(), trial=job.get("trial", 1),
        source="ingest", status="running", job_id=job.get("id"), cluster=job.get("cluster"),
        run_dir=str(path.parent.resolve()), started_at=metrics.get("started_at"),
    )  # fmt: skip
    store.finish(run_id, status, cause, metrics, ended_at=metrics.get("ended_at"),
                 metrics_sha256=item.digest, first_copy=not again)  # fmt: skip
    return Ingested(path, run_id, status, metrics, build.no_plan, again)
