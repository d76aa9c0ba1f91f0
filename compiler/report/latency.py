"""Latency distributions in the report. One job: for each row, the distributions its trials
recorded (time to first token, inter-token latency, image latency or else the step time:
p50, p90, p99), each percentile the median over the trials, and the lines that say them, with
why a row has no inter-token latency where its target could not mark tokens."""

from __future__ import annotations

import statistics

from ..figures import sig
from ..results.latency import KINDS, PERCENTILES, distributions, itl_missing


def latency_of(metrics_of_trials: list) -> tuple:
    """((kind, p50, p90, p99, samples, trials), ...) over the trials' metrics, each percentile
    the median over the trials that recorded the kind, samples their sum; then ("itl-missing",
    why) where the trials say why they have no inter-token latency."""
    found = [distributions(m) for m in metrics_of_trials]
    for recorded in found:  # a pipeline's step is its call: the image latency says it
        if "image" in recorded:
            recorded.pop("step", None)
    rows = []
    for kind, _, _ in KINDS:
        recorded = [d[kind] for d in found if kind in d]
        if recorded:
            middle = [statistics.median(r[p] for r in recorded) for p in PERCENTILES]
            rows.append((kind, *middle, sum(r["samples"] for r in recorded), len(recorded)))
    why = next((w for w in map(itl_missing, metrics_of_trials) if w), None)
    if why and not any(r[0] == "itl" for r in rows):
        rows.append(("itl-missing", why))
    return tuple(rows)


def latency_lines(section) -> list[str]:
    """One line per row that recorded a distribution: `cpu at default: time to first token p50
    28.1 / p90 29.3 / p99 29.6 ms (3 calls); ...`."""
    names = {kind: (what, counted) for kind, what, counted in KINDS}
    lines = []
    for row in section.rows:
        parts = []
        for entry in row.latency:
            if entry[0] == "itl-missing":
                parts.append(f"no inter-token latency: {entry[1]}")
                continue
            kind, *figures, samples, trials = entry
            what, counted = names[kind]
            over = f"{samples} {counted}" + (f", median of {trials} trials" if trials > 1 else "")
            shown = " / ".join(f"{p} {sig(v * 1e3)}" for p, v in zip(PERCENTILES, figures, strict=True))
            parts.append(f"{what} {shown} ms ({over})")
        if parts:
            lines.append(f"{row.target} at {row.point}: " + "; ".join(parts))
    return lines
