"""benchc's own ending by a signal: SIGTERM, SIGHUP or SIGQUIT raised as an exception the command line
and the runner catch, so every way out runs the same finally blocks as Ctrl-C. Kept apart
from processes.py so the command line can catch it without importing subprocess.

An exception raised where Python cannot pass it on is deferred, not lost: inside an import
(a module half run, a C extension's initialisation reporting it as "ImportError:
initialization failed", a library then taking itself for not installed, and the interpreter
aborting at exit) or in a callback whose exceptions are only printed (a weak reference's,
a __del__). There the signal is noted and raised again a moment later, once the import is
done, from ordinary code."""

from __future__ import annotations

import signal
import sys

RETRY_S = 0.02  # how soon a deferred ending is tried again
_received: list[int] = []  # every ending this process got, in order


class Terminated(BaseException):
    """benchc itself got SIGTERM, SIGHUP or SIGQUIT (a scheduler's cancel, a closed terminal,
    Ctrl-\\ at the terminal)."""

    def __init__(self, signum: int):
        super().__init__(signal.Signals(signum).name)
        self.signum = signum


def raise_terminated(signum, frame) -> None:
    """The handler benchc installs for its endings."""
    if not _received or _received[-1] != signum:
        _received.append(signum)
    if _importing(frame):
        _later()
        return
    raise Terminated(signum)


def swallowed_ending() -> Terminated | None:
    """The ending a signal brought, when code between the handler and benchc's own `except`
    turned it into another exception (C code that reports whatever Python raised inside it
    as an error of its own): whatever the exception then says, the command was stopped by
    the signal, and is ended as that stop, not as a crash."""
    return Terminated(_received[-1]) if _received else None


def hold_unraisable_endings() -> None:
    """A Terminated that Python could only print ("Exception ignored in ...", from a weak
    reference's callback or a __del__ the signal interrupted) is tried again from ordinary
    code; any other such exception is printed as Python prints it."""
    printed = sys.unraisablehook

    def hook(unraisable) -> None:
        if isinstance(unraisable.exc_value, Terminated):
            _later()
        else:
            printed(unraisable)

    sys.unraisablehook = hook


def no_more_retries() -> None:
    """The command is done: an ending still deferred is not raised after it."""
    signal.setitimer(signal.ITIMER_REAL, 0)


def _importing(frame) -> bool:
    while frame is not None:
        if frame.f_code.co_filename.startswith("<frozen importlib"):
            return True
        frame = frame.f_back
    return False


def _later() -> None:
    signal.signal(signal.SIGALRM, _again)
    signal.setitimer(signal.ITIMER_REAL, RETRY_S)


def _again(_, frame) -> None:
    raise_terminated(_received[-1], frame)
