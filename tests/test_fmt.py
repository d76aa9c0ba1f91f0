"""`benchc fmt`: the canonical style, comments kept, the same syntax tree, idempotence, and the
command's files, exit codes, diffs and errors (compiler/frontend/format.py, commands/format.py)."""

from __future__ import annotations

import dataclasses
import os
import re
import stat
import sys

import pytest
from fuzz_specs import FRAGMENT, REFERENCE_SPECS, mutated, spec_texts
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from benchc.diagnostics import BenchError, Source
from benchc.frontend.format import WIDTH, comments_of, format_source
from benchc.frontend.parser import parse_text
from benchc.frontend.source import decode_source

from helpers import REPO, SPECS, run_benchc, run_cli

REFERENCE = sorted([*SPECS.glob("*.bench"), *(SPECS / "common").glob("*.bench")])

MESSY_RAW = (
    '\ufeff# header\r\n\r\n\r\n\r\ninclude   "common/x.bench"\r\n'
    "experiment   demo{\r\n"
    '\tdescription="caf\\u00e9 \\"quoted\\""   # kept escapes\r\n'
    "\ttrain{precision=bf16;batch=16 ;lr=3e-4;global_batch=1_024}\r\n"
    "\r\n"
    "\tmodel   mmdit {\r\n"
    '\t\tpreset="sd3-medium" // slash comment\r\n'
    "\t\tdepth =24\r\n"
    "\t}\r\n"
    "\ttargets=[ gaudi2 ,h100,  # inside a list\r\n"
    "\t   a100 ]\r\n"
    "  sweep   train.batch=[16,32,]\r\n"
    "}   \r\n"
)
MESSY_FORMATTED = """\
# header

include "common/x.bench"
experiment demo {
  description = "caf\\u00e9 \\"quoted\\""   # kept escapes
  train { precision = bf16; batch = 16; lr = 3e-4; global_batch = 1_024 }

  model mmdit {
    preset = "sd3-medium"  // slash comment
    depth  = 24
  }
  targets = [
    gaudi2,
    h100,  # inside a list
    a100,
  ]
  sweep train.batch = [16, 32]
}
"""

MESSY = {
    "crlf-bom-tabs": MESSY_RAW,
    "comments everywhere": """experiment x {   # opening
  targets = [ # open
     gaudi2 , # first
     # about h100
     h100
     // closing
  ]
  opt = adamw( lr = 1e-4 , # lr
     betas = [0.9,0.95] )
  a = # between the key and its value
    [1, 2]
  model # between a block's name and its label
    mmdit { depth = 2 }
  b { c = 1 # inside a one-line block
  }
  k {  # after a brace
       # continued under it
    z = 1
  } # after the closing brace
  # before the end
}
# after everything
""",
    "odd spacing": "experiment    e{a=1;bb  =  2\n\n\n\n  c.d . e=[ 1 ,2 , ]   ;;;  f=g(  )\nh{}\ni {\n\n}}",
    "long values": (
        "experiment e {\n  targets = [" + ", ".join(f"target_number_{i}" for i in range(12)) + "]\n"
        "  train { optimizer = adamw(lr = 1e-4, betas = [0.9, 0.95], eps = 1e-8, weight_decay = 0.1,"
        " extra_argument = 12345) }\n"
        "  nested = [[1, 2], [3, [4, 5]], f(a = [" + ", ".join(str(i) for i in range(40)) + "])]\n}\n"
    ),
    "numbers and strings": 'x = [3e-4, 1_024, -3, +7, 6.0E+2, 0.0, 1e3, "a\\tb", "\\u00e9", "\t", ""]\n',
    "fragment with // comments": '// a fragment\nmodel mmdit { preset = "sd3-medium" }  // trailing\n'
    "train { batch = 16 }\n",
    "only comments": "\n\n# one\n\n\n\n// two\n",
    "empty": "",
}
CASES = {**{p.name: p.read_text() for p in REFERENCE}, **MESSY}


