"""Calibrations in the store: what one device of a target really reached on a host (`benchc
calibrate`), read back as typed `Calibration` records for `targets`, `estimate`, `check` and
`report`, which show them beside the datasheet's figures. A calibration is inserted as
"running" when it starts and finished however it ends; only those that ended ok are used."""

from __future__ import annotations

import json
import math
import sqlite3
from functools import lru_cache
from importlib import resources

import jsonschema

from ..pids import alive
from ..records import frozen
from .store import Store, new_id, now

SCHEMA = "benchc-calibration"


@lru_cache(maxsize=1)
def calibration_schema() -> dict:
    return json.loads(resources.files("benchc.schemas").joinpath("calibration.schema.json").read_text())


@lru_cache(maxsize=1)
def _validator() -> jsonschema.Draft202012Validator:
    return jsonschema.Draft202012Validator(calibration_schema())


def calibration_problem(data) -> str | None:
    """Why `data` is not a calibration file benchc can store (None: it is one)."""
    if not isinstance(data, dict) or data.get("schema") != SCHEMA:
        return f'not a benchc calibration file (it has no "schema": "{SCHEMA}")'
    problems = sorted(_validator().iter_errors(data), key=str)
    if problems:
        where = "/".join(map(str, problems[0].absolute_path)) or "top level"
        return f"does not match the benchc calibration schema: {where}: {problems[0].message}"
    return None


PLAUSIBLE_OVER_DATASHEET = 1.5  # a measured ceiling above 1.5x the datasheet's is no ceiling
FLOOR = 1e-6  # below 1e-6 of its unit (TFLOP/s, TB/s, GB/s) a figure measured nothing real


def implausible(data: dict) -> str | None:
    """Why a calibration file's figures cannot be a machine's ceilings (None: they can be):
    any figure not finite or below FLOOR (dividing by one gives an infinite bound), or above
    1.5x the datasheet of a target benchc knows. Such a calibration is kept, shown as
    implausible, and never used for a bound or an MFU."""
    from ..catalog.targets import TARGETS

    if data.get("status") != "ok":
        return None
    sheet = TARGETS.get(data.get("target"))
    figures = [(f"{p} matmul", v, "TFLOP/s", sheet and sheet.peak_tflops.get(p))
               for p, v in (data.get("matmul_tflops") or {}).items()]  # fmt: skip
    figures.append(("copy bandwidth", data.get("memory_tb_s"), "TB/s", sheet and sheet.hbm_tb_s))
    figures += [(f"{name} bus bandwidth", c.get("bus_gb_s"), "GB/s", None)
                for name, c in (data.get("collectives") or {}).items() if isinstance(c, dict)]  # fmt: skip
    for what, value, unit, datasheet in figures:
        if value is None:
            continue
        if not isinstance(value, int | float) or not math.isfinite(value) or value < FLOOR:
            return f"its {what} is {value!r} {unit}, not a measured figure"
        if datasheet and value > PLAUSIBLE_OVER_DATASHEET * datasheet:
            times = value / datasheet
            return (f"its {what} is {value:g} {unit}, {times:.1f}x the {data['target']} datasheet's "
                    f"{datasheet:g}: no chip measures above 1.5x its datasheet")  # fmt: skip
    return None


