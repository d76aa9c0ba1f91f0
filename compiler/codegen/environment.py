"""The one Jinja Environment of benchc: templates shipped in benchc.templates, strict undefined,
and the `py` filter that turns any value into a Python literal (the only way values enter code)."""

from __future__ import annotations

import shlex
from functools import lru_cache
from importlib import resources

import jinja2

from .literals import literal, string_literal


@lru_cache(maxsize=4)
def environment(root: str | None = None) -> jinja2.Environment:
    """The environment over the shipped templates (or over `root`, for tests)."""
    root = root or str(resources.files("benchc.templates"))
    env = jinja2.Environment(
        loader=jinja2.FileSystemLoader(root),
        undefined=jinja2.StrictUndefined,
        autoescape=False,  # we emit Python and shell, not HTML; values go through `py` / `sh`
        keep_trailing_newline=True,
        trim_blocks=True,
        lstrip_blocks=True,
    )
    env.filters["py"] = literal
    env.filters["pystr"] = string_literal
    env.filters["sh"] = shell_quote
    return env


def shell_quote(value: object) -> str:
    """One shell word (shlex.quote): nothing inside is expanded by the shell."""
    return shlex.quote(str(value))
