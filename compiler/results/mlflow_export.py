"""`benchc export --format mlflow`: stored runs into an MLflow tracking store. One job: one MLflow
experiment per benchc experiment (the same name), one MLflow run per stored run, found again
by its `benchc.run_id` tag, so exporting twice updates and never duplicates.

Each run gets params (target, point, optimize and every point value), metrics (throughput,
step times, MFU, peak memory, the latency percentiles, the energy), tags (benchc's version,
the spec's revision, the device, the status and cause, what the energy was read from or why
there is none) and artifacts (the metrics and the build's
manifest, or the stored plan where the manifest is gone). MLflow is an optional extra
(`pip install 'benchc[mlflow]'`), imported only here. Under a `sqlite:///PATH` store, a new
experiment keeps its artifacts in `mlflow-artifacts/` beside the database file, not in the
working folder (MLflow's own default)."""

from __future__ import annotations

import json
import logging
import math
import tempfile
from datetime import datetime
from pathlib import Path
from urllib.parse import urlparse

from ..diagnostics import error
from .energy import energy_of
from .export import DISTRIBUTED, tier
from .latency import PERCENTILES, distributions, section
from .run_record import RunRecord

RUN_ID_TAG = "benchc.run_id"
PARAM_CHARS = 500  # a point value shown as a param: enough to read, far below MLflow's limit
STATUS = {"ok": "FINISHED", "running": "RUNNING", "failed": "FAILED", "invalid": "FAILED"}  # else KILLED
INSTALL_HINT = "pip install 'benchc[mlflow]' (MLflow's tracking client, and SQLAlchemy for sqlite:/// stores)"


def export_mlflow(records: list[RunRecord], tracking_uri: str) -> tuple[int, int]:
    """Export every record; (runs created, runs updated)."""
    client, entities = _client(tracking_uri)
    created = updated = 0
    experiments: dict[str, str] = {}
    existing: dict[str, dict[str, object]] = {}
    for index, record in enumerate(records):
        try:
            if record.experiment not in experiments:
                experiments[record.experiment] = _experiment(client, record.experiment, tracking_uri)
                existing[record.experiment] = _runs_by_benchc_id(client, experiments[record.experiment])
            found = existing[record.experiment].get(record.id)
            _export_run(client, entities, experiments[record.experiment], record, found)
        except Exception as exc:  # MLflow's own errors, a store it cannot reach
            raise error(
                f"MLflow refused run {record.id} ({record.experiment} / {record.target} / {record.point}): "
                f"{str(exc).splitlines()[0][:300] if str(exc) else type(exc).__name__}",
                None,
                hint=f"{index} of {len(records)} run(s) were exported before it; exporting again "
                "completes them (it updates, never duplicates)",
            ) from None
        if found is None:
            created += 1
        else:
            updated += 1
    return created, updated


def _client(tracking_uri: str):
    try:
        from mlflow.entities import Metric, Param, RunTag
        from mlflow.tracking import MlflowClient
    except ImportError as exc:
        raise error(f"benchc export --format mlflow needs MLflow, which is not installed ({exc})", None,
                    hint=INSTALL_HINT) from None  # fmt: skip
    for name in ("mlflow", "alembic"):  # a store's first use logs its migrations at INFO
        logging.getLogger(name).setLevel(logging.WARNING)
    return MlflowClient(tracking_uri=tracking_uri), (Metric, Param, RunTag)


def _experiment(client, name: str, tracking_uri: str) -> str:
    found = client.get_experiment_by_name(name)
    if found is None:
        return client.create_experiment(name, artifact_location=_artifact_root(tracking_uri, name))
    if found.lifecycle_stage == "deleted":  # deleted in MLflow's UI: restored, not made anew
        client.restore_experiment(found.experiment_id)
    return found.experiment_id


def _artifact_root(tracking_uri: str, experiment: str) -> str | None:
    """Beside a sqlite database file (MLflow would use ./mlruns in the working folder); None
    elsewhere: the tracking store's own place."""
    parsed = urlparse(tracking_uri)
    if parsed.scheme != "sqlite" or not parsed.path or parsed.path in ("/", "/:memory:"):
        return None
    database = Path(parsed.path[1:] if tracking_uri.startswith("sqlite:///") else parsed.path)
    safe = "".join(c if c.isalnum() or c in "._-" else "_" for c in experiment)[:100]
    return (database.resolve().parent / "mlflow-artifacts" / safe).as_uri()


def _runs_by_benchc_id(client, experiment_id: str) -> dict[str, object]:
    found, token = {}, None
    while True:
        page = client.search_runs([experiment_id], max_results=1000, page_token=token)
        for run in page:
            benchc_id = run.data.tags.get(RUN_ID_TAG)
            if benchc_id:
                found[benchc_id] = run
        token = page.token
        if not token:
            return found


