"""The bar chart of a report section: the headline metric per target, grouped by sweep point,
with the trials' range (their 95% interval from report/stats.py's CI_TRIALS trials on) and the
published references as dashed lines across their bars; the roofline chart, with the measured
ceilings (benchc calibrate) dashed beside the datasheet's. Charts are written as PNG to the
stream or path given (the report writes them through report/output.py). A text from the store
is shown as it is: a $ in it starts no matplotlib math (which could fail to parse and end the
report)."""

from __future__ import annotations

from pathlib import Path
from typing import BinaryIO

from ..figures import sig
from .chart_text import plain
from .collect import Section
from .explain import stored_number
from .render import headline_header
from .stats import CI_TRIALS


def bar_chart(section: Section, target: Path | BinaryIO) -> Path | BinaryIO:
    """The section's chart, as PNG, into `target` (a path or a binary stream)."""
    import matplotlib.pyplot as plt

    figure = draw(section)
    figure.savefig(target, format="png")
    plt.close(figure)
    return target


def draw(section: Section):
    """The section's chart as a matplotlib Figure."""
    import matplotlib

    matplotlib.use("Agg")  # files only, no display
    import matplotlib.pyplot as plt

    points, targets = list(section.points), list(section.targets)
    by_key = {(r.point, r.target): r for r in section.rows}
    width = 0.8 / max(1, len(targets))
    figure, axes = plt.subplots(figsize=(max(6.0, 1.6 * len(points) * max(1, len(targets)) / 2), 4.2),
                                dpi=100)  # fmt: skip
    labelled_reference = False
    mixed = {p for p in points if len({r.optimize for r in section.rows if r.point == p and r.optimize}) > 1}
    for index, target in enumerate(targets):
        xs, heights, errors, refs, tiers = [], [], [[], []], [], []
        for p, point in enumerate(points):
            row = by_key.get((point, target))
            if row is None:
                continue
            x = p + (index - (len(targets) - 1) / 2) * width
            s = row.headline
            xs.append(x)
            heights.append(s.median)
            tiers.append(f"\n({row.optimize or '-'})" if point in mixed else "")  # unequal tiers: say which
            low, high = s.bar or (s.median, s.median)
            errors[0].append(max(s.median - low, 0.0))
            errors[1].append(max(high - s.median, 0.0))
            refs += [(x, r.value) for r in row.references if not r.per_device]
        spread = errors if any(errors[0] + errors[1]) else None  # no caps for single trials
        bars = axes.bar(xs, heights, width * 0.95, yerr=spread, capsize=3 if spread else 0,
                        label=plain(target))  # fmt: skip
        axes.bar_label(bars, labels=[sig(h) + t for h, t in zip(heights, tiers)], fontsize=8, padding=2)
        for x, value in refs:  # a dashed line across the bar: no marker sits on the label
            label = None if labelled_reference else "published (reference)"
            labelled_reference = True
            axes.hlines(value, x - width * 0.45, x + width * 0.45, colors="black", linestyles="dashed",
                        linewidth=1.2, zorder=3, label=label)  # fmt: skip
    axes.set_xticks(range(len(points)), [plain(p) for p in points])
    axes.set_ylabel(headline_header(section, plain))
    axes.margins(y=0.15)  # room above the tallest bar for its label
    axes.set_ylim(bottom=0)  # bars of positive quantities: the axis starts at zero
    title = plain(section.experiment) + (" (smoke, CPU)" if section.smoke else "")
    axes.set_title(title)
    axes.legend(fontsize=8)
    axes.grid(axis="y", alpha=0.3)
    if any(r.headline.n >= 2 for r in section.rows):
        axes.set_xlabel(f"bars: the trials' range; the 95% interval from {CI_TRIALS} trials on", fontsize=8)
    figure.tight_layout()
    return figure