@frozen
class Calibration:
    """One ended calibration: per device, the best of each measurement (None: not measured,
    as host-to-device on the cpu target, or collectives in one process)."""

    id: str
    target: str
    host: str
    smoke: bool
    world_size: int
    measured_at: str  # ISO 8601, UTC: when it ended
    device_name: str | None
    matmul_tflops: dict[str, float]  # precision -> best dense matrix multiply, TFLOP/s
    memory_tb_s: float | None  # device copy bandwidth, read + write
    host_to_device_gb_s: float | None
    bus_gb_s: dict[str, float]  # all_reduce | all_gather | reduce_scatter -> bus bandwidth
    launch_us: float | None
    nodes: int = 1  # the layout its collectives ran on: nodes x world_size / nodes processes

    def same_layout(self, nodes: int, devices_per_node: int, family: str) -> bool:
        """Whether its collectives ran on this layout (a bus bandwidth is the layout's, not the
        chip's). On the cpu every process shares one host: the number of processes alone."""
        if family == "cpu":
            return self.world_size == nodes * devices_per_node
        return (self.nodes, self.world_size) == (nodes, nodes * devices_per_node)

    def layout(self) -> str:
        return f"{self.nodes} x {self.world_size // max(self.nodes, 1)}"

    @property
    def date(self) -> str:
        return self.measured_at[:10]

    def peak_flops(self, precision: str) -> float | None:
        """The measured matrix-multiply ceiling in FLOP/s for `precision` (None: not measured)."""
        tflops = self.matmul_tflops.get(precision)
        return None if tflops is None else tflops * 1e12

    @property
    def memory_bytes_s(self) -> float | None:
        return None if self.memory_tb_s is None else self.memory_tb_s * 1e12

    def provenance(self) -> str:
        """ "measured on HOST on DATE" (and "smoke sizes" where they were)."""
        sizes = ", smoke sizes" if self.smoke else ""
        return f"measured on {self.host} on {self.date}{sizes}"


def _of(row: sqlite3.Row) -> Calibration | None:
    """The record of a stored row that ended ok (None: its data is not a calibration)."""
    try:
        data = json.loads(row["data"] or "null")
    except ValueError:
        return None
    if calibration_problem(data) or data["status"] != "ok" or implausible(data):
        return None  # implausible figures are kept in the store and never used
    finite = {k: float(v) for k, v in data["matmul_tflops"].items() if math.isfinite(v)}
    return Calibration(
        id=row["id"], target=row["target"], host=row["host"], smoke=bool(row["smoke"]),
        world_size=row["world_size"], measured_at=row["ended_at"] or row["started_at"],
        device_name=data.get("device_name"), matmul_tflops=finite,
        memory_tb_s=data["memory_tb_s"], host_to_device_gb_s=data["host_to_device_gb_s"],
        bus_gb_s={name: float(c["bus_gb_s"]) for name, c in data["collectives"].items()},
        launch_us=data["launch_us"], nodes=data.get("nodes") or 1,
    )  # fmt: skip


def start_calibration(store: Store, *, target: str, host: str, smoke: bool, world_size: int,
                      build_path: str | None, environment: dict) -> str:  # fmt: skip
    """A calibration starts: inserted as running, with this process as its runner."""
    import os

    calibration_id = new_id()
    with store.batch() as db:
        db.execute(
            "INSERT INTO calibrations (id, target, host, smoke, world_size, build_path, status,"
            " environment, runner_pid, started_at) VALUES (?, ?, ?, ?, ?, ?, 'running', ?, ?, ?)",
            (calibration_id, target, host, int(smoke), world_size, build_path,
             json.dumps(environment), os.getpid(), now()),
        )  # fmt: skip
    return calibration_id


def finish_calibration(store: Store, calibration_id: str, status: str, cause: str | None,
                       data: dict | None) -> None:  # fmt: skip
    """How it ended, with the calibration file (checked: data that is not a calibration file
    is not stored, and the cause says why)."""
    if data is not None and (problem := calibration_problem(data)):
        data, cause, status = None, f"calibration.json {problem}", "failed" if status == "ok" else status
    elif data is not None and (reason := implausible(data)):
        cause, status = f"implausible: {reason} (kept, never used for a bound)", "failed"
    host = data.get("host") if data is not None else None  # a Slurm job's node, known now
    with store.batch() as db:
        db.execute(
            "UPDATE calibrations SET status = ?, cause = ?, data = ?, ended_at = ?,"
            " host = coalesce(?, host) WHERE id = ?",
            (status, cause, json.dumps(data) if data is not None else None, now(), host, calibration_id),
        )


