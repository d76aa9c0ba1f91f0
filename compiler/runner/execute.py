"""Run one build point on this machine: launch it in its own process group (one per node of a
multi-node cpu plan, every node on loopback), stream its log, enforce the timeout, forward
Ctrl-C, and say how it ended (ok, failed with a cause, timeout, interrupted)."""

from __future__ import annotations

import os
import re
import signal
import socket
import subprocess
import sys
import threading
import time
from collections import deque
from collections.abc import Callable, Sequence
from pathlib import Path

from ..diagnostics import BenchError, error
from ..manifest import Manifest
from ..records import frozen
from ..results.metrics import load_metrics
from ..results.untrusted_json import read_json_file
from .interrupts import Terminated
from .manifest import load_manifest
from .processes import MARKER, ended_with_benchc, stop

LOG_TAIL_LINES = 40


@frozen
class BuildPoint:
    path: Path
    manifest: Manifest

    @property
    def label(self) -> str:
        return f"{self.manifest.experiment} / {self.manifest.target} / {self.path.name}"


@frozen
class Outcome:
    status: str  # ok | failed | timeout | interrupted | terminated
    cause: str | None
    metrics: dict | None
    returncode: int | None
    log_tail: str
    elapsed_s: float
    signum: int | None = None  # terminated: the signal benchc received (its exit is 128 + it)
    warning: str | None = None  # ok, but something after the measurement went wrong


def find_points(path: Path) -> list[BuildPoint]:
    """The build point at `path`, or every build point below it (a folder with manifest.json)."""
    if not path.exists():
        raise error(f"no such build folder: '{path}'", None)
    manifests = [path / "manifest.json"] if (path / "manifest.json").exists() else sorted(
        p for p in path.rglob("manifest.json") if "runs" not in p.relative_to(path).parts[:-1]
    )  # fmt: skip
    points = []
    for manifest_path in manifests:
        points.append(BuildPoint(manifest_path.parent, load_manifest(manifest_path)))
    if not points:
        raise error(f"no build points (folders with manifest.json) under '{path}'", None,
                    hint="compile one first: benchc compile SPEC -o DIR")  # fmt: skip
    return points


class _Interrupted(Exception):
    pass


def free_port() -> int:
    """A TCP port free on loopback now (for a local rendezvous)."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def execute(point: BuildPoint, run_dir: Path, timeout_s: float, on_line: Callable[[str], None],
            program_args: Sequence[str] = ()) -> Outcome:  # fmt: skip
    """Launch `point`'s launch.sh; every output line goes to run_dir/log.txt and to on_line.

    A plan of several nodes runs every node here, each launcher as a node of a c10d
    rendezvous on 127.0.0.1 (what a cluster does over its network, on loopback).
    `program_args` follow `--metrics PATH` on the launcher's command line (for the program)."""
    plan = point.manifest.plan
    return launch(point.path, plan.nodes, plan.world_size, run_dir, timeout_s, on_line,
                  program_args=program_args)  # fmt: skip


OutputReader = Callable[[Path], tuple[dict | None, str | None]]


