"""From stored runs to report rows: one row per (experiment, smoke, sweep point, target).

The latest series of runs for each row is used (all its trials), so an old run of a changed
spec does not blend into a new one. Each section follows its spec's headline metric
(measure.metric); ratios compare each target with the baseline target at the same point and
read as "x better" whichever way the metric runs. Every published reference of the spec is
placed beside its row, or listed with the reason it was not.

Stored plans are read as the store keeps them: each is checked with the stored plans' schema
(results/plans.py: nothing required, as an earlier benchc kept fewer fields), and one that
passes is read with ManifestPlan.read (compiler/manifest.py), which gives what it lacks as none.
Each section also carries the latest calibration of each of its targets where the caller asked
the store (report/ceilings.py), and each row its latest trial's profile, checked
(report/profile.py).
"""

from __future__ import annotations

import math
from collections import defaultdict
from dataclasses import replace

from ..catalog.metrics import Metric, metric_of, unit_of, value_of
from ..figures import normal_unit
from ..manifest import ManifestPlan, Published
from ..records import frozen
from ..results.manifests import HOW_TO_GIVE_ONE
from ..results.metrics import validation_problems
from ..results.plans import stored_plan_problem
from ..results.store import RunRecord
from .energy import RowEnergy, energy_row
from .latency import latency_of
from .maths import different_maths, maths_of
from .setup import setup_of
from .stats import Summary, summarize
from .stored_profile import profile_of


@frozen
class Reference:
    value: float
    unit: str
    label: str
    source: str | None
    per_device: bool = False  # the figure is per device (compared with the per-device value)


@frozen
class Row:
    experiment: str
    smoke: bool
    point: str
    point_values: dict
    target: str
    unit: str  # the throughput's unit
    throughput: Summary  # job throughput over trials
    headline: Summary  # the headline metric over trials
    headline_unit: str
    per_device: float  # median over trials
    step_p50: float
    step_p90: float
    peak_memory_bytes: int | None
    mfu: float | None
    peak_per_device: float | None  # the target's dense peak FLOP/s the MFU is taken against
    flops_per_sample: float | None  # model FLOPs of one unit of work (report/explain.py)
    world_size: int
    hosts: int | None  # distinct hosts the ranks ran on (None: not recorded)
    ttft_s: float | None  # generation: time to first token (median over trials)
    tpot_s: float | None  # generation: time per output token after the first
    decode_bytes_per_s: float | None  # generation: bytes moved per second per device in decode
    decode_hbm_utilisation: float | None  # generation: that over the HBM bandwidth
    s_per_image: float | None  # image pipelines: seconds per image, whole pipeline
    denoise_s_per_image: float | None  # image pipelines: the denoising loop alone
    references: tuple[Reference, ...]
    run_ids: tuple[str, ...]
    ratio: float | None = None  # to the baseline target at this point: > 1 is better
    roofline: dict | None = None  # the build's roofline (plan/roofline.py record); None: not kept
    no_roofline: str = "compiled by an older benchc"  # why it was not kept, where it was not
    runtime: str = "torch"  # what drove the program: torch, or accelerate
    optimize: str | None = None  # the optimisation tier: tuned or plain (None: not recorded)
    optimize_detail: dict | None = None  # knob -> value the tier set, as the program saw it
    precision: str | None = None  # the plan's workload precision (None: not kept)
    sharding: str | None = None  # the plan's parallel.sharding (None: not kept)
    family: str | None = None  # the target's family: cuda, hpu, cpu (None: no plan kept)
    achieved_per_device: float | None = None  # model FLOP/s per device (median over trials)
    profile: dict | None = None  # the latest trial's profile, checked (report/profile.py)
    maths: tuple = ()  # what the workload computes (report/maths.py); (): no plan kept
    no_ratio: str | None = None  # why the ratio to the baseline is not given, where it is not
    overrides: tuple[str, ...] = ()  # the --set arguments its build was compiled with
    sweep_ratio: float | None = None  # to the same target's first point (a sweep): > 1 is better
    setup: tuple = ()  # what its latest run ran on (report/setup.py)
    latency: tuple = ()  # its trials' latency distributions (report/latency.py)
    energy: RowEnergy | None = None  # its trials' energy (report/energy.py; None: none recorded)


