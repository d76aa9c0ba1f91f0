"""All files of one build point: the program, its launchers and the versioned manifest."""

from __future__ import annotations

import hashlib
import json

import jinja2

from .. import __version__
from ..catalog.versions import checked_with
from ..plan.roofline import roofline
from ..plan.types import Plan
from .launchers import (
    ACCELERATE_CONFIG,
    JOB,
    LAUNCHER,
    launcher_kind,
    render_accelerate_config,
    render_job,
    render_launcher,
    usage,
    wants_job,
)
from .programs import METRICS_SCHEMA_VERSION, PROGRAM, render_program

MANIFEST_VERSION = 1
MANIFEST = "manifest.json"
EXECUTABLE = {PROGRAM, LAUNCHER, JOB}
BUILD_FILES = (PROGRAM, LAUNCHER, ACCELERATE_CONFIG, JOB, MANIFEST)  # every name a build may write


def sha256(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def render_manifest(plan: Plan, files: dict[str, str]) -> str:
    """Versioned, deterministic: no time, no host. `files` maps a file name to its text."""
    manifest = {
        "manifest_version": MANIFEST_VERSION,
        "compiler": {"name": "benchc", "version": __version__},
        "experiment": plan.experiment,
        "target": plan.target.name,
        "point": plan.point,
        "smoke": plan.smoke,
        "spec": {
            "path": plan.spec.path,
            "sha256": plan.spec.sha256,
            "files": [{"path": p, "sha256": h} for p, h in plan.spec.files],
        },
        "files": [{"path": name, "sha256": sha256(text)} for name, text in sorted(files.items())],
        "run": {
            "launcher": launcher_kind(plan),
            "nodes": plan.cluster.nodes,
            "processes_per_node": plan.cluster.devices_per_node,
            "processes": plan.cluster.world_size,
            "launch": usage(plan)[0],
            "slurm": f"sbatch {JOB}" if JOB in files else None,
            "metrics": "metrics.json",
            "metrics_schema": f"benchc-metrics/{METRICS_SCHEMA_VERSION}",
        },
        "checked_with": checked_with(plan.target.family),
        # the plan, with its roofline (plan/roofline.py) as numbers: the report sets each run
        # against the bound that applies to it
        "plan": {**plan.to_dict(), "roofline": roofline(plan).record() if plan.cost else None},
    }
    return json.dumps(manifest, indent=2, sort_keys=True) + "\n"


def render_point(plan: Plan, env: jinja2.Environment | None = None, sbatch: bool = False) -> dict[str, str]:
    """All files of one build point, by name. `sbatch`: write job.sbatch for cpu points too."""
    files = {PROGRAM: render_program(plan, env), LAUNCHER: render_launcher(plan, env)}
    if launcher_kind(plan) == "accelerate":
        files[ACCELERATE_CONFIG] = render_accelerate_config(plan, env)
    if wants_job(plan, sbatch):
        files[JOB] = render_job(plan, env)
    files[MANIFEST] = render_manifest(plan, files)
    return files
