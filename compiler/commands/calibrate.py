"""The `benchc calibrate` command: compile a calibration program per target, run it here and
store what it measured (or, with --ingest, store calibration files written elsewhere), then
print the measured ceilings beside the datasheet's. Exit codes as `run`'s."""

from __future__ import annotations

import re
import sys
from pathlib import Path

from . import flags

EXIT_OK, EXIT_FAILED, EXIT_USER, EXIT_INTERRUPTED = 0, 1, 2, 130
COMMANDS = ("calibrate",)
DEFAULT_OUT = Path("build") / "calibrate"
SAID = ("matmul ", "device copy", "host to device", "all_reduce", "all_gather", "reduce_scatter",
        "launch latency", "calibration of")  # fmt: skip


def add_parsers(commands, variant_options) -> None:
    calibrate_ = commands.add_parser(
        "calibrate",
        help="measure what each target really reaches here and store it (benchc targets shows it)",
    )
    calibrate_.add_argument(
        "--target", "-t", action="append", default=[], metavar="T",
        help="calibrate this target (repeatable; default: cpu)",
    )  # fmt: skip
    calibrate_.add_argument(
        "--smoke", action="store_true", help="small sizes: checks the program, not the ceiling"
    )
    calibrate_.add_argument("--repeat", type=flags.repeat, default=None, metavar="N",
                            help="timed windows per measurement (the best is kept)")  # fmt: skip
    calibrate_.add_argument("-o", "--out", default=str(DEFAULT_OUT), metavar="DIR",
                            help=f"build folder (default: {DEFAULT_OUT})")  # fmt: skip
    calibrate_.add_argument("--devices", type=flags.whole_number(1, 64), default=None, metavar="N",
                            help="processes per node (default: 2 on cpu, a node's devices)")  # fmt: skip
    calibrate_.add_argument("--nodes", type=flags.whole_number(1, 1024), default=1, metavar="N",
                            help="nodes (cpu: every node runs here, over loopback)")  # fmt: skip
    calibrate_.add_argument("--timeout", type=flags.seconds, default=None, metavar="S",
                            help="seconds before a calibration is stopped")  # fmt: skip
    calibrate_.add_argument(
        "--compile-only", action="store_true", help="write the build folders, run nothing"
    )
    calibrate_.add_argument(
        "--submit", action="store_true",
        help="run each calibration as a Slurm job (sbatch job.sbatch), wait for it and store it",
    )  # fmt: skip
    calibrate_.add_argument("--partition", metavar="P", help="with --submit: Slurm partition")
    calibrate_.add_argument("--account", metavar="A", help="with --submit: Slurm account")
    calibrate_.add_argument("--time", metavar="T", help="with --submit: job time limit, e.g. 30 or 02:00:00")
    calibrate_.add_argument("--ingest", nargs="+", default=None, metavar="CALIBRATION.json",
                            help="store calibration files written elsewhere (a Slurm job's)")  # fmt: skip
    calibrate_.add_argument("--list", action="store_true",
                            help="list every calibration stored, failed and implausible too")  # fmt: skip
    calibrate_.add_argument("--db", metavar="PATH", help="results store (default: .benchc/results.db)")


