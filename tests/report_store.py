"""Runs and calibrations in a real results store, in-process, for the report's tests of
measured ceilings and profiles: runs stored from metrics as programs write them, with the plans
their builds keep (S1 at batch 16, its roofline), and calibrations as benchc calibrate stores
them."""

from __future__ import annotations

from functools import cache
from pathlib import Path

from scripted_points import ok_metrics

from benchc.catalog.targets import TARGETS
from benchc.pipeline import plan_spec
from benchc.plan.roofline import roofline
from benchc.report.collect import sections
from benchc.report.output import write_report
from benchc.results.calibrations import finish_calibration, latest_calibrations, start_calibration
from benchc.results.store import Store

from helpers import SPECS

FLOPS = 2.0e12  # model FLOPs per image


def calibrate(db: Path, target: str, tflops: dict, memory_tb_s: float, host: str = "node-1") -> None:
    """A finished calibration of `target`, stored as `benchc calibrate` stores one."""
    data = {"schema": "benchc-calibration", "schema_version": 1, "status": "ok", "target": target,
            "host": host, "smoke": False, "nodes": 1, "world_size": 2, "device_name": None,
            "matmul_tflops": tflops, "memory_tb_s": memory_tb_s, "host_to_device_gb_s": None,
            "collectives": {"all_reduce": {"bus_gb_s": 5.0, "bytes": 1 << 20}}, "launch_us": 4.0}  # fmt: skip
    with Store(db) as store:
        calibration_id = start_calibration(store, target=target, host=host, smoke=False, world_size=2,
                                           build_path=None, environment={})  # fmt: skip
        finish_calibration(store, calibration_id, "ok", None, data)


@cache
def stored_plan(target: str) -> dict:
    """The plan a build of S1 keeps in the store, with its roofline (as codegen/points.py)."""
    (plan,) = plan_spec(SPECS / "sd3.bench", [target], ["train.batch=16"], smoke=target == "cpu").plans
    return {**plan.to_dict(), "roofline": roofline(plan).record()}


def store_run(db: Path, target: str, throughput: float, world: int = 2, profile: dict | None = None) -> dict:
    """One ok run of `target` at batch-16, its metrics as a program writes them; returns the plan."""
    plan = stored_plan(target)
    m = ok_metrics(throughput, target=target, point="batch-16")
    m["world_size"] = world
    m["throughput"]["per_device"] = throughput / world
    achieved = throughput * FLOPS / world
    peak = TARGETS[target].peak_flops(plan["workload"]["precision"])
    m["flops"] = {"model_flops_per_sample": FLOPS, "achieved_per_device": achieved,
                  "peak_per_device": peak, "mfu": achieved / peak if peak else None}  # fmt: skip
    if profile is not None:
        m["profile"] = profile
    with Store(db) as store:
        run_id = store.start(experiment="sd3_mmdit_train", target=target, point="batch-16",
                             point_values={"train.batch": 16}, smoke=False, spec_path=None, spec_sha256=None,
                             build_path=None, log_path=None, environment={}, series=f"{target}-s", trial=1,
                             plan=plan)  # fmt: skip
        store.finish(run_id, "ok", None, m)
    return plan


def report(db: Path, out: Path, page_format: str = "md", calibrated: bool = True) -> str:
    """The report as `benchc report` writes it, with the store's calibrations (or without asking)."""
    with Store(db) as store:
        found = sections(store.latest_runs(None), None, latest_calibrations(store) if calibrated else None)
    name = "report." + page_format
    write_report(found, out, name, page_format, None)
    return (out / name).read_text()


def table(page: str) -> dict[str, dict[str, str]]:
    lines = [line for line in page.splitlines() if line.startswith("| ")]
    header = [c.strip() for c in lines[0].strip("|").split("|")]
    rows = [dict(zip(header, (c.strip() for c in line.strip("|").split("|")))) for line in lines[1:]
            if line.startswith("| batch")]  # fmt: skip
    return {row["target"]: row for row in rows if "MFU" in row}
