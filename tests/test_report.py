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

from benchc.report.headline import sig
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
        assert row[2] == sig(record.metrics["throughput"]["job"])
        assert row[3] == "1.00x"  # the only target is its own baseline
        assert row[4] == sig(record.metrics["throughput"]["per_device"])
        assert row[5] == sig(record.metrics["step_time_s"]["median"] * 1e3)
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
    assert rows["cpu"][3] == "1.00x"
    assert rows["h100"][3] == "1.50x"  # median of 150, 160, 140 over 100
    low, high = re.search(r"\[([\d.,]+), ([\d.,]+)\]", rows["h100"][2]).groups()
    summary = summarize([150.0, 160.0, 140.0])
    assert (low, high) == (sig(summary.ci_low), sig(summary.ci_high))
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


def test_significant_figures():
    assert [sig(v) for v in (1254.0, 0.17399, 0.151, 12.0, 9.996, 0.0004567, 0.0, 123456.7)] == [
        "1,250", "0.174", "0.151", "12.0", "10.0", "0.000457", "0", "123,000",
    ]  # fmt: skip
    assert sig(float("nan")) == "-" and sig(None) == "-"


def store_trials(db, rows: dict, plan: dict, metric_fields=lambda m, v: None):
    """rows: (target, point) -> values of the trials, stored as one series each."""
    with Store(db) as store:
        for (target, point), values in rows.items():
            for trial, value in enumerate(values, 1):
                m = ok_metrics(1.0 / value, target=target, point=point)
                metric_fields(m, value)
                run_id = store.start(experiment="sd3_large_infer", target=target, point=point,
                                     point_values={"train.batch": int(point.split("-")[1])}, smoke=False,
                                     spec_path=None, spec_sha256=None, build_path=None, log_path=None,
                                     environment={}, series=f"{target}-{point}", trial=trial,
                                     plan=plan(target, point))  # fmt: skip
                store.finish(run_id, "ok", None, m)


def test_a_lower_is_better_headline_leads_the_table_the_ratios_and_the_chart(tmp_path):
    """S3's measure.metric is s_per_image: the table's headline column, the ratios (x faster)
    and the chart are seconds per image, not images/s."""
    db = tmp_path / "r.db"

    def pipeline(m, seconds):
        m["pipeline"] = {"s_per_image": seconds, "denoise_s_per_image": seconds / 2, "denoising_steps": 30,
                         "guidance": 7.0, "resolution": 1024}  # fmt: skip
        m["metric"] = "s_per_image"

    def plan(target, point):
        return {"measure": {"metric": "s_per_image"}, "references": [], "declared_references": []}

    store_trials(db, {("a100", "batch-1"): [4.0, 4.0], ("gaudi2", "batch-1"): [2.0, 2.1]}, plan, pipeline)
    assert benchc("report", "--baseline", "a100", "-o", str(tmp_path / "out"), db=db).returncode == 0
    page = (tmp_path / "out" / "report.md").read_text()
    assert "| point | target | seconds per image (s/image, lower is better) | vs a100 (>1 = better) |" in page
    rows = {r[1]: r for r in table_rows(page)}
    assert rows["gaudi2"][2].startswith("2.05 [") and rows["gaudi2"][3] == "1.95x"  # 4.0 / 2.05: faster
    assert rows["a100"][3] == "1.00x"
    assert_chart(tmp_path / "out" / "sd3_large_infer.png")


def test_every_reference_is_placed_or_listed_with_its_reason(tmp_path):
    db = tmp_path / "r.db"
    declared = [
        {"label": "gaudi2 b16 img", "target": "gaudi2", "value": 900.0, "unit": "img/s", "where": {}},
        {"label": "gaudi2 b64", "target": "gaudi2", "value": 1300.0, "unit": "images/s",
         "where": {"train.batch": 64}},
        {"label": "a100 b16", "target": "a100", "value": 381.0, "unit": "images/s", "where": {}},
        {"label": "gaudi2 watts", "target": "gaudi2", "value": 600.0, "unit": "W", "where": {}},
        {"label": "gaudi2 per card", "target": "gaudi2", "value": 58.0, "unit": "img/s/card", "where": {}},
    ]  # fmt: skip

    def plan(target, point):
        applying = [r for r in declared if r["target"] == target and not r["where"]]
        return {
            "measure": {"metric": "images_per_s"},
            "references": applying,
            "declared_references": declared,
        }

    store_trials(db, {("gaudi2", "batch-16"): [0.001]}, plan)
    assert benchc("report", "-o", str(tmp_path / "out"), db=db).returncode == 0
    page = (tmp_path / "out" / "report.md").read_text()
    (row,) = table_rows(page)
    assert "900 img/s (published)" in row[-1] and "58.0 img/s/card (published)" in row[-1]
    assert "- reference a100 b16 not shown: no run of target a100 in this report" in page
    assert "- reference gaudi2 b64 not shown: where train.batch = 64 matches no point that ran" in page
    assert '- reference gaudi2 watts not shown: its unit "W" is neither the report\'s "images/s"' in page


def test_read_commands_create_no_store(tmp_path):
    missing = tmp_path / "nowhere" / "x.db"
    for command in (["runs"], ["show", "abc"], ["export"], ["status"], ["report", "-o", str(tmp_path / "o")]):
        result = benchc(*command, db=missing)
        assert result.returncode in (0, 2) and "Traceback" not in result.stderr, command
    assert not missing.parent.exists()
    assert "no runs stored (no results store at" in benchc("runs", db=missing).stdout


def test_the_chart_labels_bars_in_3_figures_draws_no_caps_for_one_trial_and_keeps_references_off_labels():
    import matplotlib.pyplot as plt
    from matplotlib.collections import LineCollection, PathCollection
    from matplotlib.container import ErrorbarContainer

    from benchc.report.collect import Reference, sections
    from benchc.report.plot import draw
    from benchc.results.store import RunRecord

    def record(target, value, trial, series):
        return RunRecord(id=f"{target}{trial}", experiment="e", target=target, point="p", point_values={},
                         smoke=False, spec_path=None, spec_sha256=None, build_path=None, log_path=None,
                         status="ok", cause=None, log_tail=None, metrics=ok_metrics(value, target=target),
                         environment={}, plan={}, series=series, trial=trial, source="run",
                         started_at=f"2026-01-01T00:00:0{trial}", ended_at=None)  # fmt: skip

    (section,) = sections([record("a", 0.17399, 1, "s1"), record("b", 1254.0, 1, "s2")])
    rows = [r.__class__(**{**r.__dict__, "references": (Reference(0.15, "images/s", "pub", None),)})
            if r.target == "a" else r for r in section.rows]  # fmt: skip
    figure = draw(section.__class__(**{**section.__dict__, "rows": tuple(rows)}))
    axes = figure.axes[0]
    labels = sorted(t.get_text() for t in axes.texts)
    assert labels == ["0.174", "1,250"]
    assert not [c for c in axes.containers if isinstance(c, ErrorbarContainer) and c.lines[1]]
    assert any(isinstance(c, LineCollection) for c in axes.collections)  # the reference, a line
    assert not [c for c in axes.collections if isinstance(c, PathCollection)]  # no marker on a label
    plt.close(figure)
