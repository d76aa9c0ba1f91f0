"""`benchc report` against hostile input (issue 24): a prices file nested hundreds deep, values
from the store that are Markdown links, images, emphasis or code, a directory or a symbolic
link in the way of an output file, two sections whose names meet, absurd prices, empty flag
values; and `estimate`'s figures in one format. Each runs the real CLI on a real SQLite store
(runs stored as `benchc run` stores them), and expects a clear, located error (exit 2) or an
inert report, never a traceback and never a file half-written or written outside -o DIR."""

from __future__ import annotations

import copy
import re
from pathlib import Path

import pytest
from markdown_it import MarkdownIt
from scripted_points import ok_metrics

from benchc.figures import sig
from benchc.report import prices as prices_module
from benchc.results.store import Store

from helpers import REPO, run_cli


def store_run(db: Path, *, experiment="sd3_mmdit_train", target="h100", point="batch-16", smoke=False,
              status="ok", cause=None, throughput=100.0, plan=None, metrics_fields=None) -> None:  # fmt: skip
    """One finished run in the store at `db`, as `benchc run` records it (the store is not
    validated on the way out: its names and texts may be anything)."""
    metrics = None
    if status == "ok":
        metrics = copy.deepcopy(ok_metrics(throughput, target=target, point=point))
        metrics.update(experiment=experiment, smoke=smoke, **(metrics_fields or {}))
    with Store(db) as store:
        run_id = store.start(experiment=experiment, target=target, point=point, point_values={}, smoke=smoke,
                             spec_path=None, spec_sha256=None, build_path=None, log_path=None,
                             environment={}, plan=plan or {}, series=f"{experiment}/{target}/{point}/{smoke}",
                             trial=1)  # fmt: skip
        store.finish(run_id, status, cause, metrics)


def report(tmp_path: Path, *args: str, db: Path | None = None, cwd: Path | None = None):
    return run_cli("report", *args, "--db", str(db or tmp_path / "r.db"), cwd=cwd)


def first_line(text: str) -> str:
    return text.splitlines()[0] if text else ""


def files_under(folder: Path) -> list[str]:
    return sorted(p.name for p in folder.iterdir()) if folder.exists() else []


# ------------------------------------------------------------------ 2: a prices file nested deep


@pytest.mark.parametrize(
    "text, column",
    [("a = " + "[" * 500 + "]" * 500 + "\n", 21), ("a = " + "{b=" * 400 + "1" + "}" * 400 + "\n", 53)],
    ids=["arrays-500-deep", "inline-tables-400-deep"],
)
def test_a_prices_file_nested_hundreds_deep_is_a_located_error(tmp_path, text, column):
    store_run(tmp_path / "r.db")
    bomb = tmp_path / "bomb.toml"
    bomb.write_text(text)
    out = tmp_path / "out"
    result = report(tmp_path, "--prices", str(bomb), "-o", str(out))
    assert result.code == 2, result.err
    assert first_line(result.err) == (
        f"{bomb}:1:{column}: error: '{bomb}' nests arrays or inline tables more than 16 deep"
    )
    assert "Traceback" not in result.err and "RecursionError" not in result.err
    assert not out.exists()


def test_nesting_the_scan_misses_still_ends_in_a_located_error_not_recursion(tmp_path, monkeypatch):
    monkeypatch.setattr(prices_module, "MAX_NESTING", 10**6)  # as if the scan saw nothing
    store_run(tmp_path / "r.db")
    bomb = tmp_path / "bomb.toml"
    bomb.write_text("a = " + "[" * 3000 + "]" * 3000 + "\n")
    result = report(tmp_path, "--prices", str(bomb), "-o", str(tmp_path / "out"))
    assert result.code == 2
    assert (
        first_line(result.err)
        == f"{bomb}:1:1: error: '{bomb}' nests arrays or inline tables too deep to read"
    )


def test_brackets_inside_strings_and_comments_are_not_nesting(tmp_path):
    store_run(tmp_path / "r.db")
    prices = tmp_path / "prices.toml"
    prices.write_text(f'# {"[" * 40}\ncurrency = "{"[" * 40}"\n[per_device_hour]\nh100 = 4.0\n')
    result = report(tmp_path, "--prices", str(prices), "-o", str(tmp_path / "out"))
    assert result.code == 2
    assert first_line(result.err) == f'{prices}:2:1: error: currency must be a short label such as "USD"'


