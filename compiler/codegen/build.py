"""Write build points to disk: build/<experiment>/<target>/<point>/, atomically.

A point's folder is written in full beside its final place and then swapped in, so a reader
(or an interrupted compile) sees the old build or the new one, never a mix. Compiling twice
gives identical bytes: nothing time- or host-dependent is written.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from dataclasses import dataclass
from pathlib import Path

from ..diagnostics import error
from ..plan.types import Plan
from .points import EXECUTABLE, render_point

RUNS = "runs"  # benchc run keeps each trial's log and metrics here


@dataclass(frozen=True)
class BuiltPoint:
    plan: Plan
    path: Path
    files: tuple[str, ...]


def point_dir(out: Path, plan: Plan) -> Path:
    point = f"{plan.point}-smoke" if plan.smoke else plan.point
    return out / plan.experiment / plan.target.name / point


def compile_plans(plans: tuple[Plan, ...], out: Path, sbatch: bool = False) -> list[BuiltPoint]:
    """`sbatch`: write job.sbatch beside cpu points too (it is always written for accelerator
    and multi-node points)."""
    rendered = [(plan, render_point(plan, sbatch=sbatch)) for plan in plans]  # render all, then write
    return [_write_point(point_dir(out, plan), plan, files) for plan, files in rendered]


def _write_point(final: Path, plan: Plan, files: dict[str, str]) -> BuiltPoint:
    try:
        final.parent.mkdir(parents=True, exist_ok=True)
        staging = Path(tempfile.mkdtemp(prefix=f".{final.name}.", dir=final.parent))
        for name, text in files.items():
            path = staging / name
            path.write_text(text, encoding="utf-8")
            path.chmod(0o755 if name in EXECUTABLE else 0o644)
        staging.chmod(0o755)
        if final.exists():
            if (final / RUNS).is_dir():  # the records of earlier runs outlive a recompile
                os.replace(final / RUNS, staging / RUNS)
            retired = final.with_name(f".{final.name}.old")
            shutil.rmtree(retired, ignore_errors=True)
            os.replace(final, retired)
            os.replace(staging, final)
            shutil.rmtree(retired, ignore_errors=True)
        else:
            os.replace(staging, final)
    except OSError as exc:
        raise error(f"cannot write the build folder {final}: {exc.strerror or exc}", None) from None
    return BuiltPoint(plan, final, tuple(sorted(files)))
