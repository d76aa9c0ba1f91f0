"""Hostile input to the results store through `ingest`, `runs`, `report` and `export` (issue 24):
manifests whose plan breaks its schema, stores that already hold such a row, two ingests of the
same files at once, impossible trials of a job, names no spec could give, a failed ingest that
must leave nothing behind, CSV cells a spreadsheet would run, and --repeat bounded as the spec's
measure.repeat. Each uses the real SQLite store and the real CLI."""

from __future__ import annotations

import copy
import csv
import io
import json
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest
from scripted_points import ok_metrics

from benchc.commands import flags
from benchc.diagnostics import BenchError
from benchc.report.collect import sections
from benchc.results.ingest import metrics_sha256
from benchc.results.store import MIGRATIONS, SCHEMA_VERSION, Store
from benchc.validate.schema import schema

from helpers import REPO, SPECS, run_cli


def cli(*args: str, db: Path):
    return run_cli(*args, "--db", str(db))


def refused(result, words: str) -> None:
    assert result.code == 2, result.out + result.err
    assert "Traceback" not in result.err, result.err
    assert words in result.err, result.err


def metrics_file(path: Path, **fields) -> Path:
    metrics = copy.deepcopy(ok_metrics(12.0))
    metrics.update(fields)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(metrics, ensure_ascii=False), encoding="utf-8")  # characters as they are
    return path


@pytest.fixture(scope="module")
def manifest(tmp_path_factory) -> dict:
    """A real manifest of the point ok_metrics describes (sd3.bench, cpu, smoke)."""
    from benchc.codegen.build import compile_plans
    from benchc.pipeline import plan_spec

    (plan,) = plan_spec(SPECS / "sd3.bench", targets=["cpu"], smoke=True, overrides=[
        "train.batch=16", "cluster.nodes=1", "cluster.devices_per_node=16"]).plans  # fmt: skip
    (built,) = compile_plans((plan,), tmp_path_factory.mktemp("build"))
    data = json.loads((built.path / "manifest.json").read_text())
    data["point"] = data["plan"]["point"] = "default"  # as ok_metrics names it
    return data


# ---------------------------------------------------------------- 3: plans checked before storing


CURRENCY = schema()["$defs"]["prices"]["properties"]["currency"]["pattern"]  # the spec's own rule
BAD_PLANS = {
    "measure is a list": (
        lambda plan: plan.update(measure=["x"]),
        "plan/measure: ['x'] is not of type 'object'",
    ),
    "where is a list": (
        lambda plan: plan.update(
            declared_references=[
                {"label": "r", "target": "cpu", "value": 1.0, "unit": "images/s", "where": ["train.batch"]}
            ]
        ),
        "plan/declared_references/0/where: ['train.batch'] is not of type 'object', 'null'",
    ),  # fmt: skip
    "currency is markup": (
        lambda plan: plan.update(prices={"currency": "<script>", "per_device_hour": {"cpu": 1.0}}),
        f"plan/prices/currency: '<script>' does not match {CURRENCY!r}",
    ),
}


@pytest.mark.parametrize("how", BAD_PLANS)
def test_ingest_beside_a_manifest_whose_plan_breaks_its_schema_stores_the_run_without_that_plan(
    tmp_path, manifest, how
):
    spoil, words = BAD_PLANS[how]
    bad = copy.deepcopy(manifest)
    spoil(bad["plan"])
    (tmp_path / "manifest.json").write_text(json.dumps(bad))
    path = metrics_file(tmp_path / "metrics.json")
    db = tmp_path / "r.db"
    result = cli("ingest", str(path), db=db)
    assert result.code == 0, result.err
    assert f"its build manifest '{tmp_path / 'manifest.json'}' was refused at ingest ({words}" in result.err
    with Store(db) as store:
        (run,) = store.runs()
    assert run.plan is None and run.status == "ok"
    assert cli("runs", db=db).code == 0
    assert cli("report", "-o", str(tmp_path / "out"), db=db).code == 0


def test_run_of_a_build_point_whose_manifest_has_an_invalid_currency_is_refused(tmp_path, manifest):
    from benchc.runner.manifest import read_manifest

    bad = copy.deepcopy(manifest)
    bad["plan"]["prices"] = {"currency": "x" * 5000, "per_device_hour": {"cpu": 1.0}}
    (tmp_path / "manifest.json").write_text(json.dumps(bad))
    with pytest.raises(BenchError) as refusal:
        read_manifest(tmp_path / "manifest.json")
    assert f"{tmp_path / 'manifest.json'}: plan/prices/currency: 'xxxx" in str(refusal.value)
    assert f"... (5,002 characters) does not match {CURRENCY!r}" in str(refusal.value)


