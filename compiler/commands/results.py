"""Commands over runs and results: run, runs, show, export, ingest, report."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import TYPE_CHECKING

from ..diagnostics import choices_hint, error
from ..figures import finite_json
from ..results.statuses import STATUSES
from . import flags

if TYPE_CHECKING:
    pass

# What a command needs beyond its options is imported when it runs: building the parser (every
# command, every time) stays cheap for `benchc compile`.

EXIT_OK, EXIT_RUN_FAILED, EXIT_USER, EXIT_INTERRUPTED, EXIT_TERMINATED = 0, 1, 2, 130, 143
COMMANDS = ("run", "runs", "show", "export", "ingest", "report")


def add_parsers(commands, variant_options) -> None:
    run = commands.add_parser("run", help="compile if needed, run, measure and store results")
    run.add_argument("spec", metavar="SPEC|BUILD_DIR")
    variant_options(run)
    run.add_argument("-o", "--out", default="build", metavar="DIR", help="build folder for a SPEC")
    run.add_argument(
        "--repeat", type=flags.repeat, default=None, metavar="N",
        help=f"trials per point (1-{flags.MAX_REPEAT}, as the spec's measure.repeat)",
    )  # fmt: skip
    run.add_argument("--timeout", type=flags.seconds, default=None, metavar="S", help="seconds per trial")
    run.add_argument(
        "--profile", action="store_true",
        help="profile a few more steps after the measured ones (as measure.profile): device time by "
        "category in the metrics, a chrome trace beside them",
    )  # fmt: skip
    _db_option(run)

    runs = commands.add_parser("runs", help="list stored runs")
    runs.add_argument("--experiment", "-e")
    runs.add_argument("--target", "-t")
    runs.add_argument("--status", choices=STATUSES)
    _db_option(runs)

    show = commands.add_parser("show", help="one run in full")
    show.add_argument("run_id", metavar="RUN")
    _db_option(show)

    export = commands.add_parser("export", help="all stored runs as JSON or CSV, or into MLflow")
    export.add_argument("--format", choices=("json", "csv", "mlflow"), default="json")
    export.add_argument("--experiment", "-e")
    export.add_argument("-o", "--output", metavar="FILE", help="default: standard output")
    export.add_argument("--tracking-uri", metavar="URI",
                        help="--format mlflow: the MLflow tracking store, e.g. sqlite:///mlflow.db "
                        "(default: $MLFLOW_TRACKING_URI)")  # fmt: skip
    _db_option(export)

    ingest = commands.add_parser("ingest", help="store metrics files written by runs elsewhere")
    ingest.add_argument("files", nargs="+", metavar="METRICS.json")
    ingest.add_argument("--force", action="store_true", help="store files already in the store again")
    _db_option(ingest)

    report = commands.add_parser("report", help="targets side by side: a table and a bar chart")
    report.add_argument("--experiment", "-e")
    report.add_argument("--baseline", metavar="TARGET", help="ratios against this target")
    report.add_argument("--format", choices=("md", "html"), default="md")
    report.add_argument("-o", "--out", default="reports", metavar="DIR")
    report.add_argument(
        "--prices", metavar="FILE",
        help="device-hour prices per target (TOML: currency = \"USD\", optionally electricity_per_kwh = "
        "0.12, then [per_device_hour] h100 = 4.10): the report adds cost per unit of work, "
        "price-performance and the measured energy's cost",
    )  # fmt: skip
    _db_option(report)


def _db_option(parser) -> None:
    parser.add_argument(
        "--db", metavar="PATH", help="results store (default: $BENCHC_RESULTS or .benchc/results.db)"
    )


# ---------------------------------------------------------------- run


def run(args) -> int:
    from ..files import refuse_linked_runs
    from ..results.store import Store
    from ..runner.trials import refuse_clusters, run_points
    from .build import build_points

    points = build_points(args, "run")
    refuse_clusters(points)
    for point in points:  # before the store is opened: nothing is made for a refused run
        refuse_linked_runs(point.path)
    with Store(args.db) as store:
        program_args = ["--profile"] if args.profile else []
        return run_points(points, store, args.repeat, args.timeout, program_args)


# ---------------------------------------------------------------- runs, show, export


def runs(args) -> int:
    from ..results.store import open_existing, store_path

    store = open_existing(args.db)
    if store is None:
        print(f"no runs stored (no results store at {store_path(args.db)})")
        return EXIT_OK
    with store:
        records = store.runs(args.experiment, args.target, args.status)
    if not records:
        print("no runs stored" + (" that match" if (args.experiment or args.target or args.status) else ""))
        return EXIT_OK
    header = ("run", "started (UTC)", "experiment", "target", "point", "trial", "status", "result")
    rows = [header]
    for r in records:
        status, result = _listed(r)
        point = r.point + (" (smoke)" if r.smoke else "")
        rows.append((r.id, r.started_at[:19].replace("T", " "), r.experiment, r.target, point,
                     str(r.trial), status, result))  # fmt: skip
    widths = [max(len(row[i]) for row in rows) for i in range(len(header))]
    for row in rows:
        print("  ".join(c.ljust(w) for c, w in zip(row, widths)).rstrip())
    return EXIT_OK


def _listed(r) -> tuple[str, str]:
    """(status, result) of a run as `runs` lists it; a row whose plan or metrics cannot be read
    (written by an earlier benchc, or edited) is listed as invalid, with the reason."""
    from ..catalog.metrics import headline
    from ..manifest import ManifestPlan
    from ..results.plans import stored_plan_problem

    problem = stored_plan_problem(r.plan)
    if problem:
        return "invalid", f"invalid plan in the store: {problem}"[:100]
    if r.status == "ok" and r.metrics:
        sections = ("throughput", "pipeline", "generation")
        if not isinstance(r.metrics, dict) or any(
            not isinstance(r.metrics.get(key), (dict, type(None))) for key in sections
        ):
            return "invalid", "invalid metrics in the store"
        return r.status, headline(r.metrics, ManifestPlan.read(r.plan).metric)
    queued = r.status in ("pending", "running") and r.job_id
    return r.status, f"job {r.job_id} {r.job_state}" if queued else (r.cause or "")[:60]


def show(args) -> int:
    from ..results.store import open_existing

    store = open_existing(args.db)
    record = None
    if store is not None:
        with store:
            record = store.get(args.run_id)
    if record is None:
        raise error(f"no run '{args.run_id}' in the results store", None, hint="`benchc runs` lists them")
    from ..results.export import with_tier

    print(json.dumps(finite_json(with_tier(record)), indent=2, sort_keys=True, allow_nan=False))
    return EXIT_OK


def export(args) -> int:
    from ..results.export import export_text
    from ..results.store import open_existing, store_path

    uri = _tracking_uri(args)
    store = open_existing(args.db)
    if store is None:  # an empty export would look like a store without runs
        raise error(f"nothing to export: there is no results store at {store_path(args.db)}", None,
                    hint="name the store with --db PATH or BENCHC_RESULTS; `benchc run` and `benchc ingest` "
                    "create one")  # fmt: skip
    with store:
        records = store.runs(args.experiment)
    if args.format == "mlflow":
        from ..results.mlflow_export import export_mlflow

        created, updated = export_mlflow(records, uri)
        experiments = len({r.experiment for r in records})
        print(f"exported {len(records)} run(s) of {experiments} experiment(s) to MLflow at {uri}: "
              f"{created} created, {updated} updated")  # fmt: skip
        return EXIT_OK
    text = export_text(records, args.format)
    if args.output:
        _write_whole(Path(args.output), text)
        print(f"wrote {len(records)} run(s) to {args.output}")
    else:
        sys.stdout.write(text)
    return EXIT_OK


def _tracking_uri(args) -> str | None:
    """--tracking-uri (or $MLFLOW_TRACKING_URI) for --format mlflow; refused with the others,
    as -o is with mlflow, so no option is silently ignored."""
    import os

    if args.format != "mlflow":
        if args.tracking_uri is not None:
            raise error("--tracking-uri is for --format mlflow", None,
                        hint=f"--format {args.format} writes to -o FILE or standard output")  # fmt: skip
        return None
    if args.output:
        raise error("-o/--output is for --format json and csv", None,
                    hint="--format mlflow writes into the store --tracking-uri names")  # fmt: skip
    uri = args.tracking_uri if args.tracking_uri is not None else os.environ.get("MLFLOW_TRACKING_URI", "")
    if not uri.strip():
        raise error("--format mlflow needs a tracking store", None,
                    hint="e.g. --tracking-uri sqlite:///mlflow.db, or set MLFLOW_TRACKING_URI")  # fmt: skip
    return uri


def _write_whole(path: Path, text: str) -> None:
    """Write the file whole or not at all: into a temporary file beside it, then renamed over it
    (made as any new file is, under the user's umask)."""
    import contextlib
    import os

    temporary = path.with_name(f".{path.name[:100]}.{os.getpid()}.tmp")
    try:
        handle = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o666)
        with os.fdopen(handle, "w", encoding="utf-8") as stream:
            stream.write(text)
        os.replace(temporary, path)
    except OSError as exc:
        with contextlib.suppress(OSError):
            temporary.unlink()
        raise error(f"cannot write '{path}': {exc.strerror or exc}", None) from None