@frozen
class Section:
    experiment: str
    smoke: bool
    metric: Metric
    baseline: str | None
    points: tuple[str, ...]
    targets: tuple[str, ...]
    rows: tuple[Row, ...]
    failed: tuple[RunRecord, ...]  # runs of this experiment that did not end ok (latest series)
    unplaced: tuple[tuple[str, str], ...]  # (reference label, why it is not in the table)
    prices: dict | None = None  # the spec's `prices` block, as its plan keeps it (None: none)
    description: str | None = None  # the spec's `description`, as its plan keeps it
    calibrations: dict | None = None  # target -> its latest Calibration (None: the store was not asked)


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


def _checked(run: RunRecord) -> RunRecord:
    """A row whose plan does not match the plan's schema, or stored as ok with metrics that do
    not match the metrics schema (an older benchc, an edited store), is shown as failed with the
    reason, never trusted and never a crash."""
    plan_problem = stored_plan_problem(run.plan)
    if plan_problem:
        cause = f"invalid plan in the store: {plan_problem}"
        if run.status == "ok":
            return replace(run, status="failed", cause=cause, plan=None)
        return replace(run, plan=None, cause=f"{run.cause}; {cause}" if run.cause else cause)
    if run.status != "ok":
        return run
    problems = validation_problems(run.metrics) if isinstance(run.metrics, dict) else ["no metrics"]
    if not problems:
        return run
    reason = problems[0].message if hasattr(problems[0], "message") else problems[0]
    return replace(run, status="failed", cause=f"invalid metrics in the store: {str(reason)[:200]}")


def _no_roofline(run: RunRecord) -> str:
    """Why a run kept no roofline: what ingest recorded of its build's manifest, else the plan
    of a build compiled before plans kept one."""
    reason = run.environment.get("no_plan") if isinstance(run.environment, dict) else None
    if isinstance(reason, str):
        return reason
    if run.plan is None and run.source == "ingest":  # ingested by a benchc that kept no reason
        return f"no readable build manifest was found when its metrics were ingested; {HOW_TO_GIVE_ONE}"
    return "compiled by an older benchc"


def _row(trials: list[RunRecord], metric: Metric) -> Row | None:
    ok = [t for t in trials if t.status == "ok" and t.metrics]
    if not ok:
        return None
    metrics = [t.metrics for t in ok]
    headline = [value_of(metric, m) for m in metrics]
    if any(v is None for v in headline):  # e.g. an older program without this metric
        metric, headline = metric_of(None), [m["throughput"]["job"] for m in metrics]
    memory = [m.get("peak_memory_bytes") for m in metrics if m.get("peak_memory_bytes") is not None]
    mfus = [m["flops"]["mfu"] for m in metrics if m.get("flops", {}).get("mfu") is not None]
    peaks = [(m.get("flops") or {}).get("peak_per_device") for m in metrics]
    work = [(m.get("flops") or {}).get("model_flops_per_sample") for m in metrics]
    achieved = [_positive((m.get("flops") or {}).get("achieved_per_device")) for m in metrics]
    profiles = [p for p in (profile_of(m.get("profile")) for m in metrics) if p is not None]
    last = ok[-1]
    return Row(
        experiment=last.experiment, smoke=last.smoke, point=last.point, point_values=last.point_values,
        target=last.target, unit=metrics[-1]["throughput"]["unit"],
        throughput=summarize([m["throughput"]["job"] for m in metrics]),
        headline=summarize(headline), headline_unit=unit_of(metric, metrics[-1]),
        per_device=_median([m["throughput"]["per_device"] for m in metrics]),
        step_p50=_median([m["step_time_s"]["median"] for m in metrics]),
        step_p90=_median([m["step_time_s"]["p90"] for m in metrics]),
        peak_memory_bytes=max(memory) if memory else None, mfu=_median(mfus) if mfus else None,
        peak_per_device=_median_or_none(peaks), flops_per_sample=_median_or_none(work),
        world_size=metrics[-1]["world_size"], hosts=metrics[-1].get("nodes"),
        ttft_s=_median_or_none([(m.get("generation") or {}).get("ttft_s") for m in metrics]),
        tpot_s=_median_or_none([(m.get("generation") or {}).get("tpot_s") for m in metrics]),
        decode_bytes_per_s=_median_or_none([(m.get("generation") or {}).get("decode_bytes_per_s")
                                            for m in metrics]),
        decode_hbm_utilisation=_median_or_none([(m.get("generation") or {}).get("decode_hbm_utilisation")
                                                for m in metrics]),
        s_per_image=_median_or_none([(m.get("pipeline") or {}).get("s_per_image") for m in metrics]),
        denoise_s_per_image=_median_or_none([(m.get("pipeline") or {}).get("denoise_s_per_image")
                                             for m in metrics]),
        references=(), run_ids=tuple(t.id for t in ok),
        runtime=str(metrics[-1].get("runtime") or "torch"),  # programs before runtimes: torch
        optimize=_tier(metrics[-1]), optimize_detail=_knobs(metrics[-1]),
        achieved_per_device=_median_or_none(achieved), profile=profiles[-1] if profiles else None,
    )  # fmt: skip


