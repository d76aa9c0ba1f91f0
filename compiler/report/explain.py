"""Why a ratio is what it is: each pair of targets at a point, their ratio split into the
hardware's share and the software's; how close each run came to its roofline; and what a unit
of work costs where prices are given.

The split is an identity of the recorded figures, not a model. For compute-bound work a run's
job throughput is

    throughput = world size x achieved FLOP/s per device / model FLOPs per unit of work
    achieved   = peak FLOP/s per device x MFU

so the ratio of two runs is peak ratio x MFU ratio x device-count ratio x work ratio (the
work ratio is 1 when both ran the same model at the same point). The peak ratio is the
hardware's; the MFU ratio is how well the software (kernels, compiler, overlap) used each
device. Generation (decode) is bound by memory bandwidth: there

    throughput = the throughput the HBM bandwidth alone allows (the roofline's memory bound,
                 kept in each build's plan) x bandwidth utilisation

and the ratio is HBM bandwidth ratio x utilisation ratio x the rest of the bound's ratio
(bytes per device and device count; 1 for the same layout). Medians over trials are
multiplied, so the product can differ from the ratio of the medians by the trials' spread: a
difference above 2% is printed.
"""

from __future__ import annotations

import math
from itertools import combinations

from ..catalog.metrics import metrics_of
from ..figures import PER, sig
from ..records import frozen
from .collect import Row, Section
from .maths import different_maths
from .prices import Prices

GENERATION_METRICS = metrics_of("infer", "causal_lm")


@frozen
class Split:
    row: Row
    base: Row
    ratio: float  # row over base, as "x better"
    kind: str  # "compute" (peak x MFU) or "bandwidth" (HBM bound x its utilisation)
    hardware: float  # peak FLOP/s ratio, or HBM bandwidth ratio
    utilisation: float  # MFU ratio, or bandwidth-utilisation ratio
    devices: float  # compute: world size ratio
    work: float  # compute: base FLOPs per unit over row's; bandwidth: the bound's other factors

    @property
    def product(self) -> float:
        return self.hardware * self.utilisation * self.devices * self.work


def stored_number(record: dict | None, key: str) -> float | None:
    """A positive finite number from a stored roofline record (the store is not trusted)."""
    value = (record or {}).get(key)
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        return None
    return float(value) if value > 0 else None


def _bandwidth_use(row: Row) -> float | None:
    """The run's job throughput over the throughput its HBM bandwidth alone allows."""
    bound = stored_number(row.roofline, "memory_bound_items_per_s")
    return row.throughput.median / bound if bound and row.throughput.median else None


def _pair_ratio(row: Row, base: Row, section: Section) -> float | None:
    a, b = row.headline.median, base.headline.median
    if not a or not b:
        return None
    return b / a if section.metric.lower_is_better else a / b


def _compute_split(row: Row, base: Row, ratio: float) -> Split | str:
    for r in (row, base):
        if r.peak_per_device is None or r.mfu is None:
            return f"the dense peak of {r.target} is unknown, so its MFU is too"
        if not r.mfu or not r.flops_per_sample:
            return f"{r.target} recorded no model FLOPs"
    return Split(row, base, ratio, "compute", row.peak_per_device / base.peak_per_device, row.mfu / base.mfu,
                 row.world_size / base.world_size, base.flops_per_sample / row.flops_per_sample)  # fmt: skip


def _bandwidth_split(row: Row, base: Row, ratio: float, section: Section) -> Split | str:
    if section.metric.name != "output_tokens_per_s":
        return (f"a {section.metric.label} headline is not split; the output-token throughput is "
                "bound by memory bandwidth")  # fmt: skip
    for r in (row, base):
        if r.roofline is None:
            return f"the run of {r.target} kept no roofline ({r.no_roofline})"
        if stored_number(r.roofline, "hbm_tb_s") is None or _bandwidth_use(r) is None:
            return f"the HBM bandwidth of {r.target} is unknown"
    bandwidth = stored_number(row.roofline, "hbm_tb_s") / stored_number(base.roofline, "hbm_tb_s")
    key = "memory_bound_items_per_s"
    bound = stored_number(row.roofline, key) / stored_number(base.roofline, key)
    return Split(row, base, ratio, "bandwidth", bandwidth, _bandwidth_use(row) / _bandwidth_use(base), 1.0,
                 bound / bandwidth)  # fmt: skip


