"""Hostile input never breaks benchc: each finding of the hardening review, as a regression
test. Every case ends with exit 2 and a clear message (never a traceback), writes nothing
outside the folder the user named, and stores nothing half."""

from __future__ import annotations

import copy
import json
import os
import shutil
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import pytest
from scripted_points import ok_metrics

from benchc.results.store import Store

from helpers import REPO

pytestmark = pytest.mark.integration

SPEC = """experiment e {{
  model mmdit {{ depth = 2 }}
  train {{ batch = {batch} }}
  targets = [cpu]
{extra}}}
"""


def benchc(*args: str, cwd: Path = REPO, timeout: float = 120) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "benchc", *args], cwd=cwd, capture_output=True, text=True,
                          timeout=timeout)  # fmt: skip


def refused(proc: subprocess.CompletedProcess, words: str) -> None:
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert "Traceback" not in proc.stderr and words in proc.stderr, proc.stderr


def spec(tmp_path: Path, batch="4", extra="", name="s.bench") -> Path:
    path = tmp_path / name
    path.write_text(SPEC.format(batch=batch, extra=extra))
    return path


# ---------------------------------------------------------------- the report writes only in -o


def metrics_file(folder: Path, experiment: str, value: float = 10.0, name: str = "m.json") -> Path:
    metrics = copy.deepcopy(ok_metrics(value))
    metrics["experiment"] = experiment
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / name
    path.write_text(json.dumps(metrics))
    return path


@pytest.mark.parametrize("experiment", ["{victim}", "../../escaped", "a/b/c", "nul\x00name", "x" * 300,
                                        "<script>alert(1)</script> | row", "new\nline"])  # fmt: skip
def test_names_from_the_store_never_become_paths_outside_the_output_folder(tmp_path, experiment):
    """ingest refuses every one of these names (a spec could not give them); a store written
    otherwise (an older benchc, another tool) may still hold them, and the report then
    writes only inside -o."""
    victim = tmp_path / "elsewhere" / "victim"
    victim.parent.mkdir()
    victim.with_suffix(".png").write_text("precious")
    experiment = experiment.replace("{victim}", str(victim))
    db = tmp_path / "r.db"
    path = metrics_file(tmp_path / "in", experiment)
    refused(benchc("ingest", str(path), "--db", str(db)), "experiment")
    assert not db.exists()  # a refused ingest leaves no store
    metrics = json.loads(path.read_text())
    with Store(db) as store:  # as an older benchc stored it, unchecked
        run_id = store.start(experiment=experiment, target=metrics["target"], point=metrics["point"],
                             point_values={}, smoke=False, spec_path=None, spec_sha256=None, build_path=None,
                             log_path=None, environment={}, plan=None, series="s", trial=1,
                             source="ingest")  # fmt: skip
        store.finish(run_id, "ok", None, metrics)
    out = tmp_path / "out"
    proc = benchc("report", "-o", str(out), "--db", str(db))
    assert proc.returncode == 0, proc.stderr
    assert victim.with_suffix(".png").read_text() == "precious"
    written = [p for p in tmp_path.rglob("*") if p.is_file() and p.suffix in (".png", ".md")]
    assert all(out in p.parents for p in written if p != victim.with_suffix(".png")), written
    page = (out / "report.md").read_text()
    assert "<script>" not in page


# ---------------------------------------------------------------- located errors, not tracebacks


def test_a_huge_integer_is_a_located_error(tmp_path):
    digits = "1" * 5000
    refused(benchc("check", str(spec(tmp_path, batch=digits))), "s.bench:3:")
    refused(benchc("check", "specs/sd3.bench", "--set", f"train.batch={digits}"), "--set[1]:1:")