# ---------------------------------------------------------------- ingest


NOTES_SHOWN = 5  # notes of runs stored without a plan; `benchc show RUN` gives the others' reasons


def ingest(args) -> int:
    from ..results.ingest import load_files, store_files
    from ..results.store import Store

    force = args.force
    loaded = load_files([Path(name) for name in args.files], force=force)  # a refused ingest creates no store
    with Store(args.db) as store:
        stored = store_files(store, loaded, force=force)
    for item in stored:
        m = item.metrics
        job = m.get("job")
        trial = f", job {job['id']} trial {job['trial']}/{job['trials']}" if job else ""
        again = ", stored again as a run of its own" if item.again else ""
        print(f"ingested {item.path}: {m['experiment']} / {m['target']} / {m['point']} "
              f"({item.status}{trial}{again})  [run {item.run_id}]")  # fmt: skip
    planless = [item for item in stored if item.no_plan]
    for item in planless[:NOTES_SHOWN]:
        print(f"benchc: note: {item.path}: stored without its build's plan (reports show no roofline, "
              f"published references or prices for it): {item.no_plan}", file=sys.stderr)  # fmt: skip
    if len(planless) > NOTES_SHOWN:
        print(f"benchc: note: {len(planless) - NOTES_SHOWN} more run(s) were stored without their build's "
              "plan; `benchc show RUN` gives each one's reason (environment.no_plan)",
              file=sys.stderr)  # fmt: skip
    return EXIT_OK


