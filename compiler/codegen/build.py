"""Write build points to disk: build/<experiment>/<target>/<point>/, atomically.

A point's folder is written in full beside its final place and then swapped in, so a reader
(or an interrupted compile) sees the old build or the new one, never a mix. Compiling twice
gives identical bytes: nothing time- or host-dependent is written.
"""

from __future__ import annotations

import errno
import os
import shutil
import tempfile
from pathlib import Path

from ..diagnostics import error
from ..plan.types import Plan
from ..records import frozen
from .points import EXECUTABLE, render_point

RUNS = "runs"  # benchc run keeps each trial's log and metrics here


@frozen
class BuiltPoint:
    plan: Plan
    path: Path
    files: tuple[str, ...]


def point_dir(out: Path, plan: Plan) -> Path:
    point = f"{plan.point}-smoke" if plan.smoke else plan.point
    return out / plan.experiment / plan.target.name / point


def compile_plans(plans: tuple[Plan, ...], out: Path, sbatch: bool = False) -> list[BuiltPoint]:
    """Render every point, stage every point beside its final place, then swap them all in:
    a compile that fails anywhere changes no point. `sbatch`: write job.sbatch beside cpu
    points too (it is always written for accelerator and multi-node points)."""
    rendered = [(plan, render_point(plan, sbatch=sbatch)) for plan in plans]
    staged: list[tuple[Path, Path]] = []
    try:
        for plan, files in rendered:
            final = point_dir(out, plan)
            staged.append((_stage(final, files), final))
    except OSError as exc:
        for staging, _ in staged:
            shutil.rmtree(staging, ignore_errors=True)
        where = exc.filename or out
        raise error(f"cannot write the build folder {where}: {exc.strerror or exc}", None,
                    hint="nothing was changed in the build folder") from None  # fmt: skip
    built = []
    for (staging, final), (plan, files) in zip(staged, rendered):
        try:
            _swap_in(staging, final)
        except OSError as exc:
            shutil.rmtree(staging, ignore_errors=True)
            raise error(f"cannot write the build folder {final}: {exc.strerror or exc}", None) from None
        built.append(BuiltPoint(plan, final, tuple(sorted(files))))
    return built


def _stage(final: Path, files: dict[str, str]) -> Path:
    """A hidden folder beside `final` holding the point's files in full."""
    final.parent.mkdir(parents=True, exist_ok=True)
    if final.is_symlink() or (final.exists() and not final.is_dir()):
        raise OSError(errno.EEXIST, "a file that is not a build point stands there", str(final))
    staging = Path(tempfile.mkdtemp(prefix=f".{final.name}.", dir=final.parent))
    try:
        for name, text in files.items():
            path = staging / name
            path.write_text(text, encoding="utf-8")
            path.chmod(0o755 if name in EXECUTABLE else 0o644)
        staging.chmod(0o755)
    except OSError:
        shutil.rmtree(staging, ignore_errors=True)
        raise
    return staging


def _swap_in(staging: Path, final: Path) -> None:
    if final.is_dir():
        if (final / RUNS).is_dir():  # the records of earlier runs outlive a recompile
            os.replace(final / RUNS, staging / RUNS)
        retired = final.with_name(f".{final.name}.old")
        shutil.rmtree(retired, ignore_errors=True)
        os.replace(final, retired)
        os.replace(staging, final)
        shutil.rmtree(retired, ignore_errors=True)
    else:
        os.replace(staging, final)
