"""The setup behind a number (issue 36, item 3, in part): a run records the git revision of the
repository that holds its spec, whether tracked files had uncommitted changes and whether the
spec itself is committed; `show` has it, and the report's setup list says it per target."""

from __future__ import annotations

import json
import subprocess

import pytest

from benchc.runner.provenance import spec_repository

from helpers import run_cli

SPEC = """experiment prov {
  model causal_lm {
    model_type = "llama"; hidden = 64; layers = 2; heads = 4; kv_heads = 2; intermediate = 96
    vocab = 256; max_positions = 256
  }
  train { precision = fp32; batch = 2; seq_len = 16; steps = 2; warmup = 1; optimizer = sgd(lr = 0.01) }
  targets = [cpu]
}
"""


def _git(folder, *args):
    subprocess.run(["git", "-C", str(folder), *args], check=True, capture_output=True)


def test_outside_a_repository_nothing_is_recorded(tmp_path):
    spec = tmp_path / "s.bench"
    spec.write_text(SPEC)
    assert spec_repository(str(spec)) is None and spec_repository(None) is None


@pytest.mark.integration
def test_a_run_records_the_revision_of_the_spec_s_repository_and_the_report_says_it(tmp_path):
    repo = tmp_path / "project"
    repo.mkdir()
    _git(repo, "init", "-q")
    _git(repo, "config", "user.email", "t@example.invalid")
    _git(repo, "config", "user.name", "t")
    (repo / "s.bench").write_text(SPEC)
    (repo / "notes.txt").write_text("one\n")
    _git(repo, "add", ".")
    _git(repo, "commit", "-q", "-m", "spec")
    head = subprocess.run(
        ["git", "-C", str(repo), "rev-parse", "HEAD"], capture_output=True, text=True
    ).stdout.strip()
    assert spec_repository(str(repo / "s.bench")) == {"revision": head, "dirty": False, "spec_tracked": True}
    (repo / "notes.txt").write_text("two\n")  # a tracked file changed: the work tree is dirty
    db = tmp_path / "r.db"
    result = run_cli("run", str(repo / "s.bench"), "-o", str(tmp_path / "build"), "--db", str(db))
    assert result.code == 0, result.out[-2000:] + result.err[-2000:]
    listed = run_cli("runs", "--db", str(db)).out
    (run_id,) = [w for w in listed.split() if len(w) == 12 and all(c in "0123456789abcdef" for c in w)]
    shown = json.loads(run_cli("show", run_id, "--db", str(db)).out)
    assert shown["environment"]["spec_repository"] == {"revision": head, "dirty": True, "spec_tracked": True}
    assert run_cli("report", "--db", str(db), "-o", str(tmp_path / "rep")).code == 0
    page = (tmp_path / "rep" / "report.md").read_text()
    assert "The setup behind the numbers (each target's latest runs):" in page
    line = next(x for x in page.splitlines() if x.startswith("- cpu: benchc "))
    assert f"spec revision {head[:12]} (uncommitted changes)" in line and ", torch " in line, line
