"""benchc report: tables checked against the stored values, charts opened and looked at."""

from __future__ import annotations

import json
import math
import re
import statistics
import subprocess
import sys
import time

import matplotlib.image
import pytest
from scripted_points import ok_metrics

from benchc.figures import sig
from benchc.report.stats import summarize, t95
from benchc.results.store import Store

from helpers import REPO


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


def parsed_html(page: str) -> dict:
    """The report page as html.parser reads it: each table's rows of cell texts, each image's
    src, each paragraph's and each list item's text."""
    from html.parser import HTMLParser

    class Reader(HTMLParser):  # the page's <li> are closed, as render.py writes them
        def __init__(self):
            super().__init__()
            self.found = {"tables": [], "images": [], "paragraphs": [], "items": []}
            self.text, self.cell, self.paragraph = [], None, None

        def handle_starttag(self, tag, attrs):
            if tag == "table":
                self.found["tables"].append([])
            elif tag == "tr":
                self.found["tables"][-1].append([])
            elif tag in ("td", "th"):
                self.cell = []
            elif tag == "img":
                self.found["images"].append(dict(attrs)["src"])
            elif tag in ("p", "li"):
                self.paragraph = []

        def handle_endtag(self, tag):
            if tag in ("td", "th"):
                self.found["tables"][-1][-1].append("".join(self.cell))
                self.cell = None
            elif tag in ("p", "li") and self.paragraph is not None:
                self.found["paragraphs" if tag == "p" else "items"].append("".join(self.paragraph))
                self.paragraph = None

        def handle_data(self, data):
            for part in (self.cell, self.paragraph):
                if part is not None:
                    part.append(data)

    reader = Reader()
    reader.feed(page)
    reader.close()
    return reader.found


@pytest.mark.integration
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
        assert row[4] == (record.metrics.get("optimize") or "-")  # the tier, as the program recorded it
        assert row[5] == sig(record.metrics["throughput"]["per_device"])
        assert row[6] == sig(record.metrics["step_time_s"]["median"] * 1e3)
        assert row[9] == "-"  # no MFU on the cpu: its peak is unknown
    assert "| vs batch-16 (same target) |" in page  # the sweep: each point against the first
    first, second = (r.metrics["throughput"]["job"] for r in records)
    assert (rows[0][-1], rows[1][-1]) == ("1.00x", f"{sig(second / first)}x")
    assert "smoke" in page
    assert_chart(tmp_path / "reports" / "sd3_mmdit_train-smoke.png")
    # the HTML page, read by a real HTML parser: the same table, the chart it names, each list
    html = benchc("report", "--format", "html", "-o", str(tmp_path / "html"), db=db)
    assert html.returncode == 0, html.stderr
    parsed = parsed_html((tmp_path / "html" / "report.html").read_text())
    (table,) = parsed["tables"]
    assert table[0][:4] == ["point", "target", "throughput (images/s)", "vs cpu (>1 = better)"]
    assert table[0][-1] == "vs batch-16 (same target)" and table[1:] == rows  # the Markdown's cells
    (image,) = parsed["images"]
    assert_chart(tmp_path / "html" / image)
    assert (
        "Against the roofline (benchc estimate: the least time compute, memory and interconnect allow):"
        in (parsed["paragraphs"])
    )
    # the step times' distribution (issue 36, item 1), in both pages, from each run's metrics
    title = "Latency distributions (p50 / p90 / p99; each percentile the median over the trials):"
    assert title in parsed["paragraphs"] and title in page
    for record in records:
        steps = record.metrics["step_time_s"]
        assert steps["p50"] <= steps["p90"] <= steps["p99"] and steps["p50"] == steps["median"]
        shown = " / ".join(f"{p} {sig(steps[p] * 1e3)}" for p in ("p50", "p90", "p99"))
        line = f"cpu at {record.point}: step time {shown} ms (3 steps)"
        assert f"- {line}" in page and line in (tmp_path / "html" / "report.html").read_text()


