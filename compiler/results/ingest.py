"""Store metrics files written elsewhere (a cluster job, a copied build): all files or none,
the trials of one scheduler job as one series, each run at the time it ran, and never the
same file twice."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

from ..diagnostics import BenchError, Diagnostic
from ..records import frozen
from .metrics import load_metrics
from .store import Store, new_id
from .untrusted_json import read_json_file


@frozen
class Ingested:
    path: Path
    run_id: str
    status: str
    metrics: dict


def metrics_sha256(metrics: dict) -> str:
    """The identity of a metrics file: its content, whatever its layout or location."""
    canonical = json.dumps(metrics, sort_keys=True, separators=(",", ":"), ensure_ascii=True)
    return hashlib.sha256(canonical.encode("ascii")).hexdigest()


def job_series(metrics: dict) -> str | None:
    """One series per (scheduler job, build point): every trial of the job joins it, in
    whichever ingest command it arrives."""
    job = metrics.get("job")
    if not job:
        return None
    key = "\0".join(str(x) for x in (job.get("cluster"), job["id"], metrics["experiment"],
                                      metrics["target"], metrics["point"], metrics["smoke"]))  # fmt: skip
    return "job-" + hashlib.sha256(key.encode("utf-8")).hexdigest()[:12]


def outcome(metrics: dict) -> tuple[str, str | None]:
    """(status, cause) from what the program recorded."""
    known = ("ok", "failed", "interrupted", "cancelled", "timeout")
    status = metrics["status"] if metrics["status"] in known else "failed"
    error = metrics.get("error") or {}
    cause = f"{error.get('type')}: {error.get('message')}" if error else None
    return status, cause


def manifest_near(path: Path) -> dict | None:
    """The build manifest of a metrics file: beside it, or two folders up (runs/<id>/)."""
    for folder in (path.parent, path.parent.parent.parent):
        candidate = folder / "manifest.json"
        if candidate.exists():
            try:
                data, _ = read_json_file(candidate, "build manifest")
            except BenchError:
                return None  # the metrics file carries what the store needs; the plan is extra
            return data if isinstance(data, dict) else None
    return None


def _duplicate(message: str) -> Diagnostic:
    return Diagnostic(message, None, hint="pass --force to store it again")


def ingest_files(store: Store, paths: list[Path], force: bool = False) -> list[Ingested]:
    """Validate every file, refuse files already stored, then store them in one transaction."""
    loaded, problems, seen = [], [], {}
    for path in paths:
        try:
            metrics = load_metrics(path)
        except BenchError as exc:
            problems.extend(exc.diagnostics)
            continue
        digest = metrics_sha256(metrics)
        if not force:
            earlier = store.stored_metrics(digest)
            if earlier is not None:
                problems.append(_duplicate(f"'{path}' is already in the results store as run "
                                                 f"{earlier.id} ({earlier.status})"))  # fmt: skip
                continue
            if digest in seen:
                problems.append(_duplicate(f"'{path}' is the same metrics as '{seen[digest]}'"))
                continue
        seen[digest] = path
        loaded.append((path, metrics, digest))
    if problems:
        raise BenchError(problems)  # all or nothing: no file is stored when one is refused
    stored = []
    with store.batch():
        for path, metrics, digest in loaded:
            stored.append(store_metrics(store, path, metrics, digest))
    return stored


def store_metrics(store: Store, path: Path, metrics: dict, digest: str) -> Ingested:
    manifest = manifest_near(path) or {}
    spec = manifest.get("spec") if isinstance(manifest.get("spec"), dict) else {}
    plan = manifest.get("plan") if isinstance(manifest.get("plan"), dict) else None
    job = metrics.get("job") or {}
    status, cause = outcome(metrics)
    run_id = store.start(
        experiment=metrics["experiment"], target=metrics["target"], point=metrics["point"],
        point_values=metrics.get("point_values") or {}, smoke=metrics["smoke"],
        spec_path=spec.get("path") if isinstance(spec.get("path"), str) else None,
        spec_sha256=metrics["spec_sha256"], build_path=str(path.parent.resolve()), log_path=None,
        environment={"host": metrics.get("host"), "hosts": metrics.get("hosts"),
                     "ingested_from": str(path.resolve())},
        plan=plan, series=job_series(metrics) or new_id(), trial=job.get("trial", 1),
        source="ingest", status="running", job_id=job.get("id"), cluster=job.get("cluster"),
        run_dir=str(path.parent.resolve()), started_at=metrics.get("started_at"),
    )  # fmt: skip
    store.finish(run_id, status, cause, metrics, ended_at=metrics.get("ended_at"),
                 metrics_sha256=digest)  # fmt: skip
    return Ingested(path, run_id, status, metrics)
