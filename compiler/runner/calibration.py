"""Run a calibration's build folder on this machine and store how it ended (`benchc
calibrate`): inserted as running before its launch, finished whatever the way out (ok, failed
with its cause, timeout, interrupted, terminated), as runner/trials.py does for a run."""

from __future__ import annotations

import signal
from collections.abc import Callable
from pathlib import Path

from ..diagnostics import BenchError
from ..plan.calibration import CalibrationPlan
from ..results.calibrations import calibration_problem, finish_calibration, start_calibration
from ..results.store import Store, StoreLocked, new_id
from ..results.untrusted_json import read_json_file
from .execute import Outcome, launch
from .interrupts import Terminated, raise_terminated
from .processes import signals_held
from .trials import environment

OUTPUT = "calibration.json"
# The store's statuses: the program's own file may say cancelled or timeout after SIGTERM
STORED = {"ok", "failed", "timeout", "interrupted", "terminated", "cancelled", "unknown"}


def read_calibration(path: Path) -> tuple[dict | None, str | None]:
    """The calibration file at `path` if it is one benchc can store; else (None, the cause,
    naming the file as `path` names it). A run's metrics file says which command stores it."""
    if not path.exists():
        return None, None
    try:
        data, _ = read_json_file(path, "calibration file")
    except BenchError as exc:
        return None, "invalid calibration file: " + exc.diagnostics[0].message
    if isinstance(data, dict) and data.get("schema") == "benchc-metrics":
        ingest = f"`benchc ingest {path}` stores that"
        return None, f"{path.name} is a run's metrics file, not a calibration: {ingest}"
    problem = calibration_problem(data)
    return (None, f"{path.name} {problem}") if problem else (data, None)


def run_calibration(plan: CalibrationPlan, folder: Path, store: Store, timeout_s: float | None,
                    on_line: Callable[[str], None]) -> tuple[str, Outcome]:  # fmt: skip
    """Launch `folder`'s launch.sh for the plan's layout; (the calibration's id, its outcome).
    SIGTERM, SIGHUP and SIGQUIT to benchc end it as Ctrl-C does; the row always ends."""
    endings = (signal.SIGTERM, signal.SIGHUP, signal.SIGQUIT)
    previous = {sig: signal.signal(sig, raise_terminated) for sig in endings}
    try:
        return _run(plan, folder, store, timeout_s or plan.sizes.timeout_s, on_line)
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)


def _run(plan: CalibrationPlan, folder: Path, store: Store, timeout_s: float,
         on_line: Callable[[str], None]) -> tuple[str, Outcome]:  # fmt: skip
    run_dir = folder / "runs" / new_id()
    output = run_dir / OUTPUT
    with signals_held():
        calibration_id = start_calibration(
            store, target=plan.target, host=environment()["host"], smoke=plan.smoke,
            world_size=plan.world_size, build_path=str(folder.resolve()),
            environment={**environment(), "run_dir": str(run_dir.resolve())},
        )  # fmt: skip
    outcome = Outcome("unknown", "benchc stopped before the calibration ended", None, None, "", 0.0)
    try:
        outcome = launch(folder, plan.nodes, plan.world_size, run_dir, timeout_s, on_line,
                         program_args=("--output", str(output.resolve())),
                         read_output=lambda _: read_calibration(output))  # fmt: skip
    except KeyboardInterrupt:  # between the row's start and the launch
        outcome = Outcome("interrupted", "interrupted by the user (Ctrl-C)", None, None, "", 0.0)
    except Terminated as signalled:
        outcome = Outcome("terminated", f"benchc received {signalled}", None, None, "", 0.0, signalled.signum)
    finally:
        with signals_held():  # the row always ends
            status = outcome.status if outcome.status in STORED else "failed"
            try:
                finish_calibration(store, calibration_id, status, outcome.cause, outcome.metrics)
            except StoreLocked as locked:  # the result is the file: say where, and how to store it
                kept = (f"its file is kept in {output}: `benchc calibrate --ingest {output}` stores it once "
                        "the store is free" if output.is_file() else "it wrote no file")  # fmt: skip
                raise StoreLocked(
                    locked.path, locked.waited, f"calibration {calibration_id}: {kept}"
                ) from None
    return calibration_id, outcome
