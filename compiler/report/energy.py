"""Energy in the report. One job: each row's energy over its trials (joules per unit of work and
mean watts, each the median over the trials with a figure) and the lines that say it: energy
per 1,000 images or 1M tokens, performance per watt and its ratio to the baseline target where
the two did the same maths, the electricity it costs where the prices file gives a price per
kWh; or why a row has no figure."""

from __future__ import annotations

import statistics

from ..figures import PER, sig
from ..records import frozen
from ..results.energy import energy_of
from .prices import Prices

J_PER_KWH = 3.6e6


@frozen
class RowEnergy:
    per_unit_j: float | None  # median over the trials with a figure
    mean_w: float | None
    source: str  # the latest trial's
    why: str | None  # the latest trial's reason, where no trial has a figure
    trials: int  # the trials with a figure


def energy_row(metrics_of_trials: list) -> RowEnergy | None:
    """The row's energy over its ok trials' metrics (None: no trial recorded any)."""
    found = [e for e in map(energy_of, metrics_of_trials) if e is not None]
    if not found:
        return None
    figured = [e for e in found if e.per_unit_j is not None]
    if not figured:
        return RowEnergy(None, None, found[-1].source, found[-1].why, 0)
    watts = [e.mean_w for e in figured if e.mean_w is not None]
    return RowEnergy(statistics.median(e.per_unit_j for e in figured),
                     statistics.median(watts) if watts else None, figured[-1].source, None,
                     len(figured))  # fmt: skip


def energy_lines(section, prices: Prices | None) -> list[str]:
    """One line per row that recorded energy: `h100 at default: 412 J per 1M output tokens
    (mean 650 W; NVML total energy counter); 2,427 output tokens per joule; performance per
    watt 1.9x gaudi2; electricity 0.0137 USD per 1M output tokens at 0.12 USD/kWh`."""
    base = {r.point: r for r in section.rows if r.target == section.baseline}
    electricity = prices.electricity_per_kwh if prices is not None else None
    lines = []
    for row in section.rows:
        energy = row.energy
        if energy is None:
            continue
        where = f"{row.target} at {row.point}"
        if energy.per_unit_j is None:
            lines.append(f"{where}: no energy figure: {energy.why}")
            continue
        scale, per = PER.get(row.unit, (1, "unit of work"))
        work = row.unit.removesuffix("/s")
        parts = [f"{sig(energy.per_unit_j * scale)} J per {per}"]
        mean = f"mean {sig(energy.mean_w)} W; " if energy.mean_w is not None else ""
        trials = f", median of {energy.trials} trials" if energy.trials > 1 else ""
        parts[0] += f" ({mean}{energy.source}{trials})"
        parts.append(f"{sig(1 / energy.per_unit_j)} {work} per joule ({row.unit} per W)")
        b = base.get(row.point)
        b_energy = b.energy if b is not None else None
        # a ratio only where the row has one to the baseline: the same maths (report/maths.py)
        if row.ratio is not None and row.target != section.baseline and b_energy and b_energy.per_unit_j:
            ratio = b_energy.per_unit_j / energy.per_unit_j
            parts.append(f"performance per watt {sig(ratio)}x {section.baseline} (>1 = less energy)")
        if electricity is not None:
            cost = energy.per_unit_j * scale / J_PER_KWH * electricity
            parts.append(f"electricity {sig(cost)} {prices.currency} per {per} at "
                         f"{sig(electricity)} {prices.currency}/kWh")  # fmt: skip
        lines.append(f"{where}: " + "; ".join(parts))
    return lines
