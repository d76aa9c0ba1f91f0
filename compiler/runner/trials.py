"""The local trial loop of `benchc run`: each trial of each build point run on this machine,
one after another, each recorded in the store from its start to its end, whatever the way out
(cluster/jobs.py is its twin for jobs submitted to Slurm)."""

from __future__ import annotations

import sys
from collections.abc import Sequence

from .. import __version__
from ..catalog.metrics import METRICS, headline
from ..diagnostics import error
from ..figures import sig
from ..files import refuse_linked_runs
from ..results.store import Store, StoreLocked, new_id
from .execute import Outcome, execute
from .interrupts import Terminated, raise_terminated
from .processes import signals_held
from .progress import Progress
from .provenance import spec_repository

RUN_OK, RUN_FAILED, INTERRUPTED, TERMINATED = 0, 1, 130, 143  # benchc run's exit codes
COULD_NOT_STORE = 3  # the results store stayed locked: the result kept in its metrics file


def environment(spec_path: str | None = None) -> dict:
    """The host facts stored with every run (local or submitted), and the state of the
    repository that holds its spec (runner/provenance.py; None: not in one)."""
    import platform
    import socket

    found = {"host": socket.gethostname(), "platform": platform.platform(),
             "python": platform.python_version(), "benchc": __version__}  # fmt: skip
    if spec_path is not None:
        found["spec_repository"] = spec_repository(spec_path)
    return found


def refuse_clusters(points) -> None:
    """`run` runs on this machine: the nodes of a cpu plan all run here (over loopback); the
    nodes of an accelerator plan cannot, and are said so before anything starts."""
    remote = [p for p in points if p.manifest.plan.nodes > 1 and p.manifest.plan.family != "cpu"]
    if remote:
        names = ", ".join(f"{p.label} ({p.manifest.plan.nodes} nodes)" for p in remote[:3])
        raise error(
            f"benchc run runs one machine; these points span several nodes: {names}",
            None,
            hint="submit them to a Slurm cluster with `benchc submit`, or start launch.sh on each "
            "node (docs/clusters.md)",
        )
    for p in points:
        if p.manifest.plan.nodes > 1:
            print(f"  {p.label}: {p.manifest.plan.nodes} nodes, each a launcher on this machine "
                  "(c10d over loopback)")  # fmt: skip


def run_points(points, store: Store, repeat: int | None, timeout: float | None,
               program_args: Sequence[str] = ()) -> int:  # fmt: skip
    """Each trial of each point, one after another, `program_args` given to every program
    (`--profile`). SIGTERM, SIGHUP and SIGQUIT to benchc (a scheduler's cancel, a closed
    terminal, Ctrl-\\) end the run as Ctrl-C does; every trial started is recorded as ended,
    whatever the way out."""
    import signal

    ending = (signal.SIGTERM, signal.SIGHUP, signal.SIGQUIT)
    previous = {sig: signal.signal(sig, raise_terminated) for sig in ending}
    try:
        return _trials(points, store, repeat, timeout, program_args)
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)


def _trials(points, store: Store, repeat_flag: int | None, timeout_flag: float | None,
            program_args: Sequence[str]) -> int:  # fmt: skip

    tally: dict[str, int] = {}
    for point in points:  # before any is run (a link made since `run` began checked too)
        refuse_linked_runs(point.path)
    for point in points:
        manifest, plan = point.manifest, point.manifest.plan
        repeat = repeat_flag or plan.repeat
        timeout = timeout_flag or plan.timeout_s
        series = new_id()
        for trial in range(1, repeat + 1):
            run_id = new_id()
            run_dir = point.path / "runs" / run_id
            with signals_held():
                store.start(
                    run_id=run_id, experiment=manifest.experiment, target=manifest.target,
                    point=manifest.point, point_values=plan.point_values, smoke=manifest.smoke,
                    spec_path=manifest.spec_path, spec_sha256=manifest.spec_sha256,
                    build_path=str(point.path.resolve()), log_path=str((run_dir / "log.txt").resolve()),
                    environment=environment(manifest.spec_path), plan=plan.raw, series=series, trial=trial,
                )  # fmt: skip
            label = f"{point.label} [{trial}/{repeat}]"
            metric = plan.metric or ""
            outcome = Outcome("unknown", "benchc stopped before the run ended", None, None, "", 0.0)
            try:
                unit = METRICS[metric].throughput_unit if metric in METRICS else metric
                with Progress(label, plan.items_per_step, unit) as progress:
                    outcome = execute(point, run_dir, timeout, progress.line, program_args)
            except KeyboardInterrupt:  # between the trial's start and its launch
                outcome = Outcome("interrupted", "interrupted by the user (Ctrl-C)", None, None, "", 0.0)
            except Terminated as signalled:
                outcome = Outcome("terminated", f"benchc received {signalled}", None, None, "", 0.0,
                                  signalled.signum)  # fmt: skip
            finally:
                with signals_held():  # the row always ends; an ok run's warning in its cause
                    cause = f"warning: {outcome.warning}" if outcome.warning else outcome.cause
                    locked = _finish(store, run_id, outcome, cause, run_dir)
            if locked:
                return COULD_NOT_STORE
            tally[outcome.status] = tally.get(outcome.status, 0) + 1
            _say(label, run_id, outcome, metric)
            if outcome.status in ("interrupted", "terminated"):
                print(f"benchc: {outcome.status}; the remaining runs were not started", file=sys.stderr)
                if outcome.status == "interrupted":
                    return INTERRUPTED
                return 128 + outcome.signum if outcome.signum else TERMINATED
    summary = ", ".join(f"{n} {status}" for status, n in sorted(tally.items()))
    print(f"{sum(tally.values())} run(s): {summary}; results in {store.path}")
    return RUN_OK if set(tally) <= {"ok"} else RUN_FAILED


def _say(label: str, run_id: str, outcome, metric: str | None) -> None:

    if outcome.status == "ok":
        m = outcome.metrics
        step_ms = sig(m["step_time_s"]["median"] * 1e3)
        rate = f"{sig(m['throughput']['job'])} {m['throughput']['unit']}"
        head = headline(m, metric)
        shown = rate if head == rate else f"{head} ({rate})"
        print(f"ok      {label}: {shown}, step median {step_ms} ms  [run {run_id}]", flush=True)
        if outcome.warning:
            print(f"  warning: {outcome.warning}", flush=True)
    else:
        print(f"{outcome.status:7} {label}: {outcome.cause}  [run {run_id}]", flush=True)
        if outcome.log_tail:
            tail = "\n".join("    " + line for line in outcome.log_tail.splitlines()[-8:])
            print(tail, flush=True)


def _finish(store: Store, run_id: str, outcome, cause: str | None, run_dir) -> bool:
    """Store how the run ended; where the store stays locked past its wait, say where the
    result is kept (the run's metrics file, for `benchc ingest`) and that nothing more runs.
    Whether it stayed locked."""
    try:
        store.finish(run_id, outcome.status, cause, outcome.metrics, outcome.log_tail)
    except StoreLocked as locked:
        kept = run_dir / "metrics.json"
        if kept.is_file():
            where = f"its metrics are kept in {kept}: `benchc ingest {kept}` stores them once it is free"
        else:
            where = f"it ended {outcome.status} ({cause}) and wrote no metrics"
        print(f"benchc: {locked}: run {run_id} could not be stored; {where}; the remaining runs "
              "were not started", file=sys.stderr, flush=True)  # fmt: skip
        return True
    return False