def test_includes_that_are_loops_nul_overlong_directories_or_fifos(tmp_path):
    (tmp_path / "loop.bench").symlink_to(tmp_path / "loop.bench")
    refused(benchc("check", str(spec(tmp_path, extra='  include "loop.bench"\n'))), "")
    path = tmp_path / "top.bench"
    for target, words in (("loop.bench", "symlink loop"), ("a\\u0000b.bench", "NUL"),
                          ("x" * 5000 + ".bench", "too long"), ("folder", "is a directory"),
                          ("fifo.bench", "not a regular file")):  # fmt: skip
        (tmp_path / "folder").mkdir(exist_ok=True)
        if not (tmp_path / "fifo.bench").exists():
            os.mkfifo(tmp_path / "fifo.bench")
        path.write_text(f'include "{target}"\n' + SPEC.format(batch="4", extra=""))
        proc = benchc("check", str(path), timeout=30)
        refused(proc, words)
        assert "top.bench:1:" in proc.stderr


def test_an_overlong_experiment_name_is_refused_by_check(tmp_path):
    path = tmp_path / "long.bench"
    path.write_text(SPEC.format(batch="4", extra="").replace("experiment e", "experiment " + "e" * 300))
    refused(benchc("check", str(path)), "long.bench:1:12:")


@pytest.mark.parametrize("content, words", [
    ("[" * 100_000 + "]" * 100_000, "nested"),
    ('{"schema": "benchc-metrics", "x": ' + "9" * 5000 + "}", "too large"),
    ('{"schema": "benchc-metrics", "experiment": "\\ud800"}', "surrogate"),
    ('{"schema": "benchc-metrics", "value": NaN}', "NaN"),
])  # fmt: skip
def test_hostile_metrics_files_are_refused(tmp_path, content, words):
    path = tmp_path / "m.json"
    path.write_text(content)
    db = tmp_path / "r.db"
    refused(benchc("ingest", str(path), "--db", str(db)), words)
    assert not db.exists() or Store(db).runs() == []


@pytest.mark.parametrize("field, value", [
    ("throughput.job", float("nan")), ("throughput.job", float("inf")), ("throughput.job", 1e308),
    ("step_time_s.median", float("nan")),
])  # fmt: skip
def test_non_finite_or_absurd_measurements_are_refused(tmp_path, field, value):
    metrics = copy.deepcopy(ok_metrics(10.0))
    section, key = field.split(".")
    metrics[section][key] = value
    path = tmp_path / "m.json"
    path.write_text(json.dumps(metrics))  # json writes NaN and Infinity as bare words
    refused(benchc("ingest", str(path), "--db", str(tmp_path / "r.db")), "")


def test_a_huge_metrics_file_is_refused_unread(tmp_path):
    path = tmp_path / "big.json"
    with path.open("w") as stream:
        stream.write('{"schema": "benchc-metrics", "pad": "')
        stream.write("x" * (20 * 2**20))
        stream.write('"}')
    started = time.monotonic()
    refused(benchc("ingest", str(path), "--db", str(tmp_path / "r.db")), "MiB")
    assert time.monotonic() - started < 20


def test_a_corrupt_store_is_named_with_how_to_recover_and_never_written(tmp_path):
    db = tmp_path / "r.db"
    good = metrics_file(tmp_path / "in", "exp")
    assert benchc("ingest", str(good), "--db", str(db)).returncode == 0
    with Store(db) as store:
        store.batch  # noqa: B018 - opened and closed: the WAL is checkpointed into the file
    connection = sqlite3.connect(db)
    connection.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    connection.close()
    data = bytearray(db.read_bytes())
    page = 4096
    data[page : page * 2] = os.urandom(page)  # a data page, not the header
    db.write_bytes(bytes(data))
    before = db.read_bytes()
    for command in (["runs"], ["report", "-o", str(tmp_path / "o")], ["export"]):
        refused(benchc(*command, "--db", str(db)), "is damaged")
    other = metrics_file(tmp_path / "in2", "exp2")
    proc = benchc("ingest", str(other), "--db", str(db))
    refused(proc, "is damaged")
    assert "sqlite3" in proc.stderr and str(db) in proc.stderr  # how to recover, naming the file
    assert db.read_bytes() == before


# ---------------------------------------------------------------- bounded work


