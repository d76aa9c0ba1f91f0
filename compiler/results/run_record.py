"""One stored run as the commands see it (RunRecord), read from a row of the results store."""

from __future__ import annotations

import json
import sqlite3

from ..records import frozen

# Columns the store keeps for itself, not shown in a record: the benchc process that ran a
# run (to find runs it left behind) and the copy number of its metrics file (see migrations).
_INTERNAL_COLUMNS = ("runner_pid", "runner_host", "metrics_copy")
_JSON_COLUMNS = ("point_values", "metrics", "environment", "plan")


@frozen
class RunRecord:
    id: str
    experiment: str
    target: str
    point: str
    point_values: dict
    smoke: bool
    spec_path: str | None
    spec_sha256: str | None
    build_path: str | None
    log_path: str | None
    status: str
    cause: str | None
    log_tail: str | None
    metrics: dict | None
    environment: dict
    plan: dict | None
    series: str
    trial: int
    source: str
    started_at: str
    ended_at: str | None
    job_id: str | None = None
    cluster: str | None = None
    job_state: str | None = None
    exit_code: str | None = None
    run_dir: str | None = None
    metrics_sha256: str | None = None

    def to_dict(self) -> dict:
        return dict(self.__dict__)


def record_of(row: sqlite3.Row) -> RunRecord:
    data = {key: row[key] for key in row.keys() if key not in _INTERNAL_COLUMNS}
    for column in _JSON_COLUMNS:
        data[column] = json.loads(data[column]) if data[column] is not None else None
    data["smoke"] = bool(data["smoke"])
    return RunRecord(**data)
