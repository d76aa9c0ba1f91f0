"""A recompile replaces what benchc wrote in a build point and keeps everything else: the
records of earlier runs, the compile cache, Slurm logs, the user's own files. A file of the
user's where the new build would write one of its own is refused, with nothing changed."""

from __future__ import annotations

import shutil
from pathlib import Path

from helpers import REPO, run_cli

ONE_CPU = ("--set", "cluster.nodes=1", "--set", "cluster.devices_per_node=1", "--set", "parallel.data=1")


def compile_s1(out: Path, *args: str, steps: int | None = None):
    """S1 compiled into `out` from a copy of specs/ there; `steps`: the copy's train.steps
    changed first (a recompile of the same points with another build: a --set that changes a
    value would name other points)."""
    spec = out / "specs" / "sd3.bench"
    if not spec.exists():
        shutil.copytree(REPO / "specs", out / "specs")
    if steps is not None:
        sweep = "  sweep train.batch"
        spec.write_text(spec.read_text().replace(sweep, f"  train.steps = {steps}\n{sweep}"))
    return run_cli("compile", str(spec), "-o", str(out), *args, cwd=REPO)


def test_a_recompile_keeps_every_file_benchc_did_not_write(tmp_path):
    assert compile_s1(tmp_path, "--target", "h100").code == 0
    point = tmp_path / "sd3_mmdit_train/h100/batch-16"
    (point / "slurm-4242.out").write_text("log\n")  # job.sbatch's own log, as docs/clusters.md says
    (point / "notes.txt").write_text("mine\n")
    (point / "runs" / "trial-1").mkdir(parents=True)
    (point / "runs" / "trial-1" / "metrics.json").write_text("{}")
    (point / "compile-cache" / "x").mkdir(parents=True)
    before = (point / "bench.py").read_text()
    recompiled = compile_s1(tmp_path, "--target", "h100", steps=70)
    assert recompiled.code == 0, recompiled.err
    assert (point / "bench.py").read_text() != before  # the new build is in place
    assert (point / "slurm-4242.out").read_text() == "log\n"
    assert (point / "notes.txt").read_text() == "mine\n"
    assert (point / "runs" / "trial-1" / "metrics.json").read_text() == "{}"
    assert (point / "compile-cache" / "x").is_dir()
    assert not [p.name for p in point.parent.iterdir() if p.name.startswith(".")]  # no staging left


def test_a_users_file_where_the_new_build_writes_its_own_is_refused_and_nothing_changes(tmp_path):
    assert compile_s1(tmp_path, "--target", "cpu", *ONE_CPU).code == 0
    folder = tmp_path / "sd3_mmdit_train/cpu"
    point = folder / "batch-16_nodes-1_devices_per_node-1_data-1"  # named for the --set values
    assert not (point / "job.sbatch").exists()  # one cpu node: no Slurm job unless asked
    (point / "job.sbatch").write_text("mine\n")
    before = {p: p.read_bytes() for p in folder.rglob("*") if p.is_file()}
    refused = compile_s1(tmp_path, "--target", "cpu", *ONE_CPU, "--sbatch", steps=70)
    assert refused.code == 2
    assert f"{point / 'job.sbatch'} was not written by benchc, and the new build writes a file" in refused.err
    assert "move it away and run the command again" in refused.err and "nothing was changed" in refused.err
    assert {p: p.read_bytes() for p in folder.rglob("*") if p.is_file()} == before  # batch-32 too
    assert sorted(p.name for p in folder.iterdir()) == [point.name, point.name.replace("16", "32", 1)]


def test_the_folder_of_slurm_log_is_made_at_compile_and_kept_with_its_logs(tmp_path):
    """Slurm creates no folder for a job's log: compile makes it (empty), a recompile keeps it
    with the logs in it; a % pattern in the folder could never exist and is refused."""
    log = ("--set", 'slurm.log="logs/job-%j.out"')
    assert compile_s1(tmp_path, "--target", "h100", *log).code == 0
    logs = tmp_path / "sd3_mmdit_train/h100/batch-16/logs"
    assert logs.is_dir() and not any(logs.iterdir())
    (logs / "job-7.out").write_text("ran\n")
    assert compile_s1(tmp_path, "--target", "h100", *log, steps=70).code == 0
    assert (logs / "job-7.out").read_text() == "ran\n"
    refused = run_cli("check", "specs/sd3.bench", "--set", 'slurm.log="logs/%j/out"', cwd=REPO)
    assert refused.code == 2
    assert "--set[1]:1:11: error: slurm.log's folder cannot hold a % pattern" in refused.err