# ------------------------------------------------------------------ 4: Markdown from the store is inert

HOSTILE = {
    "experiment": "a](http://evil.example/p.png) ![b `x` *y*",
    "point": "p_[x](http://evil.example)_ <http://evil.example/auto>",
    "target": "- [t](http://evil.example) ~~s~~",
    "cause": "[phish](http://evil.example) **bold** <img src=x onerror=alert(1)> &#91;e&#93;(http://x) \\",
    "status_text": "1. one > quote # head #",
    "label": "[ref]: http://evil.example",
    "unit": "img/s __strong__ \\[esc\\](http://evil.example) a|b",
}


def hostile_store(db: Path) -> None:
    h = HOSTILE
    references = [{"label": h["label"], "value": 200.0, "unit": h["unit"], "source": "x", "target": "a100"}]
    plan = {"references": [], "declared_references": references, "measure": {"metric": "images_per_s"}}
    fields = {"throughput": {"unit": h["unit"], "job": 100.0, "per_device": 50.0, "samples_per_step": 4},
              "optimize": "tuned", "optimize_detail": {"compile": h["cause"]}}  # fmt: skip
    store_run(db, experiment=h["experiment"], target=h["target"], point=h["point"], plan=plan,
              metrics_fields=fields)  # fmt: skip
    store_run(db, experiment=h["experiment"], target="gaudi2", point=h["point"], plan=plan,
              metrics_fields=fields, throughput=50.0)  # fmt: skip
    store_run(db, experiment=h["experiment"], target=h["status_text"], point="batch-32", status="failed",
              cause=h["cause"])  # fmt: skip


def inline_tokens(tokens):
    for token in tokens:
        yield token
        yield from inline_tokens(token.children or [])


def test_values_from_the_store_make_no_link_image_emphasis_or_code_in_the_markdown(tmp_path):
    db = tmp_path / "r.db"
    hostile_store(db)
    out = tmp_path / "out"
    result = report(tmp_path, "--baseline", "gaudi2", "-o", str(out), db=db)
    assert result.code == 0, result.err
    page = (out / "report.md").read_text()
    parser = MarkdownIt("commonmark").enable(["table", "strikethrough"])
    tokens = list(inline_tokens(parser.parse(page)))
    kinds = {t.type for t in tokens}
    assert not kinds & {"link_open", "em_open", "s_open", "code_inline", "code_block", "fence", "html_inline",
                        "html_block", "blockquote_open", "ordered_list_open", "hr"}, kinds  # fmt: skip
    images = [t for t in tokens if t.type == "image"]
    assert [t.attrGet("src") for t in images] == [p for p in files_under(out) if p.endswith(".png")]
    assert all("".join(c.content for c in t.children) == HOSTILE["experiment"] for t in images)  # its alt
    bold = [tokens[i + 1].content for i, t in enumerate(tokens) if t.type == "strong_open"]
    assert bold == ["failed"]  # benchc's own emphasis, and only it
    headings = [t.tag for t in tokens if t.type == "heading_open"]
    assert headings == ["h1", "h2"]
    text = "".join(t.content for t in tokens if t.type == "text")
    for name in ("experiment", "point", "target", "cause", "status_text", "label", "unit"):
        assert HOSTILE[name] in text, name  # shown as written, every character
    blocks = parser.parse(page)
    widths = [sum(1 for t in blocks[i:] if t.type in ("th_open", "td_open") and not t.hidden)
              for i, t in enumerate(blocks) if t.type == "tr_open"]  # fmt: skip
    per_row = [a - b for a, b in zip(widths, widths[1:] + [0])]
    assert len(per_row) == 3 and len(set(per_row)) == 1, per_row  # a | in a value made no column


def test_a_dollar_sign_in_a_name_starts_no_chart_math(tmp_path):
    store_run(tmp_path / "r.db", experiment=r"price $\foo$ $x^$", target=r"$\bar$")
    result = report(tmp_path, "-o", str(tmp_path / "out"))
    assert result.code == 0, result.err
    assert len([p for p in files_under(tmp_path / "out") if p.endswith(".png")]) == 1


# ------------------------------------------------------------------ 8: a directory or a link in the way


