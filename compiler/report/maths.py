"""Whether two rows of the report compute the same thing. One job: a ratio between two runs
says how their hardware or software compares only where they did the same maths: the same
width of precision, batch and shapes, and the same model FLOPs per unit of work.
`maths_of(plan)` is what a run's plan says of that, `different_maths(row, base)` why two rows
differ (None where they do not). A ratio between rows that differ is never printed: the
report says why instead (a `--set infer.precision=bf16` run beside an fp32 one, a point's
batch beside another's). fp16 and bf16 count as one width: both run at the same peak on
every target, and each vendor's 16-bit path is what a buyer compares (S4: Gaudi's stack
trains in bf16 only); the line beside such a ratio names the difference
(report/explain.py's maths_differences)."""

from __future__ import annotations

import math

# what a workload computes; a training run's micro batch follows its device count (the global
# batch is the maths), its steps and warm-up how long it is measured, neither what is computed
MATHS = ("kind", "precision", "global_batch", "seq_len", "resolution", "input_tokens",
         "output_tokens", "denoising_steps", "guidance", "objective")  # fmt: skip
BATCH = "batch"  # inference's batch (training's is its global batch)
SIXTEEN_BITS = ("bf16", "fp16")  # one width (see above)


def maths_of(raw_plan) -> tuple:
    """(name, value) of what the plan's workload computes, sorted; () where no plan is kept."""
    workload = raw_plan.get("workload") if isinstance(raw_plan, dict) else None
    if not isinstance(workload, dict):
        return ()
    keys = MATHS + (() if workload.get("global_batch") is not None else (BATCH,))
    found = {k: workload[k] for k in keys if workload.get(k) is not None}
    return tuple(sorted((k, _hashable(v)) for k, v in found.items()))


def _hashable(value):
    return value if isinstance(value, (str, int, float, bool)) else repr(value)


def _width(key: str, value):
    """The value as the maths sees it: a precision by its width (fp16 and bf16 alike)."""
    return "16-bit" if key == "precision" and value in SIXTEEN_BITS else value


def different_maths(row, base) -> str | None:
    """Why `row` and `base` compute different things ("precision bf16 vs fp32; ..."), or None
    where they compute the same (or a plan kept too little to tell)."""
    if not row.maths or not base.maths:
        return None
    a, b = dict(row.maths), dict(base.maths)
    keys = sorted(set(a) | set(b))
    differ = [
        f"{k} {a.get(k, '-')} vs {b.get(k, '-')}" for k in keys if _width(k, a.get(k)) != _width(k, b.get(k))
    ]
    work, other = row.flops_per_sample, base.flops_per_sample
    if work and other and not math.isclose(work, other, rel_tol=1e-6):
        differ.append(f"model FLOPs per unit of work {work:.4g} vs {other:.4g}")
    return "; ".join(differ) or None
