"""Commands over specs and builds: check, plan, compile, targets. None of them imports torch."""

from __future__ import annotations

import json
import sys
from dataclasses import replace
from pathlib import Path

from ..diagnostics import BenchError, format_diagnostics
from ..figures import finite_json

EXIT_OK, EXIT_USER = 0, 2
COMMANDS = ("check", "plan", "compile", "targets")


def add_parsers(commands, variant_options) -> None:
    check_ = commands.add_parser("check", help="validate specs; report every error with its location")
    check_.add_argument("specs", nargs="+", metavar="SPEC")
    variant_options(check_)
    check_.add_argument(
        "--strict", action="store_true", help="treat warnings (a point that will not fit in memory) as errors"
    )
    check_.add_argument("--db", metavar="PATH", help="results store whose calibrations are noted")

    plan_ = commands.add_parser("plan", help="show the resolved plan per target and sweep point")
    plan_.add_argument("spec", metavar="SPEC")
    variant_options(plan_)
    plan_.add_argument("--json", action="store_true", help="print the plans as JSON")

    compile_ = commands.add_parser(
        "compile", help="write programs, launchers and manifests: OUT/<experiment>/<target>/<point>/"
    )
    compile_.add_argument("spec", metavar="SPEC")
    variant_options(compile_)
    compile_.add_argument("-o", "--out", default="build", metavar="DIR", help="build folder (default: build)")
    compile_.add_argument(
        "--sbatch", action="store_true",
        help="write job.sbatch for cpu points too (always written for accelerator and multi-node points)",
    )  # fmt: skip

    targets_ = commands.add_parser("targets", help="list the known targets and their facts")
    targets_.add_argument("--json", action="store_true", help="print the target table as JSON")
    targets_.add_argument("--db", metavar="PATH", help="results store whose calibrations are shown")


def plan_args(args, spec=None):
    """plan_spec over the spec and variant options of a command's arguments."""
    from ..console import emit
    from ..pipeline import plan_spec
    from ..plan.variants import MAX_POINTS

    result = plan_spec(
        args.spec if spec is None else spec, args.target, args.overrides, args.smoke,
        include_root=args.include_root, max_points=args.max_points or MAX_POINTS,
    )  # fmt: skip
    for note in result.notes:
        emit(sys.stderr, f"note: {note}")
    return result


def check(args) -> int:
    from ..console import emit, raw

    def diagnose(diagnostics) -> None:  # each part escaped by format_diagnostics; colours ours
        emit(raw(sys.stderr), format_diagnostics(diagnostics, color=args.colour))

    failed = False
    calibrations = stored_calibrations(args.db)
    for spec in args.specs:
        try:
            result = plan_args(args, spec)
        except BenchError as exc:
            failed = True  # before printing: a reader that leaves early changes no status
            diagnose(exc.diagnostics)
            continue
        if result.warnings and args.strict:
            failed = True
            diagnose([replace(w, severity="error") for w in result.warnings])
            continue
        if result.warnings:
            diagnose(result.warnings)
        for target in result.targets:
            if target in calibrations:
                emit(sys.stderr, f"note: {target}: {_measured_note(calibrations[target])}")
        emit(sys.stdout, f"ok: {spec}: experiment {result.document.experiment}, {_what_is_built(result)}")
    return EXIT_USER if failed else EXIT_OK


def stored_calibrations(db) -> dict:
    """target -> its latest calibration in the store (results/calibrations.py); none where there
    is no store or it cannot be read (check and targets still work without one)."""
    import sqlite3

    from ..results.calibrations import latest_calibrations
    from ..results.store import open_existing

    try:
        store = open_existing(db)
        if store is None:
            return {}
        with store:
            return latest_calibrations(store)
    except (BenchError, sqlite3.DatabaseError) as exc:  # said, not silently taken for none stored
        why = exc.diagnostics[0].message if isinstance(exc, BenchError) else str(exc)
        print(f"benchc: note: the results store could not be read ({why}): no calibration is used",
              file=sys.stderr)  # fmt: skip
        return {}