def fmt(text: str, name: str = "t.bench") -> str:
    return format_source(decode_source(text.encode("utf-8"), name))


def shape(node):
    """A syntax node without its source positions."""
    if isinstance(node, tuple):
        return tuple(shape(n) for n in node)
    if dataclasses.is_dataclass(node):
        return (type(node).__name__,) + tuple(
            shape(getattr(node, f.name)) for f in dataclasses.fields(node) if "span" not in f.name
        )
    return type(node).__name__, node


def tree(text: str):
    return shape(parse_text(decode_source(text.encode("utf-8"), "t.bench")).statements)


def comment_texts(text: str) -> list[str]:
    return [c.text for c in comments_of(decode_source(text.encode("utf-8"), "t.bench").text)]


# ---------------------------------------------------------------- the formatter


@pytest.mark.parametrize("name", sorted(CASES))
def test_formatting_twice_changes_nothing(name):
    once = fmt(CASES[name])
    assert fmt(once) == once


@pytest.mark.parametrize("name", sorted(CASES))
def test_formatted_text_parses_to_the_same_syntax_tree(name):
    assert tree(fmt(CASES[name])) == tree(CASES[name])


@pytest.mark.parametrize("name", sorted(CASES))
def test_every_comment_survives_in_order(name):
    before = comment_texts(CASES[name])
    after = comment_texts(fmt(CASES[name]))
    assert after == before
    if name.endswith(".bench"):  # a reference spec: no `#` in its strings, no `//`
        assert len(before) == CASES[name].count("#") > 0
    elif name == "comments everywhere":
        assert len(before) == 14


@pytest.mark.parametrize("path", REFERENCE, ids=lambda p: p.name)
def test_a_mangled_reference_spec_formats_back_to_itself(path):
    """CRLF, a BOM, trailing white space, extra blank lines and alignment spaces removed
    (on lines without a comment): formatting restores the spec byte for byte."""
    original = path.read_text()
    lines = []
    for line in original.splitlines():
        if "#" not in line and "//" not in line and '"' not in line:
            line = re.sub(r"\s*=\s*", "=", line).replace("{  ", "{ ").replace("  {", " {")
        lines.append(line + " \t" if line else "\r\n")
    mangled = "\ufeff" + "\r\n".join(lines) + "\r\n"
    assert mangled.encode() != original.encode()
    assert fmt(mangled) == original


def test_a_messy_file_gets_the_documented_style():
    assert fmt(MESSY_RAW) == MESSY_FORMATTED


def test_comments_are_placed_where_they_belong():
    out = fmt(MESSY["comments everywhere"])
    assert out.startswith("experiment x {   # opening\n")  # the author's three spaces
    assert "  targets = [  # open\n    gaudi2,  # first\n    # about h100\n    h100,\n" in out
    assert "    h100,\n    // closing\n  ]\n" in out
    assert "    lr = 1e-4,  # lr\n    betas = [0.9, 0.95],\n" in out
    assert "  # between the key and its value\n  a = [1, 2]\n" in out
    assert "  # between a block's name and its label\n  model mmdit {\n" in out
    assert "  k {  # after a brace\n       # continued under it\n    z = 1\n" in out
    assert "    z = 1\n  }  # after the closing brace\n" in out
    assert out.endswith("  # before the end\n}\n# after everything\n")


def test_lists_join_when_short_and_wrap_with_a_trailing_comma_when_long():
    out = fmt(MESSY["long values"])
    assert "  targets = [\n    target_number_0,\n" in out and "    target_number_11,\n  ]\n" in out
    assert "  train {\n    optimizer = adamw(\n      lr = 1e-4,\n      betas = [0.9, 0.95],\n" in out
    assert all(len(line) <= WIDTH for line in out.splitlines())
    assert fmt("x = [1,\n  2,\n  3,\n]\n") == "x = [1, 2, 3]\n"


