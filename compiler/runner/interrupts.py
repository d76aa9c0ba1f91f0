"""benchc's own ending by a signal: SIGTERM, SIGHUP or SIGQUIT raised as an exception the command line
and the runner catch, so every way out runs the same finally blocks as Ctrl-C. Kept apart
from processes.py so the command line can catch it without importing subprocess."""

from __future__ import annotations


class Terminated(BaseException):
    """benchc itself got SIGTERM, SIGHUP or SIGQUIT (a scheduler's cancel, a closed terminal,
    Ctrl-\\ at the terminal)."""

    def __init__(self, signum: int):
        import signal  # here, not at import: `benchc compile` never needs its enumerations

        super().__init__(signal.Signals(signum).name)
        self.signum = signum


def raise_terminated(signum, frame) -> None:
    raise Terminated(signum)
