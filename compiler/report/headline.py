"""The spec's headline metric (measure.metric) read from a metrics file: its value and unit
(the metric table is catalog/metrics.py). Reports, charts and the console all go through here."""

from __future__ import annotations

from ..catalog.metrics import METRICS, Metric
from ..figures import sig


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

