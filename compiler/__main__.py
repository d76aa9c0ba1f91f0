"""`python -m benchc`: the same as the `benchc` command."""

from .cli import entry

entry()
