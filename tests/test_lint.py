"""The code base lints and formats clean with the pinned ruff (a gate, like CI's)."""

from __future__ import annotations

import subprocess
import sys

import pytest

from helpers import REPO

pytestmark = pytest.mark.integration


def test_ruff_check_is_clean():
    proc = subprocess.run([sys.executable, "-m", "ruff", "check", "compiler", "tests"],
                          cwd=REPO, capture_output=True, text=True)  # fmt: skip
    assert proc.returncode == 0, proc.stdout + proc.stderr


def test_ruff_format_is_clean():
    proc = subprocess.run([sys.executable, "-m", "ruff", "format", "--check", "compiler", "tests"],
                          cwd=REPO, capture_output=True, text=True)  # fmt: skip
    assert proc.returncode == 0, proc.stdout + proc.stderr
