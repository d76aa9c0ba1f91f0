"""Loading a spec with includes into one located settings document."""

from __future__ import annotations

from pathlib import Path

import pytest

from benchc.diagnostics import BenchError
from benchc.frontend.document import load_document

SPEC = """
experiment e {
  model mmdit { depth = 2 }
  train { batch = 4 }
  targets = [cpu]
}
"""


def test_values_and_origins(write):
    doc = load_document(write("e.bench", SPEC))
    assert doc.experiment == "e"
    assert doc.values == {"model": {"mmdit": {"depth": 2}}, "train": {"batch": 4}, "targets": ["cpu"]}
    span = doc.span_of(("train", "batch"))
    assert (span.line, span.column) == (4, 19)
    key = doc.span_of(("train", "batch"), prefer_key=True)
    assert (key.line, key.column) == (4, 11)
    # a path nobody wrote falls back to its nearest written ancestor (the block name)
    missing = doc.span_of(("train", "steps"))
    assert (missing.line, missing.column) == (4, 3)


def test_include_is_a_base_the_spec_overrides(write):
    write("common/base.bench", "train { batch = 16; steps = 30 }\nmodel mmdit { depth = 24 }\n")
    path = write(
        "spec.bench",
        'include "common/base.bench"\nexperiment e {\n  train.batch = 32\n  targets = [h100]\n}\n',
    )
    doc = load_document(path)
    assert doc.values["train"] == {"batch": 32, "steps": 30}
    assert doc.values["model"] == {"mmdit": {"depth": 24}}
    assert doc.span_of(("train", "steps")).source.name.endswith("base.bench")
    assert doc.span_of(("train", "batch")).source.name.endswith("spec.bench")
    assert [f.path.endswith(n) for f, n in zip(doc.files, ["spec.bench", "base.bench"])] == [True, True]


def test_includes_resolve_relative_to_the_including_file(write, tmp_path, monkeypatch):
    write("a/inner/leaf.bench", "train { steps = 9 }\n")
    write("a/mid.bench", 'include "inner/leaf.bench"\ntrain { batch = 2 }\n')
    path = write("a/spec.bench", 'include "mid.bench"\nexperiment e { targets = [cpu] }\n')
    monkeypatch.chdir(tmp_path.parent)  # the working directory does not matter
    doc = load_document(path)
    assert doc.values["train"] == {"steps": 9, "batch": 2}


def test_diamond_includes_are_not_cycles(write):
    write("d.bench", "train { steps = 5 }\n")
    write("b.bench", 'include "d.bench"\n')
    write("c.bench", 'include "d.bench"\n')
    doc = load_document(write("a.bench", 'include "b.bench"\ninclude "c.bench"\nexperiment e {}\n'))
    assert doc.values["train"] == {"steps": 5}


def test_include_cycle_names_the_chain(write):
    write("x.bench", 'include "y.bench"\n')
    write("y.bench", 'include "x.bench"\n')
    path = write("main.bench", 'include "x.bench"\nexperiment e {}\n')
    with pytest.raises(BenchError) as caught:
        load_document(path)
    message = caught.value.diagnostics[0].message
    assert message.startswith("include cycle:")
    chain = message.removeprefix("include cycle: ").split(" -> ")
    assert [Path(p).name for p in chain] == ["main.bench", "x.bench", "y.bench", "x.bench"]


def test_self_include_is_a_cycle(write):
    path = write("self.bench", 'include "self.bench"\nexperiment e {}\n')
    with pytest.raises(BenchError, match="include cycle"):
        load_document(path)


def test_blocks_merge_and_dotted_keys_nest(write):
    doc = load_document(write("m.bench", "experiment e {\n train { batch = 1 }\n train.steps = 3\n}\n"))
    assert doc.values["train"] == {"batch": 1, "steps": 3}


def test_sweeps_are_collected_with_spans(write):
    doc = load_document(write("s.bench", "experiment e {\n sweep train.batch = [16, 32]\n}\n"))
    axis = doc.sweeps[("train", "batch")]
    assert axis.values == (16, 32)
    assert [(s.line, s.column) for s in axis.value_spans] == [(2, 23), (2, 27)]


def test_duplicate_in_one_file_but_override_across_files(write):
    write("base.bench", "train { batch = 1 }\n")
    ok = write("ok.bench", 'include "base.bench"\nexperiment e { train.batch = 2 }\n')
    assert load_document(ok).values["train"]["batch"] == 2
    bad = write("bad.bench", "experiment e { train.batch = 2\n train { batch = 3 } }\n")
    with pytest.raises(BenchError, match="duplicate key 'train.batch'"):
        load_document(bad)


def test_missing_file_is_a_user_error(tmp_path):
    with pytest.raises(BenchError, match="no such file"):
        load_document(tmp_path / "nope.bench")
    with pytest.raises(BenchError, match="is a directory"):
        load_document(tmp_path)


def test_the_including_files_value_beats_an_included_sweep(write):
    write("base.bench", "sweep train.batch = [16, 32]\nsweep train.steps = [10, 20]\n")
    doc = load_document(write("spec.bench", 'include "base.bench"\nexperiment e { train.batch = 8 }\n'))
    assert doc.values["train"]["batch"] == 8
    assert list(doc.sweeps) == [("train", "steps")]
