"""Stored measurements checked before they are stored or used (issue 34, cause 2): a
calibration of a target this benchc does not know is kept and shown as such (M2); figures no
chip can reach (above 1.5x the datasheet) or that measured nothing (a denormal) are refused at
ingest, and a program's own are stored flagged and never used for a bound (M8); every JSON
benchc writes is strict JSON (M8); a metrics file whose times are not timestamps is refused
(M6). A config's sizes are bounded in test_weights.py (M1)."""

from __future__ import annotations

import json

import pytest
from report_store import calibrate
from scripted_points import ok_metrics

from benchc.figures import finite_json
from benchc.results.calibrations import calibration_rows, latest_calibrations
from benchc.results.store import Store

from helpers import REPO, SPECS, run_cli


def strict_json(text: str):
    """JSON as the standard has it: Infinity and NaN are not JSON."""

    def refuse(token):
        raise AssertionError(f"{token} in benchc's JSON")

    return json.loads(text, parse_constant=refuse)


def calibration_file(target: str, **figures) -> dict:
    data = {"schema": "benchc-calibration", "schema_version": 1, "status": "ok", "target": target,
            "host": "node-1", "smoke": False, "nodes": 1, "world_size": 2, "device_name": None,
            "matmul_tflops": {"bf16": 700.0, "fp32": 50.0}, "memory_tb_s": 3.0, "host_to_device_gb_s": None,
            "collectives": {"all_reduce": {"bus_gb_s": 5.0, "bytes": 1 << 20}}, "launch_us": 4.0,
            "started_at": "2026-12-01T10:00:00+00:00", "ended_at": "2026-12-01T10:01:00+00:00"}  # fmt: skip
    data.update(figures)
    return data


# ------------------------------------------------------------------ M2: an unknown target


def test_a_calibration_of_a_target_benchc_does_not_know_is_kept_and_shown_as_such(tmp_path):
    db = tmp_path / "r.db"
    calibrate(db, "tpu-v9", {"bf16": 900.0}, 4.0)
    calibrate(db, "cpu", {"fp32": 1.0, "bf16": 2.0}, 0.02)
    shown = run_cli("targets", "--db", str(db), cwd=REPO)
    assert shown.code == 0, shown.err
    assert "tpu-v9 (not a target this benchc knows; no datasheet): bf16 900 TFLOP/s" in shown.out
    assert "  cpu: bf16 2" in shown.out
    facts = strict_json(run_cli("targets", "--json", "--db", str(db), cwd=REPO).out)
    assert facts["calibrations_of_unknown_targets"]["tpu-v9"]["matmul_tflops"] == {"bf16": 900.0}
    assert facts["cpu"]["calibration"]["target"] == "cpu"
    for command in (("check", str(SPECS / "sd3.bench"), "--target", "cpu", "--smoke"),
                    ("estimate", str(SPECS / "sd3.bench"), "--target", "cpu", "--smoke")):  # fmt: skip
        assert run_cli(*command, "--db", str(db), cwd=REPO).code == 0


# ------------------------------------------------------------------ M8: implausible figures


@pytest.mark.parametrize("figures, words", [
    ({"matmul_tflops": {"bf16": 1e9}}, "bf16 matmul is 1e+09 TFLOP/s"),
    ({"matmul_tflops": {"bf16": 1.6 * 989}}, "1.6x the h100 datasheet's 989"),
    ({"memory_tb_s": 5e-324}, "copy bandwidth is 5e-324 TB/s, not a measured figure"),
    ({"collectives": {"all_reduce": {"bus_gb_s": 1e-310, "bytes": 1}}}, "all_reduce bus bandwidth"),
])  # fmt: skip
def test_a_calibration_no_chip_can_measure_is_refused_at_ingest(tmp_path, figures, words):
    path = tmp_path / "calibration.json"
    path.write_text(json.dumps(calibration_file("h100", **figures)))
    db = tmp_path / "r.db"
    refused = run_cli("calibrate", "--ingest", str(path), "--db", str(db), cwd=REPO)
    assert refused.code == 2 and "implausible" in refused.err and words in refused.err, refused.err
    assert "Traceback" not in refused.err
    if db.exists():
        with Store(db) as store:
            assert calibration_rows(store) == []


def test_a_programs_implausible_calibration_is_kept_flagged_and_never_used(tmp_path):
    db = tmp_path / "r.db"
    calibrate(db, "h100", {"bf16": 1e9}, 3.0)  # as a calibration program's file is stored
    with Store(db) as store:
        (row,) = calibration_rows(store)
        assert latest_calibrations(store) == {}
    assert row["status"] == "failed" and row["cause"].startswith("implausible: its bf16 matmul is 1e+09")
    asked = ("estimate", str(SPECS / "sd3.bench"), "-t", "h100", "--json", "--db", str(db))
    for record in strict_json(run_cli(*asked, cwd=REPO).out)["estimates"]:
        assert record["calibration"] is None
        assert all(ref["mfu"] is None or ref["mfu"] < 1 for ref in record["references"])
    shown = run_cli("targets", "--db", str(db), cwd=REPO).out
    assert "No calibrations stored" in shown  # none usable


