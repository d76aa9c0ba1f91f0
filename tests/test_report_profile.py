"""The report's profile view: where a step's time goes per target (a stacked bar chart, a table of
shares that add up to 100%), one sentence per pair of targets naming the category whose share
differs most, the top kernels escaped like every text from the store, and profiles the report
cannot read left out. In-process: runs with profiles stored in a real SQLite store."""

from __future__ import annotations

import math

import matplotlib.image
import pytest
from report_store import report, store_run

from benchc.figures import sig
from benchc.report.collect import sections
from benchc.report.stored_profile import CATEGORIES, profile_of, shares
from benchc.results.store import Store

ORDER = ("matmul", "attention", "norm_elementwise", "communication", "optimizer", "copy", "other", "idle")
H100 = dict(zip(ORDER, (0.50, 0.0, 0.15, 0.03, 0.03, 0.04, 0.03, 0.22)))  # idles most
GAUDI2 = dict(zip(ORDER, (0.60, 0.0, 0.20, 0.05, 0.04, 0.04, 0.04, 0.03)))
A100 = dict(zip(ORDER, (0.53, 0.0, 0.15, 0.27, 0.02, 0.01, 0.01, 0.01)))  # communicates most


def profile(fractions: dict, seconds: float, top: dict | None = None) -> dict:
    """A profile as a program stores it: `seconds` over 10 steps, split by `fractions`."""
    return {"steps": 10, "profiled_s": seconds, "activity": "cuda",
            "categories": {k: v * seconds for k, v in fractions.items()},
            "top": top or {"matmul": [{"name": "sm90_xmma_gemm_bf16", "s": 0.5 * seconds, "calls": 40}]},
            "trace": None}  # fmt: skip


def percent(value: float) -> str:
    return f"{sig(value * 100)}%"


def test_each_pair_of_targets_gets_one_sentence_naming_the_category_that_differs_most(tmp_path):
    db = tmp_path / "r.db"
    store_run(db, "h100", 1000.0, profile=profile(H100, 0.5))
    store_run(db, "gaudi2", 800.0, profile=profile(GAUDI2, 0.8))
    store_run(db, "a100", 600.0, profile=profile(A100, 1.1))
    page = report(db, tmp_path / "out")
    sentences = [line[2:] for line in page.splitlines() if " of its step outside matrix multiplies" in line]
    assert len(sentences) == 3, sentences  # every pair, once
    by_pair = {(s.split(" ")[0], s.split("; ")[1].split(" ")[0]): s for s in sentences}
    assert by_pair[("h100", "gaudi2")] == (
        "h100 at batch-16 spends 50.0% of its step outside matrix multiplies and attention and idles 22.0%; "
        "gaudi2 40.0% and 3.00%: the difference is mostly idle time: 22.0% vs 3.00%"
    )
    assert by_pair[("gaudi2", "a100")].endswith("the difference is mostly communication: 5.00% vs 27.0%")
    assert by_pair[("h100", "a100")].endswith("the difference is mostly communication: 3.00% vs 27.0%")


def test_a_target_profiled_alone_gets_a_sentence_of_its_own(tmp_path):
    """A report of one profiled target (a CPU-only machine) still says where its step goes;
    a second target at the point without a profile pairs with nothing."""
    db = tmp_path / "r.db"
    store_run(db, "h100", 1000.0, profile=profile(H100, 0.5))
    store_run(db, "gaudi2", 800.0)
    page = report(db, tmp_path / "out")
    sentences = [line[2:] for line in page.splitlines() if " of its step outside matrix multiplies" in line]
    assert sentences == [
        "h100 at batch-16 spends 50.0% of its step outside matrix multiplies and attention and idles 22.0%; "
        "its largest share is matrix multiplies (50.0%)"
    ]


