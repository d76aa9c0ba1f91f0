"""The latency distributions a run's metrics record. One job: read them (p50, p90, p99, the
mean and how many values) from metrics the store does not trust, for the report, the CSV and
anything else that shows them: time to first token over the measured prefill calls,
inter-token latency over every pair of consecutive tokens (device time marks), each image's
latency over the measured pipeline calls, and the measured steps' times."""

from __future__ import annotations

import math

PERCENTILES = ("p50", "p90", "p99")
# the kinds, in the order shown: (key, what it is, what was counted)
KINDS = (
    ("ttft", "time to first token", "calls"),
    ("itl", "inter-token latency", "token pairs"),
    ("image", "image latency", "calls"),
    ("step", "step time", "steps"),
)


def distributions(metrics) -> dict[str, dict]:
    """{kind: {"p50", "p90", "p99", "mean", "samples"}} of what the metrics record; a kind
    they do not record (a program before distributions, a target that cannot mark tokens) is
    left out."""
    m = metrics if isinstance(metrics, dict) else {}
    generation = section(m, "generation")
    latency = section(generation, "latency_s")
    found = {
        "ttft": _checked(latency.get("ttft")),
        "itl": _checked(latency.get("itl")),
        "image": _checked(section(m, "pipeline").get("image_latency_s")),
        "step": _steps(section(m, "step_time_s")),
    }
    return {kind: value for kind, value in found.items() if value is not None}


def itl_missing(metrics) -> str | None:
    """Why a generation run recorded no inter-token latency (None: it did, or it is no generation)."""
    m = metrics if isinstance(metrics, dict) else {}
    why = section(section(m, "generation"), "latency_s").get("itl_missing")
    return why if isinstance(why, str) else None


def _steps(steps: dict) -> dict | None:
    """The step times' distribution, where the program recorded p99 (programs since 2026-12-07)."""
    measured = steps.get("all")
    if not isinstance(measured, list) or not measured:
        return None
    return _checked({"p50": steps.get("p50"), "p90": steps.get("p90"), "p99": steps.get("p99"),
                     "mean": steps.get("mean"), "samples": len(measured)})  # fmt: skip


def _checked(value) -> dict | None:
    if not isinstance(value, dict):
        return None
    numbers = [value.get(k) for k in (*PERCENTILES, "mean")]
    if not all(_seconds(n) for n in numbers):
        return None
    samples = value.get("samples")
    if isinstance(samples, bool) or not isinstance(samples, int) or samples < 1:
        return None
    return {**dict(zip((*PERCENTILES, "mean"), map(float, numbers), strict=True)), "samples": samples}


def _seconds(value) -> bool:
    number = not isinstance(value, bool) and isinstance(value, (int, float))
    return number and math.isfinite(value) and value >= 0


def section(metrics: dict, key: str) -> dict:
    """metrics[key] where it is an object, else {} (the store is not trusted)."""
    found = metrics.get(key)
    return found if isinstance(found, dict) else {}