def _rows(store: Store, where: str = "", parameters: tuple = ()) -> list[sqlite3.Row]:
    try:
        return store.query(f"SELECT * FROM calibrations {where} ORDER BY started_at, rowid", parameters)
    except sqlite3.OperationalError as exc:
        if "no such table" in str(exc):  # a read-only store of an earlier benchc: none
            return []
        raise


def latest_calibrations(store: Store | None) -> dict[str, Calibration]:
    """target -> its latest calibration that ended ok, a full-size one before any smoke one
    (smoke sizes check the program; they do not reach the chip's ceiling)."""
    return {target: _preferred(found) for target, found in usable_calibrations(store).items()}


def usable_calibrations(store: Store | None) -> dict[str, list[Calibration]]:
    """target -> every calibration of it that ended ok with plausible figures, oldest first."""
    if store is None:
        return {}
    found: dict[str, list[Calibration]] = {}
    for row in _rows(store, "WHERE status = 'ok'"):
        record = _of(row)
        if record is not None:
            found.setdefault(record.target, []).append(record)
    return found


def _preferred(found: list[Calibration]) -> Calibration:
    """The latest full-size one, else the latest (later ones win unless smoke over full)."""
    kept = found[0]
    for record in found[1:]:
        if record.smoke <= kept.smoke:
            kept = record
    return kept


def calibration_for(found: list[Calibration], nodes: int, devices_per_node: int, family: str) -> Calibration:
    """The calibration a plan of this layout uses: among those whose collectives ran on its
    layout, where there are any, the preferred one (a bus bandwidth is the layout's); else the
    preferred of all (its matmul and memory figures are the chip's)."""
    same = [c for c in found if c.same_layout(nodes, devices_per_node, family)]
    return _preferred(same or found)


def calibration_rows(store: Store, target: str | None = None) -> list[dict]:
    """Every calibration stored (of `target`), oldest first, as plain rows for a listing: a
    running one whose benchc process is gone is shown as unknown."""
    rows = _rows(store, "WHERE target = ?" if target else "", (target,) if target else ())
    listed = []
    for row in rows:
        status = row["status"]
        if status == "running" and row["runner_pid"] and not alive(row["runner_pid"]):
            status = "unknown"
        listed.append({"id": row["id"], "target": row["target"], "host": row["host"],
                       "smoke": bool(row["smoke"]), "status": status, "cause": row["cause"],
                       "started_at": row["started_at"], "ended_at": row["ended_at"]})  # fmt: skip
    return listed


def store_calibration_file(store: Store, data: dict, source: str) -> tuple[str, bool]:
    """Store a calibration file written elsewhere (a Slurm job's, `benchc calibrate --ingest`)
    as an ended row, at the times it ran; (its id, False) or, where the same file is stored
    already, (that row's id, True) and nothing is written. `data` passed calibration_problem."""
    started = data.get("started_at") or now()
    with store.batch() as db:
        same = db.execute("SELECT id FROM calibrations WHERE target = ? AND host = ? AND started_at = ?",
                          (data["target"], data["host"], started)).fetchone()  # fmt: skip
        if same is not None:
            return same[0], True
        status = data["status"]
        error = data.get("error") or {}
        cause = f"{error.get('type')}: {error.get('message')}" if error else None
        calibration_id = new_id()
        db.execute(
            "INSERT INTO calibrations (id, target, host, smoke, world_size, build_path, status, cause,"
            " data, environment, runner_pid, started_at, ended_at)"
            " VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, NULL, ?, ?)",
            (calibration_id, data["target"], data["host"], int(data["smoke"]), data["world_size"], None,
             status, cause, json.dumps(data), json.dumps({"host": data["host"], "ingested_from": source}),
             started, data.get("ended_at") or started),
        )  # fmt: skip
    return calibration_id, False