def target_pairs(section: Section) -> list[tuple[Row, Row]]:
    """(row, base) for every pair of targets at each point: the baseline's pairs first."""
    order = [t for t in section.targets if t == section.baseline]
    order += [t for t in section.targets if t != section.baseline]
    by_key = {(r.point, r.target): r for r in section.rows}
    found = []
    for point in section.points:
        present = [t for t in order if (point, t) in by_key]
        found += [(by_key[(point, b)], by_key[(point, a)]) for a, b in combinations(present, 2)]
    return found


def splits(section: Section) -> list[Split | tuple[Row, Row, float | None, str]]:
    """For each pair of targets at a point: its Split, or (row, base, ratio, why not)."""
    found: list[Split | tuple[Row, Row, float | None, str]] = []
    for row, base in target_pairs(section):
        ratio = _pair_ratio(row, base, section)
        if ratio is None:
            found.append((row, base, None, "a headline of zero"))
            continue
        differ = different_maths(row, base)
        if differ:  # the ratio would compare different work, not the targets
            found.append((row, base, None, f"not the same maths: {differ}"))
            continue
        unequal = unequal_tiers(row, base)
        if unequal:  # the software differed by design: the ratio is not the hardware's to split
            found.append((row, base, ratio, unequal))
            continue
        generation = section.metric.name in GENERATION_METRICS or row.ttft_s is not None
        if generation:
            split = _bandwidth_split(row, base, ratio, section)
        else:
            split = _compute_split(row, base, ratio)
        found.append((row, base, ratio, split) if isinstance(split, str) else split)
    return found


def _split_line(s: Split) -> str:
    r, b = s.row, s.base
    if s.kind == "bandwidth":
        text = (
            f"{r.target} at {r.point}: {sig(s.ratio)}x {b.target} = HBM bandwidth {sig(s.hardware)}x "
            f"({sig(r.roofline['hbm_tb_s'])} / {sig(b.roofline['hbm_tb_s'])} TB/s) x bandwidth "
            f"utilisation {sig(s.utilisation)}x ({sig(_bandwidth_use(r) * 100)}% / "
            f"{sig(_bandwidth_use(b) * 100)}% of the throughput the bandwidth allows)"
        )
        if abs(s.work - 1) > 1e-9:
            text += f" x bytes and devices {sig(s.work)}x (the rest of the two bounds' ratio)"
    else:
        text = (
            f"{r.target} at {r.point}: {sig(s.ratio)}x {b.target} = peak {sig(s.hardware)}x "
            f"({sig(r.peak_per_device / 1e12)} / {sig(b.peak_per_device / 1e12)} TFLOP/s per device) "
            f"x MFU {sig(s.utilisation)}x ({sig(r.mfu * 100)}% / {sig(b.mfu * 100)}%)"
        )
        if s.devices != 1:
            text += f" x devices {sig(s.devices)}x ({r.world_size} / {b.world_size})"
        if abs(s.work - 1) > 1e-9:
            flops = f"{sig(b.flops_per_sample)} / {sig(r.flops_per_sample)}"
            text += f" x work {sig(s.work)}x (model FLOPs per unit {flops})"
    if abs(s.product / s.ratio - 1) > 0.02:
        text += f"; the product is {sig(s.product)}x: the rest is the trials' spread"
    return text


def unequal_tiers(row: Row, base: Row) -> str | None:
    """Why two rows at one point did not get equal treatment: each ran a different optimisation
    tier (None where both ran the same one, or either did not record its tier)."""
    if row.optimize and base.optimize and row.optimize != base.optimize:
        return f"{row.target} ran {row.optimize}, {base.target} {base.optimize}: not equal treatment"
    return None


def _optimizer(row: Row) -> str | None:
    """The optimizer implementation the run's tier chose on its family (None: not recorded)."""
    knob = (row.optimize_detail or {}).get("optimizer")
    if knob is None or row.family is None:
        return None
    if knob == "fused":
        return "Habana's FusedAdamW" if row.family == "hpu" else "torch's fused AdamW"
    return "torch's foreach AdamW" if row.family == "cuda" else "torch's per-tensor AdamW"


SHARDING = {"none": "no sharding (DDP)", "fsdp": "FSDP2", "zero1": "DeepSpeed ZeRO-1",
            "zero2": "DeepSpeed ZeRO-2", "zero3": "DeepSpeed ZeRO-3"}  # fmt: skip