def test_every_json_benchc_prints_is_strict_json(tmp_path):
    db = tmp_path / "r.db"
    calibrate(db, "cpu", {"fp32": 1.0, "bf16": 2.0}, 0.02)
    for command in (("estimate", str(SPECS / "beluga-infer.bench"), "--json"), ("targets", "--json"),
                    ("plan", str(SPECS / "sd3.bench"), "--json")):  # fmt: skip
        result = (
            run_cli(*command, "--db", str(db), cwd=REPO)
            if command[0] != "plan"
            else run_cli(*command, cwd=REPO)
        )
        assert result.code == 0, result.err
        strict_json(result.out)
    odd = {"a": [float("inf"), 1.0, {"b": float("nan")}], "c": "x"}
    assert finite_json(odd) == {"a": [None, 1.0, {"b": None}], "c": "x"}


# ------------------------------------------------------------------ M6: times that are not timestamps


@pytest.mark.parametrize("started_at", ["zzz", "9999-12-31T00:00:00+00:00", "2026-12-06T10:00:00", "", 3])
def test_a_metrics_file_whose_start_is_not_a_timestamp_is_refused(tmp_path, started_at):
    metrics = ok_metrics()
    metrics["started_at"] = started_at
    path = tmp_path / "metrics.json"
    path.write_text(json.dumps(metrics))
    db = tmp_path / "r.db"
    refused = run_cli("ingest", str(path), "--db", str(db), cwd=REPO)
    assert refused.code == 2 and "started_at" in refused.err and "Traceback" not in refused.err, refused.err
    assert not db.exists()


def test_calibrate_list_shows_failed_and_implausible_calibrations_too(tmp_path):
    db = tmp_path / "r.db"
    assert run_cli("calibrate", "--list", "--db", str(db), cwd=REPO).out == "no calibrations stored\n"
    assert not db.exists()  # a read never makes a store
    calibrate(db, "cpu", {"fp32": 1.0, "bf16": 2.0}, 0.02)
    calibrate(db, "h100", {"bf16": 1e9}, 3.0)
    listed = run_cli("calibrate", "--list", "--db", str(db), cwd=REPO)
    assert listed.code == 0, listed.err
    lines = listed.out.splitlines()
    assert lines[0].split() == ["calibration", "ended", "target", "host", "sizes", "status", "cause"]
    assert any(" cpu " in line and " ok" in line for line in lines[1:])
    assert any(
        " h100 " in line and "failed" in line and "implausible: its bf16 matmul" in line for line in lines
    )
    only = run_cli("calibrate", "--list", "-t", "h100", "--db", str(db), cwd=REPO).out
    assert " cpu " not in only and " h100 " in only


PROFILES = [("cpu", 3.0, True), ("cuda", 6.0, True), ("cpu", 1.0, False), ("cuda", 2.5, False)]


@pytest.mark.parametrize("activity, factor, refused", PROFILES)
def test_a_profile_whose_parts_exceed_its_time_is_refused(tmp_path, activity, factor, refused):
    """On the CPU the categories share one timeline; on an accelerator streams overlap, up to 4x."""
    metrics = ok_metrics()
    names = ("matmul", "attention", "norm_elementwise", "communication", "optimizer", "copy", "other", "idle")
    categories = {name: 0.1 * factor / len(names) for name in names}
    metrics["profile"] = {"steps": 2, "profiled_s": 0.1, "activity": activity, "trace": "trace.json",
                          "top": {}, "categories": categories}  # fmt: skip
    path = tmp_path / "metrics.json"
    path.write_text(json.dumps(metrics))
    result = run_cli("ingest", str(path), "--db", str(tmp_path / "r.db"), cwd=REPO)
    if refused:
        assert result.code == 2 and "its profile adds up to" in result.err and f"on {activity}" in result.err
        assert "Traceback" not in result.err
    else:
        assert "its profile" not in result.err


def test_calibrate_ingest_names_the_file_it_was_given_and_the_command_for_a_runs_metrics(tmp_path):
    metrics = tmp_path / "metrics-1.json"
    metrics.write_text(json.dumps(ok_metrics()))
    told = run_cli("calibrate", "--ingest", str(metrics), "--db", str(tmp_path / "r.db"), cwd=REPO)
    assert told.code == 2 and "metrics-1.json is a run's metrics file, not a calibration" in told.err
    assert f"`benchc ingest {metrics}`" in told.err and "calibration.json" not in told.err
    odd = tmp_path / "mine.json"
    odd.write_text(json.dumps({"schema": "benchc-calibration", "status": "ok"}))
    told = run_cli("calibrate", "--ingest", str(odd), "--db", str(tmp_path / "r.db"), cwd=REPO)
    assert told.code == 2 and "mine.json does not match the benchc calibration schema" in told.err
    assert "calibration.json" not in told.err and not (tmp_path / "r.db").exists()


