"""benchc report beside measured ceilings: each row's MFU against the datasheet's peak and
against the latest calibration of its target (benchc calibrate's rows in a real store), the cpu
target's MFU once calibrated, the roofline chart with both roofs, and the one line that says a
calibration would add them where none is stored. In-process: a real SQLite store, runs stored
from metrics files' contents with the plans their builds keep."""

from __future__ import annotations

import matplotlib.image
import pytest
from report_store import FLOPS, calibrate, report, store_run, table

from benchc.catalog.targets import TARGETS
from benchc.figures import sig
from benchc.report.collect import sections
from benchc.results.calibrations import latest_calibrations
from benchc.results.store import Store


def test_each_row_gets_its_mfu_against_the_datasheet_and_against_the_measured_peak(tmp_path):
    db = tmp_path / "r.db"
    peak = TARGETS["h100"].peak_flops("bf16")
    throughput = 0.355 * peak * 2 / FLOPS  # 35.5% of the datasheet's peak on 2 devices
    store_run(db, "h100", throughput)
    calibrate(db, "h100", {"bf16": 790.0, "fp32": 50.0}, 3.0)
    page = report(db, tmp_path / "out")
    measured = sig(0.355 * peak / 790e12 * 100)
    expected = (f"- h100 at batch-16: MFU 35.5% of the datasheet's {sig(peak / 1e12)} TFLOP/s, "
                f"{measured}% of the measured 790 TFLOP/s bf16 (benchc calibrate, node-1, ")  # fmt: skip
    assert expected in page, page
    assert table(page)["h100"]["MFU (measured)"] == f"{sig(0.355 * peak / 790e12 * 100)}%"
    assert "would add measured ceilings" not in page  # every target here is calibrated


def test_the_latest_calibration_is_used(tmp_path):
    db = tmp_path / "r.db"
    store_run(db, "h100", 1000.0)
    calibrate(db, "h100", {"bf16": 700.0}, 3.0, host="old")
    calibrate(db, "h100", {"bf16": 800.0}, 3.0, host="new")
    page = report(db, tmp_path / "out")
    assert "of the measured 800 TFLOP/s bf16 (benchc calibrate, new, " in page and "700" not in page


def test_the_cpu_gets_an_mfu_and_a_roofline_only_once_calibrated(tmp_path):
    db = tmp_path / "r.db"
    plan = store_run(db, "cpu", 50.0)
    precision = plan["workload"]["precision"]
    before = report(db, tmp_path / "before")
    assert table(before)["cpu"]["MFU"] == "-" and "MFU (measured)" not in before
    hint = "- no calibration of cpu is stored: benchc calibrate --target cpu would add measured ceilings"
    assert hint in before
    assert not (tmp_path / "before" / "sd3_mmdit_train-roofline.png").exists()  # no peak: no roof

    calibrate(db, "cpu", {precision: 0.5}, 0.02)
    after = report(db, tmp_path / "after")
    achieved = 50.0 * FLOPS / 2
    assert table(after)["cpu"]["MFU (measured)"] == f"{sig(achieved / 0.5e12 * 100)}%"
    assert (f"- cpu at batch-16: MFU: the datasheet states no peak, {sig(achieved / 0.5e12 * 100)}% of the "
            f"measured 0.500 TFLOP/s {precision}") in after  # fmt: skip
    assert "would add measured ceilings" not in after
    chart = tmp_path / "after" / "sd3_mmdit_train-roofline.png"
    assert chart.stat().st_size > 10_000 and "sd3_mmdit_train-roofline.png" in after
    image = matplotlib.image.imread(chart)
    assert image[..., :3].std() > 0.05


def test_the_roofline_chart_draws_the_measured_roof_beside_the_datasheets(tmp_path):
    import matplotlib.pyplot as plt

    from benchc.report.plot import measured_roofline_points, roofline_chart, roofline_points

    db = tmp_path / "r.db"
    store_run(db, "h100", 1000.0)
    store_run(db, "gaudi2", 800.0)
    calibrate(db, "h100", {"bf16": 790.0}, 3.0)
    with Store(db) as store:
        (section,) = sections(store.latest_runs(None), None, latest_calibrations(store))
    assert {p[0] for p in roofline_points(section)} == {"h100 batch-16", "gaudi2 batch-16"}
    (measured,) = measured_roofline_points(section)  # only h100 is calibrated
    assert measured[0] == "h100 batch-16" and measured[3:] == (790e12, 3.0e12)
    drawn = []
    original = plt.Figure.savefig

    def keep(figure, *args, **kwargs):  # the figure as it is saved: its lines, to look at
        drawn.extend((line.get_label(), line.get_linestyle()) for line in figure.axes[0].get_lines())
        return original(figure, *args, **kwargs)

    plt.Figure.savefig = keep
    try:
        path = roofline_chart(section, tmp_path / "roof.png")
    finally:
        plt.Figure.savefig = original
    assert path.stat().st_size > 10_000
    assert ("h100 roof", "-") in drawn and ("h100 roof (measured)", "--") in drawn
    assert ("gaudi2 roof", "-") in drawn and ("gaudi2 roof (measured)", "--") not in drawn


@pytest.mark.integration  # four reports with their charts: about 2 s
def test_without_a_calibration_the_report_changes_only_by_the_line_that_says_how_to_add_one(tmp_path):
    db = tmp_path / "r.db"
    store_run(db, "h100", 1000.0)
    store_run(db, "gaudi2", 800.0)
    for page_format in ("md", "html"):
        asked = report(db, tmp_path / f"asked-{page_format}", page_format).splitlines()
        unasked = report(db, tmp_path / f"unasked-{page_format}", page_format, calibrated=False).splitlines()
        added = [line for line in asked if line not in unasked]
        assert [line for line in unasked if line not in asked] == []
        hint = "no calibration of gaudi2, h100 is stored: benchc calibrate --target T for each would add"
        assert any(hint in line for line in added) and len(added) <= 4, added  # the line, its heading
    assert sorted(p.name for p in (tmp_path / "asked-md").iterdir()) == sorted(
        p.name for p in (tmp_path / "unasked-md").iterdir()
    )


def test_a_calibration_of_another_target_changes_nothing_of_this_ones_rows(tmp_path):
    db = tmp_path / "r.db"
    store_run(db, "h100", 1000.0)
    calibrate(db, "gaudi2", {"bf16": 400.0}, 2.0)
    page = report(db, tmp_path / "out")
    assert "MFU (measured)" not in page and "of the measured" not in page
    assert "no calibration of h100 is stored" in page