def maths_differences(row: Row, base: Row) -> str:
    """Where the two runs' paths differ in arithmetic, not only in speed (each vendor's best
    path may), though they compute the same work (report/maths.py: a batch, shape or width of
    precision apart gives no ratio at all): fp16 against bf16, the optimizer's implementation,
    the sharding and its gradient reductions. Said beside the ratio; empty where they agree
    or either is not recorded."""
    differ = []
    if row.precision and base.precision and row.precision != base.precision:
        differ.append(f"precision {row.precision} vs {base.precision}")
    mine, theirs = _optimizer(row), _optimizer(base)
    if mine and theirs and mine != theirs:
        differ.append(f"{mine} vs {theirs} (the same update rule, other kernels and rounding)")
    if row.sharding and base.sharding and row.sharding != base.sharding:
        differ.append(f"{SHARDING[row.sharding]} vs {SHARDING[base.sharding]} (gradients reduced in "
                      "another order and grouping)")  # fmt: skip
    if not differ:
        return ""
    return f"; the two paths differ in maths: {'; '.join(differ)}"


def _unrecorded_tier(row: Row, base: Row) -> str:
    """A note where one of the two recorded its tier and the other did not (never a guess)."""
    missing = [r.target for r in (row, base) if r.optimize is None]
    if len(missing) != 1:
        return ""
    return f"; the tier of {missing[0]} is not recorded (an older program): equal treatment is not known"


def split_lines(section: Section) -> list[str]:
    """One plain-text line per pair of targets at a point (escaped by the renderer)."""
    lines = []
    for item in splits(section):
        if isinstance(item, Split):
            row, base = item.row, item.base
            lines.append(_split_line(item) + _unrecorded_tier(row, base) + maths_differences(row, base))
            continue
        row, base, ratio, why = item
        if ratio is None:
            lines.append(f"{row.target} at {row.point}: no ratio to {base.target}: {why}")
            continue
        text = f"{row.target} at {row.point}: {sig(ratio)}x {base.target}, not split: {why}"
        lines.append(text + _unrecorded_tier(row, base) + maths_differences(row, base))
    return lines


# ------------------------------------------------------------------ runtimes


def _side_by_side(section: Section, setting: str, value_of, first: str, second: str):
    """(target, where, row under `first`, row under `second`) for each target and point that
    ran under both values of `setting`, the rest of the point the same. Rows whose value is
    not recorded (None) are left out, never guessed."""
    groups: dict[tuple, dict[str, Row]] = {}
    for row in section.rows:
        value = value_of(row)
        if value is None:
            continue
        rest = tuple(sorted((k, str(v)) for k, v in row.point_values.items() if k != setting))
        groups.setdefault((row.target, rest), {})[value] = row
    for (target, rest), by_value in groups.items():
        if first in by_value and second in by_value:
            where = ", ".join(f"{k}={v}" for k, v in rest) or "the same point"
            yield target, where, by_value[first], by_value[second]


def runtime_lines(section: Section) -> list[str]:
    """The same target and point under each runtime, side by side: accelerate over torch."""
    lines = []
    for target, where, other, torch_row in _side_by_side(
        section, "runtime", lambda row: row.runtime, "accelerate", "torch"
    ):
        differ = different_maths(other, torch_row)
        if differ:
            lines.append(f"{target} at {where}: no ratio, accelerate and torch did not do the same "
                         f"maths ({differ})")  # fmt: skip
            continue
        ratio = _pair_ratio(other, torch_row, section)
        lines.append(
            f"{target} at {where}: accelerate {sig(ratio)}x torch ({section.metric.label} "
            f"{sig(other.headline.median)} vs {sig(torch_row.headline.median)} {other.headline_unit}; "
            f"step p50 {sig(other.step_p50 * 1e3)} vs {sig(torch_row.step_p50 * 1e3)} ms)"
        )
    return lines


# ------------------------------------------------------------------ optimisation tiers

OFF = ("off", "none", "false", "")  # a knob value that turns nothing on


def _turned_on(tuned: Row, plain: Row) -> str:
    """The knobs the tuned run set that the plain one did not, as name=value."""
    if not tuned.optimize_detail:
        return "its knobs are not recorded"
    before = plain.optimize_detail or {}
    on = [f"{k}={v}" for k, v in tuned.optimize_detail.items()
          if v.strip().lower() not in OFF and before.get(k) != v]  # fmt: skip
    return ", ".join(on) if on else "no knob on beyond plain's"


def tier_lines(section: Section) -> list[str]:
    """The same target and point under each optimisation tier, side by side: tuned over plain
    in the headline's direction (>1: tuned is faster), with the knobs tuned turned on. Rows
    whose metrics record no tier are left out, never guessed."""
    lines = []
    for target, where, tuned, plain in _side_by_side(
        section, "optimize", lambda row: row.optimize, "tuned", "plain"
    ):
        differ = different_maths(tuned, plain)
        if differ:
            lines.append(f"{target} at {where}: no ratio, tuned and plain did not do the same maths "
                         f"({differ})")  # fmt: skip
            continue
        ratio = _pair_ratio(tuned, plain, section)
        lines.append(
            f"{target} at {where}: tuned {sig(ratio)}x plain ({_turned_on(tuned, plain)}; "
            f"{section.metric.label} {sig(tuned.headline.median)} vs {sig(plain.headline.median)} "
            f"{tuned.headline_unit})"
        )
    return lines


