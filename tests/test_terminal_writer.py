"""The one terminal writer (issue 34, cause 3; M7): text that came from the store, a host or
an error reaches the terminal with its control characters shown as escapes, whichever command
prints it (calibrate, targets, check, estimate, runs, show, run); benchc's own colours still
work, and the commands whose stdout is data (fmt, export) write it as it is."""

from __future__ import annotations

import json

import pytest
from report_store import calibrate, store_run

from benchc.console import TerminalText, raw
from benchc.results.store import Store

from helpers import REPO, SPECS, run_cli

HOSTILE = "node\x1b]0;pwned\x07\x1b[2J\x1b[31m\r\x08\x9b-1"  # retitle, clear, colour, CR, BS, CSI


def no_control(text: str) -> bool:
    return not any(c in text for c in "\x1b\x07\r\x08\x9b")


def test_the_writer_escapes_what_it_is_given_and_keeps_lines():
    import io

    stream = io.StringIO()
    writer = TerminalText(stream)
    assert writer.write(f"a {HOSTILE}\n\tb") == len(f"a {HOSTILE}\n\tb")
    shown = stream.getvalue()
    assert no_control(shown) and "\\x1b]0;pwned\\x07" in shown and shown.endswith("\n\tb")
    assert raw(writer) is stream and raw(stream) is stream


@pytest.fixture()
def hostile_store(tmp_path):
    db = tmp_path / "results.db"
    calibrate(db, "cpu", {"fp32": 1.0, "bf16": 2.0}, 0.02, host=HOSTILE)
    store_run(db, "cpu", 10.0)
    with Store(db) as store:  # a failed run whose error text came from a program
        run_id = store.start(experiment="sd3_mmdit_train", target="cpu", point="batch-32", point_values={},
                             smoke=False, spec_path=None, spec_sha256=None, build_path=None, log_path=None,
                             environment={}, series="s", trial=1, plan=None)  # fmt: skip
        store.finish(run_id, "failed", f"RuntimeError: {HOSTILE}", None)
    return db


@pytest.mark.parametrize("command", [
    ("targets",),
    ("check", str(SPECS / "sd3.bench"), "--target", "cpu", "--smoke"),
    ("estimate", str(SPECS / "sd3.bench"), "--target", "cpu", "--smoke"),
    ("runs",),
    ("runs", "--status", "failed"),
])  # fmt: skip
def test_stored_text_reaches_the_terminal_escaped(hostile_store, command):
    result = run_cli(*command, "--db", str(hostile_store), cwd=REPO)
    assert result.code == 0, result.err
    assert no_control(result.out) and no_control(result.err)
    shown = result.out + result.err
    if command[0] in ("targets", "check"):
        assert "\\x1b]0;pwned" in shown  # the host, shown, not obeyed
    if command == ("runs", "--status", "failed"):
        assert "RuntimeError: node\\x1b]0;pwned" in shown


def test_a_stored_error_is_escaped_by_show_and_kept_whole_in_its_json(hostile_store):
    listed = run_cli("runs", "--status", "failed", "--db", str(hostile_store), cwd=REPO).out
    run_id = next(line.split()[0] for line in listed.splitlines()[1:] if line.strip())
    shown = run_cli("show", run_id, "--db", str(hostile_store), cwd=REPO)
    assert shown.code == 0 and no_control(shown.out)
    record = json.loads(shown.out)  # JSON escapes it itself; the data is whole
    assert record["cause"] == f"RuntimeError: {HOSTILE}"


def test_a_spec_error_keeps_benchc_s_own_colours(tmp_path):
    spec = tmp_path / "bad.bench"
    spec.write_text('experiment "x\x1b[2J" {}\n')
    result = run_cli("--color", "always", "check", str(spec), cwd=REPO)
    assert result.code == 2
    assert "\x1b[31m" in result.err  # benchc's red
    assert "\x1b[2J" not in result.err  # the spec's sequence, escaped


def test_fmt_writes_its_diff_as_it_is(tmp_path):
    """fmt's stdout is data: a diff of a CRLF spec keeps the carriage returns it removes."""
    spec = tmp_path / "crlf.bench"
    spec.write_bytes((SPECS / "sd3.bench").read_bytes().replace(b"\n", b"\r\n"))
    result = run_cli("fmt", "--diff", str(spec), cwd=REPO)
    assert "\r\n" in result.out and "\\r" not in result.out
