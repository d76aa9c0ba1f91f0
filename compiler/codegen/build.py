"""Write build points to disk: build/<experiment>/<target>/<point>/, through the one folder
writer (compiler/folder_writer.py).

Every point's files are written under temporary names first, then renamed into place, so a
compile that fails anywhere changes no point and a reader never sees a half-written file.
Compiling twice gives identical bytes: nothing time- or host-dependent is written. What benchc
did not write there (runs/, the compile cache, Slurm logs, the user's own files) is kept, and
a point whose program is running is not rewritten.
"""

from __future__ import annotations

import os
from pathlib import Path

from ..folder_writer import FolderFiles, write_folders
from ..plan.types import Plan
from ..records import frozen
from .launchers import JOB
from .points import BUILD_FILES, EXECUTABLE, MANIFEST, render_point


@frozen
class BuiltPoint:
    plan: Plan
    path: Path
    files: tuple[str, ...]


def point_dir(out: Path, plan: Plan) -> Path:
    point = f"{plan.point}-smoke" if plan.smoke else plan.point
    return out / plan.experiment / plan.target.name / point


def compile_plans(plans: tuple[Plan, ...], out: Path, sbatch: bool = False) -> list[BuiltPoint]:
    """Render every point, then write them all or none. `sbatch`: write job.sbatch beside cpu
    points too (it is always written for accelerator and multi-node points)."""
    rendered = [(plan, render_point(plan, sbatch=sbatch)) for plan in plans]
    targets = [
        FolderFiles(
            point_dir(out, plan),
            files,
            frozenset(EXECUTABLE),
            folders=tuple(f for f in (_log_folder(plan, files),) if f),
            manifest=MANIFEST,
            stale_names=BUILD_FILES,
        )  # fmt: skip
        for plan, files in rendered
    ]
    write_folders(targets)
    return [BuiltPoint(plan, point_dir(out, plan), tuple(sorted(files))) for plan, files in rendered]


def _log_folder(plan: Plan, files: dict[str, str]) -> str | None:
    """The folder of job.sbatch's log (slurm.log), made at compile time: Slurm creates none,
    and a job whose log folder is missing fails with no output anywhere."""
    folder = os.path.dirname(plan.slurm.log)
    return folder if JOB in files and folder else None
