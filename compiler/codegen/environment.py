"""The one Jinja Environment of benchc: templates shipped in benchc.templates, strict undefined,
and the `py` filter that turns any value into a Python literal (the only way values enter code).

Compiled templates are kept in benchc's cache folder (compiler/cache.py) as Jinja bytecode,
checked against each template's source: compiling them anew takes a new process ~0.1 s."""

from __future__ import annotations

import shlex
from functools import lru_cache
from importlib import resources

import jinja2

from .. import cache
from .literals import literal, string_literal


class _BytecodeCache(jinja2.FileSystemBytecodeCache):
    """Jinja's file cache made harmless: a damaged entry is recompiled and a folder that cannot
    be read or written is ignored (Jinja checks each entry's source checksum itself, and writes
    through a temporary file and os.replace)."""

    def load_bytecode(self, bucket: jinja2.bccache.Bucket) -> None:
        try:
            super().load_bytecode(bucket)
        except Exception:  # noqa: BLE001 - truncated or foreign: compile the template anew
            bucket.reset()

    def dump_bytecode(self, bucket: jinja2.bccache.Bucket) -> None:
        if cache.ensure_dir() is None:
            return
        try:
            super().dump_bytecode(bucket)
        except OSError:
            pass  # a read-only or full disk: the next process compiles it again


# How templates compile; with the Jinja version, part of each cache entry's name, since Jinja's
# own check covers only the template source.
_OPTIONS = {"keep_trailing_newline": True, "trim_blocks": True, "lstrip_blocks": True}


def _bytecode_cache() -> jinja2.BytecodeCache | None:
    folder = cache.cache_dir()
    if folder is None:
        return None
    variant = cache.key(jinja2.__version__, repr(sorted(_OPTIONS.items())))[:12]
    return _BytecodeCache(str(folder), f"jinja-{variant}-%s.cache")


@lru_cache(maxsize=4)
def environment(root: str | None = None) -> jinja2.Environment:
    """The environment over the shipped templates (or over `root`, for tests)."""
    root = root or str(resources.files("benchc.templates"))
    env = jinja2.Environment(
        loader=jinja2.FileSystemLoader(root),
        undefined=jinja2.StrictUndefined,
        autoescape=False,  # we emit Python and shell, not HTML; values go through `py` / `sh`
        **_OPTIONS,
        bytecode_cache=_bytecode_cache(),
    )
    env.filters["py"] = literal
    env.filters["pystr"] = string_literal
    env.filters["sh"] = shell_quote
    return env


def shell_quote(value: object) -> str:
    """One shell word (shlex.quote): nothing inside is expanded by the shell."""
    return shlex.quote(str(value))