# ---------------------------------------------------------------- report


def _refuse_empty(args) -> None:
    """An empty value of a report flag is a mistake, never a silent default or a filter."""
    from ..diagnostics import BenchError, Diagnostic

    wanted = (("-e/--experiment", args.experiment, "an experiment name"),
              ("--baseline", args.baseline, "a target name"), ("-o/--out", args.out, "a folder name"),
              ("--prices", args.prices, "a file name"), ("--db", args.db, "a file name"))  # fmt: skip
    hint = "give it one, or leave the flag out"
    empty = [Diagnostic(f"{flag} needs {what}, got '{value}'", None, hint=hint)
             for flag, value, what in wanted if value is not None and not str(value).strip()]  # fmt: skip
    if empty:
        raise BenchError(empty)


def report(args) -> int:
    from ..report.collect import sections
    from ..report.output import file_name, write_report
    from ..results.calibrations import latest_calibrations
    from ..results.store import open_existing, store_path

    _refuse_empty(args)
    prices = None
    if args.prices:
        from ..report.prices import load_prices

        prices = load_prices(Path(args.prices))  # before anything is read or written
    store = open_existing(args.db)
    if store is None:
        raise error(f"no runs to report: there is no results store at {store_path(args.db)}", None,
                    hint="run something first: benchc run SPEC --smoke")  # fmt: skip
    with store:
        records = store.latest_runs(args.experiment)  # what the report shows, not the whole store
        targets = store.targets(args.experiment)
        calibrations = latest_calibrations(store)  # measured ceilings beside the datasheet's
    if not records:
        raise error("no runs to report" + (f" for experiment '{args.experiment}'" if args.experiment else ""),
                    None, hint="run something first: benchc run SPEC --smoke")  # fmt: skip
    if args.baseline and args.baseline not in targets:
        raise error(f"no runs of baseline target '{args.baseline}'", None,
                    hint=choices_hint(args.baseline, targets, "targets with runs"))  # fmt: skip
    found = sections(records, args.baseline, calibrations)
    name = file_name(args.experiment or "report") + (".md" if args.format == "md" else ".html")
    written = write_report(found, Path(args.out), name, args.format, prices)
    print("\n".join(f"wrote {path}" for path in written))
    return EXIT_OK
