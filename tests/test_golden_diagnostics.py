"""Every bad input gives exit code 2 and exactly the diagnostic text in its golden file.

Inputs are tests/bad/*.bench (a first line `# args: ...` adds command-line arguments) plus a
few generated here (binary data, NUL bytes, huge or deeply nested files). Regenerate the
golden files after an intended change of wording with BENCHC_UPDATE_GOLDEN=1.
"""

from __future__ import annotations

import os
import random
import re
import shlex

import pytest

from helpers import BAD, GOLDEN, run_cli

GOLDEN_DIR = GOLDEN / "diagnostics"
UPDATE = os.environ.get("BENCHC_UPDATE_GOLDEN") == "1"


def _generated() -> dict[str, bytes]:
    rng = random.Random(1234)
    garbage = bytes([0x89, 0x50, 0x4E, 0x47]) + bytes(rng.randrange(256) for _ in range(512))
    nested = b"experiment s {\n  model mmdit { depth = " + b"[" * 5000 + b"]" * 5000 + b" }\n}\n"
    huge = b"experiment s {\n" + b"  # padding padding padding padding padding padding\n" * 200_000 + b"}\n"
    return {
        "binary-garbage.bench": garbage,
        "nul-byte.bench": b'experiment s {\n  description = "a\x00b"\n}\n',
        "deep-nesting.bench": nested,
        "ten-megabytes.bench": huge,
        "latin1.bench": 'experiment s {\n  description = "caf\xe9"\n}\n'.encode("latin-1"),
    }


GENERATED = _generated()
FILE_CASES = sorted(p.name for p in BAD.glob("*.bench"))
CASES = FILE_CASES + sorted(GENERATED)


def test_enough_distinct_cases():
    assert len(CASES) >= 25
    assert len(set(CASES)) == len(CASES)


@pytest.mark.parametrize("name", CASES)
def test_bad_input_matches_golden(name, tmp_path):
    if name in GENERATED:
        (tmp_path / name).write_bytes(GENERATED[name])
        cwd = tmp_path
        args: list[str] = []
    else:
        cwd = BAD
        first = (BAD / name).read_text().splitlines()[:1]
        args = shlex.split(first[0][len("# args:") :]) if first and first[0].startswith("# args:") else []
    result = run_cli("check", name, *args, cwd=cwd)

    assert result.code == 2, result.err
    assert "Traceback" not in result.err
    assert result.out == ""
    first_line = result.err.splitlines()[0]
    assert re.match(r"^\S+:\d+:\d+: error: ", first_line), first_line
    assert "^" in result.err  # a caret under the span

    golden = GOLDEN_DIR / (name.removesuffix(".bench") + ".txt")
    if UPDATE:
        golden.write_text(result.err)
    assert golden.exists(), f"no golden file {golden.name}; run with BENCHC_UPDATE_GOLDEN=1"
    assert result.err == golden.read_text()


def test_no_orphan_golden_files():
    expected = {c.removesuffix(".bench") + ".txt" for c in CASES}
    assert {p.name for p in GOLDEN_DIR.glob("*.txt")} == expected
