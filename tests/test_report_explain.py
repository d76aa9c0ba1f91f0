"""benchc report explains each ratio (peak x MFU x devices x work, an identity of the recorded
figures) and, with --prices FILE, what a unit of work costs; bad prices files get located
errors and write nothing."""

from __future__ import annotations

import json
import subprocess
import sys

from scripted_points import ok_metrics

from benchc.catalog.targets import TARGETS
from benchc.report.headline import sig

from conftest import REPO

FLOPS = 2.0e12  # model FLOPs per image, the same model on every target


def benchc(*args, db):
    return subprocess.run([sys.executable, "-m", "benchc", *args, "--db", str(db)], cwd=REPO,
                          capture_output=True, text=True, timeout=300)  # fmt: skip


def metrics_for(target: str, throughput: float, world: int = 2) -> dict:
    m = ok_metrics(throughput, target=target, point="batch-16")
    m["world_size"] = world
    m["throughput"]["per_device"] = throughput / world
    achieved = throughput * FLOPS / world
    peak = TARGETS[target].peak_flops("bf16") if target != "cpu" else None
    m["flops"] = {"model_flops_per_sample": FLOPS, "achieved_per_device": achieved,
                  "peak_per_device": peak, "mfu": achieved / peak if peak else None}  # fmt: skip
    return m


def stored(tmp_path, *runs) -> object:
    db = tmp_path / "r.db"
    for index, m in enumerate(runs):
        path = tmp_path / f"m{index}.json"
        path.write_text(json.dumps(m))
        assert benchc("ingest", str(path), db=db).returncode == 0
    return db


def test_each_ratio_is_split_into_peak_and_mfu_and_the_product_is_the_ratio(tmp_path):
    db = stored(tmp_path, metrics_for("gaudi2", 100.0), metrics_for("h100", 150.0), metrics_for("cpu", 10.0))
    proc = benchc("report", "--baseline", "gaudi2", "-o", str(tmp_path / "out"), db=db)
    assert proc.returncode == 0, proc.stderr
    page = (tmp_path / "out" / "report.md").read_text()
    peak = TARGETS["h100"].peak_flops("bf16") / TARGETS["gaudi2"].peak_flops("bf16")
    mfu = 1.5 / peak  # the same work at 1.5x the rate on a device peak x faster
    line = next(x for x in page.splitlines() if x.startswith("- h100 at batch-16"))
    assert f"1.50x gaudi2 = peak {sig(peak)}x" in line, line
    assert f"x MFU {sig(mfu)}x" in line and "product" not in line, line  # product == ratio
    assert "- cpu at batch-16: 0.100x, not split: the dense peak of cpu is unknown" in page
    assert "No prices were given" in page


def test_different_device_counts_and_models_are_factors_of_their_own(tmp_path):
    big = metrics_for("h100", 300.0, world=4)
    small = metrics_for("gaudi2", 100.0, world=2)
    small["flops"]["model_flops_per_sample"] = FLOPS  # same work
    db = stored(tmp_path, small, big)
    proc = benchc("report", "--baseline", "gaudi2", "-o", str(tmp_path / "out"), db=db)
    assert proc.returncode == 0, proc.stderr
    line = next(
        x for x in (tmp_path / "out" / "report.md").read_text().splitlines() if x.startswith("- h100")
    )
    assert "x devices 2.00x (4 / 2)" in line and "product" not in line, line


def test_prices_give_cost_per_unit_and_price_performance(tmp_path):
    db = stored(tmp_path, metrics_for("gaudi2", 100.0), metrics_for("h100", 150.0), metrics_for("cpu", 10.0))
    prices = tmp_path / "prices.toml"
    prices.write_text('currency = "USD"\n[per_device_hour]\nh100 = 4.0\ngaudi2 = 2.0\n')
    proc = benchc(
        "report", "--baseline", "gaudi2", "--prices", str(prices), "-o", str(tmp_path / "out"), db=db
    )
    assert proc.returncode == 0, proc.stderr
    page = (tmp_path / "out" / "report.md").read_text()
    h100 = 2 * 4.0 / 3600 / 150.0 * 1000  # 2 devices x price per second / images per second
    gaudi2 = 2 * 2.0 / 3600 / 100.0 * 1000
    assert (
        f"- gaudi2 at batch-16: {sig(gaudi2)} USD per 1,000 images (2 devices x 2.00 USD/device-hour)" in page
    )
    assert f"- h100 at batch-16: {sig(h100)} USD per 1,000 images" in page
    assert f"price-performance {sig(gaudi2 / h100)}x gaudi2 (>1 = cheaper)" in page
    assert f"no price in {prices} for: cpu" in page


def test_a_bad_prices_file_is_a_located_error_and_nothing_is_written(tmp_path):
    db = stored(tmp_path, metrics_for("h100", 150.0))
    cases = {
        "unknown target": (
            "[per_device_hour]\nh100 = 4.0\nh101 = 3.0\n",
            ":3:1: error: unknown target 'h101'",
        ),
        "not toml": ("[per_device_hour\nh100 = 4\n", ":1:"),
        "negative": ("[per_device_hour]\nh100 = -4\n", ":2:1: error: the price of h100 must be above 0"),
        "a string": ('[per_device_hour]\nh100 = "4"\n', ":2:1: error: the price of h100 must be a number"),
        "no table": ('currency = "USD"\n', "has no [per_device_hour] table"),
        "unknown key": ("[per_device_hour]\nh100 = 4.0\n[extra]\n", "unknown key 'extra'"),
    }
    for name, (text, expected) in cases.items():
        prices = tmp_path / f"{name.replace(' ', '_')}.toml"
        prices.write_text(text)
        out = tmp_path / f"out-{name.replace(' ', '_')}"
        proc = benchc("report", "--prices", str(prices), "-o", str(out), db=db)
        assert proc.returncode == 2, (name, proc.stderr)
        assert expected in proc.stderr and "Traceback" not in proc.stderr, (name, proc.stderr)
        assert not out.exists(), name
    proc = benchc("report", "--prices", str(tmp_path / "missing.toml"), "-o", str(tmp_path / "o"), db=db)
    assert proc.returncode == 2 and "no such file" in proc.stderr