def test_a_store_already_holding_rows_with_bad_plans_still_lists_and_reports_them_as_invalid(tmp_path):
    db = tmp_path / "r.db"
    good = metrics_file(tmp_path / "in" / "good.json")
    assert cli("ingest", str(good), db=db).code == 0
    with Store(db) as store:  # as the previous benchc stored them, unchecked
        reference = {"label": "r", "value": 1.0, "unit": "x", "where": ["train.batch"]}
        for point, plan in (
            ("default", {"measure": ["x"]}),
            ("batch-32", {"declared_references": [reference]}),
        ):
            run_id = store.start(experiment="sd3_mmdit_train", target="h100", point=point, point_values={},
                                 smoke=True, spec_path=None, spec_sha256=None, build_path=None, log_path=None,
                                 environment={}, plan=plan, series=point, trial=1,
                                 source="ingest")  # fmt: skip
            store.finish(run_id, "ok", None, ok_metrics(20.0, target="h100", point=point))
    listed = cli("runs", db=db)
    assert listed.code == 0 and "Traceback" not in listed.err, listed.err
    assert "invalid  invalid plan in the store: plan/measure: ['x'] is not of type 'object'" in listed.out
    assert (
        "invalid plan in the store: plan/declared_references/0/where: ['train.batch'] is not of type"
        in listed.out
    )
    out = tmp_path / "out"
    report = cli("report", "-o", str(out), db=db)
    assert report.code == 0 and "Traceback" not in report.err, report.err
    page = (out / "report.md").read_text()
    assert page.count("**failed**: invalid plan in the store: plan") == 2
    assert "12.0" in page  # the good run is still reported


# ---------------------------------------------------------------- 6: one file stored once


@pytest.mark.integration
def test_two_ingests_of_the_same_300_files_at_once_store_each_file_once(tmp_path):
    files = [str(metrics_file(tmp_path / "in" / f"m{i}.json", point=f"p{i}")) for i in range(300)]
    db = tmp_path / "r.db"
    Store(db).close()  # a store in use: neither ingest waits for the other to create it
    command = [sys.executable, "-m", "benchc", "ingest", *files, "--db", str(db)]
    procs = [subprocess.Popen(command, cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
             for _ in range(2)]  # fmt: skip
    results = []
    for proc in procs:
        _, err = proc.communicate(timeout=300)
        results.append((proc.returncode, err))
    assert sorted(code for code, _ in results) == [0, 2], results
    loser = next(err for code, err in results if code == 2)
    assert "is already in the results store as run" in loser and "Traceback" not in loser
    rows = sqlite3.connect(db).execute("SELECT count(*), count(DISTINCT metrics_sha256) FROM runs").fetchone()
    assert rows == (300, 300)


def test_a_store_of_the_previous_version_holding_one_file_twice_opens_keeps_both_and_guards_new_rows(
    tmp_path,
):
    path = metrics_file(tmp_path / "in" / "m.json")
    digest = metrics_sha256(json.loads(path.read_text()))
    db = tmp_path / "old.db"
    old = sqlite3.connect(db)
    for script in MIGRATIONS[:2]:
        old.executescript(script)
    for run_id in ("first", "second"):  # the previous benchc's race stored one file twice
        old.execute("INSERT INTO runs (id, experiment, target, point, point_values, smoke, status,"
                    " environment, series, trial, source, started_at, metrics_sha256, metrics) VALUES (?,"
                    " 'sd3_mmdit_train', 'cpu', 'default', '{}', 1, 'ok', '{}', ?, 1, 'ingest',"
                    " '2026-01-01T00:00:00+00:00', ?, ?)",
                    (run_id, run_id, digest, path.read_text()))  # fmt: skip
    old.execute("PRAGMA user_version = 2")
    old.commit()
    old.close()
    listed = cli("runs", db=db)
    assert listed.code == 0 and "first" in listed.out and "second" in listed.out
    with Store(db) as store:
        assert store.schema_version == SCHEMA_VERSION == 4
    refused(cli("ingest", str(path), db=db), "is already in the results store as run first")
    assert cli("ingest", str(path), "--force", db=db).code == 0
    connection = sqlite3.connect(db)
    copies = connection.execute("SELECT id, metrics_copy FROM runs ORDER BY rowid").fetchall()
    assert copies[:2] == [("first", 0), ("second", 1)] and copies[2][1] == 2
    with pytest.raises(sqlite3.IntegrityError):  # the guard: no second first copy, whoever writes
        connection.execute("UPDATE runs SET metrics_copy = 0 WHERE id = 'second'")


# ---------------------------------------------------------------- 7: the trials of a job


def job_file(folder: Path, name: str, trial: int, trials: int, throughput: float) -> Path:
    metrics = copy.deepcopy(ok_metrics(throughput))
    metrics["job"] = {"scheduler": "slurm", "id": "4711", "cluster": "c1", "trial": trial, "trials": trials}
    path = folder / name
    folder.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(metrics))
    return path


