"""Commands for Slurm clusters: submit (sbatch each build point and record it), status (follow
submitted runs and collect their results) and cancel."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import TYPE_CHECKING

from ..diagnostics import error
from . import flags

if TYPE_CHECKING:
    from ..results.store import Store

EXIT_OK, EXIT_RUN_FAILED, EXIT_USER, EXIT_COULD_NOT_ASK, EXIT_INTERRUPTED = 0, 1, 2, 3, 130
COMMANDS = ("submit", "status", "cancel")
FOLLOW_AGAIN = "follow them again with: benchc status --wait"


def add_parsers(commands, variant_options) -> None:
    submit_ = commands.add_parser("submit", help="submit build points to Slurm (sbatch) and record them")
    submit_.add_argument("spec", metavar="SPEC|BUILD_DIR")
    variant_options(submit_)
    submit_.add_argument("-o", "--out", default="build", metavar="DIR", help="build folder for a SPEC")
    submit_.add_argument("--partition", metavar="P", help="Slurm partition (wins over the spec)")
    submit_.add_argument("--account", metavar="A", help="Slurm account (wins over the spec)")
    submit_.add_argument("--time", metavar="T", help="job time limit, e.g. 30 or 02:00:00 (wins)")
    submit_.add_argument(
        "--repeat", type=flags.repeat, default=None, metavar="N", help="trials per point, in one job"
    )
    submit_.add_argument("--wait", action="store_true", help="follow the jobs until they end, then collect")
    submit_.add_argument(
        "--profile", action="store_true",
        help="profile a few more steps after the measured ones (as measure.profile), in every trial",
    )  # fmt: skip
    _db_option(submit_)

    status_ = commands.add_parser("status", help="refresh and list submitted runs; collect ended jobs")
    status_.add_argument("--wait", action="store_true", help="follow until every submitted run has ended")
    _db_option(status_)

    cancel_ = commands.add_parser("cancel", help="cancel submitted runs (scancel) and record it")
    cancel_.add_argument("runs", nargs="*", metavar="RUN", help="run ids (a job's trials go together)")
    cancel_.add_argument("--all", action="store_true", help="every submitted run that has not ended")
    _db_option(cancel_)


def _db_option(parser) -> None:
    parser.add_argument(
        "--db", metavar="PATH", help="results store (default: $BENCHC_RESULTS or .benchc/results.db)"
    )


def _say(text: str) -> None:
    print(text, flush=True)


def _time(args, point) -> list[str]:
    """--repeat N extends the derived time limit as measure.repeat does (the same rule); an
    explicit --time, or the spec's slurm.time, wins."""
    from ..codegen.launchers import trials_time

    plan = point.manifest.plan
    if args.time is not None or args.repeat is None or plan.slurm_time:
        return []
    return [f"--time={trials_time(args.repeat, plan.timeout_s)}"]


def _points(args):
    from .build import build_points

    points = build_points(args, "submit", sbatch=True)
    missing = [p for p in points if not (p.path / "job.sbatch").exists()]
    if missing:
        raise error(f"{missing[0].path} has no job.sbatch", None,
                    hint="compile it with `benchc compile --sbatch`, or submit the spec")  # fmt: skip
    return points


def submit(args) -> int:
    from ..cluster import jobs, slurm
    from ..results.store import Store
    from ..runner.trials import environment

    options = flags.slurm_options(args)  # --repeat is bounded by its flag type, as for `run`
    if Path(args.spec).is_dir():  # a build folder: what it lacks is said first
        points = _points(args)
        slurm.command("sbatch")
    else:  # a spec: say at once that this is no login node, before compiling anything
        slurm.command("sbatch")
        points = _points(args)
    if not points:
        raise error(f"no build points to submit under '{args.spec}'", None)
    env, cluster = slurm.environment_for_jobs(), slurm.cluster_name()
    submitted: set[str] = set()
    with Store(args.db) as store:
        for point in points:
            trials = args.repeat or point.manifest.plan.repeat
            sbatch_options = [*options, *_time(args, point)]
            job_id, run_ids = jobs.submit_point(store, point, trials=trials, options=sbatch_options, env=env,
                                                cluster=cluster,
                                                environment=environment(point.manifest.spec_path),
                                                profile=args.profile)  # fmt: skip
            submitted.update(run_ids)
            where = f" on {cluster}" if cluster else ""
            _say(f"submitted {point.label}: job {job_id}{where}, {trials} trial(s)  "
                 f"[run{'s' if len(run_ids) > 1 else ''} {', '.join(run_ids)}]")  # fmt: skip
            _say(f"  its log and metrics: {store.get(run_ids[0]).run_dir}")
        if not args.wait:
            _say(f"{len(points)} job(s) submitted; follow them with: benchc status --wait")
            return EXIT_OK
        return _follow(store, submitted)


