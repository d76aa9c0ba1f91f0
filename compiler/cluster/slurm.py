"""The Slurm client: the one place benchc shells out to sbatch, squeue, scontrol, sacct and
scancel, and parses what they print. Everything else sees jobs as `JobState` values.

A job's state comes from squeue while the job is in the queue, then from `scontrol show job`
(which keeps ended jobs for MinJobAge, 5 minutes by default), then from sacct where the site
runs accounting. `sbatch --wait` is never used: it notices a job's end tens of seconds late.

Only a definite answer changes what benchc knows of a job: a command that fails for any other
reason than "no such job" (the controller down, a timeout, a refused connection) raises
Unreachable, before anything is stored, and the runs keep the state they had.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from pathlib import Path

from ..diagnostics import error
from ..records import frozen

TIMEOUT_S = 60.0  # for one client command; slurmctld answers in milliseconds when healthy
ACTIVE = {"PENDING", "CONFIGURING", "RUNNING", "COMPLETING", "SUSPENDED", "REQUEUED", "RESIZING",
          "SIGNALING", "STAGE_OUT", "STOPPED", "REQUEUE_HOLD", "REQUEUE_FED", "RESV_DEL_HOLD"}  # fmt: skip
# Ended states (Slurm's job_state_string): what each means for the runs of the job.
ENDED = {"COMPLETED", "FAILED", "TIMEOUT", "OUT_OF_MEMORY", "CANCELLED", "NODE_FAIL", "PREEMPTED",
         "BOOT_FAIL", "DEADLINE", "REVOKED", "SPECIAL_EXIT"}  # fmt: skip
UNKNOWN = "UNKNOWN"  # the scheduler no longer knows the job and keeps no accounting of it
NO_SUCH_JOB = re.compile(r"Invalid job id", re.IGNORECASE)  # Slurm's definite "it is gone"


class Unreachable(Exception):
    """Slurm could not be asked (its controller or accounting down, a command timing out):
    nothing it said may change a run's state."""


@frozen
class JobState:
    job_id: str
    state: str  # PENDING, RUNNING, ..., COMPLETED, TIMEOUT, ..., or UNKNOWN
    exit_code: str | None  # "code:signal", known once the job has ended
    reason: str | None  # why it is pending, or the node list while it runs

    @property
    def ended(self) -> bool:
        return self.state not in ACTIVE


def command(name: str) -> str:
    """The path of a Slurm client command, or a user error saying none is here."""
    found = shutil.which(name)
    if found is None:
        raise error(
            f"'{name}' is not on PATH: benchc {'submit' if name == 'sbatch' else 'status'} needs "
            "the Slurm client commands (run it on the cluster's login node)",
            None,
            hint="or copy the build folder to the cluster, `sbatch job.sbatch` there and "
            "`benchc ingest` its metrics (docs/clusters.md)",
        )
    return found


def _run(args: list[str], env: dict | None = None) -> subprocess.CompletedProcess:
    try:
        return subprocess.run(args, capture_output=True, text=True, timeout=TIMEOUT_S, env=env)
    except subprocess.TimeoutExpired:
        raise Unreachable(f"{Path(args[0]).name} did not answer within {TIMEOUT_S:g} s") from None
    except OSError as exc:
        raise Unreachable(f"{Path(args[0]).name} could not be started: {exc.strerror or exc}") from None


def _failed(proc: subprocess.CompletedProcess, name: str) -> Unreachable:
    said = proc.stderr.strip().splitlines()[-1] if proc.stderr.strip() else f"exit status {proc.returncode}"
    return Unreachable(f"{name}: {said}")


