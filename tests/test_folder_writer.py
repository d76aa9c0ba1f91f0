"""The one folder writer (compiler/folder_writer.py) as compile and calibrate use it
(issue 34, cause 1): it writes the files it generates by name and keeps everything else,
whatever an old manifest lists (C1, C3); it refuses a folder that is a symbolic link (C2) and
a folder in use by a running program, which holds it through its own code (M4); concurrent
compiles into one folder never mix two builds' files; and for random trees already there,
every entry it does not generate is left byte for byte (a property test)."""

from __future__ import annotations

import hashlib
import json
import os
import signal
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from benchc.codegen.build import compile_plans, point_dir
from benchc.diagnostics import BenchError
from benchc.folder_writer import LOCK
from benchc.pipeline import plan_spec

from helpers import REPO, run_cli

GENERATED = {"bench.py", "launch.sh", "manifest.json", "job.sbatch", "accelerate.yaml"}


S5_SMOKE = ("compile", "specs/beluga-infer.bench", "-t", "cpu", "--smoke")


def smoke_point(out: Path, *args: str) -> Path:
    result = run_cli(*S5_SMOKE, "-o", str(out), *args, cwd=REPO)
    assert result.code == 0, result.err
    (point,) = [p.parent for p in out.glob("*/cpu/*/bench.py")]
    return point


def snapshot(root: Path) -> dict[str, str]:
    """Every entry under `root` (links not followed): its kind and bytes."""
    seen = {}
    for path in sorted(root.rglob("*")):
        name = str(path.relative_to(root))
        if path.is_symlink():
            seen[name] = "link:" + os.readlink(path)
        elif path.is_dir():
            seen[name] = "dir"
        else:
            seen[name] = "file:" + hashlib.sha256(path.read_bytes()).hexdigest()
    return seen


# ------------------------------------------------------------------ C1, C2: calibrate


def test_calibrate_keeps_everything_it_does_not_write_in_its_folder(tmp_path):
    """C1: notes, Slurm logs, a folder of the user's and earlier runs/ survive a calibrate."""
    out = tmp_path / "cal"
    first = run_cli("calibrate", "--compile-only", "--smoke", "-o", str(out), cwd=REPO)
    assert first.code == 0, first.err
    (folder,) = [p for p in out.iterdir() if p.is_dir()]
    (folder / "notes.md").write_text("mine\n")
    (folder / "slurm-77.out").write_text("a job's log\n")
    (folder / "mine" / "deep").mkdir(parents=True)
    (folder / "mine" / "deep" / "data.csv").write_text("1,2\n")
    (folder / "runs" / "r1").mkdir(parents=True)
    (folder / "runs" / "r1" / "calibration.json").write_text("{}")
    kept = {k: v for k, v in snapshot(folder).items() if k.split("/")[0] not in GENERATED}
    for args in (["--compile-only"], ["--compile-only", "--repeat", "2"]):
        again = run_cli("calibrate", *args, "--smoke", "-o", str(out), cwd=REPO)
        assert again.code == 0, again.err
        assert {k: v for k, v in snapshot(folder).items() if k in kept} == kept


def test_a_calibration_folder_that_is_a_symbolic_link_is_refused_and_its_runs_kept(tmp_path):
    """C2: the layout's folder reached through a link is refused, located, nothing changed."""
    out = tmp_path / "cal"
    assert run_cli("calibrate", "--compile-only", "--smoke", "-o", str(out), cwd=REPO).code == 0
    (folder,) = [p for p in out.iterdir() if p.is_dir()]
    elsewhere = tmp_path / "elsewhere"
    folder.rename(elsewhere)
    (elsewhere / "runs" / "r1").mkdir(parents=True)
    (elsewhere / "runs" / "r1" / "calibration.json").write_text("{}")
    folder.symlink_to(elsewhere)
    before = snapshot(elsewhere)
    refused = run_cli("calibrate", "--compile-only", "--smoke", "-o", str(out), cwd=REPO)
    assert refused.code == 2 and "is a symbolic link" in refused.err and "Traceback" not in refused.err
    assert snapshot(elsewhere) == before and folder.is_symlink()