def test_numbers_and_strings_stay_as_written():
    assert fmt(MESSY["numbers and strings"]) == MESSY["numbers and strings"]
    assert "3e-4" in fmt("x = 3e-4") and "0.0003" not in fmt("x = 3e-4")


def test_spacing_blank_lines_and_alignment():
    assert fmt(MESSY["odd spacing"]) == (
        "experiment e {\n  a = 1; bb = 2\n\n  c.d.e = [1, 2]; f = g()\n  h {}\n  i {}\n}\n"
    )
    assert fmt("a = 1\n\n\n\n# c\n\n\n\nb = 2\n") == "a = 1\n\n# c\n\nb = 2\n"
    assert fmt("cluster { nodes = 1 }\nparallel { data = 1 }\n") == (
        "cluster  { nodes = 1 }\nparallel { data = 1 }\n"
    )
    assert fmt("sweep a.b = [1]\nsweep a.long = [2]\n") == "sweep a.b    = [1]\nsweep a.long = [2]\n"


def test_trailing_comments_of_adjacent_lines_share_a_column():
    assert fmt("a = 1 # x\nlonger_key = 2  # y\n") == "a          = 1  # x\nlonger_key = 2  # y\n"
    assert fmt("a = 1       # far\nb = 2 # near\n") == "a = 1       # far\nb = 2       # near\n"


def test_a_syntax_error_is_a_located_bench_error():
    with pytest.raises(BenchError) as caught:
        format_source(Source("bad.bench", "experiment e {\n  a = [1,\n}\n"))
    assert str(caught.value).startswith("bad.bench:3:1: error:")


PROPERTY = settings(
    max_examples=60, derandomize=True, deadline=None, database=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)  # fmt: skip


@pytest.mark.integration
@PROPERTY
@given(spec_texts())
def test_generated_specs_keep_tree_and_comments_and_are_stable(text):
    once = fmt(text)
    assert tree(once) == tree(text)
    assert comment_texts(once) == comment_texts(text)
    assert fmt(once) == once


@PROPERTY
@given(st.sampled_from([*REFERENCE_SPECS.values(), FRAGMENT]).flatmap(mutated))
def test_mangled_input_is_formatted_or_refused_never_broken(case):
    data, _ = case
    try:
        once = format_source(decode_source(data, "t.bench"))
    except BenchError as exc:
        assert all(d.message for d in exc.diagnostics)
        return
    assert format_source(Source("t.bench", once)) == once


# ---------------------------------------------------------------- the command


@pytest.mark.integration
def test_the_reference_specs_are_formatted():
    specs = sorted(str(p.relative_to(REPO)) for p in REFERENCE)
    result = run_benchc("fmt", "--check", *specs)
    assert result.code == 0, result.out + result.err
    assert result.out == "" and result.err == ""


@pytest.mark.integration
def test_fmt_rewrites_in_place_keeps_the_mode_and_reports(tmp_path):
    spec = tmp_path / "s.bench"
    spec.write_bytes(MESSY_RAW.encode())
    spec.chmod(0o640)
    tidy = tmp_path / "tidy.bench"
    tidy.write_text(MESSY_FORMATTED)
    result = run_benchc("fmt", "s.bench", "tidy.bench", cwd=tmp_path)
    assert result.code == 0, result.err
    assert result.out == "formatted s.bench\n"
    assert spec.read_bytes() == MESSY_FORMATTED.encode()
    assert stat.S_IMODE(spec.stat().st_mode) == 0o640
    assert sorted(p.name for p in tmp_path.iterdir()) == ["s.bench", "tidy.bench"]  # no temp file
    again = run_benchc("fmt", "s.bench", cwd=tmp_path)
    assert (again.code, again.out, again.err) == (0, "", "")