def test_calibrations_of_two_hosts_at_the_same_moment_are_both_stored(tmp_path):
    """The key that finds a calibration file stored already is its target, host and start:
    the same file again is stored once, another host's of the same moment is its own."""
    db = tmp_path / "r.db"
    files = []
    for host in ("node-1", "node-2", "node-1"):
        path = tmp_path / f"{host}-{len(files)}.json"
        path.write_text(json.dumps(calibration_file("cpu", host=host, memory_tb_s=0.02,
                                                    matmul_tflops={"fp32": 1.0, "bf16": 2.0})))  # fmt: skip
        files.append(path)
    said = [run_cli("calibrate", "--ingest", str(p), "--db", str(db), cwd=REPO).out for p in files]
    assert "stored (ok)" in said[0] and "stored (ok)" in said[1] and "already stored" in said[2]
    with Store(db) as store:
        assert sorted(r["host"] for r in calibration_rows(store)) == ["node-1", "node-2"]


def test_a_calibrations_collectives_bound_only_plans_of_the_layout_they_ran_on(tmp_path):
    """matmul and memory are the chip's; a bus bandwidth is the layout's (nodes x processes)."""
    from benchc.results.calibrations import finish_calibration, start_calibration

    db = tmp_path / "r.db"
    data = calibration_file("h100", world_size=8, nodes=1,
                            collectives={"all_reduce": {"bus_gb_s": 300.0, "bytes": 1 << 20}})  # fmt: skip
    with Store(db) as store:
        made = start_calibration(store, target="h100", host="node-1", smoke=False, world_size=8,
                                 build_path=None, environment={})  # fmt: skip
        finish_calibration(store, made, "ok", None, data)
    asked = ("estimate", str(SPECS / "sd3.bench"), "-t", "h100", "--db", str(db))
    for overrides, used in ((("--set", "cluster.nodes=1", "--set", "parallel.data=8"), True), ((), False)):
        (record, *_) = strict_json(run_cli(*asked, *overrides, "--json", cwd=REPO).out)["estimates"]
        assert record["calibration"]["collectives_used"] is used
        text = run_cli(*asked, *overrides, cwd=REPO).out
        assert ("all_reduce 300 GB/s bus" in text) is used
        assert (
            "its collectives ran on 1 x 8 (nodes x processes), not this plan's layout" in text
        ) is not used


def test_a_plan_uses_the_calibration_of_its_layout_where_one_is_stored(tmp_path):
    """Two calibrations of h100: the older on 1 x 8, the newer on 1 x 2. A 1 x 8 plan uses the
    older (its links were measured), a 2 x 8 plan the newer, without its collectives."""
    from benchc.results.calibrations import finish_calibration, start_calibration

    db = tmp_path / "r.db"
    with Store(db) as store:
        for world, bus, started in (
            (8, 300.0, "2026-12-01T10:00:00+00:00"),
            (2, 100.0, "2026-12-02T10:00:00+00:00"),
        ):
            links = {"all_reduce": {"bus_gb_s": bus, "bytes": 1 << 20}}
            data = calibration_file("h100", world_size=world, nodes=1, started_at=started, collectives=links)
            made = start_calibration(store, target="h100", host="node-1", smoke=False, world_size=world,
                                     build_path=None, environment={})  # fmt: skip
            finish_calibration(store, made, "ok", None, data)
    asked = ("estimate", str(SPECS / "sd3.bench"), "-t", "h100", "--db", str(db), "--json")
    one_node = ("--set", "cluster.nodes=1", "--set", "parallel.data=8")
    (record, *_) = strict_json(run_cli(*asked, *one_node, cwd=REPO).out)["estimates"]
    assert record["calibration"]["world_size"] == 8 and record["calibration"]["collectives_used"]
    (record, *_) = strict_json(run_cli(*asked, cwd=REPO).out)["estimates"]
    assert record["calibration"]["world_size"] == 2 and not record["calibration"]["collectives_used"]


def test_calibrations_stored_in_the_same_millisecond_keep_the_order_they_were_stored(tmp_path, monkeypatch):
    """Two calibrations whose start times are equal (the store's clock has milliseconds; a fast
    disk stores two within one): the later stored is the later, never a coin toss of their ids
    (which made the layout test above fail one run in several)."""
    import benchc.results.calibrations as calibrations
    from benchc.results.calibrations import finish_calibration, start_calibration

    monkeypatch.setattr(calibrations, "now", lambda: "2026-12-07T00:00:00.000+00:00")
    with Store(tmp_path / "r.db") as store:
        for world in (8, 2, 4, 1):
            made = start_calibration(store, target="h100", host="node-1", smoke=False, world_size=world,
                                     build_path=None, environment={})  # fmt: skip
            finish_calibration(store, made, "ok", None, calibration_file("h100", world_size=world, nodes=1))
        assert latest_calibrations(store)["h100"].world_size == 1
        assert [row["id"] for row in calibration_rows(store)] == [
            c.id for c in calibrations.usable_calibrations(store)["h100"]
        ]
        assert [c.world_size for c in calibrations.usable_calibrations(store)["h100"]] == [8, 2, 4, 1]
