"""A run's stored profile read back (metrics "profile": device seconds by category over the
profiled steps, with the top kernels of each): checked, and its shares. The one reading that
collect.py (attaching it to a report's rows) and profile.py (showing it) share.

The store is not trusted: a profile is read only where its categories are finite numbers of
seconds, none negative, and some positive, and add up to what its profiled time allows
(results/metrics.py's profile_problem); names of kernels are kept as text (at most 120
characters) for the renderer to escape. Shares are of the sum of the categories, so they add
up to 100%."""

from __future__ import annotations

import math

from ..results.metrics import profile_problem

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