def test_the_table_of_shares_adds_up_to_100_percent_and_the_bar_chart_is_drawn(tmp_path):
    db = tmp_path / "r.db"
    store_run(db, "h100", 1000.0, profile=profile(H100, 0.5))
    store_run(db, "gaudi2", 800.0, profile=profile(GAUDI2, 0.8))
    page = report(db, tmp_path / "out")
    lines = page.splitlines()
    start = lines.index("Shares of the profiled step time:") + 2
    header = [c.strip() for c in lines[start].strip("|").split("|")]
    assert header == ["point", "target", "profiled step (ms)", *CATEGORIES]
    rows = [[c.strip() for c in line.strip("|").split("|")] for line in lines[start + 2 : start + 4]]
    assert {r[1]: r[2] for r in rows} == {"h100": "50.0", "gaudi2": "80.0"}  # the profiled step, ms
    for row in rows:
        assert sum(float(cell.rstrip("%")) for cell in row[3:]) == pytest.approx(100, abs=0.05), row
    chart = tmp_path / "out" / "sd3_mmdit_train-profile.png"
    assert chart.stat().st_size > 5_000 and "](sd3_mmdit_train-profile.png)" in page
    image = matplotlib.image.imread(chart)
    assert image.shape[1] >= 400 and image[..., :3].std() > 0.05
    html_page = report(db, tmp_path / "html", "html")
    assert "<img src='sd3_mmdit_train-profile.png'" in html_page
    assert (tmp_path / "html" / "sd3_mmdit_train-profile.png").exists()
    assert "<p>Shares of the profiled step time:</p><table>" in html_page


def test_shares_are_of_the_categories_sum():
    read = profile_of(profile(A100, 3.0))
    assert math.isclose(sum(shares(read).values()), 1.0)
    assert shares(read)["communication"] == pytest.approx(0.27)


def test_names_of_top_kernels_are_escaped_in_markdown_and_html(tmp_path):
    hostile = "<script>alert(1)</script> | *x* [l](javascript:x) `c` &amp;"
    top = {"other": [{"name": hostile, "s": 0.1, "calls": 3}],
           "matmul": [{"name": "gemm", "s": 0.2, "calls": 1}]}  # fmt: skip
    db = tmp_path / "r.db"
    store_run(db, "h100", 1000.0, profile=profile(H100, 0.5, top))
    page = report(db, tmp_path / "md")
    line = next(x for x in page.splitlines() if x.startswith("- h100 at batch-16, top kernels: "))
    assert line.index("matmul: gemm (") < line.index("other: ")  # the larger category first
    escaped = "&lt;script>alert(1)&lt;/script> \\| \\*x\\* \\[l\\](javascript:x) \\`c\\` &amp;amp;"
    assert f"other: {escaped} (100 ms, 3 calls)" in line
    assert "<script>" not in page
    html_page = report(db, tmp_path / "html", "html")
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in html_page and "<script>" not in html_page


@pytest.mark.parametrize(
    "broken",
    [
        {"categories": {"matmul": -1.0, "idle": 2.0}},  # a negative time
        {"categories": {"matmul": "1", "idle": 2.0}},  # a string
        {"categories": {"matmul": float("nan"), "idle": 2.0}},
        {"categories": {"matmul": 0.0, "idle": 0.0}},  # nothing profiled
        {"categories": ["matmul"]},
        "a profile",
    ],
)
def test_a_profile_the_report_cannot_read_is_left_out(broken):
    """The metrics schema refuses these; a store written by another benchc may still hold them."""
    raw = {"steps": 10, "profiled_s": 1.0, **broken} if isinstance(broken, dict) else broken
    assert profile_of(raw) is None


def test_a_stored_run_with_a_malformed_profile_is_shown_failed_with_the_reason(tmp_path):
    db = tmp_path / "r.db"
    store_run(db, "h100", 1000.0, profile={"steps": 10, "categories": {"matmul": -1.0}})
    store_run(db, "gaudi2", 800.0, profile=profile(GAUDI2, 0.8))
    with Store(db) as store:
        (section,) = sections(store.latest_runs(None))
    assert [r.target for r in section.rows] == ["gaudi2"] and section.rows[0].profile is not None
    (failed,) = section.failed
    assert failed.target == "h100" and "invalid metrics in the store" in failed.cause


def test_a_section_without_profiles_has_no_profile_view(tmp_path):
    db = tmp_path / "r.db"
    store_run(db, "h100", 1000.0)
    page = report(db, tmp_path / "out")
    assert "Shares of the profiled step time" not in page and "outside matrix multiplies" not in page
    assert not (tmp_path / "out" / "sd3_mmdit_train-profile.png").exists()