@pytest.mark.integration
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
    assert rows["h100"][4] == "-"  # these metrics record no tier: shown as unknown, not guessed
    assert rows["h100"][10] == "2"  # world size: these metrics record no hosts
    assert rows["h100"][11] == "3"
    assert "200 images/s (published)" in rows["h100"][12]
    assert_chart(tmp_path / "out" / "sd3_mmdit_train-smoke.png")

    html = benchc("report", "--format", "html", "-o", str(tmp_path / "html"), db=db)
    assert html.returncode == 0
    page = (tmp_path / "html" / "report.html").read_text()
    assert "<table>" in page and "1.50x" in page and "sd3_mmdit_train-smoke.png" in page


@pytest.mark.integration
def test_report_with_nothing_stored_is_a_clear_error(tmp_path):
    result = benchc("report", "-o", str(tmp_path / "out"), db=tmp_path / "empty.db")
    assert result.returncode == 2 and "no runs to report" in result.stderr


def test_statistics():
    one = summarize([10.0])
    assert (one.n, one.median, one.ci_low, one.cv, one.noisy) == (1, 10.0, None, None, False)
    quiet = summarize([100.0, 101.0, 99.0])
    assert quiet.median == 100.0 and not quiet.noisy
    logs = [math.log(v) for v in (100.0, 101.0, 99.0)]  # positive: the geometric mean's interval
    half = 4.303 * statistics.stdev(logs) / 3**0.5
    assert quiet.ci_low == pytest.approx(math.exp(statistics.fmean(logs) - half))
    assert quiet.ci_high == pytest.approx(math.exp(statistics.fmean(logs) + half))
    assert quiet.ci_low == pytest.approx(100.0 - 4.303 * 1.0 / 3**0.5, rel=1e-3)  # near the mean's
    spread = summarize([289 * 0.2, 289 * 1.8])  # two far-apart trials: the mean's would go below 0
    assert 0 < spread.ci_low < spread.median < spread.ci_high
    signed = summarize([-1.0, 2.0])  # not a positive quantity: the mean's interval
    assert signed.ci_low == pytest.approx(0.5 - 12.706 * statistics.stdev([-1.0, 2.0]) / 2**0.5)
    assert t95(1) == 12.706 and t95(22) == 2.086 and t95(1000) == 1.960  # between rows: the smaller df


def test_significant_figures():
    assert [sig(v) for v in (1254.0, 0.17399, 0.151, 12.0, 9.996, 0.0004567, 0.0, 123456.7)] == [
        "1,250", "0.174", "0.151", "12.0", "10.0", "0.000457", "0", "123,000",
    ]  # fmt: skip
    assert sig(float("nan")) == "-" and sig(None) == "-"


def batch_of(target: str, point: str) -> dict:
    return {"train.batch": int(point.split("-")[1].split("_")[0])}


def store_trials(db, rows: dict, plan: dict, metric_fields=lambda m, v: None, point_values=batch_of):
    """rows: (target, point) -> values of the trials, stored as one series each."""
    with Store(db) as store:
        for (target, point), values in rows.items():
            for trial, value in enumerate(values, 1):
                m = ok_metrics(1.0 / value, target=target, point=point)
                m["point_values"] = point_values(target, point)
                metric_fields(m, value)
                run_id = store.start(experiment="sd3_large_infer", target=target, point=point,
                                     point_values=m["point_values"], smoke=False,
                                     spec_path=None, spec_sha256=None, build_path=None, log_path=None,
                                     environment={}, series=f"{target}-{point}", trial=trial,
                                     plan=plan(target, point))  # fmt: skip
                store.finish(run_id, "ok", None, m)


@pytest.mark.integration
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
    header = "| seconds per image (s/image, lower is better) | vs a100 (>1 = better) | tier |"
    assert f"| point | target {header}" in page
    rows = {r[1]: r for r in table_rows(page)}
    assert rows["gaudi2"][2].startswith("2.05 [") and rows["gaudi2"][3] == "1.95x"  # 4.0 / 2.05: faster
    assert rows["a100"][3] == "1.00x"
    assert_chart(tmp_path / "out" / "sd3_large_infer.png")


@pytest.mark.integration
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