# ------------------------------------------------------------------ C3: a manifest is not trusted


@pytest.mark.parametrize("listed", [["runs"], ["notes.txt", "runs", "../escape"], ["bench.py", "mine"]])
def test_a_manifest_naming_the_users_files_never_gets_them_deleted(tmp_path, listed):
    point = smoke_point(tmp_path)
    (point / "runs" / "r1").mkdir(parents=True)
    (point / "runs" / "r1" / "metrics.json").write_text("{}")
    (point / "notes.txt").write_text("mine\n")
    (point / "mine").mkdir()
    manifest = json.loads((point / "manifest.json").read_text())
    manifest["files"] += [{"path": name, "sha256": "0" * 64} for name in listed]
    (point / "manifest.json").write_text(json.dumps(manifest))
    before = {k: v for k, v in snapshot(point).items() if k.split("/")[0] not in GENERATED}
    again = run_cli(*S5_SMOKE, "-o", str(tmp_path), cwd=REPO)
    assert again.code == 0, again.err
    assert {k: v for k, v in snapshot(point).items() if k in before} == before
    assert not (tmp_path.parent / "escape").exists()


def test_a_file_the_former_build_wrote_goes_only_while_unchanged(tmp_path):
    """job.sbatch written with --sbatch, then a build without it: removed while it is the
    former build's bytes, kept once the user changed it."""
    point = smoke_point(tmp_path, "--sbatch")
    assert (point / "job.sbatch").is_file()
    smoke_point(tmp_path)
    assert not (point / "job.sbatch").exists()
    smoke_point(tmp_path, "--sbatch")
    (point / "job.sbatch").write_text((point / "job.sbatch").read_text() + "# my edit\n")
    smoke_point(tmp_path)
    assert (point / "job.sbatch").read_text().endswith("# my edit\n")


# ------------------------------------------------------------------ M4: a folder in use

HOLDER = """
import importlib.util, sys, time
spec = importlib.util.spec_from_file_location("held", sys.argv[1])
module = importlib.util.module_from_spec(spec)
spec.loader.exec_module(module)
module.hold_folder()
print("held", flush=True)
time.sleep(120)
"""


def hold(program: Path) -> subprocess.Popen:
    """A process running the program's own hold_folder(), as its main() does first."""
    process = subprocess.Popen([sys.executable, "-c", HOLDER, str(program)], stdout=subprocess.PIPE,
                               text=True)  # fmt: skip
    assert process.stdout.readline().strip() == "held"
    return process


@pytest.mark.parametrize("command", ["compile", "calibrate"])
def test_a_folder_whose_program_runs_is_not_rewritten_until_it_ends(tmp_path, command):
    if command == "compile":
        point = smoke_point(tmp_path)
        again = (*S5_SMOKE, "-o", str(tmp_path))
    else:
        assert run_cli("calibrate", "--compile-only", "--smoke", "-o", str(tmp_path), cwd=REPO).code == 0
        (point,) = [p for p in tmp_path.iterdir() if p.is_dir()]
        again = ("calibrate", "--compile-only", "--smoke", "-o", str(tmp_path))
    process = hold(point / "bench.py")
    try:
        before = snapshot(point)
        refused = run_cli(*again, cwd=REPO)
        assert refused.code == 2 and "is in use" in refused.err and f"pid {process.pid}" in refused.err
        assert "Traceback" not in refused.err
        assert snapshot(point) == before
    finally:
        process.send_signal(signal.SIGKILL)  # however the program ends, the kernel lets go
        process.wait()
    assert run_cli(*again, cwd=REPO).code == 0


def test_the_generated_programs_hold_their_folder(tmp_path):
    """Every program benchc writes calls hold_folder() first thing in main()."""
    point = smoke_point(tmp_path)
    assert run_cli("calibrate", "--compile-only", "--smoke", "-o", str(tmp_path / "cal"), cwd=REPO).code == 0
    (calibration,) = [p for p in (tmp_path / "cal").iterdir() if p.is_dir()]
    for program in (point / "bench.py", calibration / "bench.py"):
        text = program.read_text()
        main = text[text.index("\ndef main(") :]
        assert "    hold_folder()\n" in main.split("started = time.perf_counter()")[0], program


