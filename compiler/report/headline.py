"""The spec's headline metric (measure.metric) read from a metrics file: its value, unit and
direction; and numbers shown to 3 significant figures. Reports, charts and the console all
go through here."""

from __future__ import annotations

import math
import re

from ..records import frozen


@frozen
class Metric:
    name: str
    label: str
    lower_is_better: bool
    section: str | None  # where the value sits in a metrics file; None: the job throughput
    key: str | None
    unit: str | None  # None: the throughput's own unit


METRICS = {
    m.name: m
    for m in (
        Metric("images_per_s", "throughput", False, None, None, None),
        Metric("tokens_per_s", "throughput", False, None, None, None),
        Metric("output_tokens_per_s", "throughput", False, None, None, None),
        Metric("s_per_image", "seconds per image", True, "pipeline", "s_per_image", "s/image"),
        Metric("ttft_s", "time to first token", True, "generation", "ttft_s", "s"),
        Metric("tpot_s", "time per output token", True, "generation", "tpot_s", "s"),
    )
}


def metric_of(name: str | None) -> Metric:
    return METRICS.get(name or "", METRICS["images_per_s"])


def value_of(metric: Metric, metrics: dict) -> float | None:
    if metric.section is None:
        return (metrics.get("throughput") or {}).get("job")
    return (metrics.get(metric.section) or {}).get(metric.key)


def unit_of(metric: Metric, metrics: dict) -> str:
    return metric.unit or (metrics.get("throughput") or {}).get("unit", "")


def headline(metrics: dict, metric_name: str | None) -> str:
    """'0.174 s/image' or '1,250 images/s': the headline of one run, for the console."""
    metric = metric_of(metric_name)
    value = value_of(metric, metrics)
    return "-" if value is None else f"{sig(value)} {unit_of(metric, metrics)}"


SMALLEST_DECIMAL, LARGEST_DECIMAL = 1e-6, 1e15  # beyond: e-notation, not a row of zeros


def sig(value: float | None, digits: int = 3) -> str:
    """A number to `digits` significant figures, thousands separated: 1254 -> '1,250',
    0.17399 -> '0.174', 12.0 -> '12.0'. Below a millionth or from 10^15 on, where decimals
    would be a row of zeros, in e-notation with as many figures: 1e-300 -> '1.00e-300'."""
    if value is None or not math.isfinite(value):
        return "-"
    if value == 0:
        return "0"
    if not SMALLEST_DECIMAL <= abs(float(f"{value:.{digits - 1}e}")) < LARGEST_DECIMAL:
        return f"{value:.{digits - 1}e}"
    decimals = digits - 1 - math.floor(math.log10(abs(value)))
    rounded = round(value, decimals)
    if rounded and math.floor(math.log10(abs(rounded))) > math.floor(math.log10(abs(value))):
        decimals -= 1  # 9.996 rounds up to 10.0: one decimal fewer keeps 3 figures
    return f"{rounded:,.{max(decimals, 0)}f}"


_SYNONYMS = ((r"\bimgs?\b", "images"), (r"\bimage\b(?!s)", "images"), (r"\btoks?\b", "tokens"),
             (r"/\s*sec(ond)?s?\b", "/s"), (r"\s+per\s+sec(ond)?\b", "/s"),
             (r"/\s*(device|gpu|hpu|card)\b", " per device"),
             (r"\bper\s+(gpu|hpu|card)\b", "per device"), (r"\s+", " "))  # fmt: skip


def normal_unit(unit: str) -> str:
    """Units as people spell them, made comparable: 'img/s' = 'images/s', 'tok/s/gpu' =
    'tokens/s per device'. Seconds per image keeps its own form."""
    text = unit.strip().lower()
    if re.fullmatch(r"s(ec(onds?)?)?\s*/\s*(image|img)", text):
        return "s/image"
    for pattern, replacement in _SYNONYMS:
        text = re.sub(pattern, replacement, text)
    return text.strip()
