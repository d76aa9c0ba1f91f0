"""`benchc export`: stored runs as JSON (each run in full) or CSV (one row per run).

CSV cells are made safe to open in a spreadsheet (OWASP's advice on CSV injection): a cell of
text that begins with =, +, -, @, a tab or a carriage return would be read as a formula, so it
gets a leading single quote ('=cmd|...). Numbers the store holds as numbers (a throughput, a
peak memory) are written as numbers, -1.5 included; text that is a plain decimal number
("-1.5", "2e-3") is not a formula either and is written as it is.
"""

from __future__ import annotations

import csv
import io
import json
import re

from ..figures import finite_json
from .energy import energy_of
from .latency import KINDS, PERCENTILES, distributions, section
from .run_record import RunRecord

# p50, p90 and p99 of each (the steps' p50 and p90 are step_median_s and step_p90_s)
DISTRIBUTED = tuple(kind for kind, _, _ in KINDS if kind != "step")

CSV_COLUMNS = ("id", "experiment", "target", "point", "smoke", "trial", "status", "cause",
               "throughput", "unit", "per_device", "step_median_s", "step_p90_s",
               "peak_memory_bytes", "mfu", "world_size", "started_at", "ended_at", "spec_sha256",
               "optimize", "precision", "batch", "ttft_s", "tpot_s", "s_per_image",
               *(f"{kind}_{p}_s" for kind in DISTRIBUTED for p in PERCENTILES), "step_p99_s",
               "energy_j", "energy_per_unit_j", "mean_power_w", "energy_source", "energy_why")  # fmt: skip

FORMULA_STARTS = ("=", "+", "-", "@", "\t", "\r")
_DECIMAL = re.compile(r"[+-]?(\d+(\.\d*)?|\.\d+)([eE][+-]?\d+)?")


def tier(record: RunRecord) -> str | None:
    """The optimisation tier a run's metrics record (None where they predate tiers: never guessed)."""
    found = record.metrics.get("optimize") if isinstance(record.metrics, dict) else None
    return found if found in ("plain", "tuned") else None


def with_tier(record: RunRecord) -> dict:
    """The record as show and export write it, with its tier beside the metrics."""
    return {**record.to_dict(), "optimize": tier(record)}


def safe_cell(value):
    """A CSV cell a spreadsheet shows as data, never runs as a formula."""
    if isinstance(value, bool):
        return int(value)
    if isinstance(value, (int, float)) or value is None:
        return "" if value is None else value
    text = str(value)
    if text.startswith(FORMULA_STARTS) and not _DECIMAL.fullmatch(text):
        return "'" + text
    return text


def _workload(record: RunRecord) -> dict:
    """The run's plan's workload (its precision and batch), {} where no plan is kept."""
    return section(record.plan, "workload") if isinstance(record.plan, dict) else {}


def csv_row(record: RunRecord) -> list:
    m = record.metrics if isinstance(record.metrics, dict) else {}
    throughput, steps = section(m, "throughput"), section(m, "step_time_s")
    work, generation = _workload(record), section(m, "generation")
    batch = work.get("global_batch") or work.get("batch")  # training's global batch, inference's
    cells = [record.id, record.experiment, record.target, record.point, int(record.smoke), record.trial,
             record.status, record.cause, throughput.get("job"), throughput.get("unit"),
             throughput.get("per_device"), steps.get("median"), steps.get("p90"), m.get("peak_memory_bytes"),
             section(m, "flops").get("mfu"), m.get("world_size"), record.started_at, record.ended_at,
             record.spec_sha256, tier(record), work.get("precision"), batch, generation.get("ttft_s"),
             generation.get("tpot_s"), section(m, "pipeline").get("s_per_image")]  # fmt: skip
    found = distributions(m)
    cells += [found[kind][p] if kind in found else None for kind in DISTRIBUTED for p in PERCENTILES]
    cells.append(found["step"]["p99"] if "step" in found else None)
    energy = energy_of(m)
    if energy is None:
        cells += [None] * 5
    else:
        cells += [energy.joules, energy.per_unit_j, energy.mean_w, energy.source, energy.why]
    return [safe_cell(cell) for cell in cells]


def export_text(records: list[RunRecord], format: str) -> str:
    if format == "json":
        return (
            json.dumps(
                finite_json([with_tier(r) for r in records]), indent=2, sort_keys=True, allow_nan=False
            )
            + "\n"
        )
    buffer = io.StringIO()
    writer = csv.writer(buffer)
    writer.writerow(CSV_COLUMNS)
    writer.writerows(csv_row(r) for r in records)
    return buffer.getvalue()