JOB = "job 4711 on cluster 'c1' (sd3_mmdit_train / cpu / default, smoke)"


def test_ingest_refuses_impossible_trials_of_a_job_naming_the_files(tmp_path):
    folder = tmp_path / "job"
    a, b, c, d, e = (
        job_file(folder, f"{name}.json", trial, trials, value)
        for name, trial, trials, value in (
            ("a", 1, 2, 100.0),
            ("b", 1, 2, 101.0),
            ("c", 2, 2, 102.0),
            ("d", 5, 2, 103.0),
            ("e", 3, 1, 104.0),
        )
    )
    db = tmp_path / "r.db"
    result = cli("ingest", *map(str, (a, b, c, d, e)), db=db)
    refused(result, f"'{d}' is trial 5 of 2 of {JOB}: a job's trials are numbered 1 to 2")
    assert f"'{e}' is trial 3 of 1 of {JOB}: a job's trials are numbered 1 to 1" in result.err
    assert (f"the files of {JOB} disagree on its number of trials: '{e}' says 1; '{a}', '{b}', '{c}' and "
            f"'{d}' say 2") in result.err  # fmt: skip
    assert f"'{b}' is trial 1 of {JOB}, as '{a}' is: a job runs each trial once" in result.err
    assert not db.exists()  # nothing stored, no store made


def test_ingest_refuses_a_trial_the_store_already_holds_from_another_file(tmp_path):
    db = tmp_path / "r.db"
    first = job_file(tmp_path / "one", "metrics-1.json", 1, 2, 100.0)
    assert cli("ingest", str(first), db=db).code == 0
    other = job_file(tmp_path / "two", "metrics-1.json", 1, 2, 150.0)  # trial 1 again, other numbers
    with Store(db) as store:
        (run,) = store.runs()
    result = cli("ingest", str(other), "--force", db=db)
    refused(
        result, f"'{other}' is trial 1 of {JOB}, as run {run.id} in the store (from '{first.resolve()}') is"
    )
    second = job_file(tmp_path / "two", "metrics-2.json", 2, 2, 101.0)
    assert cli("ingest", str(second), db=db).code == 0
    with Store(db) as store:
        assert sorted(r.trial for r in store.runs()) == [1, 2] and len({r.series for r in store.runs()}) == 1


# ---------------------------------------------------------------- 12: no manifest beside the metrics


def test_ingest_without_a_manifest_says_so_and_how_to_give_one(tmp_path):
    path = metrics_file(tmp_path / "in" / "metrics.json")
    db = tmp_path / "r.db"
    result = cli("ingest", str(path), db=db)
    assert result.code == 0, result.err
    beside, above = path.parent / "manifest.json", path.parent.parent.parent / "manifest.json"
    reason = (f"no build manifest was found when its metrics were ingested, neither '{beside}' nor "
              f"'{above}'; to keep its plan, ingest a metrics file with its build point's manifest.json "
              "beside it (or two folders up, as `benchc run` lays runs out)")  # fmt: skip
    assert f"benchc: note: {path}: stored without its build's plan" in result.err and reason in result.err
    with Store(db) as store:
        (section,) = sections(store.latest_runs())
    (row,) = section.rows
    assert row.roofline is None and row.no_roofline == reason


def test_the_report_says_no_manifest_was_found_instead_of_an_older_benchc(tmp_path):
    path = metrics_file(tmp_path / "in" / "metrics.json")
    db = tmp_path / "r.db"
    assert cli("ingest", str(path), db=db).code == 0
    assert cli("report", "-o", str(tmp_path / "out"), db=db).code == 0
    page = (tmp_path / "out" / "report.md").read_text()
    assert "compiled by an older benchc" not in page
    assert "kept no roofline (no build manifest was found when its metrics were ingested" in page


# ---------------------------------------------------------------- 14: names a spec would refuse


@pytest.mark.parametrize("field, value, words", [
    ("experiment", "e" * 5000, "the experiment name is 5,000 characters long; a spec's limit is 100"),
    ("experiment", "", "experiment '' is not a name a spec can give"),
    ("experiment", "sd3\u202etrain", "experiment 'sd3\\u202etrain' is not a name a spec can give"),
    ("experiment", "sd3\u2028train", "experiment 'sd3\\u2028train' is not a name a spec can give"),
    ("target", "", "unknown target ''"),
    ("target", "tpu9", "unknown target 'tpu9'"),
    ("target", "cpu\u202e", "unknown target 'cpu\\u202e'"),
    ("point", "", "point '' is not a point name benchc gives"),
    ("point", "batch-16\u2028x", "point 'batch-16\\u2028x' is not a point name benchc gives"),
    ("point", "-1", "point '-1' is not a point name benchc gives"),
])  # fmt: skip
def test_ingest_refuses_names_a_spec_would_refuse(tmp_path, field, value, words):
    path = metrics_file(tmp_path / "in" / "m.json", **{field: value})
    db = tmp_path / "r.db"
    result = cli("ingest", str(path), db=db)
    refused(result, f"'{path}': {words}")
    assert "\u202e" not in result.err and "\u2028" not in result.err
    assert not db.exists()


