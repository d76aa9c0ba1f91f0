"""Shared by the benchmark scripts: the header every result carries (date, machine, load) and
the median and spread of a list of per-round ratios."""

from __future__ import annotations

import os
import platform
import statistics
import subprocess
from pathlib import Path


def cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown"


def load() -> str:
    try:
        return " ".join(f"{x:.2f}" for x in os.getloadavg())
    except OSError:
        return "unknown"


def header(title: str) -> str:
    date = subprocess.run(["date"], capture_output=True, text=True).stdout.strip()
    return (f"== {title}: {date}; {os.cpu_count()} CPUs ({cpu_model()}); "
            f"load average {load()} (1, 5, 15 min); Python {platform.python_version()}")  # fmt: skip


def spread(values: list[float]) -> tuple[float, float, float, float]:
    """(median, interquartile range, min, max)."""
    if len(values) < 2:
        return values[0], 0.0, values[0], values[0]
    q1, _, q3 = statistics.quantiles(values, n=4, method="inclusive")
    return statistics.median(values), q3 - q1, min(values), max(values)