def sbatch(script: Path, *, chdir: Path, output: Path, options: list[str], script_args: list[str],
           env: dict | None = None) -> tuple[str, str | None]:  # fmt: skip
    """Submit `script`; (job id, cluster name or None). A refusal is a user error."""
    args = [command("sbatch"), "--parsable", f"--chdir={chdir}", f"--output={output}", *options,
            str(script), *script_args]  # fmt: skip
    proc = _run(args, env)
    if proc.returncode != 0:
        message = proc.stderr.strip().splitlines()[-1] if proc.stderr.strip() else f"exit {proc.returncode}"
        raise error(f"sbatch refused {script}: {message}", None,
                    hint="check --partition, --account and --time against `sinfo`")  # fmt: skip
    answer = proc.stdout.strip().splitlines()[-1] if proc.stdout.strip() else ""
    match = re.fullmatch(r"(\d+)(?:;(\S+))?", answer)
    if not match:
        raise error(f"sbatch answered {answer!r}, not a job id", None)
    return match.group(1), match.group(2)


def cluster_name() -> str | None:
    proc = _run([command("scontrol"), "show", "config"])
    match = re.search(r"^ClusterName\s*=\s*(\S+)", proc.stdout, re.MULTILINE)
    return match.group(1) if match else None


def states(job_ids: list[str]) -> dict[str, JobState]:
    """The state of each job: squeue for queued ones, then scontrol, then sacct."""
    if not job_ids:
        return {}
    found: dict[str, JobState] = {}
    proc = _run([command("squeue"), "-h", "-j", ",".join(job_ids), "-o", "%i|%T|%R"])
    if proc.returncode != 0 and not NO_SUCH_JOB.search(proc.stderr):
        raise _failed(proc, "squeue")
    if proc.returncode == 0:
        for line in proc.stdout.splitlines():
            parts = line.strip().split("|", 2)
            if len(parts) == 3 and parts[0] in job_ids and parts[1] in ACTIVE:
                found[parts[0]] = JobState(parts[0], parts[1], None, parts[2] or None)
    for job_id in job_ids:
        if job_id not in found:
            found[job_id] = (
                _scontrol_state(job_id)
                or _sacct_state(job_id)
                or JobState(job_id, UNKNOWN, None, "the scheduler no longer knows this job")
            )
    return found


def job_state(job_id: str) -> JobState | None:
    """What scontrol says of one job now (its exit code included, even while completing);
    None once Slurm has forgotten it."""
    return _scontrol_state(job_id)


def _scontrol_state(job_id: str) -> JobState | None:
    proc = _run([command("scontrol"), "show", "job", "-o", job_id])
    if proc.returncode != 0:
        if NO_SUCH_JOB.search(proc.stderr):
            return None  # "Invalid job id specified": purged after MinJobAge
        raise _failed(proc, "scontrol")
    fields = dict(re.findall(r"(\w+)=(\S*)", proc.stdout))
    state = fields.get("JobState")
    if not state:
        return None
    return JobState(job_id, state, fields.get("ExitCode"), fields.get("Reason"))


def _sacct_state(job_id: str) -> JobState | None:
    if shutil.which("sacct") is None:
        return None
    proc = _run(["sacct", "-n", "-P", "-X", "-j", job_id, "--format=JobID,State,ExitCode"])
    if proc.returncode != 0 and not re.search(r"accounting storage is disabled", proc.stderr, re.I):
        raise _failed(proc, "sacct")  # slurmdbd down: no answer, not "unknown"
    for line in proc.stdout.splitlines():
        parts = line.strip().split("|")
        if len(parts) == 3 and parts[0] == job_id and parts[1]:
            return JobState(job_id, parts[1].split()[0], parts[2] or None, None)  # "CANCELLED by 0"
    return None


def scancel(job_ids: list[str]) -> None:
    proc = _run([command("scancel"), *job_ids])
    if proc.returncode != 0:
        if not NO_SUCH_JOB.search(proc.stderr):
            raise _failed(proc, "scancel")
        raise error(f"scancel failed: {proc.stderr.strip() or proc.returncode}", None)


def environment_for_jobs() -> dict:
    """What a job needs from benchc's environment: the interpreter that runs benchc runs the
    programs (sbatch exports the environment to the job), unless PYTHON says otherwise."""
    import sys

    return {"PYTHON": sys.executable, **os.environ}
