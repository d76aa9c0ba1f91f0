"""Spec values -> Python source literals. The only way a spec value reaches generated code.

Only None, bools, ints, finite floats, strings, lists, tuples and dicts with string keys are
accepted; anything else is a bug in benchc and raises TypeError. Strings become quoted literals
(never code), in the quote style `ruff format` keeps, so generated files are format-stable.
"""

from __future__ import annotations

import math

INDENT = "    "
LINE_LENGTH = 88  # ruff format's default, which the generated programs follow


def string_literal(text: str) -> str:
    """A double-quoted literal where that needs no more escapes than repr's own (ruff's rule)."""
    literal = repr(text)
    if literal.startswith("'") and '"' not in text:
        literal = '"' + literal[1:-1].replace("\\'", "'") + '"'
    return literal


def scalar_literal(value: object) -> str:
    if value is None or isinstance(value, bool):
        return repr(value)
    if isinstance(value, int):
        return repr(value)
    if isinstance(value, float):
        if not math.isfinite(value):
            raise TypeError(f"not a finite float: {value!r}")
        return repr(value)
    if isinstance(value, str):
        return string_literal(value)
    raise TypeError(f"no literal for {type(value).__name__}")


def literal(value: object, indent: int = 0) -> str:
    """A literal, laid out as ruff format lays it out: dicts one entry per line with a trailing
    comma, lists on one line when they fit and hold only scalars."""
    if isinstance(value, dict):
        if not value:
            return "{}"
        inner = INDENT * (indent + 1)
        lines = []
        for key, item in value.items():
            if not isinstance(key, str):
                raise TypeError(f"dict keys must be strings, not {type(key).__name__}")
            lines.append(f"{inner}{string_literal(key)}: {literal(item, indent + 1)},")
        return "{\n" + "\n".join(lines) + "\n" + INDENT * indent + "}"
    if isinstance(value, (list, tuple)):
        items = list(value)
        flat = all(not isinstance(i, (dict, list, tuple)) for i in items)
        one_line = "[" + ", ".join(scalar_literal(i) for i in items) + "]" if flat else None
        if one_line is not None and len(INDENT * (indent + 1)) + len(one_line) + 40 <= LINE_LENGTH:
            return one_line
        if not items:
            return "[]"
        inner = INDENT * (indent + 1)
        body = "\n".join(f"{inner}{literal(i, indent + 1)}," for i in items)
        return "[\n" + body + "\n" + INDENT * indent + "]"
    return scalar_literal(value)