# ------------------------------------------------------------------ concurrent compiles


def test_concurrent_compiles_into_one_folder_never_mix_two_builds(tmp_path):
    """Eight compiles of different settings at once: each point folder holds one build's files
    (its manifest's hashes are its files'), the others refused as in use or written whole."""
    # eight specs of one experiment, each its own description: eight builds of one point (a
    # --set that changes a value would name a point of its own)
    spec = (REPO / "specs/beluga-infer.bench").read_text()
    commands = []
    for i in range(8):
        copy = tmp_path / "specs" / f"s5-{i}.bench"
        copy.parent.mkdir(exist_ok=True)
        copy.write_text(spec.replace('description = "', f'description = "build {i}: '))
        out = ["-o", str(tmp_path / "out")]
        commands.append([sys.executable, "-m", "benchc", "compile", str(copy), "-t", "cpu", "--smoke", *out])

    def compile_one(command):
        return subprocess.run(command, cwd=REPO, capture_output=True, text=True)

    with ThreadPoolExecutor(8) as pool:
        results = list(pool.map(compile_one, commands))
    assert all(r.returncode in (0, 2) for r in results), [r.stderr for r in results]
    assert any(r.returncode == 0 for r in results)
    assert all("is in use" in r.stderr for r in results if r.returncode == 2)
    assert not any("Traceback" in r.stderr for r in results)
    (point,) = [p.parent for p in (tmp_path / "out").glob("*/cpu/*/bench.py")]
    manifest = json.loads((point / "manifest.json").read_text())
    for entry in manifest["files"]:
        assert hashlib.sha256((point / entry["path"]).read_bytes()).hexdigest() == entry["sha256"]
    assert not [p.name for p in point.iterdir() if p.name.endswith(".tmp")]


# ------------------------------------------------------------------ property: what is there stays

NAMES = st.sampled_from(["runs", "notes.txt", "slurm-1.out", "cache", "a", "b.json", "trial-1", "bench.py",
                         "launch.sh", "manifest.json", ".hidden", LOCK])  # fmt: skip
CONTENT = st.binary(max_size=64)


@st.composite
def trees(draw, depth: int = 0):
    """name -> bytes (a file), a dict (a folder), or ('link', target)."""
    entries = {}
    for name in draw(st.lists(NAMES, max_size=5, unique=True)):
        kind = draw(st.sampled_from(["file", "dir", "link"] if depth < 2 else ["file", "link"]))
        if kind == "file":
            entries[name] = draw(CONTENT)
        elif kind == "dir":
            entries[name] = draw(trees(depth + 1))
        else:
            entries[name] = ("link", draw(st.sampled_from(["/etc/hostname", "../x", "runs", "missing"])))
    return entries


def make(root: Path, tree: dict) -> None:
    root.mkdir(parents=True, exist_ok=True)
    for name, value in tree.items():
        if isinstance(value, bytes):
            (root / name).write_bytes(value)
        elif isinstance(value, tuple):
            (root / name).symlink_to(value[1])
        else:
            make(root / name, value)


PLAN = None


def smoke_plan():
    global PLAN
    if PLAN is None:
        (PLAN,) = plan_spec(REPO / "specs" / "beluga-infer.bench", targets=["cpu"], smoke=True).plans
    return PLAN


FLOCK = (
    "import fcntl, os, sys, time; fd = os.open(sys.argv[1], os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW); "
    "fcntl.flock(fd, fcntl.LOCK_SH); print('held', flush=True); time.sleep(60)"
)


REPORT_FILES = {"report.md", "sd3_mmdit_train.png"}