@pytest.mark.skipif(sys.platform == "win32", reason="symbolic links")
def test_fmt_through_a_symbolic_link_rewrites_the_file_and_keeps_the_link(tmp_path):
    (tmp_path / "real.bench").write_text("x=1\n")
    (tmp_path / "link.bench").symlink_to("real.bench")
    assert run_cli("fmt", "link.bench", cwd=tmp_path).code == 0
    assert (tmp_path / "link.bench").is_symlink()
    assert (tmp_path / "real.bench").read_text() == "x = 1\n"


@pytest.mark.integration
def test_check_writes_nothing_and_exits_1_when_a_file_would_change(tmp_path):
    (tmp_path / "messy.bench").write_text("x=1\n")
    (tmp_path / "tidy.bench").write_text("x = 1\n")
    result = run_benchc("fmt", "--check", "messy.bench", "tidy.bench", cwd=tmp_path)
    assert result.code == 1
    assert result.out == "would reformat messy.bench\n"
    assert (tmp_path / "messy.bench").read_text() == "x=1\n"
    ok = run_cli("fmt", "--check", "tidy.bench", cwd=tmp_path)
    assert (ok.code, ok.out) == (0, "")


@pytest.mark.integration
def test_diff_prints_a_unified_diff_and_writes_nothing(tmp_path):
    (tmp_path / "s.bench").write_text("experiment e {\n  a=1 # c\n  b = 2\n}")
    result = run_benchc("fmt", "--diff", "s.bench", cwd=tmp_path)
    assert result.code == 0, result.err
    assert result.out.splitlines() == [
        "--- s.bench",
        "+++ s.bench",
        "@@ -1,4 +1,4 @@",
        " experiment e {",
        "-  a=1 # c",
        "+  a = 1  # c",
        "   b = 2",
        "-}",
        "\\ No newline at end of file",
        "+}",
    ]
    assert (tmp_path / "s.bench").read_text() == "experiment e {\n  a=1 # c\n  b = 2\n}"
    both = run_cli("fmt", "--diff", "--check", "s.bench", cwd=tmp_path)
    assert both.code == 1 and "+  a = 1  # c" in both.out and "would reformat s.bench" in both.err


@pytest.mark.integration
def test_a_syntax_error_leaves_the_file_untouched_with_a_located_error(tmp_path):
    bad = b"experiment e {\r\n  a=[1,\r\n}\r\n"
    (tmp_path / "bad.bench").write_bytes(bad)
    (tmp_path / "good.bench").write_text("x=1\n")
    result = run_benchc("fmt", "bad.bench", "good.bench", cwd=tmp_path)
    assert result.code == 2
    assert "bad.bench:3:1: error: unexpected '}'" in result.err
    assert "3 | }\n  | ^" in result.err
    assert "Traceback" not in result.err
    assert (tmp_path / "bad.bench").read_bytes() == bad
    assert (tmp_path / "good.bench").read_text() == "x = 1\n"  # the other files are formatted


@pytest.mark.integration
def test_folders_missing_files_and_fifos_are_refused_without_a_traceback(tmp_path):
    (tmp_path / "folder.bench").mkdir()
    names = ["folder.bench", "missing.bench"]
    if hasattr(os, "mkfifo"):
        os.mkfifo(tmp_path / "pipe.bench")
        names.append("pipe.bench")
    result = run_benchc("fmt", *names, cwd=tmp_path)
    assert result.code == 2
    assert "'folder.bench' is a directory" in result.err
    assert "no such file: 'missing.bench'" in result.err
    if "pipe.bench" in names:
        assert "'pipe.bench' is not a regular file" in result.err
    assert "Traceback" not in result.err


def test_a_formatting_that_would_change_the_meaning_is_never_written(tmp_path, monkeypatch):
    from benchc.frontend import format as formatter

    monkeypatch.setattr(formatter._Formatter, "file", lambda self, tree: "x = 2\n")
    (tmp_path / "s.bench").write_text("x=1\n")
    result = run_cli("fmt", "s.bench", cwd=tmp_path)
    assert result.code == 1
    assert "would change its meaning" in result.err
    assert (tmp_path / "s.bench").read_text() == "x=1\n"