def _positive(value) -> float | None:
    """A positive finite number from the metrics (the store is not trusted), else None."""
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        return None
    return float(value) if value > 0 else None


def _precision(plan: ManifestPlan) -> str | None:
    workload = plan.raw.get("workload") if isinstance(plan.raw, dict) else None
    value = workload.get("precision") if isinstance(workload, dict) else None
    return value if value in ("fp32", "bf16", "fp16", "fp8") else None


def _overrides(plan: ManifestPlan) -> tuple[str, ...]:
    """The --set arguments the build was compiled with, as given (none where not kept)."""
    given = plan.raw.get("overrides") if isinstance(plan.raw, dict) else None
    return tuple(str(o) for o in given if isinstance(o, str)) if isinstance(given, list) else ()


def _sharding(plan: ManifestPlan) -> str | None:
    parallel = plan.raw.get("parallel") if isinstance(plan.raw, dict) else None
    value = parallel.get("sharding") if isinstance(parallel, dict) else None
    return value if value in ("none", "fsdp", "zero1", "zero2", "zero3") else None


def _family(plan: ManifestPlan) -> str | None:
    target = plan.raw.get("target") if isinstance(plan.raw, dict) else None
    value = target.get("family") if isinstance(target, dict) else None
    return value if value in ("cuda", "hpu", "cpu") else None


def _tier(metrics: dict) -> str | None:
    """The tier the latest trial ran under; None where its program predates tiers (never a
    guess: the report shows "-")."""
    tier = metrics.get("optimize")
    return tier if tier in ("plain", "tuned") else None


def _knobs(metrics: dict) -> dict | None:
    """The knobs the tier set (name -> value, both strings: the metrics are not trusted)."""
    detail = metrics.get("optimize_detail")
    if not isinstance(detail, dict):
        return None
    return {str(k): v for k, v in detail.items() if isinstance(v, str)}


def _applying(plan: ManifestPlan) -> set[str]:
    """The labels of the references the spec's `where` matched for this point (lowering)."""
    return {str(ref.label) for ref in plan.references}


def _headline_ratio(row: Row, base: Row | None, metric: Metric) -> float | None:
    """Row over base in the headline's direction (> 1: row is better), None without both."""
    if base is None or not base.headline.median or not row.headline.median:
        return None
    b, a = base.headline.median, row.headline.median
    return b / a if metric.lower_is_better else a / b


def _with_ratio(row: Row, base: dict, metric: Metric) -> Row:
    """The row with its ratio to the baseline's row at its point, as 'x better': higher-is-
    better metrics value / base, lower-is-better base / value; none where the two did
    different maths (no_ratio says why)."""
    other = base.get(row.point)
    if other is None or not other.headline.median or not row.headline.median:
        return row
    why = different_maths(row, other)
    if why:
        return replace(row, no_ratio=f"not the same maths as {other.target}: {why}")
    return replace(row, ratio=_headline_ratio(row, other, metric))


def _place_references(
    rows: list[Row], plans: dict[tuple, ManifestPlan]
) -> tuple[list[Row], list[tuple[str, str]]]:
    """Put each declared reference beside the row it is for, or say why it is not there:
    its target has no run here, its `where` matches no point that ran, or its unit is
    neither the headline's nor the headline's per device."""
    declared: dict[str, Published] = {}
    for plan in plans.values():
        for ref in plan.declared_references or plan.references:
            if None not in (ref.label, ref.value, ref.unit):
                declared.setdefault(str(ref.label), ref)
    placed: dict[tuple, list[Reference]] = defaultdict(list)
    unplaced = []
    for label, ref in sorted(declared.items()):
        target = ref.target
        candidates = [r for r in rows if target is None or r.target == target]
        if not candidates:
            unplaced.append((label, f"no run of target {target} in this report"))
            continue
        matching = [r for r in candidates if label in _applying(plans[(r.point, r.target)])]
        if not matching:
            where = ", ".join(f"{k} = {v}" for k, v in (ref.where or {}).items()) or "(none)"
            points = ", ".join(sorted({r.point for r in candidates}))
            unplaced.append((label, f"where {where} matches no point that ran on {target} ({points})"))
            continue
        unit, headline = normal_unit(ref.unit), normal_unit(matching[0].headline_unit)
        if unit not in (headline, f"{headline} per device"):
            unplaced.append((label, f'its unit "{ref.unit}" is neither the report\'s '
                                    f'"{matching[0].headline_unit}" nor that per device'))  # fmt: skip
            continue
        for row in matching:
            placed[(row.point, row.target)].append(
                Reference(ref.value, ref.unit, label, ref.source, unit != headline)
            )
    rows = [replace(r, references=tuple(placed.get((r.point, r.target), ()))) for r in rows]
    return rows, unplaced


