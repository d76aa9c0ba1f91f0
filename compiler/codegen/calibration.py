"""Render and write a calibration's build folder (`benchc calibrate`): the program (bench.py,
from templates/calibrate.py.j2), launch.sh and job.sbatch from the same launcher templates
as every build point (launch.sh.j2 with launch_<kind>.sh.j2, job.sbatch.j2), and
calibration-plan.json. The file is named bench.py because the launchers and the Slurm job
start that file; its first line says what it is.

A folder is written whole or not at all: into a temporary folder beside it, then renamed
into place (replacing an earlier calibration folder of the same target and layout)."""

from __future__ import annotations

import json
import os
from pathlib import Path

import jinja2

from .. import __version__
from ..diagnostics import error
from ..folder_writer import FolderFiles, write_folders
from ..plan.calibration import CalibrationPlan
from .environment import environment
from .launchers import JOB, LAUNCHER, STOP_GRACE_S, launcher_template, safe_name, trials_time

PROGRAM = "bench.py"
PLAN_FILE = "calibration-plan.json"
EXPERIMENT = "calibration"
_HOW = {
    "python": "One device: the program runs alone.",
    "torchrun": "torchrun: standalone on one node, a c10d rendezvous across nodes.",
    "mpirun": "mpirun: one rank per Gaudi card, bound to cores as optimum-habana's gaudi_spawn does.",
    "deepspeed": "DeepSpeed's launcher, as optimum-habana runs multi-node jobs.",
}


def launcher_kind(plan: CalibrationPlan) -> str:
    """As a build point of the same layout gets (codegen/launchers.py's rule, no DeepSpeed
    training and no accelerate runtime here)."""
    if plan.world_size == 1:
        return "python"
    if plan.family == "hpu":
        return "deepspeed" if plan.nodes > 1 else "mpirun"
    return "torchrun"


def _header(plan: CalibrationPlan) -> dict:
    return {"experiment": EXPERIMENT, "target": plan.target, "point": plan.name, "nodes": plan.nodes,
            "per_node": plan.devices_per_node, "world": plan.world_size,
            "how": _HOW[launcher_kind(plan)]}  # fmt: skip


def _usage(plan: CalibrationPlan) -> list[str]:
    slurm = f"under Slurm: sbatch {JOB}; then benchc calibrate --ingest runs/slurm-<job id>/metrics-1.json"
    if plan.nodes == 1:
        return [f"bash {LAUNCHER} [--metrics FILE]", slurm]
    if launcher_kind(plan) == "deepspeed":
        return [f"on the first node only: HOSTFILE=<hostfile> bash {LAUNCHER} [--metrics FILE]", slurm]
    return [f"on each of the {plan.nodes} nodes: MASTER_ADDR=<first node> [MASTER_PORT=29400] "
            f"[RDZV_ID=<id>] bash {LAUNCHER}", slurm]  # fmt: skip


def render_launcher(plan: CalibrationPlan, env: jinja2.Environment) -> str:
    kind = launcher_kind(plan)
    context = {
        **_header(plan),
        "family": plan.family,
        "command": launcher_template(kind),
        "multi_node": plan.nodes > 1,
        "nproc": kind != "python" or plan.family == "cpu",
        "deepspeed": False,
        "accelerate_config": "accelerate.yaml",
        "usage": _usage(plan),
        "rdzv_id": safe_name(f"benchc-{EXPERIMENT}-{plan.name}"),
        "stop_grace_s": STOP_GRACE_S,
    }
    return env.get_template("launch.sh.j2").render(context)


def render_job(plan: CalibrationPlan, env: jinja2.Environment) -> str:
    kind = launcher_kind(plan)
    directives: list[tuple[str, str | None]] = [
        ("job-name", safe_name(f"benchc-{EXPERIMENT}-{plan.name}")),
        ("nodes", str(plan.nodes)),
        ("ntasks-per-node", str(plan.devices_per_node if kind == "mpirun" else 1)),
    ]
    if plan.family == "cuda":
        directives.append(("gpus-per-node", str(plan.devices_per_node)))
    directives += [("time", trials_time(1, plan.sizes.timeout_s)), ("output", "slurm-%j.out")]
    gres_note = {"hpu": "Gaudi cards: sites name them differently; pass --gres to sbatch where needed.",
                 "cuda": "GPUs: --gpus-per-node, or pass --gres (e.g. gpu:8) where the site wants gres.",
                 "cpu": ""}[plan.family]  # fmt: skip
    context = {
        **_header(plan),
        "per_node_launcher": kind in ("python", "torchrun"),
        "directives": directives,
        "trials": 1,
        "gres_note": gres_note,
        "launcher_file": LAUNCHER,
        "folder": "calibration folder",
        "profile_flag": "",
        "submit_line": None,
        "store_line": "in the results store with: "
        "benchc calibrate --ingest runs/slurm-<job id>/metrics-1.json",
    }
    return env.get_template("job.sbatch.j2").render(context)


def render_program(plan: CalibrationPlan, env: jinja2.Environment) -> str:
    context = {
        "target": plan.target,
        "version": __version__,
        "family": plan.family,
        "plan": plan.literal(),
        "extra_requirements": " and habana_frameworks" if plan.family == "hpu" else "",
    }
    return env.get_template("calibrate.py.j2").render(context)


def render_files(plan: CalibrationPlan) -> dict[str, str]:
    """name -> text of every file of the calibration's build folder."""
    env = environment()
    return {
        PROGRAM: render_program(plan, env),
        LAUNCHER: render_launcher(plan, env),
        JOB: render_job(plan, env),
        PLAN_FILE: json.dumps(
            {"benchc": __version__, "launcher": launcher_kind(plan), **plan.literal()},
            indent=2,
            sort_keys=True,
        )
        + "\n",  # fmt: skip
    }


def checked_out_folder(out: Path) -> Path:
    """`out` as a folder benchc may write calibrations into, or a located error (nothing is
    written): not a file, and writable (or creatable) where it is."""
    text = str(out)
    if not text.strip():
        raise error(
            "-o/--out needs a folder name, got ''", None, hint="e.g. -o build/calibrate (the default)"
        )
    if out.exists() and not out.is_dir():
        raise error(f"-o {text}: it is a file, not a folder", None, hint="name a folder for the calibration")
    existing = next((p for p in (out, *out.parents) if p.exists()), Path("."))
    if not existing.is_dir() or not os.access(existing, os.W_OK | os.X_OK):
        raise error(f"-o {text}: cannot write under '{existing}' (permission denied)", None,
                    hint="name a folder you can write, e.g. -o build/calibrate")  # fmt: skip
    return out


def write_calibration(plan: CalibrationPlan, out: Path) -> Path:
    """Write the plan's build folder OUT/<target>-<nodes>x<devices>[-smoke]/ through the one
    folder writer: its four files, nothing else touched (runs/, Slurm logs, a user's notes are
    kept); refused while a calibration runs there. Its path."""
    files = render_files(plan)
    checked_out_folder(out)
    try:
        out.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise error(f"-o {out}: cannot create it: {exc.strerror or exc}", None) from None
    folder = out / plan.name
    write_folders([FolderFiles(folder, files, frozenset({PROGRAM, LAUNCHER, JOB}))])
    return folder
