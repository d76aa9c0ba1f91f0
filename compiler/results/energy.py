"""The energy a run's metrics record. One job: read it from metrics the store does not trust,
for the report, the CSV and the MLflow export: joules over the measured work, joules per unit
of work, mean watts and what was read; or why there is no figure."""

from __future__ import annotations

import math

from ..records import frozen
from .latency import section

MAX_TEXT = 500  # a source or a reason longer than this is cut (the store is not trusted)


@frozen
class Energy:
    joules: float | None  # over the measured work, the whole job's
    per_unit_j: float | None  # per unit of work: an image, a token
    mean_w: float | None  # the job's mean power over the measured work
    source: str  # what was read (NVML, hl-smi, RAPL)
    why: str | None  # why there is no figure (None: there is one)


def _joules(value) -> float | None:
    number = not isinstance(value, bool) and isinstance(value, (int, float))
    return float(value) if number and math.isfinite(value) and value > 0 else None


def _text(value) -> str | None:
    return value[:MAX_TEXT] if isinstance(value, str) and value else None


def energy_of(metrics) -> Energy | None:
    """The run's energy (None: its program predates energy, or the record is no object). A
    figure that is not a positive finite number is none, and so are all three where any is."""
    found = section(metrics if isinstance(metrics, dict) else {}, "energy")
    if not found:
        return None
    figures = [_joules(found.get(k)) for k in ("joules", "per_unit_j", "mean_w")]
    source = _text(found.get("source")) or "unknown"
    why = _text(found.get("why"))
    if None in figures[:2]:  # a mean power needs the window's seconds, which may be missing
        return Energy(None, None, None, source, why or "no figure recorded")
    return Energy(*figures, source, None)