def calibrate(args) -> int:
    from ..diagnostics import error
    from ..plan.calibration import calibration_plan
    from ..validate.capabilities import NOT_GENERATED_PRECISIONS

    if args.list:
        return _list(args)
    if args.ingest is not None:
        return _ingest(args)
    if args.db is not None and not args.db.strip():
        raise error("--db needs a file name, got ''", None, hint="give it one, or leave the flag out")
    names = list(dict.fromkeys(args.target or ["cpu"]))
    plans = [calibration_plan(name, not_generated=NOT_GENERATED_PRECISIONS, smoke=args.smoke,
                              devices=args.devices, nodes=args.nodes, repeat=args.repeat)
             for name in names]  # fmt: skip
    slurm_options = flags.slurm_options(args)  # checked before anything is written
    if slurm_options and not args.submit:
        raise error("--partition, --account and --time are for --submit", None,
                    hint="add --submit to run the calibrations as Slurm jobs")  # fmt: skip
    remote = [p for p in plans if p.nodes > 1 and p.family != "cpu"]
    if remote and not (args.compile_only or args.submit):
        first = remote[0]
        raise error(f"benchc calibrate runs one machine; {first.target} over {first.nodes} nodes cannot",
                    None, hint="add --submit to run it as a Slurm job (or --compile-only, sbatch the "
                    "folder's job.sbatch, then benchc calibrate --ingest its "
                    "runs/slurm-<job>/metrics-1.json)")  # fmt: skip
    from ..codegen.calibration import checked_out_folder, write_calibration

    out = checked_out_folder(Path(args.out))  # before anything is written
    folders = [write_calibration(plan, out) for plan in plans]
    for plan, folder in zip(plans, folders):
        print(f"wrote {folder}/ (bench.py, launch.sh, job.sbatch, calibration-plan.json): "
              f"{plan.target}, {plan.nodes} node(s) x {plan.devices_per_node} process(es)")  # fmt: skip
    if args.compile_only:
        return EXIT_OK
    if args.submit:
        return _submit(args, plans, folders, slurm_options)
    return _run(args, plans, folders)


def _submit(args, plans, folders, options: list[str]) -> int:
    """Each calibration as a Slurm job, one after another: submitted, waited for, stored."""
    from ..cluster.calibration import submit_calibration
    from ..results.calibrations import latest_calibrations
    from ..results.store import Store

    code = EXIT_OK
    with Store(args.db) as store:
        for plan, folder in zip(plans, folders):
            print(f"calibrating {plan.target} as a Slurm job ({plan.nodes} node(s) x "
                  f"{plan.devices_per_node} process(es))", flush=True)  # fmt: skip
            calibration_id, status, cause = submit_calibration(
                plan, folder, store, options, lambda line: print(f"  {line}", flush=True)
            )
            if status == "ok":
                print(f"ok      {plan.target}  [calibration {calibration_id}]")
                continue
            print(f"{status:7} {plan.target}: {cause}  [calibration {calibration_id}]")
            if status in ("interrupted", "terminated"):
                print(f"benchc: {status}; the remaining calibrations were not submitted", file=sys.stderr)
                return EXIT_INTERRUPTED if status == "interrupted" else 143
            code = EXIT_FAILED
        latest = latest_calibrations(store)
        print(f"results in {store.path}")
    for plan in plans:
        if plan.target in latest:
            print()
            print(summary(latest[plan.target]))
    return code


def _run(args, plans, folders) -> int:
    from ..results.calibrations import latest_calibrations
    from ..results.store import Store
    from ..runner.calibration import run_calibration

    def said(line: str) -> None:
        if re.sub(r"^\[node \d+\] ", "", line).startswith(SAID):
            print(f"  {line}", flush=True)

    code = EXIT_OK
    with Store(args.db) as store:
        for plan, folder in zip(plans, folders):
            sizes = ", smoke sizes" if plan.smoke else ""
            print(f"calibrating {plan.target} ({plan.world_size} process(es){sizes})", flush=True)
            calibration_id, outcome = run_calibration(plan, folder, store, args.timeout, said)
            if outcome.status == "ok":
                print(f"ok      {plan.target} in {outcome.elapsed_s:.1f} s  [calibration {calibration_id}]")
                continue
            print(f"{outcome.status:7} {plan.target}: {outcome.cause}  [calibration {calibration_id}]")
            if outcome.log_tail:
                print("\n".join("    " + line for line in outcome.log_tail.splitlines()[-8:]))
            if outcome.status == "interrupted":
                print("benchc: interrupted; the remaining calibrations were not started", file=sys.stderr)
                return EXIT_INTERRUPTED
            if outcome.status == "terminated":
                print("benchc: terminated; the remaining calibrations were not started", file=sys.stderr)
                return 128 + (outcome.signum or 15)
            code = EXIT_FAILED
        latest = latest_calibrations(store)
        print(f"results in {store.path}")
    for plan in plans:
        if plan.target in latest:
            print()
            print(summary(latest[plan.target]))
    return code


