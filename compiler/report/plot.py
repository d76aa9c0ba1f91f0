"""The bar chart of a report section: throughput per target, grouped by sweep point, with
95% confidence intervals where there are trials and the published references beside them."""

from __future__ import annotations

from pathlib import Path

from .collect import Section


def bar_chart(section: Section, path: Path) -> Path:
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
            s = row.throughput
            xs.append(x)
            heights.append(s.median)
            low = s.median - s.ci_low if s.ci_low is not None else 0.0
            high = s.ci_high - s.median if s.ci_high is not None else 0.0
            errors[0].append(max(low, 0.0))
            errors[1].append(max(high, 0.0))
            refs += [(x, r.value) for r in row.references if r.unit == row.unit]
        bars = axes.bar(xs, heights, width * 0.95, yerr=errors, capsize=3, label=target)
        axes.bar_label(bars, fmt="{:,.0f}", fontsize=8, padding=2)
        if refs:
            label = None if labelled_reference else "published (reference)"
            labelled_reference = True
            axes.scatter([x for x, _ in refs], [v for _, v in refs], marker="D", color="black",
                         zorder=3, s=22, label=label)  # fmt: skip
    unit = section.rows[0].unit if section.rows else ""
    axes.set_xticks(range(len(points)), points)
    axes.set_ylabel(f"throughput ({unit})")
    title = section.experiment + (" (smoke, CPU)" if section.smoke else "")
    axes.set_title(title)
    axes.legend(fontsize=8)
    axes.grid(axis="y", alpha=0.3)
    figure.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    figure.savefig(path)
    plt.close(figure)
    return path
