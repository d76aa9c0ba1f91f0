"""The bar chart of a report section: the headline metric per target, grouped by sweep point,
with 95% confidence intervals where there are several trials and the published references as
dashed lines across their bars."""

from __future__ import annotations

from pathlib import Path

from .collect import Section
from .headline import sig
from .render import headline_header


def bar_chart(section: Section, path: Path) -> Path:
    import matplotlib.pyplot as plt

    figure = draw(section)
    path.parent.mkdir(parents=True, exist_ok=True)
    figure.savefig(path)
    plt.close(figure)
    return path


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
    for index, target in enumerate(targets):
        xs, heights, errors, refs = [], [], [[], []], []
        for p, point in enumerate(points):
            row = by_key.get((point, target))
            if row is None:
                continue
            x = p + (index - (len(targets) - 1) / 2) * width
            s = row.headline
            xs.append(x)
            heights.append(s.median)
            errors[0].append(max(s.median - s.ci_low, 0.0) if s.ci_low is not None else 0.0)
            errors[1].append(max(s.ci_high - s.median, 0.0) if s.ci_high is not None else 0.0)
            refs += [(x, r.value) for r in row.references if not r.per_device]
        spread = errors if any(errors[0] + errors[1]) else None  # no caps for single trials
        bars = axes.bar(xs, heights, width * 0.95, yerr=spread, capsize=3 if spread else 0, label=target)
        axes.bar_label(bars, labels=[sig(h) for h in heights], fontsize=8, padding=2)
        for x, value in refs:  # a dashed line across the bar: no marker sits on the label
            label = None if labelled_reference else "published (reference)"
            labelled_reference = True
            axes.hlines(value, x - width * 0.45, x + width * 0.45, colors="black", linestyles="dashed",
                        linewidth=1.2, zorder=3, label=label)  # fmt: skip
    axes.set_xticks(range(len(points)), points)
    axes.set_ylabel(headline_header(section))
    axes.margins(y=0.15)  # room above the tallest bar for its label
    title = section.experiment + (" (smoke, CPU)" if section.smoke else "")
    axes.set_title(title)
    axes.legend(fontsize=8)
    axes.grid(axis="y", alpha=0.3)
    figure.tight_layout()
    return figure
