"""The `benchc` command line: the parser, output of errors, and exit codes (0 ok, 1 a failed
run or a bug, 2 a mistake in the input, 130 interrupted).

The commands live in compiler/commands/, one module per group, imported only when one of
their commands runs; nothing on the check/plan/compile path imports torch.
"""

from __future__ import annotations

import argparse
import gc
import importlib
import os
import sys
from collections.abc import Sequence

from . import __version__
from .commands.flags import whole_number
from .console import ReaderMayLeave, TerminalText, emit, raw, silence
from .diagnostics import BenchError, error, format_diagnostics
from .runner.interrupts import (
    Terminated,
    hold_unraisable_endings,
    no_more_retries,
    raise_terminated,
    swallowed_ending,
)

EXIT_OK, EXIT_INTERNAL, EXIT_USER = 0, 1, 2
EXIT_COULD_NOT_ASK = 3  # the results store or Slurm could not be asked; nothing was changed
# Commands that run and record work: a reader that leaves (`| head`) must not stop them halfway.
LONG_WORK = {"run", "submit", "status", "cancel", "ingest", "calibrate"}
# commands whose stdout is data (a formatted spec or its diff, exported runs), written as is;
# everything else passes through the terminal writer (console.TerminalText)
DATA_ON_STDOUT = {"fmt", "export"}
GROUPS = ("build", "results", "cluster", "format", "estimate", "calibrate")  # compiler/commands/<group>.py
# Which group holds each command, so that a command builds only its own group's options and
# imports only its modules (tests/test_cli.py checks this against each group's COMMANDS).
COMMAND_GROUPS = {
    **dict.fromkeys(("check", "plan", "compile", "targets"), "build"),
    **dict.fromkeys(("run", "runs", "show", "export", "ingest", "report"), "results"),
    **dict.fromkeys(("submit", "status", "cancel"), "cluster"),
    "fmt": "format",
    "estimate": "estimate",
    "calibrate": "calibrate",
}


class _Parser(argparse.ArgumentParser):
    """argparse that exits 2 with benchc's one-line style instead of printing usage noise."""

    def error(self, message: str):  # noqa: D401 - argparse API
        self.print_usage(sys.stderr)
        self.exit(EXIT_USER, f"benchc: error: {message}\n")


def _group(name: str):
    return importlib.import_module(f".commands.{name}", __package__)


def _parser(groups: Sequence[str] = GROUPS) -> argparse.ArgumentParser:
    """The parser of every command, or of the commands of `groups` only."""
    parser = _Parser(
        prog="benchc",
        description="Compile declarative .bench experiments into benchmark programs.",
    )
    parser.add_argument("--version", action="version", version=f"benchc {__version__}")
    parser.add_argument(
        "--color", choices=("auto", "always", "never"), default="auto", help="colour diagnostics"
    )
    commands = parser.add_subparsers(dest="command", metavar="COMMAND", parser_class=_Parser)
    commands.required = True
    for name in groups:
        _group(name).add_parsers(commands, _variant_options)
    return parser


def _groups_for(argv: Sequence[str]) -> Sequence[str]:
    """The groups the parser needs for this command line: the command's own when it names
    one (after the global options), else all (--help, a mistyped command, none)."""
    words = list(argv)
    while words and words[0].startswith("-") and words[0] not in ("-h", "--help", "--version"):
        words = words[2:] if words[0] == "--color" else words[1:]
    group = COMMAND_GROUPS.get(words[0]) if words else None
    return (group,) if group else GROUPS


def _variant_options(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--target", "-t", action="append", default=[], metavar="T",
        help="plan for this target only (repeatable; default: the spec's targets, cpu with --smoke)",
    )  # fmt: skip
    parser.add_argument(
        "--set", dest="overrides", action="append", default=[], metavar="KEY=VALUE",
        help="override a setting, e.g. --set train.batch=32 (repeatable)",
    )  # fmt: skip
    parser.add_argument(
        "--include-root", metavar="DIR",
        help="allow includes from anywhere under DIR (default: only under the spec's own folder)",
    )  # fmt: skip
    parser.add_argument(
        "--max-points", type=whole_number(1, 10**9), default=None, metavar="N",
        help="refuse specs that expand to more than N points (default: 10,000)",
    )  # fmt: skip
    parser.add_argument(
        "--smoke", action="store_true",
        help="shrink to a tiny model on 2 processes (2 nodes x 1 for multi-node plans; same code "
        "paths), cpu by default",
    )  # fmt: skip


def _command(name: str):
    return getattr(_group(COMMAND_GROUPS[name]), name)


