"""The `benchc` command line: argument parsing, output, and exit codes (0 ok, 2 user error).

Only the front end is imported here; nothing on the check/plan path imports torch.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from collections.abc import Sequence

from . import __version__
from .diagnostics import BenchError, format_diagnostics

EXIT_OK, EXIT_INTERNAL, EXIT_USER = 0, 1, 2


class _Parser(argparse.ArgumentParser):
    """argparse that exits 2 with benchc's one-line style instead of printing usage noise."""

    def error(self, message: str):  # noqa: D401 - argparse API
        self.print_usage(sys.stderr)
        self.exit(EXIT_USER, f"benchc: error: {message}\n")


def _parser() -> argparse.ArgumentParser:
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

    check = commands.add_parser("check", help="validate specs; report every error with its location")
    check.add_argument("specs", nargs="+", metavar="SPEC")
    _variant_options(check)

    plan = commands.add_parser("plan", help="show the resolved plan per target and sweep point")
    plan.add_argument("spec", metavar="SPEC")
    _variant_options(plan)
    plan.add_argument("--json", action="store_true", help="print the plans as JSON")

    compile_ = commands.add_parser(
        "compile", help="write programs, launchers and manifests: OUT/<experiment>/<target>/<point>/"
    )
    compile_.add_argument("spec", metavar="SPEC")
    _variant_options(compile_)
    compile_.add_argument("-o", "--out", default="build", metavar="DIR", help="build folder (default: build)")

    from .commands_results import add_parsers

    add_parsers(commands, _variant_options)

    targets = commands.add_parser("targets", help="list the known targets and their facts")
    targets.add_argument("--json", action="store_true", help="print the target table as JSON")
    return parser


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
        "--smoke", action="store_true",
        help="shrink to a tiny model on 1 node x 2 processes (same code paths), cpu by default",
    )  # fmt: skip


def main(argv: Sequence[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    color = args.color == "always" or (
        args.color == "auto" and sys.stderr.isatty() and "NO_COLOR" not in os.environ
    )
    try:
        return _COMMANDS[args.command](args)
    except BenchError as exc:
        print(format_diagnostics(exc.diagnostics, color=color), file=sys.stderr)
        return EXIT_USER
    except KeyboardInterrupt:
        print("benchc: interrupted", file=sys.stderr)
        return 130
    except BrokenPipeError:
        sys.stderr.close()  # `benchc plan ... | head`: the reader left; not an error
        return EXIT_OK


def _check(args) -> int:
    from .pipeline import plan_spec

    failed = False
    for spec in args.specs:
        try:
            result = plan_spec(spec, args.target, args.overrides, args.smoke)
        except BenchError as exc:
            print(format_diagnostics(exc.diagnostics), file=sys.stderr)
            failed = True
            continue
        targets = len(result.targets)
        points = len(result.points)
        print(
            f"ok: {spec}: experiment {result.document.experiment}, "
            f"{targets} target{'s' if targets != 1 else ''} x {points} "
            f"point{'s' if points != 1 else ''} ({', '.join(result.targets)})"
        )
    return EXIT_USER if failed else EXIT_OK


def _plan(args) -> int:
    from .pipeline import plan_spec
    from .plan.summary import summarize

    result = plan_spec(args.spec, args.target, args.overrides, args.smoke)
    if args.json:
        payload = {
            "experiment": result.document.experiment,
            "plans": [p.to_dict() for p in result.plans],
        }
        print(json.dumps(payload, indent=2, sort_keys=True))
    else:
        print("\n\n".join(summarize(plan) for plan in result.plans))
    return EXIT_OK


def _compile(args) -> int:
    from pathlib import Path

    from .codegen.build import compile_plans
    from .pipeline import plan_spec

    result = plan_spec(args.spec, args.target, args.overrides, args.smoke)
    built = compile_plans(result.plans, Path(args.out))
    for point in built:
        print(f"wrote {point.path}/ ({', '.join(point.files)})")
    print(f"{len(built)} build point{'s' if len(built) != 1 else ''}; run one with: bash <point>/launch.sh")
    return EXIT_OK


def _targets(args) -> int:
    from dataclasses import asdict

    from .catalog.targets import TARGETS

    if args.json:
        print(json.dumps({name: asdict(t) for name, t in TARGETS.items()}, indent=2, sort_keys=True))
        return EXIT_OK

    def figure(value, unit=""):
        return "-" if value is None else f"{value:g}{unit}"

    rows = [("target", "family", "device", "bf16 TF/s", "fp8 TF/s", "memory", "HBM", "precisions")]
    for t in TARGETS.values():
        rows.append((
            t.name, t.family, t.device_name, figure(t.peak_tflops.get("bf16")),
            figure(t.peak_tflops.get("fp8")), figure(t.memory_gb, " GB"),
            figure(t.hbm_tb_s, " TB/s"), ",".join(t.precisions),
        ))  # fmt: skip
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    for row in rows:
        print("  ".join(cell.ljust(width) for cell, width in zip(row, widths)).rstrip())
    print("\nPeaks are dense per device; '-' = unknown (no MFU is computed from it).")
    return EXIT_OK


def _results_command(name: str):
    def command(args) -> int:
        from . import commands_results

        return getattr(commands_results, name)(args)

    return command


_COMMANDS = {
    "check": _check,
    "plan": _plan,
    "compile": _compile,
    "targets": _targets,
    **{name: _results_command(name) for name in ("run", "runs", "show", "export", "ingest", "report")},
}


if __name__ == "__main__":
    sys.exit(main())
