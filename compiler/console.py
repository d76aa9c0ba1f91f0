"""Printing for the command line: the one terminal writer (every string from a file, the
store, a host or an error escaped before a terminal sees it), and output whose reader may
leave early (`benchc check | head`)."""

from __future__ import annotations

import os

from .diagnostics import printable


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


class ReaderMayLeave:
    """A stream for commands whose work goes on after their reader has left (`benchc run |
    head`): the first write or flush to a closed pipe points the stream at /dev/null, and
    the command carries on running and recording, its output dropped. Its exit status says
    how the work went, not whether anyone read about it."""

    def __init__(self, stream) -> None:
        self._stream = stream

    def write(self, text: str) -> int:
        try:
            return self._stream.write(text)
        except BrokenPipeError:
            silence(self._stream)
            return len(text)

    def flush(self) -> None:
        try:
            self._stream.flush()
        except BrokenPipeError:
            silence(self._stream)

    def __getattr__(self, name: str):
        return getattr(self._stream, name)


class TerminalText:
    """The one terminal writer: every write has its control characters shown as escapes
    (diagnostics.printable: newlines and tabs kept), so a host name, a device name, an error or
    any stored text cannot move the cursor, clear the screen or retitle the terminal, whichever
    command prints it. benchc's own styling (the diagnostics' colours, rich's progress bar)
    writes to `.raw`, past it, after escaping what it shows itself."""

    def __init__(self, stream) -> None:
        self.raw = stream

    def write(self, text: str) -> int:
        self.raw.write(printable(text))
        return len(text)

    def flush(self) -> None:
        self.raw.flush()

    def __getattr__(self, name: str):
        return getattr(self.raw, name)


def raw(stream):
    """The stream under the terminal writer (itself where there is none)."""
    return getattr(stream, "raw", stream) if isinstance(stream, TerminalText) else stream