def _locked_store(exc: Exception) -> bool:
    """The results store locked by another process past benchc's wait (results/store.py)."""
    store = sys.modules.get(f"{__package__}.results.store")
    if store is not None and isinstance(exc, store.StoreLocked):
        return True
    sqlite3 = sys.modules.get("sqlite3")
    return sqlite3 is not None and isinstance(exc, sqlite3.OperationalError) and "locked" in str(exc)


def _damaged_store(exc: Exception) -> bool:
    """A results store damaged while benchc used it (sqlite3 is imported only by commands that
    open the store, so without it no such error can have happened)."""
    sqlite3 = sys.modules.get("sqlite3")
    return sqlite3 is not None and isinstance(exc, sqlite3.DatabaseError)


def main(argv: Sequence[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else list(argv)
    args = _parser(_groups_for(argv)).parse_args(argv)
    color = args.color == "always" or (
        args.color == "auto" and sys.stderr.isatty() and "NO_COLOR" not in os.environ
    )
    args.colour = color  # for a command that prints diagnostics and goes on (check)
    streams = sys.stdout, sys.stderr
    if args.command in LONG_WORK:
        sys.stdout = ReaderMayLeave(sys.stdout)
    if args.command not in DATA_ON_STDOUT:
        sys.stdout = TerminalText(sys.stdout)
    sys.stderr = TerminalText(sys.stderr)
    try:
        return _run(args, color)
    finally:
        sys.stdout, sys.stderr = streams


def _empty_paths(args: argparse.Namespace) -> None:
    """An empty --db, -o or --output names nothing: refused, never read as the default store,
    the current folder or standard output."""
    for flag, attribute, what in (("--db", "db", "a file name"), ("-o/--out", "out", "a folder name"),
                                  ("-o/--output", "output", "a file name")):  # fmt: skip
        value = getattr(args, attribute, None)
        if isinstance(value, str) and not value.strip():
            raise error(f"{flag} needs {what}, got ''", None, hint="give it one, or leave the flag out")


def _run(args: argparse.Namespace, color: bool) -> int:
    try:
        _empty_paths(args)
        return _command(args.command)(args)
    except BenchError as exc:  # each part already escaped; the colours are benchc's own
        emit(raw(sys.stderr), format_diagnostics(exc.diagnostics, color=color))
        return EXIT_USER  # also when the reader of stderr has left
    except KeyboardInterrupt:
        emit(sys.stderr, "benchc: interrupted")
        return 130
    except Terminated as signalled:
        emit(sys.stderr, f"benchc: {signalled}")
        return 128 + signalled.signum
    except BrokenPipeError:
        silence(sys.stdout)  # `benchc plan ... | head`: the reader left; not an error
        return EXIT_OK
    except Exception as exc:
        if (stop := swallowed_ending()) is not None:  # a signal came, and library code renamed it
            emit(sys.stderr, f"benchc: {stop}")
            return 128 + stop.signum
        if _locked_store(exc):
            emit(sys.stderr, f"benchc: error: {exc}; nothing was written to it\n"
                 "  hint: another benchc (or sqlite3) is writing it: run the command again once it "
                 "is done")  # fmt: skip
            return EXIT_COULD_NOT_ASK
        if not _damaged_store(exc):
            raise
        emit(sys.stderr, f"benchc: error: the results store failed: {exc}\n"
             "  hint: `sqlite3 FILE .recover | sqlite3 NEW` saves what is readable")  # fmt: skip
        return EXIT_USER


def entry() -> None:
    """The `benchc` command (its console script, and `python -m benchc`): main(), then exit.
    First every object is frozen out of the garbage collector (gc.freeze): the interpreter's
    last collection would otherwise walk all that the command made, only for the process to
    end (about 20 ms of a 180 ms `benchc compile`). By then every file, store and process of
    the command is closed; nothing waits on a collection. SIGTERM, SIGHUP and SIGQUIT
    (Ctrl-\\, without a core dump) end any command as an exception does: what it was writing
    is removed (a report's or a build's temporary files), a store transaction rolled back, and
    it exits 128 + the signal (`run` records them)."""
    import signal

    for ending in (signal.SIGTERM, signal.SIGHUP, signal.SIGQUIT):  # every command ends cleanly
        signal.signal(ending, raise_terminated)
    hold_unraisable_endings()  # an ending Python could only print is raised again
    try:
        code = main()
    except Terminated as late:  # an ending deferred past the command's own handling of it
        code = 128 + late.signum
    no_more_retries()
    for ending in (signal.SIGTERM, signal.SIGHUP, signal.SIGQUIT):  # the work is done and written:
        signal.signal(ending, signal.SIG_DFL)  # a late signal ends the process, raises nothing at exit
    gc.freeze()
    sys.exit(code)


if __name__ == "__main__":
    entry()
