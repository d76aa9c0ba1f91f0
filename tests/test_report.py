"""benchc report: tables checked against the stored values, charts opened and looked at."""

from __future__ import annotations

import json
import re
import subprocess
import sys
import time

import matplotlib.image
import pytest
from scripted_points import ok_metrics

from benchc.report.stats import summarize, t95
from benchc.results.store import Store

from conftest import REPO


def benchc(*args, db, cwd=REPO):
    return subprocess.run([sys.executable, "-m", "benchc", *args, "--db", str(db)], cwd=cwd,
                          capture_output=True, text=True, timeout=300)  # fmt: skip


def table_rows(markdown: str) -> list[list[str]]:
    return [
        [cell.strip() for cell in line.strip("|").split("|")]
        for line in markdown.splitlines()
        if line.startswith("| ") and not line.startswith("| point")
    ]


def assert_chart(path, min_width=400, min_height=300):
    image = matplotlib.image.imread(path)
    height, width = image.shape[:2]
    assert width >= min_width and height >= min_height
    assert image[..., :3].std() > 0.05  # not blank: bars, text and axes differ from the page


def test_smoke_run_of_s1_stores_both_points_and_reports_them(tmp_path):
    db = tmp_path / "results.db"
    started = time.monotonic()
    run = benchc("run", "specs/sd3.bench", "--target", "cpu", "--smoke", "-o", str(tmp_path / "build"), db=db)
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]
    assert time.monotonic() - started < 180
    assert "step 5/5" in run.stdout  # progress was shown
    records = Store(db).runs()
    assert [(r.point, r.status) for r in records] == [("batch-16", "ok"), ("batch-32", "ok")]

    report = benchc("report", "-o", str(tmp_path / "reports"), db=db)
    assert report.returncode == 0, report.stderr
    page = (tmp_path / "reports" / "report.md").read_text()
    rows = table_rows(page)
    assert [r[:2] for r in rows] == [["batch-16", "cpu"], ["batch-32", "cpu"]]
    for row, record in zip(rows, records):
        assert row[2] == f"{record.metrics['throughput']['job']:,.1f}"
        assert row[3] == f"{record.metrics['throughput']['per_device']:,.1f}"
        assert row[5] == f"{record.metrics['step_time_s']['median'] * 1e3:,.1f}"
        assert row[8] == "-"  # no MFU on the cpu: its peak is unknown
    assert "smoke" in page
    assert_chart(tmp_path / "reports" / "sd3_mmdit_train-smoke.png")


def test_report_ratios_confidence_intervals_noise_and_references(tmp_path):
    db = tmp_path / "r.db"
    files = []
    for index, (target, value) in enumerate(
        [("cpu", 100.0), ("h100", 150.0), ("h100", 160.0), ("h100", 140.0)]
    ):
        metrics = ok_metrics(value, target=target, point="batch-16")
        path = tmp_path / f"m{index}.json"
        path.write_text(json.dumps(metrics))
        files.append(path)
    # one cpu run through ingest; three h100 trials stored as one series (as `run --repeat 3`
    # stores them), with a published reference in their plan
    assert benchc("ingest", str(files[0]), db=db).returncode == 0
    with Store(db) as store:
        series = "h100-trials"
        for path in files[1:]:
            m = json.loads(path.read_text())
            run_id = store.start(experiment=m["experiment"], target=m["target"], point=m["point"],
                                 point_values={}, smoke=True, spec_path=None, spec_sha256=None,
                                 build_path=None, log_path=None, environment={}, series=series,
                                 plan={"references": [{"label": "pub", "value": 200.0, "unit": "images/s",
                                                       "source": "paper"}]},
                                 trial=1)  # fmt: skip
            store.finish(run_id, "ok", None, m)
    report = benchc("report", "--baseline", "cpu", "-o", str(tmp_path / "out"), db=db)
    assert report.returncode == 0, report.stderr
    rows = {r[1]: r for r in table_rows((tmp_path / "out" / "report.md").read_text())}
    assert rows["cpu"][4] == "1.00x"
    assert rows["h100"][4] == "1.50x"  # median of 150, 160, 140 over 100
    low, high = map(float, re.search(r"\[([\d.,]+), ([\d.,]+)\]", rows["h100"][2]).groups())
    summary = summarize([150.0, 160.0, 140.0])
    assert (low, high) == (round(summary.ci_low, 1), round(summary.ci_high, 1))
    assert "(noisy)" in rows["h100"][2]  # cv = 6.7% > 5%
    assert rows["h100"][9] == "2"  # world size: these metrics record no hosts
    assert rows["h100"][10] == "3"
    assert "200 images/s (published)" in rows["h100"][11]
    assert_chart(tmp_path / "out" / "sd3_mmdit_train-smoke.png")

    html = benchc("report", "--format", "html", "-o", str(tmp_path / "html"), db=db)
    assert html.returncode == 0
    page = (tmp_path / "html" / "report.html").read_text()
    assert "<table>" in page and "1.50x" in page and "sd3_mmdit_train-smoke.png" in page


def test_report_with_nothing_stored_is_a_clear_error(tmp_path):
    result = benchc("report", "-o", str(tmp_path / "out"), db=tmp_path / "empty.db")
    assert result.returncode == 2 and "no runs to report" in result.stderr


def test_statistics():
    one = summarize([10.0])
    assert (one.n, one.median, one.ci_low, one.cv, one.noisy) == (1, 10.0, None, None, False)
    quiet = summarize([100.0, 101.0, 99.0])
    assert quiet.median == 100.0 and not quiet.noisy
    assert quiet.ci_low == pytest.approx(100.0 - 4.303 * 1.0 / 3**0.5)
    assert t95(1) == 12.706 and t95(22) == 2.086 and t95(1000) == 1.960  # between rows: the smaller df
