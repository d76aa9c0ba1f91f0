"""Commands over runs and results: run, runs, show, export, ingest, report."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import TYPE_CHECKING

from .. import __version__
from ..catalog.metrics import METRICS
from ..diagnostics import choices_hint, error
from ..results.statuses import STATUSES
from . import flags

if TYPE_CHECKING:
    from ..results.store import Store

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
    _db_option(run)

    runs = commands.add_parser("runs", help="list stored runs")
    runs.add_argument("--experiment", "-e")
    runs.add_argument("--target", "-t")
    runs.add_argument("--status", choices=STATUSES)
    _db_option(runs)

    show = commands.add_parser("show", help="one run in full")
    show.add_argument("run_id", metavar="RUN")
    _db_option(show)

    export = commands.add_parser("export", help="all stored runs as JSON or CSV")
    export.add_argument("--format", choices=("json", "csv"), default="json")
    export.add_argument("--experiment", "-e")
    export.add_argument("-o", "--output", metavar="FILE", help="default: standard output")
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
        help="device-hour prices per target (TOML: currency = \"USD\", then [per_device_hour] "
        "h100 = 4.10): the report adds cost per unit of work and price-performance",
    )  # fmt: skip
    _db_option(report)


def _db_option(parser) -> None:
    parser.add_argument(
        "--db", metavar="PATH", help="results store (default: $BENCHC_RESULTS or .benchc/results.db)"
    )


def _environment() -> dict:
    import platform
    import socket

    return {"host": socket.gethostname(), "platform": platform.platform(),
            "python": platform.python_version(), "benchc": __version__}  # fmt: skip


# ---------------------------------------------------------------- run


def run(args) -> int:
    from ..results.store import Store
    from .build import build_points

    points = build_points(args, "run")
    _refuse_clusters(points)
    with Store(args.db) as store:
        return _run_points(points, store, args)


def _refuse_clusters(points) -> None:
    """`run` runs on this machine: the nodes of a cpu plan all run here (over loopback); the
    nodes of an accelerator plan cannot, and are said so before anything starts."""
    remote = [p for p in points if p.nodes > 1 and p.family != "cpu"]
    if remote:
        names = ", ".join(f"{p.label} ({p.nodes} nodes)" for p in remote[:3])
        raise error(
            f"benchc run runs one machine; these points span several nodes: {names}",
            None,
            hint="submit them to a Slurm cluster with `benchc submit`, or start launch.sh on each "
            "node (docs/clusters.md)",
        )
    for p in points:
        if p.nodes > 1:
            print(f"  {p.label}: {p.nodes} nodes, each a launcher on this machine (c10d over loopback)")


def _run_points(points, store: Store, args) -> int:
    """Each trial of each point, one after another. SIGTERM, SIGHUP and SIGQUIT to benchc (a
    scheduler's cancel, a closed terminal, Ctrl-\\) end the run as Ctrl-C does; every trial
    started is recorded as ended, whatever the way out."""
    import signal

    from ..runner.interrupts import raise_terminated

    ending = (signal.SIGTERM, signal.SIGHUP, signal.SIGQUIT)
    previous = {sig: signal.signal(sig, raise_terminated) for sig in ending}
    try:
        return _trials(points, store, args)
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)


def _trials(points, store: Store, args) -> int:
    from ..results.store import new_id
    from ..runner.execute import Outcome, execute
    from ..runner.interrupts import Terminated
    from ..runner.processes import signals_held
    from ..runner.progress import Progress

    tally: dict[str, int] = {}
    for point in points:
        plan = point.plan
        repeat = args.repeat or plan.get("measure", {}).get("repeat", 1)
        timeout = args.timeout or plan.get("measure", {}).get("timeout_s", 3600.0)
        series = new_id()
        workload = plan.get("workload", {})
        for trial in range(1, repeat + 1):
            manifest = point.manifest
            run_id = new_id()
            run_dir = point.path / "runs" / run_id
            with signals_held():
                store.start(
                    run_id=run_id, experiment=manifest["experiment"], target=manifest["target"],
                    point=manifest["point"], point_values=plan.get("point_values", {}),
                    smoke=bool(manifest.get("smoke")), spec_path=manifest["spec"]["path"],
                    spec_sha256=manifest["spec"]["sha256"], build_path=str(point.path.resolve()),
                    log_path=str((run_dir / "log.txt").resolve()), environment=_environment(),
                    plan=plan, series=series, trial=trial,
                )  # fmt: skip
            label = f"{point.label} [{trial}/{repeat}]"
            metric = plan.get("measure", {}).get("metric", "")
            sequences = workload.get("global_batch") or workload.get("batch") or 0
            items = sequences * (workload.get("seq_len") or workload.get("output_tokens") or 1)  # per step
            outcome = Outcome("unknown", "benchc stopped before the run ended", None, None, "", 0.0)
            try:
                unit = METRICS[metric].throughput_unit if metric in METRICS else metric
                with Progress(label, items or None, unit) as progress:
                    outcome = execute(point, run_dir, timeout, progress.line)
            except KeyboardInterrupt:  # between the trial's start and its launch
                outcome = Outcome("interrupted", "interrupted by the user (Ctrl-C)", None, None, "", 0.0)
            except Terminated as signalled:
                outcome = Outcome("terminated", f"benchc received {signalled}", None, None, "", 0.0,
                                  signalled.signum)  # fmt: skip
            finally:
                with signals_held():  # the row always ends
                    store.finish(run_id, outcome.status, outcome.cause, outcome.metrics, outcome.log_tail)
            tally[outcome.status] = tally.get(outcome.status, 0) + 1
            _say(label, run_id, outcome, metric)
            if outcome.status in ("interrupted", "terminated"):
                print(f"benchc: {outcome.status}; the remaining runs were not started", file=sys.stderr)
                if outcome.status == "interrupted":
                    return EXIT_INTERRUPTED
                return 128 + outcome.signum if outcome.signum else EXIT_TERMINATED
    summary = ", ".join(f"{n} {status}" for status, n in sorted(tally.items()))
    print(f"{sum(tally.values())} run(s): {summary}; results in {store.path}")
    return EXIT_OK if set(tally) <= {"ok"} else EXIT_RUN_FAILED


def _say(label: str, run_id: str, outcome, metric: str | None) -> None:
    from ..figures import sig
    from ..report.headline import headline

    if outcome.status == "ok":
        m = outcome.metrics
        step_ms = sig(m["step_time_s"]["median"] * 1e3)
        rate = f"{sig(m['throughput']['job'])} {m['throughput']['unit']}"
        head = headline(m, metric)
        shown = rate if head == rate else f"{head} ({rate})"
        print(f"ok      {label}: {shown}, step median {step_ms} ms  [run {run_id}]", flush=True)
    else:
        print(f"{outcome.status:7} {label}: {outcome.cause}  [run {run_id}]", flush=True)
        if outcome.log_tail:
            tail = "\n".join("    " + line for line in outcome.log_tail.splitlines()[-8:])
            print(tail, flush=True)


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
    from ..report.headline import headline
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
        return r.status, headline(r.metrics, ((r.plan or {}).get("measure") or {}).get("metric"))
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

    print(json.dumps(with_tier(record), indent=2, sort_keys=True))
    return EXIT_OK


def export(args) -> int:
    from ..results.export import export_text
    from ..results.store import open_existing, store_path

    store = open_existing(args.db)
    if store is None:  # an empty export would look like a store without runs
        raise error(f"nothing to export: there is no results store at {store_path(args.db)}", None,
                    hint="name the store with --db PATH or BENCHC_RESULTS; `benchc run` and `benchc ingest` "
                    "create one")  # fmt: skip
    with store:
        records = store.runs(args.experiment)
    text = export_text(records, args.format)
    if args.output:
        _write_whole(Path(args.output), text)
        print(f"wrote {len(records)} run(s) to {args.output}")
    else:
        sys.stdout.write(text)
    return EXIT_OK


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
    if not records:
        raise error("no runs to report" + (f" for experiment '{args.experiment}'" if args.experiment else ""),
                    None, hint="run something first: benchc run SPEC --smoke")  # fmt: skip
    if args.baseline and args.baseline not in targets:
        raise error(f"no runs of baseline target '{args.baseline}'", None,
                    hint=choices_hint(args.baseline, targets, "targets with runs"))  # fmt: skip
    found = sections(records, args.baseline)
    name = file_name(args.experiment or "report") + (".md" if args.format == "md" else ".html")
    written = write_report(found, Path(args.out), name, args.format, prices)
    print("\n".join(f"wrote {path}" for path in written))
    return EXIT_OK