def test_a_sweep_of_too_many_points_is_refused_before_expanding(tmp_path):
    sweeps = "".join(f"  sweep train.{k} = [{', '.join(str(i) for i in range(1, 101))}]\n"
                     for k in ("batch", "steps", "seed", "warmup", "grad_accum"))  # fmt: skip
    started = time.monotonic()
    proc = benchc("check", str(spec(tmp_path, extra=sweeps)), timeout=60)
    refused(proc, "10,000,000,000 points")
    assert "--max-points" in proc.stderr and time.monotonic() - started < 20


def test_an_include_diamond_reads_each_file_once(tmp_path):
    depth = 14
    for level in range(depth):
        body = "" if level == depth - 1 else f'include "l{level + 1}.bench"\ninclude "l{level + 1}.bench"\n'
        (tmp_path / f"l{level}.bench").write_text(body + f"train.seed = {level}\n")
    top = tmp_path / "top.bench"
    top.write_text('include "l0.bench"\n' + SPEC.format(batch="4", extra=""))
    started = time.monotonic()
    proc = benchc("plan", str(top), "--json", timeout=60)
    assert proc.returncode == 0, proc.stderr
    assert time.monotonic() - started < 15
    files = json.loads(proc.stdout)["plans"][0]["spec"]["files"]
    assert len(files) == depth + 1 and len({f["path"] for f in files}) == depth + 1


# ---------------------------------------------------------------- includes stay in the spec's tree


def test_includes_outside_the_specs_folder_need_an_opt_in_and_show_no_foreign_content(tmp_path):
    inside = tmp_path / "project"
    inside.mkdir()
    (tmp_path / "shared.bench").write_text("train.seed = 3\n")
    path = inside / "s.bench"
    path.write_text('include "../shared.bench"\n' + SPEC.format(batch="4", extra=""))
    refused(benchc("check", str(path)), "outside the folder of the spec")
    assert benchc("check", str(path), "--include-root", str(tmp_path)).returncode == 0
    path.write_text('include "/etc/passwd"\n' + SPEC.format(batch="4", extra=""))
    proc = benchc("check", str(path), "--include-root", "/")
    refused(proc, ".bench")
    assert "root:" not in proc.stderr


# ---------------------------------------------------------------- smaller


def test_no_targets_and_an_empty_output_folder_are_refused(tmp_path):
    refused(benchc("check", "specs/sd3.bench", "--set", "targets=[]"), "at least 1")
    path = tmp_path / "t.bench"
    path.write_text(SPEC.format(batch="4", extra="").replace("targets = [cpu]", "targets = []"))
    refused(benchc("check", str(path)), "at least 1")
    empty = tmp_path / "empty"
    empty.mkdir()
    refused(benchc("compile", str(REPO / "specs/sd3.bench"), "-o", "", cwd=empty), "-o")
    assert not any(empty.iterdir())


def test_a_compile_that_fails_on_one_point_writes_none(tmp_path):
    out = tmp_path / "b"
    shutil.copytree(REPO / "specs", tmp_path / "specs")  # changed below: the same points, new builds
    s1 = tmp_path / "specs" / "sd3.bench"
    assert benchc("compile", str(s1), "-t", "cpu", "--smoke", "-o", str(out)).returncode == 0
    before = {p: p.read_bytes() for p in out.rglob("*") if p.is_file()}
    # a point whose folder cannot be made: a file stands where batch-32's folder goes
    blocker = out / "sd3_mmdit_train/cpu/batch-32-smoke"
    for child in sorted(blocker.rglob("*"), reverse=True):
        child.unlink() if child.is_file() else child.rmdir()
    blocker.rmdir()
    blocker.write_text("in the way")
    before = {p: p.read_bytes() for p in out.rglob("*") if p.is_file()}
    s1.write_text(s1.read_text().replace("  sweep train.batch", "  train.seed = 9\n  sweep train.batch"))
    proc = benchc("compile", str(s1), "-t", "cpu", "--smoke", "-o", str(out))
    refused(proc, "batch-32-smoke is a file, not a folder benchc writes")
    after = {p: p.read_bytes() for p in out.rglob("*") if p.is_file()}
    assert after == before  # batch-16 kept its old files: all points or none