def sections(runs: list[RunRecord], baseline: str | None = None, calibrations: dict | None = None
             ) -> list[Section]:  # fmt: skip
    """The report's sections; `calibrations` (results/calibrations.latest_calibrations of the
    store) adds measured ceilings beside the datasheet's (None: the store was not asked)."""
    latest: dict[tuple, str] = {}
    for run in runs:  # ordered by start time: the last finished series per row wins
        if run.status not in ("running", "pending"):
            latest[(run.experiment, run.smoke, run.point, run.target)] = run.series
    grouped: dict[tuple, list[RunRecord]] = defaultdict(list)
    for run in runs:
        key = (run.experiment, run.smoke, run.point, run.target)
        if latest.get(key) == run.series:
            grouped[key].append(run)
    by_section: dict[tuple, list[Row]] = defaultdict(list)
    failures: dict[tuple, list[RunRecord]] = defaultdict(list)
    plans: dict[tuple, dict[tuple, ManifestPlan]] = defaultdict(dict)
    metrics: dict[tuple, str | None] = {}
    for (experiment, smoke, point, target), trials in grouped.items():
        trials = [_checked(t) for t in trials]
        failures[(experiment, smoke)] += [t for t in trials if t.status != "ok"]
        plan = ManifestPlan.read(trials[-1].plan)  # checked above: None where it did not pass
        metrics[(experiment, smoke)] = plan.metric or metrics.get((experiment, smoke))
        row = _row(trials, metric_of(metrics[(experiment, smoke)]))
        if row is not None:
            line = plan.roofline
            why = row.no_roofline if line else _no_roofline(trials[-1])
            row = replace(row, roofline=line, no_roofline=why, precision=_precision(plan),
                          sharding=_sharding(plan), family=_family(plan),
                          maths=maths_of(plan.raw), overrides=_overrides(plan),
                          setup=setup_of(trials[-1].environment, trials[-1].metrics),
                          latency=latency_of([t.metrics for t in trials if t.status == "ok"]),
                          energy=energy_row([t.metrics for t in trials if t.status == "ok"]))  # fmt: skip
            by_section[(experiment, smoke)].append(row)
            plans[(experiment, smoke)][(point, target)] = plan
    result = []
    for key in sorted(set(by_section) | set(failures)):
        experiment, smoke = key
        metric = metric_of(metrics.get(key))
        rows = sorted(by_section.get(key, []), key=lambda r: (_natural(r.point_values), r.point, r.target))
        rows, unplaced = _place_references(rows, plans.get(key, {}))
        targets = tuple(sorted({r.target for r in rows}))
        chosen = baseline if baseline in targets else (targets[0] if targets else None)
        base = {r.point: r for r in rows if r.target == chosen}
        rows = [_with_ratio(r, base, metric) for r in rows]
        points = tuple(dict.fromkeys(r.point for r in rows))
        if len(points) > 1:  # each point against its target's first: what the swept setting did
            first = {r.target: r for r in rows if r.point == points[0]}
            rows = [replace(r, sweep_ratio=_headline_ratio(r, first.get(r.target), metric)) for r in rows]
        priced = [p.prices for p in plans.get(key, {}).values() if p.prices is not None]
        described = [p.description for p in plans.get(key, {}).values()
                     if p.description and p.description.strip()]  # fmt: skip
        result.append(Section(experiment, smoke, metric, chosen, points, targets, tuple(rows),
                              tuple(failures.get(key, [])), tuple(unplaced),
                              priced[-1] if priced else None,
                              described[-1] if described else None,
                              None if calibrations is None else
                              {t: calibrations[t] for t in targets if t in calibrations}))  # fmt: skip
    return result