def _measured_note(calibration) -> str:
    """ "measured ceilings from benchc calibrate (HOST, DATE): fp32 0.41 TFLOP/s, memory 18 GB/s;
    ..." for check."""
    from ..figures import sig

    figures = [f"{p} {sig(v)} TFLOP/s" for p, v in calibration.matmul_tflops.items() if p in ("bf16", "fp32")]
    if calibration.memory_tb_s is not None:
        figures.append(f"memory {sig(calibration.memory_tb_s * 1e3)} GB/s")
    smoke = ", smoke sizes" if calibration.smoke else ""
    return (f"measured ceilings from benchc calibrate ({calibration.host}, {calibration.date}{smoke}): "
            f"{', '.join(figures)}; estimate and report use them beside the datasheet's")  # fmt: skip


def plan(args) -> int:
    from ..plan.summary import summarize

    result = plan_args(args)
    if args.json:
        payload = {
            "experiment": result.document.experiment,
            "plans": [p.to_dict() for p in result.plans],
        }
        print(json.dumps(finite_json(payload), indent=2, sort_keys=True, allow_nan=False))
    else:
        print("\n\n".join(summarize(p) for p in result.plans))
    return EXIT_OK


def _what_is_built(result) -> str:
    """ "2 targets x 2 points (gaudi2, h100)" where every target has the same points, else the
    build points per target: what compile would write, counted."""
    per_target = {t: [p.point for p in result.plans if p.target.name == t] for t in result.targets}
    counts = {len(points) for points in per_target.values()}
    targets = len(result.targets)
    if len(counts) == 1 and len({tuple(p) for p in per_target.values()}) == 1:
        (points,) = counts
        return (f"{targets} target{'s' if targets != 1 else ''} x {points} "
                f"point{'s' if points != 1 else ''} ({', '.join(result.targets)})")  # fmt: skip
    built = len(result.plans)
    each = ", ".join(f"{t} {len(p)}" for t, p in per_target.items())
    return f"{built} build point{'s' if built != 1 else ''} over {targets} targets ({each})"


def compile_spec(args, sbatch: bool = False):
    """Plan and compile the spec of `args` into args.out; the built points."""
    from ..codegen.build import compile_plans
    from ..diagnostics import error

    if not str(args.out).strip():
        raise error("-o/--out needs a folder name, got ''", None,
                    hint="name the build folder, e.g. -o build (the default)")  # fmt: skip
    result = plan_args(args)
    if result.warnings:  # what check warns of (a point that will not fit its memory), said here too
        from ..console import emit, raw

        emit(raw(sys.stderr), format_diagnostics(result.warnings, color=getattr(args, "colour", False)))
    return compile_plans(result.plans, Path(args.out), sbatch=sbatch)


def build_points(args, verb: str, sbatch: bool = False):
    """The build points `run` or `submit` works on: a build folder's, or the spec's, compiled
    now into args.out (`sbatch`: with job.sbatch for cpu points too)."""
    from ..diagnostics import error
    from ..runner.execute import find_points

    target = Path(args.spec)
    if not target.is_dir():
        return [p for built in compile_spec(args, sbatch=sbatch) for p in find_points(built.path)]
    if args.overrides or args.smoke:
        raise error(f"'{target}' is a build folder: --set and --smoke apply when compiling a spec",
                    None, hint=f"compile again with them, or {verb} the spec itself")  # fmt: skip
    points = find_points(target)
    if args.target:
        points = [p for p in points if p.manifest.target in args.target]
        if not points:
            raise error(f"no build point for target {', '.join(args.target)} under '{target}'", None)
    return points


def compile(args) -> int:  # noqa: A001 - the command's name
    built = compile_spec(args, sbatch=args.sbatch)
    for point in built:
        print(f"wrote {point.path}/ ({', '.join(point.files)})")
    print(f"{len(built)} build point{'s' if len(built) != 1 else ''}; run one with: bash <point>/launch.sh"
          " (or benchc run <point>)")  # fmt: skip
    return EXIT_OK