@pytest.mark.integration
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


# ------------------------------------------------------------------ optimisation tiers

TUNED = {"compile": "regional", "attention": "cudnn>flash>efficient", "qkv": "fused", "optimizer": "fused",
         "graphs": "off"}  # fmt: skip
PLAIN = {"compile": "off", "attention": "math", "qkv": "separate", "optimizer": "foreach", "graphs": "off"}


def tiered(throughput: float, target: str, point: str, tier: str | None, detail: dict | None = None) -> dict:
    """Metrics as a program of the optimisation tier writes them (tier None: an older program,
    without the fields); a plain point set by --set or `on` carries the tier in its name and
    values."""
    m = ok_metrics(throughput, target=target, point=point)
    plain = point.endswith("_optimize-plain")
    m["point_values"] = {"train.batch": 16, **({"optimize": "plain"} if plain else {})}
    if tier is not None:
        m["optimize"] = tier
        m["optimize_detail"] = dict(detail if detail is not None else (TUNED if tier == "tuned" else PLAIN))
    return m


def ingested(tmp_path, *metrics) -> object:
    db = tmp_path / "r.db"
    paths = []
    for index, m in enumerate(metrics):
        path = tmp_path / f"m{index}.json"
        path.write_text(json.dumps(m))
        paths.append(str(path))
    proc = benchc("ingest", *paths, db=db)
    assert proc.returncode == 0, proc.stderr
    return db


@pytest.mark.integration
def test_the_tier_column_shows_each_rows_tier_and_a_dash_where_the_metrics_predate_tiers(tmp_path):
    runs = [tiered(150.0, "h100", "batch-16", "tuned"), tiered(100.0, "gaudi2", "batch-16", None),
            tiered(90.0, "a100", "batch-16", "plain")]  # fmt: skip
    db = ingested(tmp_path, *runs)
    assert benchc("report", "--baseline", "gaudi2", "-o", str(tmp_path / "out"), db=db).returncode == 0
    page = (tmp_path / "out" / "report.md").read_text()
    assert "| point | target | throughput (images/s) | vs gaudi2 (>1 = better) | tier | per device |" in page
    rows = {r[1]: r for r in table_rows(page)}
    assert (rows["h100"][4], rows["gaudi2"][4], rows["a100"][4]) == ("tuned", "-", "plain")
    assert "The tier is the optimisation tier each run had" in page  # the notes say what it means
    assert "The same point under each tier" not in page  # no target ran both tiers
    html = benchc("report", "--format", "html", "-o", str(tmp_path / "html"), db=db)
    assert html.returncode == 0, html.stderr
    page = (tmp_path / "html" / "report.html").read_text()
    assert "<th>tier</th>" in page and "<td>tuned</td>" in page and "<td>-</td>" in page


@pytest.mark.integration
def test_the_same_point_under_both_tiers_gives_tuned_over_plain_and_the_knobs_tuned_turned_on(tmp_path):
    db = ingested(tmp_path, tiered(231.0, "h200", "batch-16", "tuned"),
                  tiered(100.0, "h200", "batch-16_optimize-plain", "plain"),
                  tiered(120.0, "gaudi2", "batch-16", "tuned", {**TUNED, "compile": "off"}),
                  tiered(80.0, "gaudi2", "batch-16_optimize-plain", "plain"),
                  tiered(50.0, "a100", "batch-16", "tuned"))  # fmt: skip
    assert benchc("report", "-o", str(tmp_path / "out"), db=db).returncode == 0
    page = (tmp_path / "out" / "report.md").read_text()
    assert "The same point under each tier (>1: tuned is faster):" in page
    lines = [x for x in page.splitlines() if " plain (" in x and x.startswith("- ")]
    assert lines == [
        "- gaudi2 at train.batch=16: tuned 1.50x plain (attention=cudnn>flash>efficient, qkv=fused, "
        "optimizer=fused; throughput 120 vs 80.0 images/s)",
        "- h200 at train.batch=16: tuned 2.31x plain (compile=regional, attention=cudnn>flash>efficient, "
        "qkv=fused, optimizer=fused; throughput 231 vs 100 images/s)",
    ], lines  # knobs left off (compile=off, graphs=off) are not listed; a100 ran one tier only
    rows = {(r[0], r[1]): r[4] for r in table_rows(page)}
    assert rows[("batch-16_optimize-plain", "h200")] == "plain" and rows[("batch-16", "h200")] == "tuned"


