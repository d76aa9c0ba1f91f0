"""From stored runs to report rows: one row per (experiment, smoke, sweep point, target).

The latest series of runs for each row is used (all its trials), so an old run of a changed
spec does not blend into a new one. Ratios compare each target with the baseline target at
the same sweep point.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass

from ..results.store import RunRecord
from .stats import Summary, summarize


@dataclass(frozen=True)
class Reference:
    value: float
    unit: str
    label: str
    source: str | None


@dataclass(frozen=True)
class Row:
    experiment: str
    smoke: bool
    point: str
    point_values: dict
    target: str
    unit: str
    throughput: Summary  # job throughput over trials
    per_device: float  # median over trials
    step_p50: float
    step_p90: float
    peak_memory_bytes: int | None
    mfu: float | None
    world_size: int
    hosts: int | None  # distinct hosts the ranks ran on (None: not recorded)
    ttft_s: float | None  # generation: time to first token (median over trials)
    tpot_s: float | None  # generation: time per output token after the first
    s_per_image: float | None  # image pipelines: seconds per image, whole pipeline
    denoise_s_per_image: float | None  # image pipelines: the denoising loop alone
    references: tuple[Reference, ...]
    run_ids: tuple[str, ...]
    ratio: float | None = None  # to the baseline target at this point


@dataclass(frozen=True)
class Section:
    experiment: str
    smoke: bool
    baseline: str | None
    points: tuple[str, ...]
    targets: tuple[str, ...]
    rows: tuple[Row, ...]
    failed: tuple[RunRecord, ...]  # runs of this experiment that did not end ok (latest series)


def _median(values):
    ordered = sorted(values)
    middle = len(ordered) // 2
    return ordered[middle] if len(ordered) % 2 else (ordered[middle - 1] + ordered[middle]) / 2


def _median_or_none(values: list) -> float | None:
    present = [v for v in values if v is not None]
    return _median(present) if present else None


def _natural(point_values: dict) -> tuple:
    """Order points by their values, numbers as numbers (nodes 2 before nodes 16)."""
    return tuple((0, v, "") if isinstance(v, (int, float)) else (1, 0, str(v)) for v in point_values.values())


def sections(runs: list[RunRecord], baseline: str | None = None) -> list[Section]:
    latest: dict[tuple, str] = {}
    for run in runs:  # ordered by start time: the last finished series per row wins
        if run.status != "running":
            latest[(run.experiment, run.smoke, run.point, run.target)] = run.series
    grouped: dict[tuple, list[RunRecord]] = defaultdict(list)
    for run in runs:
        key = (run.experiment, run.smoke, run.point, run.target)
        if latest.get(key) == run.series:
            grouped[key].append(run)
    by_section: dict[tuple, list[Row]] = defaultdict(list)
    failures: dict[tuple, list[RunRecord]] = defaultdict(list)
    for (experiment, smoke, point, target), trials in grouped.items():
        ok = [t for t in trials if t.status == "ok" and t.metrics]
        failures[(experiment, smoke)] += [t for t in trials if t.status != "ok"]
        if not ok:
            continue
        metrics = [t.metrics for t in ok]
        plan = ok[-1].plan or {}
        refs = tuple(
            Reference(r["value"], r["unit"], r["label"], r.get("source")) for r in plan.get("references", [])
        )
        memory = [m.get("peak_memory_bytes") for m in metrics if m.get("peak_memory_bytes") is not None]
        mfus = [m["flops"]["mfu"] for m in metrics if m.get("flops", {}).get("mfu") is not None]
        by_section[(experiment, smoke)].append(
            Row(
                experiment=experiment,
                smoke=smoke,
                point=point,
                point_values=ok[-1].point_values,
                target=target,
                unit=metrics[-1]["throughput"]["unit"],
                throughput=summarize([m["throughput"]["job"] for m in metrics]),
                per_device=_median([m["throughput"]["per_device"] for m in metrics]),
                step_p50=_median([m["step_time_s"]["median"] for m in metrics]),
                step_p90=_median([m["step_time_s"]["p90"] for m in metrics]),
                peak_memory_bytes=max(memory) if memory else None,
                mfu=_median(mfus) if mfus else None,
                world_size=metrics[-1]["world_size"],
                hosts=metrics[-1].get("nodes"),
                ttft_s=_median_or_none([(m.get("generation") or {}).get("ttft_s") for m in metrics]),
                tpot_s=_median_or_none([(m.get("generation") or {}).get("tpot_s") for m in metrics]),
                s_per_image=_median_or_none([(m.get("pipeline") or {}).get("s_per_image") for m in metrics]),
                denoise_s_per_image=_median_or_none(
                    [(m.get("pipeline") or {}).get("denoise_s_per_image") for m in metrics]
                ),
                references=refs,
                run_ids=tuple(t.id for t in ok),
            )  # fmt: skip
        )
    result = []
    for key in sorted(set(by_section) | set(failures)):
        experiment, smoke = key
        rows = sorted(by_section.get(key, []), key=lambda r: (_natural(r.point_values), r.point, r.target))
        targets = tuple(sorted({r.target for r in rows}))
        chosen = baseline if baseline in targets else (targets[0] if targets else None)
        base = {r.point: r.throughput.median for r in rows if r.target == chosen}
        rows = [
            Row(**{**r.__dict__, "ratio": r.throughput.median / base[r.point] if base.get(r.point) else None})
            for r in rows
        ]
        points = tuple(dict.fromkeys(r.point for r in rows))
        result.append(Section(experiment, smoke, chosen, points, targets, tuple(rows),
                              tuple(failures.get(key, []))))  # fmt: skip
    return result