@pytest.mark.parametrize("name", ["report.md", "sd3_mmdit_train.png"])
def test_a_directory_in_the_way_of_an_output_is_refused_and_nothing_is_written(tmp_path, name):
    store_run(tmp_path / "r.db")
    out = tmp_path / "out"
    (out / name).mkdir(parents=True)
    result = report(tmp_path, "-o", str(out))
    assert result.code == 2, result.err
    assert first_line(result.err) == (
        f"error: -o/--out: '{out / name}' is a directory; the report cannot write its file there"
    )
    assert files_under(out) == [name]  # no report, no chart, no temporary file left
    assert "Traceback" not in result.err


@pytest.mark.parametrize("name", ["report.md", "sd3_mmdit_train.png"])
def test_a_symbolic_link_in_the_way_is_replaced_never_written_through(tmp_path, name):
    store_run(tmp_path / "r.db")
    out, victim = tmp_path / "out", tmp_path / "elsewhere" / "victim"
    victim.parent.mkdir()
    victim.write_text("precious")
    out.mkdir()
    (out / name).symlink_to(victim)
    result = report(tmp_path, "-o", str(out))
    assert result.code == 0, result.err
    assert victim.read_text() == "precious"
    assert not (out / name).is_symlink() and (out / name).stat().st_size > 100
    assert files_under(out) == ["report.md", "sd3_mmdit_train.png"]


# ------------------------------------------------------------------ 9: one chart per section


def test_experiment_a_in_smoke_and_experiment_a_smoke_get_a_chart_each(tmp_path):
    db = tmp_path / "r.db"
    store_run(db, experiment="a", target="cpu", smoke=True)
    store_run(db, experiment="a-smoke", target="h100", smoke=False)
    result = report(tmp_path, "-o", str(tmp_path / "out"), db=db)
    assert result.code == 0, result.err
    page = (tmp_path / "out" / "report.md").read_text()
    charts = re.findall(r"^!\[([^\]]*)\]\(([^)]+)\)$", page, flags=re.M)
    assert [alt for alt, _ in charts] == ["a", "a-smoke"]
    assert len({src for _, src in charts}) == 2, charts
    assert all((tmp_path / "out" / src).is_file() for _, src in charts)


# ------------------------------------------------------------------ 13: prices in range, files as named


def test_a_price_out_of_range_is_refused_and_a_tiny_number_is_never_a_row_of_zeros(tmp_path):
    store_run(tmp_path / "r.db")
    prices = tmp_path / "tiny.toml"
    prices.write_text('currency = "USD"\n[per_device_hour]\nh100 = 1e-300\n')
    result = report(tmp_path, "--prices", str(prices), "-o", str(tmp_path / "out"))
    assert result.code == 2
    assert first_line(result.err) == (
        f"{prices}:3:1: error: the price of h100 must be from 0.0001 to 1,000,000 per device-hour"
    )
    assert sig(1e-300) == "1.00e-300" and sig(2.5e-9) == "2.50e-09" and sig(0.000012345) == "0.0000123"


def test_a_spec_price_out_of_range_in_the_store_gives_no_cost(tmp_path):
    store_run(tmp_path / "r.db", plan={"prices": {"currency": "USD", "per_device_hour": {"h100": 1e-300}}})
    result = report(tmp_path, "-o", str(tmp_path / "out"))
    assert result.code == 0, result.err
    page = (tmp_path / "out" / "report.md").read_text()
    # the stored plan breaks the plan's schema (prices from 0.0001): the row is shown invalid
    assert "**failed**: invalid plan in the store: plan/prices/per_device_hour/h100: 1e-300" in page
    assert "USD per" not in page and not re.search(r"\d{13}", page)


def test_a_prices_file_over_the_size_limit_is_said_in_one_unit(tmp_path):
    store_run(tmp_path / "r.db")
    prices = tmp_path / "big.toml"
    prices.write_text("#" * 100_000 + "\n")
    result = report(tmp_path, "--prices", str(prices), "-o", str(tmp_path / "out"))
    assert result.code == 2
    assert first_line(result.err) == f"error: --prices: '{prices}' is 98 KiB; a prices file is at most 64 KiB"


def test_an_unknown_table_is_located_at_its_own_line(tmp_path):
    store_run(tmp_path / "r.db")
    prices = tmp_path / "extra.toml"
    prices.write_text('currency = "USD"\n\n[per_device_hour]\nh100 = 1\n\n[extra]\nx = 1\n')
    result = report(tmp_path, "--prices", str(prices), "-o", str(tmp_path / "out"))
    assert result.code == 2
    assert first_line(result.err) == f"{prices}:6:2: error: unknown key 'extra' in a prices file"