# ---------------------------------------------------------------- 19: nothing left behind, no silent []


def test_a_failed_ingest_leaves_no_store_behind(tmp_path):
    bad = tmp_path / "bad.json"
    bad.write_text('{"schema": "benchc-metrics"}')
    db = tmp_path / "new" / "r.db"
    refused(cli("ingest", str(bad), db=db), "does not match the benchc metrics schema")
    assert not db.parent.exists()


def test_export_without_a_store_says_so_and_exits_2(tmp_path):
    db = tmp_path / "nowhere.db"
    for form in ("json", "csv"):
        result = cli("export", "--format", form, db=db)
        refused(result, f"nothing to export: there is no results store at {db}")
        assert result.out == ""
    assert not db.exists()


# ---------------------------------------------------------------- 5: CSV cells a spreadsheet would run


def test_csv_export_neutralises_formulas_and_keeps_numbers(tmp_path):
    db = tmp_path / "r.db"
    with Store(db) as store:  # a store written by hand: export shows what it holds, safely
        run_id = store.start(experiment='=HYPERLINK("http://x")', target="+cpu", point="@p",
                             point_values={}, smoke=True, spec_path=None, spec_sha256="\tx", build_path=None,
                             log_path=None,
                             environment={}, plan=None, series="s", trial=1, source="ingest")  # fmt: skip
        metrics = {"throughput": {"job": -1.5, "unit": "-2+3", "per_device": "-1.5"}, "world_size": 2}
        store.finish(run_id, "failed", "=cmd|' /C calc'!A0", metrics)
    out = tmp_path / "runs.csv"
    assert cli("export", "--format", "csv", "-o", str(out), db=db).code == 0
    header, row = csv.reader(io.StringIO(out.read_text()))
    cell = dict(zip(header, row))
    assert cell["experiment"] == '\'=HYPERLINK("http://x")' and cell["target"] == "'+cpu"
    assert cell["point"] == "'@p" and cell["spec_sha256"] == "'\tx"
    assert cell["cause"] == "'=cmd|' /C calc'!A0" and cell["unit"] == "'-2+3"
    assert cell["throughput"] == "-1.5" and cell["per_device"] == "-1.5"  # numbers stay numbers
    assert cell["world_size"] == "2"


# ---------------------------------------------------------------- 21: one bound for --repeat


def test_repeat_has_the_bound_of_measure_repeat(tmp_path):
    bound = schema()["$defs"]["measure"]["properties"]["repeat"]["maximum"]
    assert flags.MAX_REPEAT == bound == 100
    for command in ("run", "submit"):
        result = run_cli(
            command, str(SPECS / "sd3.bench"), "--repeat", str(bound + 1), "--db", str(tmp_path / "r.db")
        )
        refused(result, f"expected a number from 1 to {bound}, got {bound + 1}")
    assert not (tmp_path / "r.db").exists()


@pytest.mark.parametrize("target", ["cpu", "h100", "gaudi2"])
def test_the_manifest_of_every_target_family_is_read(tmp_path, target):
    """The manifest schema takes the families of the target catalog (Gaudi's is hpu): a
    compiled point of every family is read, as `run` and `ingest` read it."""
    from benchc.runner.manifest import read_manifest

    assert run_cli("compile", "specs/sd3.bench", "--target", target, "-o", str(tmp_path), cwd=REPO).code == 0
    for manifest in sorted(tmp_path.glob(f"sd3_mmdit_train/{target}/*/manifest.json")):
        assert read_manifest(manifest)["target"] == target


def test_the_store_is_found_above_the_working_folder_as_git_finds_its_repository(tmp_path):
    """The by-hand recipe runs from a build point: ingest there stores in the project's
    .benchc/results.db (named on stderr), so the project's report sees the run."""
    project = tmp_path / "project"
    good = metrics_file(project / "in" / "metrics.json")
    first = run_cli("ingest", str(good), cwd=project)
    assert first.code == 0, first.err
    assert (project / ".benchc/results.db").is_file()
    point = project / "build/sd3_mmdit_train/cpu/batch-16"
    point.mkdir(parents=True)
    other = metrics_file(point / "runs" / "metrics.json", host="another")  # another file
    second = run_cli("ingest", str(other), cwd=point)
    assert second.code == 0, second.err
    found = f"using the results store {project / '.benchc/results.db'} (found above the working folder)"
    assert found in second.err
    assert not (point / ".benchc").exists()
    with Store(project / ".benchc/results.db") as store:
        assert len(store.runs()) == 2
