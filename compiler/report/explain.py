"""Why a ratio is what it is: each target's ratio to the baseline at a point, split into the
hardware's share and the software's, and what a unit of work costs where prices are given.

The split is an identity of the recorded figures, not a model. A run's job throughput is

    throughput = world size x achieved FLOP/s per device / model FLOPs per unit of work
    achieved   = peak FLOP/s per device x MFU

so the ratio of two runs is peak ratio x MFU ratio x device-count ratio x work ratio (the
work ratio is 1 when both ran the same model at the same point). The peak ratio is the
hardware's; the MFU ratio is how well the software (kernels, compiler, overlap) used each
device. Medians over trials are multiplied, so the product can differ from the ratio of the
medians by the trials' spread: a difference above 2% is printed. Generation (decode) is
bound by memory bandwidth, not FLOP/s: its ratio is not split, and the report says why.
"""

from __future__ import annotations

from dataclasses import dataclass

from .collect import Row, Section
from .headline import sig
from .prices import Prices

PER = {"images/s": (1_000, "1,000 images"), "tokens/s": (1e6, "1M tokens"),
       "output tokens/s": (1e6, "1M output tokens")}  # fmt: skip


@dataclass(frozen=True)
class Split:
    row: Row
    base: Row
    ratio: float
    peak: float  # row peak over baseline peak
    utilisation: float  # row MFU over baseline MFU
    devices: float  # row world size over baseline's
    work: float  # baseline FLOPs per unit over row's (1: the same model)

    @property
    def product(self) -> float:
        return self.peak * self.utilisation * self.devices * self.work


def _unsplit_reason(row: Row, base: Row, section: Section) -> str | None:
    if row.ttft_s is not None or section.metric.name in ("ttft_s", "tpot_s", "output_tokens_per_s"):
        return (
            "generation is bound by memory bandwidth, not FLOP/s, and runs do not record the bytes they move"
        )
    for r in (row, base):
        if r.peak_per_device is None or r.mfu is None:
            return f"the dense peak of {r.target} is unknown, so its MFU is too"
        if not r.mfu or not r.flops_per_sample:
            return f"{r.target} recorded no model FLOPs"
    return None


def splits(section: Section) -> list[Split | tuple[Row, str]]:
    """For each row with a ratio to another target's row: its Split, or (row, why not)."""
    base_rows = {r.point: r for r in section.rows if r.target == section.baseline}
    found: list[Split | tuple[Row, str]] = []
    for row in section.rows:
        base = base_rows.get(row.point)
        if base is None or row.target == section.baseline or row.ratio is None:
            continue
        why = _unsplit_reason(row, base, section)
        if why:
            found.append((row, why))
            continue
        found.append(Split(row, base, row.ratio, row.peak_per_device / base.peak_per_device,
                           row.mfu / base.mfu, row.world_size / base.world_size,
                           base.flops_per_sample / row.flops_per_sample))  # fmt: skip
    return found


def split_lines(section: Section) -> list[str]:
    """One plain-text line per row with a ratio (escaped by the renderer)."""
    lines = []
    for item in splits(section):
        if isinstance(item, tuple):
            row, why = item
            lines.append(f"{row.target} at {row.point}: {sig(row.ratio)}x, not split: {why}")
            continue
        s, b, r = item, item.base, item.row
        text = (
            f"{r.target} at {r.point}: {sig(s.ratio)}x {b.target} = peak {sig(s.peak)}x "
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
        lines.append(text)
    return lines


@dataclass(frozen=True)
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
        return ["No prices were given, so no cost per unit of work: pass --prices FILE "
                "(benchc ships and invents none)."]  # fmt: skip
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
