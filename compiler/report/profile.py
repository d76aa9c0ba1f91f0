"""Where a step's time goes: the profile a run stored (metrics "profile": device seconds by
category over the profiled steps, with the top kernels of each), as shares of the profiled
step time, a table of them, a stacked horizontal bar per target (PNG) and, for each pair of
targets at a point, one sentence naming the category whose share differs most (a target
profiled alone gets a sentence of its own).

The profile is read back, checked, by stored_profile.py; text from the store is escaped by
the renderer, and by chart_text.plain on a chart."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, BinaryIO

from ..figures import sig
from .chart_text import plain
from .stored_profile import CATEGORIES, shares

if TYPE_CHECKING:
    from .collect import Row, Section

MATRIX_WORK = ("matmul", "attention")


def profiled(section: Section) -> list[Row]:
    return [row for row in section.rows if row.profile is not None]


def _label(section: Section, row: Row) -> str:
    several = len({r.point for r in profiled(section)}) > 1
    return f"{row.target} {row.point}" if several else row.target


def _step_ms(row: Row) -> str:
    p = row.profile
    if not p["steps"]:
        return "-"
    return sig(sum(p["categories"].values()) / p["steps"] * 1e3)


def _percent(value: float) -> str:
    return f"{sig(value * 100)}%" if value >= 0.001 else "0%"


def profile_table(section: Section, text=str) -> tuple[list[str], list[list[str]]]:
    """Header and cells: per profiled row, the share of each category (`text` escapes store texts)."""
    header = ["point", "target", "profiled step (ms)", *CATEGORIES]
    rows = []
    for row in profiled(section):
        part = shares(row.profile)
        cells = [_percent(part[c]) for c in CATEGORIES]
        rows.append([text(row.point), text(row.target), _step_ms(row), *cells])
    return header, rows


def _outside_matrix_work(part: dict[str, float]) -> float:
    return 1 - sum(part[c] for c in MATRIX_WORK)


def _pair_line(row: Row, base: Row) -> str:
    a, b = shares(row.profile), shares(base.profile)
    most = max(CATEGORIES, key=lambda c: abs(a[c] - b[c]))
    return (f"{row.target} at {row.point} spends {_percent(_outside_matrix_work(a))} of its step outside "
            f"matrix multiplies and attention and idles {_percent(a['idle'])}; {base.target} "
            f"{_percent(_outside_matrix_work(b))} and {_percent(b['idle'])}: the difference is mostly "
            f"{CATEGORIES[most][0]}: {_percent(a[most])} vs {_percent(b[most])}")  # fmt: skip


def _alone_line(row: Row) -> str:
    part = shares(row.profile)
    largest = max(CATEGORIES, key=lambda c: part[c])
    return (f"{row.target} at {row.point} spends {_percent(_outside_matrix_work(part))} of its step "
            f"outside matrix multiplies and attention and idles {_percent(part['idle'])}; its largest "
            f"share is {CATEGORIES[largest][0]} ({_percent(part[largest])})")  # fmt: skip


def profile_lines(section: Section) -> list[str]:
    """For each pair of profiled targets at a point, the sentence (plain text, escaped later);
    for a profiled row with no profiled partner at its point, a sentence of its own."""
    from .explain import target_pairs  # the pairs the ratios are explained for, in the same order

    pairs = [(row, base) for row, base in target_pairs(section)
             if row.profile is not None and base.profile is not None]  # fmt: skip
    paired = {id(r) for pair in pairs for r in pair}
    alone = [_alone_line(row) for row in profiled(section) if id(row) not in paired]
    return [_pair_line(row, base) for row, base in pairs] + alone


def kernel_lines(section: Section) -> list[str]:
    """Per profiled row, the top kernels of its largest categories (names from the store)."""
    lines = []
    for row in profiled(section):
        part = shares(row.profile)
        named = []
        for category in sorted(CATEGORIES, key=lambda c: -part[c]):
            kernels = row.profile["top"].get(category) or []
            if kernels:
                named.append(f"{category}: " + ", ".join(
                    f"{name} ({sig(s * 1e3)} ms" + (f", {calls} call{'s' * (calls != 1)})" if calls else ")")
                    for name, s, calls in kernels))  # fmt: skip
        if named:
            lines.append(f"{row.target} at {row.point}, top kernels: " + "; ".join(named))
    return lines


def profile_chart(section: Section, target: Path | BinaryIO) -> Path | BinaryIO | None:
    """A stacked horizontal bar per profiled row of the shares of its step, as PNG into
    `target`; None (nothing written) where no row of the section has a profile."""
    rows = profiled(section)
    if not rows:
        return None
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    figure, axes = plt.subplots(figsize=(8.0, 1.6 + 0.5 * len(rows)), dpi=100)
    labels = [plain(_label(section, row)) for row in rows]
    left = [0.0] * len(rows)
    for category, (name, colour) in CATEGORIES.items():
        widths = [shares(row.profile)[category] * 100 for row in rows]
        axes.barh(range(len(rows)), widths, left=left, color=colour, label=name, height=0.6)
        left = [x + w for x, w in zip(left, widths)]
    axes.set_yticks(range(len(rows)), labels)
    axes.invert_yaxis()  # the first row on top, as in the table
    axes.set_xlim(0, 100)
    axes.set_xlabel("share of the profiled step time (%)")
    axes.set_title(f"{plain(section.experiment)}: where a step's time goes")
    axes.legend(fontsize=7, ncol=4, loc="upper center", bbox_to_anchor=(0.5, -0.25 - 0.02 * len(rows)))
    figure.tight_layout()
    figure.savefig(target, format="png", bbox_inches="tight")
    plt.close(figure)
    return target
