"""Write build points to disk: build/<experiment>/<target>/<point>/, atomically.

A point's folder is written in full beside its final place and then swapped in, so a reader
(or an interrupted compile) sees the old build or the new one, never a mix. Compiling twice
gives identical bytes: nothing time- or host-dependent is written. What benchc did not write
there (runs/, the compile cache, Slurm logs, the user's own files) is kept by a recompile.
"""

from __future__ import annotations

import errno
import json
import os
import shutil
import tempfile
from pathlib import Path

from ..diagnostics import error
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
    """Render every point, stage every point beside its final place, then swap them all in:
    a compile that fails anywhere changes no point. `sbatch`: write job.sbatch beside cpu
    points too (it is always written for accelerator and multi-node points)."""
    rendered = [(plan, render_point(plan, sbatch=sbatch)) for plan in plans]
    staged: list[tuple[Path, Path]] = []
    try:
        for plan, files in rendered:
            final = point_dir(out, plan)
            staged.append((_stage(final, files, _log_folder(plan, files)), final))
        for staging, final in staged:  # before any point is swapped in
            _refuse_clashes(staging, final)
    except OSError as exc:
        for staging, _ in staged:
            shutil.rmtree(staging, ignore_errors=True)
        where = exc.filename or out
        raise error(f"cannot write the build folder {where}: {exc.strerror or exc}", None,
                    hint="nothing was changed in the build folder") from None  # fmt: skip
    built = []
    for index, ((staging, final), (plan, files)) in enumerate(zip(staged, rendered, strict=True)):
        try:
            _swap_in(staging, final, _log_folder(plan, files))
        except OSError as exc:
            for left, _ in staged[index:]:
                shutil.rmtree(left, ignore_errors=True)
            raise error(f"cannot write the build folder {final}: {exc.strerror or exc}", None) from None
        built.append(BuiltPoint(plan, final, tuple(sorted(files))))
    return built


def _log_folder(plan: Plan, files: dict[str, str]) -> str | None:
    """The folder of job.sbatch's log (slurm.log), made at compile time: Slurm creates none,
    and a job whose log folder is missing fails with no output anywhere."""
    folder = os.path.dirname(plan.slurm.log)
    return folder if JOB in files and folder else None


def _stage(final: Path, files: dict[str, str], folder: str | None = None) -> Path:
    """A hidden folder beside `final` holding the point's files in full (and the log folder)."""
    final.parent.mkdir(parents=True, exist_ok=True)
    if final.is_symlink() or (final.exists() and not final.is_dir()):
        raise OSError(errno.EEXIST, "a file that is not a build point stands there", str(final))
    staging = Path(tempfile.mkdtemp(prefix=f".{final.name}.", dir=final.parent))
    try:
        for name, text in files.items():
            path = staging / name
            path.write_text(text, encoding="utf-8")
            path.chmod(0o755 if name in EXECUTABLE else 0o644)
        if folder:
            (staging / folder).mkdir(parents=True)
        staging.chmod(0o755)
    except OSError:
        shutil.rmtree(staging, ignore_errors=True)
        raise
    return staging


def _swap_in(staging: Path, final: Path, folder: str | None = None) -> None:
    """Replace `final` by `staging`, keeping what benchc did not write at compile time: the
    records of earlier runs (runs/), the compile cache, a Slurm log, any file of the user's.
    What benchc wrote is what the old manifest lists (_refuse_clashes ran before)."""
    if not final.is_dir():
        os.replace(staging, final)
        return
    ours = _written_by_benchc(final)
    kept = sorted(entry.name for entry in final.iterdir() if entry.name not in ours)
    moved = []
    try:
        for name in kept:
            if _empty_folder(staging / name):  # the build's empty log folder: the old one stays
                shutil.rmtree(staging / name)
            os.replace(final / name, staging / name)
            moved.append(name)
        if folder:  # a kept log folder still holds the log's own folder
            (staging / folder).mkdir(parents=True, exist_ok=True)
    except OSError:
        for name in moved:  # put back what was moved: the old build stays whole
            os.replace(staging / name, final / name)
        raise
    retired = final.with_name(f".{final.name}.old")
    shutil.rmtree(retired, ignore_errors=True)
    os.replace(final, retired)
    os.replace(staging, final)
    shutil.rmtree(retired, ignore_errors=True)


def _refuse_clashes(staging: Path, final: Path) -> None:
    """A file of the user's where the new build writes one of its own: refused, not replaced."""
    if not final.is_dir():
        return
    ours = _written_by_benchc(final)
    clashes = sorted(e.name for e in final.iterdir() if e.name not in ours and _clash(staging / e.name, e))
    if clashes:
        raise OSError(
            errno.EEXIST,
            f"{', '.join(clashes)} was not written by benchc, and the new build writes a file of that name: "
            "move it away and compile again",
            str(final),
        )


def _clash(new: Path, old: Path) -> bool:
    """The new build writes `new` where the user's `old` stands; a folder the build makes
    empty (the log folder) where a folder stands is none: the old one is kept."""
    if not new.exists() and not new.is_symlink():
        return False
    return not (_empty_folder(new) and old.is_dir() and not old.is_symlink())


def _empty_folder(path: Path) -> bool:
    """A folder holding nothing but empty folders (the log folder the build makes)."""
    if not path.is_dir() or path.is_symlink():
        return False
    return all(_empty_folder(entry) for entry in path.iterdir())


def _written_by_benchc(folder: Path) -> set[str]:
    """The files a build of benchc wrote in `folder`: its manifest's list and the manifest.
    Without a readable manifest, the names benchc writes (the folder is a point's)."""
    try:
        manifest = json.loads((folder / MANIFEST).read_text(encoding="utf-8"))
        listed = {entry["path"] for entry in manifest["files"]}
    except (OSError, ValueError, KeyError, TypeError):
        listed = set(BUILD_FILES)
    return {name for name in listed if isinstance(name, str) and "/" not in name} | {MANIFEST}