# ------------------------------------------------------------------ against the roofline


def bound_share(row: Row) -> float | None:
    """How close the run came to its roofline: the achieved headline over the best one the
    bound allows (for a lower-is-better metric, the best over the achieved)."""
    line = row.roofline
    best = stored_number(line, "best")
    if best is None or not row.headline.median:
        return None
    if line.get("lower_is_better"):
        return best / row.headline.median
    return row.headline.median / best


def _binding(line: dict) -> str:
    phases = [p for p in line.get("phases") or [] if isinstance(p, dict)]
    return ", ".join(f"{p.get('name')} {p.get('binding')}-bound" for p in phases if p.get("binding"))


def bound_lines(section: Section) -> list[str]:
    """Each row against the bound that applies to it (plain text, escaped by the renderer)."""
    lines = []
    for row in section.rows:
        where = f"{row.target} at {row.point}"
        if row.roofline is None:
            lines.append(f"{where}: no bound: the run kept no roofline ({row.no_roofline})")
            continue
        share = bound_share(row)
        if share is None:
            lines.append(f"{where}: no bound: {row.target} states no peak FLOP/s or HBM bandwidth")
            continue
        best, unit = row.roofline["best"], row.headline_unit
        text = (f"{where}: the roofline allows at best {sig(best)} {unit} ({_binding(row.roofline)}); "
                f"achieved {sig(row.headline.median)} {unit}, ")  # fmt: skip
        text += f"{sig(share * 100)}% of " + ("that speed" if row.roofline.get("lower_is_better") else "it")
        lines.append(text + _decode_traffic(row))
    return lines


def _decode_traffic(row: Row) -> str:
    """Generation's decode as memory traffic, its achieved bytes/s against the datasheet's HBM
    bandwidth (an MFU against the matmul peak means little for decode; the measured copy
    bandwidth, where calibrated, is report/ceilings.py's)."""
    if row.decode_bytes_per_s is None:
        return ""
    text = f"; decode moved {sig(row.decode_bytes_per_s / 1e12)} TB/s per device"
    if row.decode_hbm_utilisation:
        hbm = row.decode_bytes_per_s / row.decode_hbm_utilisation
        text += (f", {sig(row.decode_hbm_utilisation * 100)}% of its HBM bandwidth ({sig(hbm / 1e12)} TB/s, "
                 "the datasheet's): decode is bound by memory, not by the matmul peak")  # fmt: skip
    return text


# ------------------------------------------------------------------ cost


@frozen
class Cost:
    row: Row
    amount: float  # in the currency, per `per` units of work
    per: str
    price: float  # per device-hour


def costs(section: Section, prices: Prices) -> tuple[list[Cost], list[str]]:
    """Cost per unit of work of each row whose target has a price; targets without one."""
    found, missing = [], set()
    for row in section.rows:
        price = prices.per_device_hour.get(row.target)
        scale = PER.get(row.unit)
        if price is None:
            missing.add(row.target)
            continue
        if scale is None or not row.throughput.median:
            continue
        per_second = row.world_size * price / 3600
        found.append(Cost(row, per_second / row.throughput.median * scale[0], scale[1], price))
    return found, sorted(missing)


def cost_lines(section: Section, prices: Prices | None) -> list[str]:
    if prices is None:
        return ["No prices were given, so no cost per unit of work: add a `prices` block to the spec "
                "or pass --prices FILE (benchc ships and invents none)."]  # fmt: skip
    found, missing = costs(section, prices)
    base = {c.row.point: c for c in found if c.row.target == section.baseline}
    lines = []
    for c in found:
        text = (f"{c.row.target} at {c.row.point}: {sig(c.amount)} {prices.currency} per {c.per} "
                f"({c.row.world_size} devices x {sig(c.price)} {prices.currency}/device-hour)")  # fmt: skip
        b = base.get(c.row.point)
        if b is not None and c.row.target != section.baseline:
            text += f"; price-performance {sig(b.amount / c.amount)}x {section.baseline} (>1 = cheaper)"
        lines.append(text)
    if missing:
        lines.append(f"no price in {prices.path} for: {', '.join(missing)}")
    return lines