@pytest.mark.integration
def test_under_a_lower_is_better_headline_tuned_over_plain_is_still_how_much_faster(tmp_path):
    db = tmp_path / "r.db"

    def pipeline(m, seconds):
        m["pipeline"] = {"s_per_image": seconds, "denoise_s_per_image": seconds / 2, "denoising_steps": 30,
                         "guidance": 7.0, "resolution": 1024}  # fmt: skip
        m["metric"] = "s_per_image"
        m["optimize"] = "plain" if m["point"].endswith("_optimize-plain") else "tuned"
        m["optimize_detail"] = PLAIN if m["optimize"] == "plain" else TUNED

    def values(target, point):
        return {"train.batch": 1, **({"optimize": "plain"} if point.endswith("_optimize-plain") else {})}

    def plan(target, point):
        return {"measure": {"metric": "s_per_image"}, "references": [], "declared_references": []}

    rows = {("h100", "batch-1"): [2.0, 2.0], ("h100", "batch-1_optimize-plain"): [3.0, 3.0]}
    store_trials(db, rows, plan, pipeline, values)
    assert benchc("report", "-o", str(tmp_path / "out"), db=db).returncode == 0
    page = (tmp_path / "out" / "report.md").read_text()
    line = next(x for x in page.splitlines() if x.startswith("- h100 at train.batch=1: tuned"))
    assert line.startswith("- h100 at train.batch=1: tuned 1.50x plain (compile=regional,"), line  # 3 s / 2 s
    assert line.endswith("; seconds per image 2.00 vs 3.00 s/image)"), line


@pytest.mark.integration
def test_a_sweep_over_both_tiers_is_paired_by_the_other_values_of_its_points(tmp_path):
    def swept(throughput, tier):
        m = tiered(throughput, "h100", f"batch-16_optimize-{tier}", tier)
        m["point_values"] = {"train.batch": 16, "optimize": tier}
        return m

    db = ingested(tmp_path, swept(200.0, "tuned"), swept(100.0, "plain"))
    assert benchc("report", "-o", str(tmp_path / "out"), db=db).returncode == 0
    page = (tmp_path / "out" / "report.md").read_text()
    assert "- h100 at train.batch=16: tuned 2.00x plain (compile=regional," in page, page


@pytest.mark.integration
def test_knob_values_from_the_metrics_are_escaped_in_markdown_and_html(tmp_path):
    hostile = {"compile": "<script>alert(1)</script>", "attention": "a|b\nc", "qkv": "x & y"}
    db = ingested(tmp_path, tiered(200.0, "h100", "batch-16", "tuned", hostile),
                  tiered(100.0, "h100", "batch-16_optimize-plain", "plain", {}))  # fmt: skip
    assert benchc("report", "-o", str(tmp_path / "out"), db=db).returncode == 0
    page = (tmp_path / "out" / "report.md").read_text()
    assert "<script>" not in page
    line = next(x for x in page.splitlines() if x.startswith("- h100 at train.batch=16: tuned"))
    assert "compile=&lt;script>alert(1)&lt;/script>, attention=a\\|b c, qkv=x &amp; y;" in line, line
    assert benchc("report", "--format", "html", "-o", str(tmp_path / "html"), db=db).returncode == 0
    page = (tmp_path / "html" / "report.html").read_text()
    assert "<script>" not in page and "compile=&lt;script&gt;alert(1)&lt;/script&gt;" in page
    assert "attention=a|b\nc" in page  # inside an <li>: a newline and a bar are inert in HTML