def write_as(writer: str, out: Path) -> tuple[Path, set[str]]:
    """Write with the command's own writer into its folder under `out`; (the folder, the
    names that writer generates there)."""
    if writer == "compile":
        plan = smoke_plan()
        compile_plans((plan,), out)
        return point_dir(out, plan), GENERATED
    if writer == "calibrate":
        from benchc.codegen.calibration import write_calibration
        from benchc.plan.calibration import calibration_plan
        from benchc.validate.capabilities import NOT_GENERATED_PRECISIONS

        plan = calibration_plan("cpu", not_generated=NOT_GENERATED_PRECISIONS, smoke=True)
        return write_calibration(plan, out), {"bench.py", "launch.sh", "job.sbatch", "calibration-plan.json"}
    from benchc.report.output import OutputFolder

    with OutputFolder(out / "report") as folder:
        for name in sorted(REPORT_FILES):
            folder.add(name, lambda stream, name=name: stream.write(name.encode() * 40))
        folder.commit()
    return out / "report", REPORT_FILES


def folder_of(writer: str, out: Path) -> Path:
    if writer == "compile":
        return point_dir(out, smoke_plan())
    if writer == "calibrate":
        return out / "cpu-1x2-smoke"
    return out / "report"


@pytest.mark.parametrize("writer", ["compile", "calibrate", "report"])
@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(tree=trees(), held=st.booleans())
def test_whatever_stands_in_a_folder_every_entry_benchc_does_not_write_is_kept(tmp_path_factory, writer, tree,
                                                                             held):  # fmt: skip
    """Random trees (files, folders, links, a runs/ with results, the lock file) stand where
    compile, calibrate or report writes, sometimes with the lock held by a live process:
    afterwards every entry the command does not write is as it was; a refused write (a link or
    folder where a file goes, a point or calibration whose lock is held) changes nothing."""
    out = tmp_path_factory.mktemp("out")
    folder = folder_of(writer, out)
    make(folder, tree)
    holder = None
    lock = folder / LOCK
    if held and (lock.is_file() and not lock.is_symlink() or not os.path.lexists(lock)):
        holder = subprocess.Popen([sys.executable, "-c", FLOCK, str(lock)], stdout=subprocess.PIPE, text=True)
        assert holder.stdout.readline().strip() == "held"
    before = snapshot(folder)
    try:
        written, names = write_as(writer, out)
    except BenchError as refused:
        assert snapshot(folder) == before, refused.message  # refused: nothing changed
        return
    finally:
        if holder is not None:
            holder.kill()
            holder.wait()
    assert written == folder
    assert holder is None or writer == "report"  # a point or calibration in use is never written
    after = snapshot(folder)
    for name, value in before.items():
        if name.split("/")[0] in names or name == LOCK:
            continue
        assert after.get(name) == value, name
    for name in names - {"job.sbatch", "accelerate.yaml"}:
        assert after[name].startswith("file:"), name
    assert not [n for n in after if n.endswith(".tmp")]


# ------------------------------------------------------------------ paths naming nothing, or elsewhere


def test_a_runs_folder_that_is_a_link_is_refused_before_anything_runs(tmp_path):
    point = smoke_point(tmp_path / "build")
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    (point / "runs").symlink_to(elsewhere)
    db = tmp_path / "r.db"
    refused = run_cli("run", str(point), "--db", str(db), cwd=REPO)
    assert refused.code == 2 and "runs is a symbolic link" in refused.err and "nothing was run" in refused.err
    assert list(elsewhere.iterdir()) == [] and not db.exists()


@pytest.mark.parametrize("command", [
    ("runs", "--db", ""), ("status", "--db", ""), ("targets", "--db", ""),
    ("estimate", str(REPO / "specs/sd3.bench"), "--db", ""),
    ("compile", str(REPO / "specs/sd3.bench"), "-o", ""),
    ("run", str(REPO / "specs/sd3.bench"), "--smoke", "-o", ""),
    ("export", "-o", ""), ("report", "-o", ""),
])  # fmt: skip
def test_an_empty_path_names_nothing_and_is_refused(tmp_path, command):
    result = run_cli(*command, cwd=tmp_path)
    assert result.code == 2 and "needs a" in result.err and "got ''" in result.err, result.err
    assert list(tmp_path.iterdir()) == []  # nothing made where the command ran
