"""Fixtures shared by the tests. Helpers (paths, running benchc) are in tests/helpers/; each
test module marks its own integration tests (`pytestmark` or `@pytest.mark.integration`)."""

from __future__ import annotations

from pathlib import Path

import pytest


@pytest.fixture
def write(tmp_path):
    """write('name.bench', text) -> path under a fresh temp dir."""

    def _write(name: str, text: str) -> Path:
        path = tmp_path / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
        return path

    return _write