def roofline_points(section: Section) -> list[tuple[str, float, float, float, float]]:
    """(label, FLOPs per HBM byte, achieved FLOP/s per device, peak FLOP/s, HBM bytes/s) of each
    row that can sit on a roofline plot: its build kept a roofline, its target states a peak
    and an HBM bandwidth, and the run recorded its MFU."""
    found = []
    for row in section.rows:
        figures = [stored_number(row.roofline, key)
                   for key in ("intensity_flops_per_byte", "peak_flops_per_device", "hbm_tb_s")]  # fmt: skip
        if row.mfu is None or row.peak_per_device is None or None in figures:
            continue
        intensity, peak, hbm = figures
        achieved = row.mfu * row.peak_per_device
        found.append((f"{row.target} {row.point}", intensity, achieved, peak, hbm * 1e12))
    return found


def measured_roofline_points(section: Section) -> list[tuple[str, float, float, float, float]]:
    """(label, FLOPs per HBM byte, achieved FLOP/s per device, measured matmul FLOP/s, measured
    copy bytes/s) of each row whose target has a calibration with both figures for its
    precision (report/ceilings.py): the cpu target gets a roofline this way."""
    from .ceilings import calibration_of, measured_roof

    found = []
    for row in section.rows:
        intensity = stored_number(row.roofline, "intensity_flops_per_byte")
        roof = measured_roof(row, calibration_of(section, row))
        achieved = row.achieved_per_device
        if achieved is None and row.mfu is not None and row.peak_per_device is not None:
            achieved = row.mfu * row.peak_per_device
        if intensity is None or roof is None or achieved is None:
            continue
        found.append((f"{row.target} {row.point}", intensity, achieved, *roof))
    return found


def roofline_chart(section: Section, target: Path | BinaryIO) -> Path | BinaryIO | None:
    """Achieved FLOP/s per device against each target's roofline (min(peak, bandwidth x
    intensity)), log-log, as PNG into `target`: the datasheet's roof solid, the measured one
    (benchc calibrate) dashed in the same colour; None (nothing written) when no row of the
    section can be placed."""
    points, measured = roofline_points(section), measured_roofline_points(section)
    if not points and not measured:
        return None
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    figure, axes = plt.subplots(figsize=(7.0, 4.6), dpi=100)
    every = points + measured
    low = min(p[1] for p in every) / 10
    high = max(max(p[1] for p in every) * 10, max(p[3] / p[4] for p in every) * 4)
    xs = [low * (high / low) ** (i / 200) for i in range(201)]
    roofs: dict[str, str] = {}

    def roof(name: str, peak: float, hbm: float, dashed: bool) -> str:
        style = {"color": roofs[name]} if name in roofs else {}
        kind = " (measured)" if dashed else ""
        (line,) = axes.plot(xs, [min(peak, hbm * x) / 1e12 for x in xs], linestyle="--" if dashed else "-",
                            label=f"{plain(name)} roof{kind}", **style)  # fmt: skip
        return line.get_color()

    drawn: set[tuple[str, bool]] = set()
    placed: dict[str, float] = {}  # label -> its share of the roof it is annotated against
    for dashed, found in ((False, points), (True, measured)):
        for label, intensity, achieved, peak, hbm in found:
            name = label.split(" ", 1)[0]
            if (name, dashed) not in drawn:
                roofs[name] = roof(name, peak, hbm, dashed)
                drawn.add((name, dashed))
            placed.setdefault(label, achieved / min(peak, hbm * intensity))  # the datasheet's first
    for index, (label, intensity, achieved, _, _) in enumerate(dict((p[0], p) for p in every).values()):
        name = label.split(" ", 1)[0]
        axes.plot([intensity], [achieved / 1e12], "o", color=roofs[name])
        axes.annotate(f"{plain(label)}: {sig(placed[label] * 100)}%", (intensity, achieved / 1e12),
                      fontsize=7, textcoords="offset points", xytext=(6, 8 - 11 * (index % 4)))  # fmt: skip
        # runs at one intensity (the same model on several targets) get their labels stacked
    axes.set_xscale("log")
    axes.set_yscale("log")
    axes.set_xlabel("arithmetic intensity (model FLOPs per HBM byte, per device)")
    axes.set_ylabel("TFLOP/s per device")
    axes.set_title(f"{plain(section.experiment)}: achieved vs roofline (% of the roof at that intensity)")
    axes.legend(fontsize=8)
    axes.grid(alpha=0.3, which="both")
    figure.tight_layout()
    figure.savefig(target, format="png")
    plt.close(figure)
    return target
