"""A ratio only between runs that did the same maths (issue 36, item 5): a `--set
infer.precision=bf16` run beside an fp32 one, or runs of another batch or shape, get no ratio
in the table or the explanations; the report says why instead, and lists the --set arguments
each build was compiled with. fp16 and bf16 count as one
width (each vendor's 16-bit path: S4), the line beside the ratio naming the difference."""

from __future__ import annotations

import pytest
from test_report import PLAIN, TUNED, benchc, store_trials, table_rows

from benchc.report.maths import different_maths, maths_of


class Ran:
    def __init__(self, workload: dict, flops: float | None = 1e9):
        self.maths, self.flops_per_sample = maths_of({"workload": workload}), flops


TRAIN = {"kind": "train", "precision": "bf16", "global_batch": 64, "micro_batch": 8, "seq_len": 4096,
         "steps": 20, "warmup": 5}  # fmt: skip


def test_what_counts_as_the_same_maths():
    same = Ran(TRAIN)
    assert different_maths(Ran({**TRAIN, "micro_batch": 4, "steps": 50}), same) is None  # 16 devices, longer
    assert different_maths(Ran({**TRAIN, "precision": "fp16"}), same) is None  # one width
    assert different_maths(Ran({**TRAIN, "precision": "fp32"}), same) == "precision fp32 vs bf16"
    assert different_maths(Ran({**TRAIN, "global_batch": 128, "seq_len": 2048}), same) == (
        "global_batch 128 vs 64; seq_len 2048 vs 4096"
    )
    assert different_maths(Ran(TRAIN, 2e9), same) == "model FLOPs per unit of work 2e+09 vs 1e+09"
    assert different_maths(Ran({}), same) is None  # a plan kept too little to tell: not refused
    infer = {"kind": "infer", "precision": "bf16", "batch": 8, "input_tokens": 128, "output_tokens": 128}
    assert different_maths(Ran({**infer, "batch": 16}), Ran(infer)) == "batch 16 vs 8"


@pytest.mark.integration
def test_the_report_gives_no_ratio_between_runs_of_different_maths_and_says_why(tmp_path):
    db = tmp_path / "r.db"
    precision = {("h100", "batch-16"): "bf16", ("h100", "batch-16_optimize-plain"): "fp32",
                 ("gaudi2", "batch-16"): "fp32", ("a100", "batch-16"): "fp16"}  # fmt: skip

    def plan(target, point):
        workload = {**TRAIN, "global_batch": 16, "precision": precision[(target, point)]}
        given = ["train.precision=bf16"] if (target, point) == ("h100", "batch-16") else []
        return {"workload": workload, "overrides": given, "references": [], "declared_references": []}

    def tier(m, value):
        m["optimize"] = "plain" if m["point"].endswith("_optimize-plain") else "tuned"
        m["optimize_detail"] = PLAIN if m["optimize"] == "plain" else TUNED

    def values(target, point):
        return {"train.batch": 16, **({"optimize": "plain"} if point.endswith("_optimize-plain") else {})}

    rows = {key: [0.01, 0.01] for key in precision}  # 100 images/s each
    rows[("h100", "batch-16")] = [0.005, 0.005]  # 200 images/s: bf16, tuned
    store_trials(db, rows, plan, tier, values)
    proc = benchc("report", "--baseline", "a100", "-o", str(tmp_path / "out"), db=db)
    assert proc.returncode == 0, proc.stderr
    page = (tmp_path / "out" / "report.md").read_text()
    ratios = {(r[0], r[1]): r[3] for r in table_rows(page)}
    assert ratios[("batch-16", "h100")] == "2.00x"  # bf16 against the baseline's fp16: one width
    assert ratios[("batch-16", "gaudi2")] == "-"  # fp32 against fp16
    assert "- gaudi2 at batch-16: not the same maths as a100: precision fp32 vs fp16" in page, page
    tiers = "- h100 at train.batch=16: no ratio, tuned and plain did not do the same maths"
    assert f"{tiers} (precision bf16 vs fp32)" in page
    assert "tuned 2.00x plain" not in page and "x plain (" not in page
    assert "- gaudi2 at batch-16: no ratio to a100: not the same maths: precision fp32 vs fp16" in page
    assert "- h100 at batch-16: 2.00x a100" in page and "precision bf16 vs fp16" in page
    # the report lists what --set changed
    given = "Settings given on the command line (--set), not the spec's:\n\n"
    assert f"{given}- h100 at batch-16: train.precision=bf16\n" in page


def test_the_chart_s_bars_are_the_trials_range_until_there_are_enough_trials_for_an_interval(tmp_path):
    """Issue 36, item 6: with 2 trials Student's t is 12.7, and the 95% interval of 100 and 120
    spans 30 to 370 images/s: most of the axis. Below report/stats.py's CI_TRIALS the chart
    draws the trials' range; from it, the interval; one trial, no bar."""
    from matplotlib.collections import LineCollection

    from benchc.report.collect import sections
    from benchc.report.plot import draw
    from benchc.report.stats import CI_TRIALS, summarize
    from benchc.results.store import Store

    many_values = [100.0, 105.0, 110.0, 115.0, 120.0]
    two, many = summarize([100.0, 120.0]), summarize(many_values)
    assert two.ci_low < 40 and two.ci_high > 300 and two.bar == (100.0, 120.0)
    assert many.n == CI_TRIALS and many.bar == (many.ci_low, many.ci_high) and 100 < many.ci_low < 110
    assert summarize([100.0]).bar is None

    db = tmp_path / "r.db"
    seconds = {("a100", "batch-16"): [1 / 100, 1 / 120], ("h100", "batch-16"): [1 / v for v in many_values]}
    store_trials(db, seconds, lambda target, point: {"references": [], "declared_references": []})
    (section,) = sections(Store(db).runs())
    figure = draw(section)
    (axes,) = figure.axes
    lines = [c for c in axes.collections if isinstance(c, LineCollection)]
    spans = sorted((round(min(y for _, y in seg), 2), round(max(y for _, y in seg), 2))
                   for lc in lines for seg in lc.get_segments())  # fmt: skip
    assert spans == sorted([(100.0, 120.0), (round(many.ci_low, 2), round(many.ci_high, 2))])
    assert "the trials' range" in axes.get_xlabel()
