"""A calibration as a Slurm job (`benchc calibrate --submit`): its folder's job.sbatch submitted,
followed until the job ends, and its file stored; the calibration row is inserted as pending
when the job is submitted and ended however the wait ends. benchc waits for the job: Ctrl-C,
SIGTERM, SIGHUP or SIGQUIT cancel it (scancel) and are recorded, so nothing is left running."""

from __future__ import annotations

import signal
import time
from collections.abc import Callable
from pathlib import Path

from ..plan.calibration import CalibrationPlan
from ..results.calibrations import finish_calibration, start_calibration
from ..results.store import Store
from ..runner.calibration import read_calibration
from ..runner.interrupts import Terminated, raise_terminated
from ..runner.processes import signals_held
from ..runner.trials import environment
from . import slurm

POLL_S = 1.0


def submit_calibration(plan: CalibrationPlan, folder: Path, store: Store, options: list[str],
                       on_state: Callable[[str], None]) -> tuple[str, str, str | None]:  # fmt: skip
    """Submit `folder`'s job.sbatch and wait for it; (calibration id, status, cause)."""
    endings = (signal.SIGTERM, signal.SIGHUP, signal.SIGQUIT)
    previous = {sig: signal.signal(sig, raise_terminated) for sig in endings}
    try:
        return _submit(plan, folder, store, options, on_state)
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)


def _submit(plan: CalibrationPlan, folder: Path, store: Store, options: list[str],
            on_state: Callable[[str], None]) -> tuple[str, str, str | None]:  # fmt: skip
    folder = folder.resolve()
    job_id, cluster = slurm.sbatch(
        folder / "job.sbatch", chdir=folder, output=folder / "slurm-%j.out", options=options,
        script_args=[], env=slurm.environment_for_jobs(),
    )  # fmt: skip
    with signals_held():
        calibration_id = start_calibration(
            store, target=plan.target, host=f"slurm job {job_id}", smoke=plan.smoke,
            world_size=plan.world_size, build_path=str(folder),
            environment={**environment(), "job_id": job_id, "cluster": cluster},
        )  # fmt: skip
    on_state(f"submitted job {job_id}" + (f" on {cluster}" if cluster else ""))
    status, cause, data = "unknown", "benchc stopped before the job ended", None
    try:
        state = _wait(job_id, on_state)
        output = folder / "runs" / f"slurm-{job_id}" / "metrics-1.json"
        data, problem = read_calibration(output)
        if state.state == "COMPLETED" and data is not None and data["status"] == "ok":
            status, cause = "ok", None
        else:
            status = "timeout" if state.state == "TIMEOUT" else "failed"
            cause = _cause(job_id, state, data, problem)
    except KeyboardInterrupt:
        status, cause = "interrupted", f"interrupted by the user (Ctrl-C); job {job_id} cancelled"
        slurm.scancel([job_id])
    except Terminated as signalled:
        status, cause = "terminated", f"benchc received {signalled}; job {job_id} cancelled"
        slurm.scancel([job_id])
    finally:
        with signals_held():  # the row always ends
            finish_calibration(store, calibration_id, status, cause, data)
    return calibration_id, status, cause


def _cause(job_id: str, state: slurm.JobState, data: dict | None, problem: str | None) -> str:
    """Why a calibration job did not store a calibration: its program's error, a file that is
    not a calibration, or the job's own ending."""
    error = (data or {}).get("error")
    if isinstance(error, dict):
        return f"{error.get('type', 'error')}: {error.get('message', '')}"
    if problem:
        return problem
    return (f"job {job_id} ended {state.state} (exit code {state.exit_code}) without a calibration; "
            f"see slurm-{job_id}.out in its folder")  # fmt: skip


def _wait(job_id: str, on_state: Callable[[str], None]) -> slurm.JobState:
    """The job's state once it has ended, saying each new state as it comes."""
    said = None
    while True:
        state = slurm.job_state(job_id) or slurm.states([job_id])[job_id]
        if state.state != said:
            on_state(f"job {job_id}: {state.state}")
            said = state.state
        if state.ended:
            return state
        time.sleep(POLL_S)
