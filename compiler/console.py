"""Printing for the command line: output whose reader may leave early (`benchc check | head`)."""

from __future__ import annotations

import os


def emit(stream, text: str) -> None:
    """Print to `stream`; a reader that left early (`| head`) is no error of the command, whose
    exit status stays what it was going to be."""
    try:
        print(text, file=stream, flush=True)
    except BrokenPipeError:
        silence(stream)


def silence(stream) -> None:
    """Point a broken stream at /dev/null, so that Python's final flush raises nothing."""
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, stream.fileno())
    except (OSError, ValueError):
        pass
