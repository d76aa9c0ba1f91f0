"""Where a step's time goes: the profile a run stored (metrics "profile": device seconds by
category over the profiled steps, with the top kernels of each), as shares of the profiled
step time, a table of them, a stacked horizontal bar per target (PNG) and, for each pair of
targets at a point, one sentence naming the category whose share differs most (a target
profiled alone gets a sentence of its own).

The store is not trusted: a profile is read only where its categories are finite numbers of
seconds, none negative, and some positive; names of kernels are kept as text (at most 120
characters) for the renderer to escape. Shares are of the sum of the categories, so they add
up to 100%."""

from __future__ import annotations

import math
from pathlib import Path
from typing import TYPE_CHECKING, BinaryIO

from ..figures import sig
from ..results.metrics import profile_problem

if TYPE_CHECKING:
    from .collect import Row, Section

CATEGORIES = {  # name -> (how a sentence names it, the bar's colour)
    "matmul": ("matrix multiplies", "#1f77b4"),
    "attention": ("attention", "#17becf"),
    "norm_elementwise": ("normalisation and elementwise", "#2ca02c"),
    "communication": ("communication", "#9467bd"),
    "optimizer": ("the optimizer", "#8c564b"),
    "copy": ("copies", "#ff7f0e"),
    "other": ("other kernels", "#7f7f7f"),
    "idle": ("idle time", "#d62728"),
}
MATRIX_WORK = ("matmul", "attention")
TOP_KERNELS = 3  # per category, in the report's list


def _seconds(value) -> float | None:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        return None
    return float(value) if value >= 0 else None


def profile_of(raw) -> dict | None:
    """A stored profile, checked (None: none, or not one the report can read)."""
    if not isinstance(raw, dict) or not isinstance(raw.get("categories"), dict):
        return None
    if profile_problem(raw) is not None:  # categories past what the profiled time allows
        return None
    categories = {name: _seconds(raw["categories"].get(name, 0)) for name in CATEGORIES}
    if any(v is None for v in categories.values()) or not sum(categories.values()):
        return None
    top = {}
    for name, kernels in (raw.get("top") if isinstance(raw.get("top"), dict) else {}).items():
        if name not in CATEGORIES or not isinstance(kernels, list):
            continue
        kept = [(str(k.get("name"))[:120], _seconds(k.get("s")), k.get("calls"))
                for k in kernels[:TOP_KERNELS] if isinstance(k, dict)]  # fmt: skip
        top[name] = [(n, s, c if isinstance(c, int) and not isinstance(c, bool) else None)
                     for n, s, c in kept if s is not None]  # fmt: skip
    steps = raw.get("steps")
    steps = steps if isinstance(steps, int) and not isinstance(steps, bool) and steps > 0 else None
    activity = raw.get("activity") if raw.get("activity") in ("cpu", "cuda", "hpu") else None
    return {"steps": steps, "profiled_s": _seconds(raw.get("profiled_s")), "activity": activity,
            "categories": categories, "top": top}  # fmt: skip


def shares(profile: dict) -> dict[str, float]:
    """category -> its fraction of the profiled time (they add up to 1)."""
    total = sum(profile["categories"].values())
    return {name: seconds / total for name, seconds in profile["categories"].items()}


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

    from .plot import _plain

    figure, axes = plt.subplots(figsize=(8.0, 1.6 + 0.5 * len(rows)), dpi=100)
    labels = [_plain(_label(section, row)) for row in rows]
    left = [0.0] * len(rows)
    for category, (name, colour) in CATEGORIES.items():
        widths = [shares(row.profile)[category] * 100 for row in rows]
        axes.barh(range(len(rows)), widths, left=left, color=colour, label=name, height=0.6)
        left = [x + w for x, w in zip(left, widths)]
    axes.set_yticks(range(len(rows)), labels)
    axes.invert_yaxis()  # the first row on top, as in the table
    axes.set_xlim(0, 100)
    axes.set_xlabel("share of the profiled step time (%)")
    axes.set_title(f"{_plain(section.experiment)}: where a step's time goes")
    axes.legend(fontsize=7, ncol=4, loc="upper center", bbox_to_anchor=(0.5, -0.25 - 0.02 * len(rows)))
    figure.tight_layout()
    figure.savefig(target, format="png", bbox_inches="tight")
    plt.close(figure)
    return target