def summary(calibration) -> str:
    """The measured figures of one calibration beside the datasheet's, as a small table."""
    from ..catalog.targets import PRECISIONS, TARGETS
    from ..figures import sig

    target = TARGETS[calibration.target]

    def shown(value, unit: str) -> str:
        return "-" if value is None else f"{sig(value)} {unit}"

    def bandwidth(tb_s) -> str:
        return shown(tb_s, "TB/s") if tb_s is None or tb_s >= 1 else shown(tb_s * 1e3, "GB/s")

    rows = [("", calibration.provenance(), "datasheet")]
    for precision in sorted(calibration.matmul_tflops, key=PRECISIONS.index):
        tflops = calibration.matmul_tflops[precision]
        rows.append((f"{precision} matmul", shown(tflops, "TFLOP/s"), shown(target.peak_tflops.get(precision),
                                                                              "TFLOP/s")))  # fmt: skip
    rows.append(("memory (copy)", bandwidth(calibration.memory_tb_s), bandwidth(target.hbm_tb_s)))
    rows.append(("host to device", shown(calibration.host_to_device_gb_s, "GB/s"), "-"))
    for name, bus in calibration.bus_gb_s.items():
        rows.append((f"{name} (bus)", shown(bus, "GB/s"), shown(target.scale_up_gb_s, "GB/s")))
    rows.append(("launch latency", shown(calibration.launch_us, "us"), "-"))
    widths = [max(len(row[i]) for row in rows) for i in range(3)]
    lines = [f"{calibration.target}: {calibration.device_name or target.device_name}, "
             f"{calibration.world_size} process(es)"]  # fmt: skip
    lines += [
        "  " + "  ".join(cell.ljust(width) for cell, width in zip(row, widths)).rstrip() for row in rows
    ]
    return "\n".join(lines)


def _ingest(args) -> int:
    from ..diagnostics import BenchError, Diagnostic
    from ..results.calibrations import implausible, store_calibration_file
    from ..results.store import Store
    from ..runner.calibration import read_calibration

    loaded, problems = [], []
    for name in args.ingest:
        path = Path(name)
        data, problem = read_calibration(path) if path.is_file() else (None, "no such file")
        if data is None:
            problems.append(Diagnostic(f"'{name}': {problem or 'no such file'}", None,
                                       hint="`benchc calibrate` programs write them"))  # fmt: skip
        elif reason := implausible(data):
            again = "measure it again with `benchc calibrate`; nothing was stored"
            problems.append(Diagnostic(f"'{name}': implausible: {reason}", None, hint=again))
        loaded.append((path, data))
    if problems:
        raise BenchError(problems)  # all or nothing
    with Store(args.db) as store:
        for path, data in loaded:
            calibration_id, again = store_calibration_file(store, data, str(path.resolve()))
            said = "already stored" if again else f"stored ({data['status']})"
            print(f"{path}: calibration of {data['target']} on {data['host']} {said}  "
                  f"[calibration {calibration_id}]")  # fmt: skip
    return EXIT_OK


def _list(args) -> int:
    """Every calibration stored, oldest first: how each ended and why (a failed or implausible
    one too); a store that is not there is not made."""
    from ..results.calibrations import calibration_rows
    from ..results.store import open_existing

    store = open_existing(args.db)
    rows = []
    if store is not None:
        with store:
            rows = calibration_rows(store, args.target[0] if len(args.target) == 1 else None)
    if not rows:
        print("no calibrations stored")
        return EXIT_OK
    table = [("calibration", "ended", "target", "host", "sizes", "status", "cause")]
    for row in rows:
        when = (row["ended_at"] or row["started_at"] or "")[:19].replace("T", " ")
        table.append((row["id"], when, row["target"], row["host"] or "-", "smoke" if row["smoke"] else "full",
                      row["status"], (row["cause"] or "")[:100]))  # fmt: skip
    widths = [max(len(r[i]) for r in table) for i in range(len(table[0]))]
    for r in table:
        print("  ".join(cell.ljust(width) for cell, width in zip(r, widths)).rstrip())
    return EXIT_OK
