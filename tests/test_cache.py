"""benchc's cache folder (compiler/cache.py): the Lark parser tables and the compiled Jinja
templates are reused by the next process, a damaged entry is rebuilt, BENCHC_CACHE_DIR=off
writes nothing, and the compiled output is byte-identical whatever the cache holds."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from benchc import cache

from helpers import REPO, SPECS

SPEC = SPECS / "sd3.bench"  # every target: all templates but the inference ones
INFER = SPECS / "beluga-infer.bench"


def _env(tmp_path: Path, cache_dir: str) -> dict:
    env = {**os.environ, "BENCHC_CACHE_DIR": cache_dir}
    env["HOME"], env["XDG_CACHE_HOME"] = str(tmp_path / "home"), str(tmp_path / "xdg")
    return env


def _compile(tmp_path: Path, out: Path, cache_dir: str, spec: Path = SPEC) -> dict[str, bytes]:
    proc = subprocess.run(
        [sys.executable, "-m", "benchc", "compile", str(spec), "-o", str(out)],
        cwd=REPO, env=_env(tmp_path, cache_dir), capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    return {str(p.relative_to(out)): p.read_bytes() for p in sorted(out.rglob("*")) if p.is_file()}


def _python(tmp_path: Path, cache_dir: str, code: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-c", code], cwd=REPO, env=_env(tmp_path, cache_dir),
                          capture_output=True, text=True, timeout=120)  # fmt: skip


# A new process that cannot build a parser or compile a template: it works only from the cache.
NO_BUILDING = """
import jinja2, lark
def refuse(*args, **kwargs):
    raise AssertionError("built anew instead of read from the cache")
lark.Lark.__init__ = refuse
jinja2.Environment.compile = refuse
from pathlib import Path
from benchc.pipeline import plan_spec
from benchc.codegen.build import compile_plans
compile_plans(plan_spec({spec!r}).plans, Path({out!r}))
"""


@pytest.mark.integration
def test_a_second_process_reads_the_parser_and_templates_from_the_cache(tmp_path):
    folder = tmp_path / "cache"
    reference = _compile(tmp_path, tmp_path / "off", "off")
    first = _compile(tmp_path, tmp_path / "cold", str(folder))
    assert len(list(folder.glob("lark-*.pickle"))) == 1
    assert list(folder.glob("jinja-*.cache"))
    assert not list(folder.glob("*.tmp")) and not list(folder.glob(".*"))  # replaced into place
    code = NO_BUILDING.format(spec=str(SPEC), out=str(tmp_path / "cached"))
    proc = _python(tmp_path, str(folder), code)
    assert proc.returncode == 0, proc.stderr
    second = {str(p.relative_to(tmp_path / "cached")): p.read_bytes()
              for p in sorted((tmp_path / "cached").rglob("*")) if p.is_file()}  # fmt: skip
    assert first == reference and second == reference
    # without the cache, the same process is refused: the check above proves the cache was used
    assert _python(tmp_path, "off", code).returncode != 0


@pytest.mark.integration
@pytest.mark.parametrize("damage", [b"", b"\x80\x05garbage", b"not a pickle at all" * 100])
def test_a_damaged_cache_entry_is_rebuilt_and_the_output_is_unchanged(tmp_path, damage):
    folder = tmp_path / "cache"
    reference = _compile(tmp_path, tmp_path / "off", "off")
    _compile(tmp_path, tmp_path / "warm", str(folder))
    entries = sorted(folder.iterdir())
    for entry in entries:
        entry.write_bytes(damage)
    assert _compile(tmp_path, tmp_path / "damaged", str(folder)) == reference
    (parser,) = folder.glob("lark-*.pickle")
    assert parser.read_bytes() != damage  # written anew, whole
    # and the rewritten entries serve the next process
    proc = _python(tmp_path, str(folder), NO_BUILDING.format(spec=str(SPEC), out=str(tmp_path / "next")))
    assert proc.returncode == 0, proc.stderr


@pytest.mark.integration
def test_the_cache_disabled_writes_nothing_anywhere(tmp_path):
    for spec in (SPEC, INFER):
        _compile(tmp_path, tmp_path / "out" / spec.stem, "off", spec)
    assert not (tmp_path / "home").exists() and not (tmp_path / "xdg").exists()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out"]


@pytest.mark.integration
def test_a_cache_folder_that_cannot_be_made_is_ignored(tmp_path):
    blocker = tmp_path / "a-file"
    blocker.write_text("not a folder")
    reference = _compile(tmp_path, tmp_path / "off", "off", INFER)
    assert _compile(tmp_path, tmp_path / "blocked", str(blocker / "cache"), INFER) == reference
    assert blocker.read_text() == "not a folder"


@pytest.mark.integration
def test_the_output_is_identical_with_and_without_the_cache(tmp_path):
    folder = str(tmp_path / "cache")
    for spec in sorted(SPECS.glob("*.bench")):
        without = _compile(tmp_path, tmp_path / "off" / spec.stem, "off", spec)
        cold = _compile(tmp_path, tmp_path / "cold" / spec.stem, folder, spec)
        warm = _compile(tmp_path, tmp_path / "warm" / spec.stem, folder, spec)
        assert without == cold == warm, spec.name


def test_where_the_cache_folder_is(monkeypatch, tmp_path):
    for name in ("BENCHC_CACHE_DIR", "XDG_CACHE_HOME"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    assert cache.cache_dir() == tmp_path / "home" / ".cache" / "benchc"
    monkeypatch.setenv("XDG_CACHE_HOME", "relative/is/ignored")
    assert cache.cache_dir() == tmp_path / "home" / ".cache" / "benchc"
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    assert cache.cache_dir() == tmp_path / "xdg" / "benchc"
    monkeypatch.setenv("BENCHC_CACHE_DIR", str(tmp_path / "mine"))
    assert cache.cache_dir() == tmp_path / "mine"
    for off in ("off", "OFF", "0", "none", "false"):
        monkeypatch.setenv("BENCHC_CACHE_DIR", off)
        assert cache.cache_dir() is None
        assert cache.read_bytes("x") is None and not cache.write_bytes("x", b"y")
    assert sorted(p.name for p in tmp_path.iterdir()) == []  # nothing was created
