"""Large and odd input stays cheap and printable: diagnostics of a file with thousands of
mistakes are computed in linear time and capped when printed, and control characters from
the user's text never reach the terminal raw."""

from __future__ import annotations

import subprocess
import sys
import time

from benchc.diagnostics import MAX_SHOWN_PER_FILE, Source, printable

from conftest import REPO


def benchc(*args: str, timeout: float = 60) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "benchc", *args], cwd=REPO, capture_output=True,
                          text=True, timeout=timeout)  # fmt: skip


def test_control_characters_from_a_spec_are_escaped_in_diagnostics(tmp_path):
    path = tmp_path / "cc.bench"
    path.write_text(
        'experiment e {\n  model mmdit { preset = "\\u001b[2Jboom\\u0007" }\n'
        "  train { batch = 4 }\n  targets = [cpu]\n}\n"
    )
    proc = benchc("check", str(path))
    assert proc.returncode == 2
    assert "\x1b" not in proc.stderr and "\x07" not in proc.stderr
    assert "\\x1b[2Jboom\\x07" in proc.stderr  # shown, escaped: the user sees what they wrote


def test_printable_keeps_newlines_and_tabs_and_escapes_the_rest():
    assert printable("a\nb\tc") == "a\nb\tc"
    assert printable("\x1b[31mred\x9b") == "\\x1b[31mred\\x9b"


def test_thousands_of_mistakes_are_found_fast_and_printed_capped(tmp_path):
    count = 20_000
    body = "".join(f"  train.unknown_{i} = {i}\n" for i in range(count))
    path = tmp_path / "many.bench"
    path.write_text(f"experiment e {{\n  model mmdit {{ depth = 2 }}\n{body}  targets = [cpu]\n}}\n")
    started = time.monotonic()
    proc = benchc("check", str(path), timeout=120)
    elapsed = time.monotonic() - started
    assert proc.returncode == 2, proc.stderr[-2000:]
    assert elapsed < 30, elapsed  # minutes before the fix, on the same machine
    shown = proc.stderr.count(": error: ")
    assert shown == MAX_SHOWN_PER_FILE, shown
    assert f"and {count - MAX_SHOWN_PER_FILE} more errors in " in proc.stderr
    assert f"{count} errors found" in proc.stderr


def test_positions_are_computed_from_line_starts():
    text = "ab\ncd\n\nef"
    source = Source("s", text)
    for offset in range(len(text) + 1):
        before = text[:offset]
        expected = (before.count("\n") + 1, offset - (before.rfind("\n") + 1) + 1)
        assert source.position(offset) == expected, offset
