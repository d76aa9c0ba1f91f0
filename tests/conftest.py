"""Fixtures shared by the tests, and the `integration` mark of tests in modules that do not
mark themselves. Helpers (paths, running benchc) are in tests/helpers/."""

from __future__ import annotations

from pathlib import Path

import pytest

# Integration tests (they start processes or take over ~1 s) of modules that carry no
# `pytestmark` or `@pytest.mark.integration` of their own: a module's every test (None), or the
# tests of these names. A module that marks its tests itself needs no entry here.
INTEGRATION: dict[str, set[str] | None] = {
    "test_codegen.py": {
        "test_compile_never_imports_torch",  # a fresh interpreter
        "test_generated_programs_are_formatted_and_lint_clean",  # ruff on each program
    },
}


@pytest.hookimpl(tryfirst=True)  # before -m deselects by marks
def pytest_collection_modifyitems(config, items):
    for item in items:
        names = INTEGRATION.get(item.path.name, set())
        if names is None or getattr(item, "originalname", item.name) in names:
            item.add_marker(pytest.mark.integration)
        module = getattr(item, "module", None)
        if names and module is not None:
            missing = sorted(name for name in names if not hasattr(module, name))
            if missing:
                raise pytest.UsageError(
                    f"tests/conftest.py INTEGRATION names tests that {item.path.name} no longer has: "
                    f"{', '.join(missing)}"
                )


@pytest.fixture
def write(tmp_path):
    """write('name.bench', text) -> path under a fresh temp dir."""

    def _write(name: str, text: str) -> Path:
        path = tmp_path / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
        return path

    return _write