def test_a_prices_path_that_is_a_symbolic_link_is_refused_without_showing_its_target(tmp_path):
    store_run(tmp_path / "r.db")
    secret = tmp_path / "secret.txt"
    secret.write_text("root:x:0:0:the secret line\n")
    link = tmp_path / "prices.toml"
    link.symlink_to(secret)
    result = report(tmp_path, "--prices", str(link), "-o", str(tmp_path / "out"))
    assert result.code == 2
    assert (
        first_line(result.err) == f"error: --prices: '{link}' is a symbolic link; name the prices file itself"
    )
    assert "secret" not in result.err and not (tmp_path / "out").exists()


def test_a_currency_with_a_trailing_newline_is_refused_in_a_prices_file(tmp_path):
    store_run(tmp_path / "r.db")
    prices = tmp_path / "prices.toml"
    prices.write_text('currency = "USD\\n"\n[per_device_hour]\nh100 = 4.0\n')
    result = report(tmp_path, "--prices", str(prices), "-o", str(tmp_path / "out"))
    assert result.code == 2
    assert first_line(result.err) == f'{prices}:1:1: error: currency must be a short label such as "USD"'


# ------------------------------------------------------------------ 19: empty flag values


@pytest.mark.parametrize(
    "flag, message",
    [("-e", "-e/--experiment needs an experiment name, got ''"),
     ("--baseline", "--baseline needs a target name, got ''"),
     ("-o", "-o/--out needs a folder name, got ''"), ("--prices", "--prices needs a file name, got ''")],
)  # fmt: skip
def test_an_empty_flag_value_is_an_error_naming_the_flag(tmp_path, flag, message):
    store_run(tmp_path / "r.db")
    here = tmp_path / "here"
    here.mkdir()
    args = [flag, ""] if flag == "-o" else [flag, "", "-o", str(tmp_path / "out")]
    result = report(tmp_path, *args, cwd=here)
    assert result.code == 2, result.err
    assert first_line(result.err) == f"error: {message}"
    assert files_under(here) == [] and not (tmp_path / "out").exists()


def test_an_empty_db_is_an_error_not_the_default_store(tmp_path):
    result = run_cli("report", "--db", "", "-o", str(tmp_path / "out"))
    assert result.code == 2 and first_line(result.err) == "error: --db needs a file name, got ''"


# ------------------------------------------------------------------ 20: estimate's figures in one format


def test_estimate_shows_each_figure_to_3_significant_figures():
    text = run_cli("estimate", "specs/sd3.bench", "-t", "gaudi2", cwd=REPO).out
    assert "  bound       at most 2,930 images/s (183 per device; images_per_s)" in text
    assert "the roofline allows at best 2,930 images/s" in text  # the same bound, the same figure
    assert "49.0 GB of 96.0 GB per device: fits, 47.0 GB free (51.1% used)" in text
    assert "    weights         8.11 GB  fp32 parameters" in text
    over = run_cli("estimate", "specs/sd3.bench", "-t", "h100", "--set", "train.batch=1000000", cwd=REPO).out
    assert "763,000 GB of 80.0 GB per device: does NOT fit, 763,000 GB over (9,540x the memory)" in over


def test_the_spec_description_heads_its_section_escaped(tmp_path):
    """`description` is documented as shown in plans and reports: under the section's heading,
    inert in Markdown and escaped in HTML."""
    db = tmp_path / "r.db"
    store_run(db, plan={"description": "S1 on *16* devices [see](http://evil.example) <b>"})
    assert report(tmp_path, "-o", str(tmp_path / "out"), db=db).code == 0
    page = (tmp_path / "out" / "report.md").read_text().splitlines()
    heading = page.index("## sd3_mmdit_train")
    assert page[heading + 2] == r"S1 on \*16\* devices \[see\](http://evil.example) &lt;b>"
    assert report(tmp_path, "--format", "html", "-o", str(tmp_path / "html"), db=db).code == 0
    html_page = (tmp_path / "html" / "report.html").read_text()
    assert "<p>S1 on *16* devices [see](http://evil.example) &lt;b&gt;</p>" in html_page