def _export_run(client, entities, experiment_id: str, record: RunRecord, found) -> None:
    Metric, Param, RunTag = entities
    params, metrics, tags = params_of(record), metrics_of(record), tags_of(record)
    if found is None:
        run = client.create_run(experiment_id, start_time=_ms(record.started_at), tags=tags,
                                run_name=f"{record.target}/{record.point}#{record.trial}")  # fmt: skip
        run_id, had_params, had_metrics = run.info.run_id, {}, {}
    else:
        run_id, had_params, had_metrics = found.info.run_id, found.data.params, found.data.metrics
    stamp = _ms(record.ended_at or record.started_at)
    new_params = [Param(k, v) for k, v in params.items() if k not in had_params]  # params never change
    changed = [Metric(k, v, stamp, 0) for k, v in metrics.items() if had_metrics.get(k) != v]
    client.log_batch(run_id, metrics=changed, params=new_params, tags=[RunTag(k, v) for k, v in tags.items()])
    _log_artifacts(client, run_id, record)
    status = STATUS.get(record.status, "KILLED")
    if status != "RUNNING":
        client.set_terminated(run_id, status, _ms(record.ended_at) if record.ended_at else None)


def params_of(record: RunRecord) -> dict[str, str]:
    """target, point, optimize (the tier), smoke, and every point value by its key."""
    params = {"target": record.target, "point": record.point, "optimize": tier(record) or "unknown",
              "smoke": str(bool(record.smoke)).lower()}  # fmt: skip
    values = record.point_values if isinstance(record.point_values, dict) else {}
    for key, value in sorted(values.items()):
        shown = value if isinstance(value, str) else json.dumps(value, sort_keys=True, default=str)
        params[str(key)[:250]] = shown[:PARAM_CHARS]
    return params


def metrics_of(record: RunRecord) -> dict[str, float]:
    """The run's figures under stable names; a figure the run does not have is left out."""
    m = record.metrics if isinstance(record.metrics, dict) else {}
    throughput, steps = section(m, "throughput"), section(m, "step_time_s")
    generation, pipeline = section(m, "generation"), section(m, "pipeline")
    found = {
        "throughput": throughput.get("job"),
        "throughput_per_device": throughput.get("per_device"),
        "step_time_median_s": steps.get("median"),
        "step_time_p90_s": steps.get("p90"),
        "step_time_p99_s": steps.get("p99"),
        "mfu": section(m, "flops").get("mfu"),
        "peak_memory_bytes": m.get("peak_memory_bytes"),
        "ttft_s": generation.get("ttft_s"),
        "tpot_s": generation.get("tpot_s"),
        "s_per_image": pipeline.get("s_per_image"),
    }
    latency = distributions(m)
    for kind in DISTRIBUTED:
        if kind in latency:
            found.update({f"{kind}_{p}_s": latency[kind][p] for p in PERCENTILES})
    energy = energy_of(m)
    if energy is not None:
        found.update(energy_j=energy.joules, energy_per_unit_j=energy.per_unit_j, mean_power_w=energy.mean_w)
    return {k: float(v) for k, v in found.items() if _number(v)}


def tags_of(record: RunRecord) -> dict[str, str]:
    env = record.environment if isinstance(record.environment, dict) else {}
    m = record.metrics if isinstance(record.metrics, dict) else {}
    repo = env.get("spec_repository") if isinstance(env.get("spec_repository"), dict) else {}
    tags = {
        RUN_ID_TAG: record.id,
        "benchc.experiment": record.experiment,
        "benchc.series": record.series,
        "benchc.trial": str(record.trial),
        "benchc.status": record.status,
        "benchc.version": env.get("benchc"),
        "benchc.spec_revision": repo.get("revision"),
        "benchc.spec_dirty": None if "dirty" not in repo else str(bool(repo["dirty"])).lower(),
        "benchc.cause": (record.cause or "")[:500] or None,
        "device": m.get("device_name"),
    }
    energy = energy_of(m)
    if energy is not None:
        tags.update({"benchc.energy_source": energy.source, "benchc.energy_why": energy.why})
    return {k: str(v) for k, v in tags.items() if isinstance(v, (str, int)) and str(v)}


def _log_artifacts(client, run_id: str, record: RunRecord) -> None:
    """The metrics file and the build's manifest (or the stored plan where the manifest is gone)."""
    manifest = Path(record.build_path) / "manifest.json" if record.build_path else None
    with tempfile.TemporaryDirectory(prefix="benchc-mlflow-") as folder:
        files = []
        if isinstance(record.metrics, dict):
            files.append(_written(Path(folder) / "metrics.json", record.metrics))
        if manifest is not None and manifest.is_file():
            files.append(manifest)
        elif isinstance(record.plan, dict):
            files.append(_written(Path(folder) / "plan.json", record.plan))
        for path in files:
            client.log_artifact(run_id, str(path))


def _written(path: Path, data: dict) -> Path:
    path.write_text(json.dumps(data, indent=2, sort_keys=True, default=str), encoding="utf-8")
    return path


def _ms(stamp: str | None) -> int | None:
    try:
        return int(datetime.fromisoformat(stamp).timestamp() * 1000) if stamp else None
    except ValueError:
        return None


def _number(value) -> bool:
    return not isinstance(value, bool) and isinstance(value, (int, float)) and math.isfinite(value)