def targets(args) -> int:
    from dataclasses import asdict

    from ..catalog.targets import TARGETS
    from ..validate.capabilities import NOT_GENERATED_PRECISIONS

    def generated(t) -> list[str]:
        return [p for p in t.precisions if p not in NOT_GENERATED_PRECISIONS]

    calibrations = stored_calibrations(args.db)
    if args.json:
        facts = {name: {**asdict(t), "generated_precisions": generated(t),
                        "calibration": asdict(calibrations[name]) if name in calibrations else None}
                 for name, t in TARGETS.items()}  # fmt: skip
        unknown = {name: asdict(c) for name, c in calibrations.items() if name not in TARGETS}
        if unknown:  # kept, apart: no datasheet to stand beside
            facts["calibrations_of_unknown_targets"] = unknown
        print(json.dumps(finite_json(facts), indent=2, sort_keys=True, allow_nan=False))
        return EXIT_OK

    def figure(value, unit=""):
        return "-" if value is None else f"{value:g}{unit}"

    rows = [("target", "family", "device", "bf16 TF/s", "fp8 TF/s", "memory", "HBM", "benchc runs",
             "chip only")]  # fmt: skip
    for t in TARGETS.values():
        rows.append((
            t.name, t.family, t.device_name, figure(t.peak_tflops.get("bf16")),
            figure(t.peak_tflops.get("fp8")), figure(t.memory_gb, " GB"),
            figure(t.hbm_tb_s, " TB/s"), ",".join(generated(t)),
            ",".join(p for p in t.precisions if p not in generated(t)) or "-",
        ))  # fmt: skip
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    for row in rows:
        print("  ".join(cell.ljust(width) for cell, width in zip(row, widths)).rstrip())
    print(
        "\nPeaks are dense per device; '-' = unknown (no MFU is computed from it). 'benchc runs': the "
        "precisions benchc generates programs in; 'chip only': the chip's, not generated yet."
    )
    _print_measured(TARGETS, calibrations)
    return EXIT_OK


def _print_measured(targets: dict, calibrations: dict) -> None:
    """The measured ceilings (benchc calibrate) beside the datasheet's, a row per target."""
    from ..figures import sig

    if not calibrations:
        print("\nNo calibrations stored: `benchc calibrate --target T` measures what a target reaches here.")
        return

    def pair(measured, datasheet, unit: str) -> str:
        shown = "-" if measured is None else sig(measured)
        return f"{shown} {unit} (datasheet {'-' if datasheet is None else sig(datasheet)})"

    print("\nMeasured by benchc calibrate, per device:")
    for name, c in calibrations.items():
        t = targets.get(name)
        if t is None:  # a calibration of a target this benchc does not know: kept, shown as such
            print(f"  {name} (not a target this benchc knows; no datasheet): bf16 "
                  f"{sig(c.matmul_tflops['bf16']) if 'bf16' in c.matmul_tflops else '-'} TFLOP/s, "
                  f"fp32 {sig(c.matmul_tflops['fp32']) if 'fp32' in c.matmul_tflops else '-'} TFLOP/s; "
                  f"{c.provenance()}")  # fmt: skip
            continue
        memory = c.memory_tb_s
        if memory is not None and memory < 1 and t.hbm_tb_s is None:  # a CPU's: GB/s reads better
            memory_text = f"{sig(memory * 1e3)} GB/s (datasheet -)"
        else:
            memory_text = pair(memory, t.hbm_tb_s, "TB/s")
        print(f"  {name}: bf16 {pair(c.matmul_tflops.get('bf16'), t.peak_tflops.get('bf16'), 'TFLOP/s')}, "
              f"fp32 {pair(c.matmul_tflops.get('fp32'), t.peak_tflops.get('fp32'), 'TFLOP/s')}, "
              f"memory {memory_text}; {c.provenance()}")  # fmt: skip