def _follow(store: Store, run_ids: set[str] | None) -> int:
    from ..cluster import jobs

    try:
        records = jobs.follow(store, run_ids, _say)
    except KeyboardInterrupt:
        print(f"benchc: stopped following; the jobs keep running; {FOLLOW_AGAIN}", file=sys.stderr)
        return EXIT_INTERRUPTED
    _table(records)
    return EXIT_OK if all(r.status == "ok" for r in records) else EXIT_RUN_FAILED


def _table(records) -> None:
    from ..catalog.metrics import headline
    from ..manifest import ManifestPlan

    if not records:
        _say("no submitted runs")
        return
    rows = [("run", "job", "state", "experiment", "target", "point", "trial", "status", "result")]
    for r in records:
        if r.status == "ok" and r.metrics:
            result = headline(r.metrics, ManifestPlan.read(r.plan).metric)
            hosts = r.metrics.get("hosts")
            if hosts:
                result += f" on {len(hosts)} host{'s' if len(hosts) > 1 else ''}"
        else:
            result = (r.cause or "")[:80]
        point = r.point + (" (smoke)" if r.smoke else "")
        rows.append((r.id, r.job_id or "-", r.job_state or "-", r.experiment, r.target, point,
                     str(r.trial), r.status, result))  # fmt: skip
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    for row in rows:
        _say("  ".join(c.ljust(w) for c, w in zip(row, widths)).rstrip())


def status(args) -> int:
    from ..cluster import jobs, slurm
    from ..results.store import open_existing

    store = open_existing(args.db)
    if store is None:
        _say("no submitted runs")
        return EXIT_OK
    with store:
        active = store.submitted(active_only=True)
        if args.wait:  # its exit status: the runs it waited on, not every run ever submitted
            if not active:
                _say("no submitted run is pending or running")
                _table(store.submitted())
                return EXIT_OK
            return _follow(store, {r.id for r in active})
        code = EXIT_OK
        if active:
            try:
                changes = jobs.refresh(store, active)
            except slurm.Unreachable as exc:
                changes, code = [], EXIT_COULD_NOT_ASK
                _unreachable(exc, "the runs keep the state they had; ask again later")
            for change in changes:
                r = change.record
                _say(f"{change.status:9} {r.experiment} / {r.target} / {r.point} [trial {r.trial}]  "
                     f"job {r.job_id} {change.job_state}  [run {r.id}]")  # fmt: skip
        _table(store.submitted())
    return code


def _unreachable(exc: Exception, then: str) -> None:
    print(f"benchc: the Slurm controller could not be asked ({exc}); {then}", file=sys.stderr, flush=True)


def cancel(args) -> int:
    from ..cluster import jobs, slurm
    from ..results.store import open_existing

    if not args.runs and not args.all:
        raise error("name the runs to cancel, or --all", None, hint="`benchc status` lists them")
    store = open_existing(args.db)
    if store is None:
        if args.runs:
            raise error(f"no submitted run '{args.runs[0]}'", None, hint="`benchc status` lists them")
        _say("no submitted run is pending or running")
        return EXIT_OK
    with store:
        active = store.submitted(active_only=True)
        if args.all:
            chosen = active
        else:
            chosen = []
            for run_id in args.runs:
                record = store.get(run_id)
                if record is None or record.source != "submit":
                    raise error(f"no submitted run '{run_id}'", None, hint="`benchc status` lists them")
                if record.status not in ("pending", "running"):
                    raise error(f"run {record.id} has already ended ({record.status})", None)
                chosen.append(record)
        if not chosen:
            _say("no submitted run is pending or running")
            return EXIT_OK
        job_ids = {r.job_id for r in chosen}  # a job's trials end together
        chosen = [r for r in active if r.job_id in job_ids]
        try:
            records = jobs.cancel(store, chosen, _say)
        except slurm.Unreachable as exc:
            _unreachable(exc, "runs whose end Slurm did not confirm keep their state; "
                         "`benchc status` asks again")  # fmt: skip
            _table(store.submitted())
            return EXIT_COULD_NOT_ASK
        _table(records)
    return EXIT_OK
