"""Text from the store as a chart shows it: matplotlib reads "$" as the start of math mode, so
a name holding one is escaped to be shown literally."""

from __future__ import annotations


def plain(text) -> str:
    """A text from the store as matplotlib shows it literally: no $ opens math mode."""
    return str(text).replace("$", r"\$")