def launch(path: Path, nodes: int, world: int, run_dir: Path, timeout_s: float,
           on_line: Callable[[str], None], *, program_args: Sequence[str] = (),
           read_output: OutputReader | None = None) -> Outcome:  # fmt: skip
    """Launch the launch.sh in `path` (a build point, or another program benchc generates with
    the same launchers) for `nodes` nodes of `world` processes in all, as execute() says.
    `read_output`: reads the program's output file (default: a metrics file, checked against
    its schema) into (its data or None, why it is invalid or None)."""
    read_output = read_output or _checked_metrics
    run_dir.mkdir(parents=True, exist_ok=True)
    metrics_path = run_dir / "metrics.json"
    log_path = run_dir / "log.txt"
    # The interpreter running benchc runs the program unless PYTHON says otherwise.
    env = {"PYTHON": sys.executable, **os.environ, "PYTHONUNBUFFERED": "1"}
    if nodes > 1:
        env.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(free_port()), RDZV_ID=run_dir.name)
        # every node's launcher sees all of this machine's cores: share them among all ranks
        env.setdefault("OMP_NUM_THREADS", str(max(1, (os.cpu_count() or 1) // world)))
        for name in ("SLURM_JOB_NODELIST", "SLURM_JOB_NUM_NODES", "SLURM_JOB_ID"):
            env.pop(name, None)  # this machine is every node, whatever allocation benchc is in
    marker = str(run_dir.resolve())
    env[MARKER] = marker  # every process of this run inherits it: see processes.py
    command = ["bash", str((path / "launch.sh").resolve()), "--metrics", str(metrics_path.resolve()),
               *program_args]  # fmt: skip
    started = time.monotonic()
    tail: deque[str] = deque(maxlen=LOG_TAIL_LINES)
    lock = threading.Lock()
    processes: list[subprocess.Popen] = []
    readers: list[threading.Thread] = []
    ending, stop_with = None, signal.SIGTERM
    with log_path.open("w", encoding="utf-8") as log:

        def pump(process: subprocess.Popen, prefix: str) -> None:
            for line in process.stdout:
                text = prefix + line.rstrip("\n")
                with lock:
                    log.write(text + "\n")
                    log.flush()
                    tail.append(text)
                    on_line(text)

        # each launcher leads a session of its own, and gets SIGTERM if benchc dies (processes.py)
        options = dict(cwd=path.resolve(), stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                       text=True, errors="replace", bufsize=1, env=env, start_new_session=True,
                       preexec_fn=ended_with_benchc())  # fmt: skip
        try:
            for index in range(nodes):
                # the node's number, for launchers that want one (accelerate's --machine_rank)
                options["env"] = {**env, "MACHINE_RANK": str(index)}
                process = subprocess.Popen(command, **options)
                processes.append(process)
                prefix = f"[node {index}] " if nodes > 1 else ""
                readers.append(threading.Thread(target=pump, args=(process, prefix), daemon=True))
                readers[-1].start()
            while any(p.poll() is None for p in processes):
                if time.monotonic() - started > timeout_s:
                    ending = "timeout"
                    break
                if nodes > 1 and any(p.returncode not in (None, 0) for p in processes):
                    break  # one node failed: end the others
                time.sleep(0.1)
        except KeyboardInterrupt:
            ending, stop_with = "interrupted", signal.SIGINT
        except Terminated as signalled:
            ending, terminated_by = "terminated", signalled.signum
        finally:
            # Every way out ends every process of the run (launchers, torchrun, each rank).
            stop(processes, marker, stop_with)
            deadline = time.monotonic() + 5.0  # the pipes close once their writers are gone
            for reader in readers:
                reader.join(max(0.0, deadline - time.monotonic()))
    elapsed = time.monotonic() - started
    log_tail = "\n".join(tail)
    metrics, invalid = read_output(metrics_path)
    failed = [p.returncode for p in processes if p.returncode != 0]
    returncode = failed[0] if failed else 0
    if ending == "timeout":
        return Outcome("timeout", f"timeout: still running after {timeout_s:g} s; stopped", metrics,
                       returncode, log_tail, elapsed)  # fmt: skip
    if ending == "interrupted":
        return Outcome("interrupted", "interrupted by the user (Ctrl-C)", metrics, returncode,
                       log_tail, elapsed)  # fmt: skip
    if ending == "terminated":
        name = signal.Signals(terminated_by).name
        cause = f"benchc received {name} (a scheduler's cancel or time limit?); the run was stopped"
        return Outcome("terminated", cause, metrics, returncode, log_tail, elapsed, terminated_by)
    if invalid:  # never stored as measured: the report could not trust a field of it
        return Outcome("failed", invalid, None, returncode, log_tail, elapsed)
    if returncode == 0 and metrics and metrics.get("status") == "ok":
        return Outcome("ok", None, metrics, returncode, log_tail, elapsed)
    if metrics and metrics.get("status") == "ok":
        # Rank 0 writes the whole measurement before the job's last collective: a launcher
        # that fails after that (a node's agent finding the rendezvous store of another
        # already gone, a rank ending badly on its way out) does not undo it.
        why = shutdown_error(log_tail) or _last_exception(log_tail) or "see the log"
        warning = f"the launcher failed after the metrics were complete (exit code {returncode}): {why}"
        return Outcome("ok", None, metrics, returncode, log_tail, elapsed, warning=warning)
    ranks = sorted(run_dir.glob("metrics.rank*.json"))
    stopped = metrics and metrics.get("status") in ("cancelled", "timeout")
    if stopped and not _raised(ranks):  # SIGTERM from elsewhere
        return Outcome(metrics["status"], f"the program received SIGTERM{_reached(metrics)}, not from benchc",
                       metrics, returncode, log_tail, elapsed)  # fmt: skip
    # else another rank failed first, and its launcher stopped rank 0: the run failed
    return Outcome("failed", failure_cause(metrics, ranks, returncode, log_tail), metrics,
                   returncode, log_tail, elapsed)  # fmt: skip


def _reached(metrics: dict) -> str:
    progress = metrics.get("progress")
    if isinstance(progress, dict) and {"step", "of"} <= progress.keys():
        return f" at step {progress['step']} of {progress['of']}"
    return ""


def _checked_metrics(path: Path) -> tuple[dict | None, str | None]:
    """The program's metrics if they match the shipped schema; else (None, the cause)."""
    if not path.exists():
        return None, None
    try:
        metrics = load_metrics(path)
    except BenchError as exc:
        return None, "invalid metrics: " + exc.diagnostics[0].message
    return metrics, None


def _read_json(path: Path) -> dict | None:
    """A program's metrics file, or None where it is missing or not sound JSON."""
    try:
        data, _ = read_json_file(path, "metrics file")
    except BenchError:
        return None
    return data if isinstance(data, dict) else None


# Endings a rank records that are not its own failure: a stop by a signal, an exit
STOPS = ("SystemExit", "KeyboardInterrupt", "Stopped")


def _raised(rank_files: list[Path]) -> bool:
    """Whether another rank recorded an error of its own, not a stop."""
    for rank_file in rank_files:
        data = _read_json(rank_file)
        error = data.get("error") if data else None
        if isinstance(error, dict) and error.get("type") not in STOPS:
            return True
    return False


def failure_cause(metrics: dict | None, rank_files: list[Path], returncode: int | None, log_tail: str) -> str:
    """One line that says why a run failed, from the most specific evidence there is: the
    errors the ranks recorded (rank 0's metrics, the other ranks' metrics.rank<N> files)."""
    errors = []
    if metrics and metrics.get("error"):
        errors.append(metrics["error"])
    for rank_file in rank_files:
        data = _read_json(rank_file)
        if data and isinstance(data.get("error"), dict):  # a rank's file is not schema-checked
            errors.append(data["error"])
    real = [e for e in errors if e.get("type") not in STOPS]
    for err in real or errors:
        kind, message, rank = err.get("type", "error"), err.get("message", ""), err.get("rank", "?")
        text = f"{kind}: {message}".lower()
        if err.get("cause") == "oom" or "out of memory" in text or kind == "OutOfMemoryError":
            return f"oom: out of memory on rank {rank}{_estimated(err.get('memory_estimate'))}: {message}"
        if kind == "FloatingPointError":
            return f"non-finite loss on rank {rank}: {message}"
        if kind == "NumericsMismatch":
            return f"numerics on rank {rank}: {message}"
        return f"rank {rank} raised {kind}: {message}"
    if "out of memory" in log_tail.lower():
        code = f" (exit code {returncode})" if returncode is not None else ""
        return f"oom: out of memory{code}; see the log"
    if returncode in (-9, 137):
        return "killed by SIGKILL (out of host memory?) before writing metrics"
    raised = _last_exception(log_tail)
    written = "its metrics written" if metrics else "no metrics written"
    if raised:
        code = f"exit code {returncode}, " if returncode is not None else ""
        return f"crashed with {raised} ({code}{written})"
    if returncode is None:
        return f"{written}; see the log"
    if metrics:
        return f"exited with code {returncode} after writing its metrics; see the log"
    return f"exited with code {returncode} without writing metrics; see the log"


def _estimated(estimate) -> str:
    """ " (estimated X GB per device, of Y GB)": what benchc estimate said, beside an
    out-of-memory ending; empty where the program recorded none."""
    if not isinstance(estimate, dict) or not isinstance(estimate.get("bytes_per_device"), (int, float)):
        return ""
    of = estimate.get("device_bytes")
    device = f", of {of / 1e9:.1f} GB" if isinstance(of, (int, float)) and of else ""
    return f" (estimated {estimate['bytes_per_device'] / 1e9:.2f} GB per device{device})"


def _last_exception(log_tail: str) -> str | None:
    """The last line of a Python traceback in the log's tail (it names the exception)."""
    lines = [_NODE_PREFIX.sub("", line).strip() for line in log_tail.splitlines()]
    raised = [line for line in lines if _EXCEPTION_LINE.match(line)]
    return raised[-1] if raised else None


def shutdown_error(log_tail: str) -> str | None:
    """The last error a distributed launcher's agent raised about its rendezvous (the c10d
    store it shares with the other nodes' agents) in the log's tail, or None."""
    lines = [_NODE_PREFIX.sub("", line).strip() for line in log_tail.splitlines()]
    found = [line for line in lines if _RENDEZVOUS_ERROR.match(line)]
    return found[-1] if found else None


_RENDEZVOUS_ERROR = re.compile(
    r"^(torch\.distributed\.elastic\.rendezvous\.api\.)?"
    r"(RendezvousConnectionError|RendezvousClosedError|RendezvousStateError|RendezvousTimeoutError)\b"
)
_NODE_PREFIX = re.compile(r"^\[node \d+\] ")  # the runner's prefix on each node's lines
_EXCEPTION_LINE = re.compile(r"^([A-Za-z_][\w.]*(Error|Exception|Interrupt)):\s")