@pytest.mark.integration
def test_the_csv_has_the_precision_batch_and_latencies_of_each_run(tmp_path):
    """Issue 36, item 6: the CSV carries what a reader compares runs by, beside the throughput:
    the plan's precision and batch (training's global batch, inference's batch) and the
    generation's TTFT and TPOT or the pipeline's seconds per image; empty where a run has none."""
    import csv
    import io

    db = tmp_path / "r.db"

    def plan(target, point):
        work = {"kind": "infer", "precision": "bf16", "batch": 8} if target == "h100" else {
            "kind": "train", "precision": "fp32", "global_batch": 64}  # fmt: skip
        return {"workload": work, "references": [], "declared_references": []}

    def generation(m, value):
        if m["target"] == "h100":
            ttft = {"p50": 0.05, "p90": 0.06, "p99": 0.07, "mean": 0.055, "samples": 2}
            itl = {"p50": 0.01, "p90": 0.02, "p99": 0.03, "mean": 0.011, "samples": 62}
            m["generation"] = {"batch": 8, "input_tokens": 16, "output_tokens": 32, "ttft_s": 0.05,
                               "tpot_s": 0.01, "first_sequence": [1, 2],
                               "latency_s": {"ttft": ttft, "itl": itl, "itl_missing": None}}  # fmt: skip

    store_trials(db, {("h100", "batch-8"): [0.01], ("cpu", "batch-8"): [0.02]}, plan, generation)
    export = benchc("export", "--format", "csv", db=db)
    assert export.returncode == 0, export.stderr
    rows = list(csv.DictReader(io.StringIO(export.stdout)))
    found = {
        r["target"]: (r["precision"], r["batch"], r["ttft_s"], r["tpot_s"], r["s_per_image"]) for r in rows
    }
    assert found == {"h100": ("bf16", "8", "0.05", "0.01", ""), "cpu": ("fp32", "64", "", "", "")}
    # the distributions (issue 36, item 1): p50, p90, p99 of each kind a run recorded
    latency = {r["target"]: [r[f"{k}_{p}_s"] for k in ("ttft", "itl", "image") for p in ("p50", "p90", "p99")]
               for r in rows}  # fmt: skip
    assert latency == {"h100": ["0.05", "0.06", "0.07", "0.01", "0.02", "0.03", "", "", ""], "cpu": [""] * 9}
    assert len(set(export.stdout.splitlines()[0].split(","))) == len(export.stdout.splitlines()[0].split(","))


@pytest.mark.integration
def test_export_and_show_carry_the_tier(tmp_path):
    db = ingested(tmp_path, tiered(150.0, "h100", "batch-16_optimize-plain", "plain"),
                  tiered(100.0, "gaudi2", "batch-16", None))  # fmt: skip
    exported = json.loads(benchc("export", "--format", "json", db=db).stdout)
    assert {r["target"]: r["optimize"] for r in exported} == {"h100": "plain", "gaudi2": None}
    assert [r for r in exported if r["target"] == "h100"][0]["metrics"]["optimize_detail"] == PLAIN
    lines = benchc("export", "--format", "csv", db=db).stdout.splitlines()
    header = lines[0].split(",")
    assert "optimize" in header
    cells = {row.split(",")[2]: row.split(",")[header.index("optimize")] for row in lines[1:]}
    assert cells == {"h100": "plain", "gaudi2": ""}
    run = [r for r in exported if r["target"] == "h100"][0]["id"]
    assert json.loads(benchc("show", run, db=db).stdout)["optimize"] == "plain"


@pytest.mark.integration
def test_a_metrics_file_with_a_bad_tier_is_refused(tmp_path):
    cases = {"tier": {"optimize": "fast"}, "knob name": {"optimize_detail": {"Compile!": "x"}},
             "knob value": {"optimize_detail": {"compile": 3}},
             "long value": {"optimize_detail": {"compile": "x" * 201}}}  # fmt: skip
    for name, fields in cases.items():
        m = {**tiered(100.0, "h100", "batch-16", "tuned"), **fields}
        path = tmp_path / f"{name.replace(' ', '_')}.json"
        path.write_text(json.dumps(m))
        proc = benchc("ingest", str(path), db=tmp_path / "r.db")
        assert proc.returncode == 2 and "does not match the benchc metrics schema" in proc.stderr, name
