"""All files of one build point: the program, its launchers and the versioned manifest (the record
of compiler/manifest.py, made here from the plan)."""

from __future__ import annotations

import hashlib

import jinja2

from .. import __version__
from ..catalog.versions import checked_with
from ..manifest import FileHash, Manifest, ManifestPlan
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

MANIFEST = "manifest.json"
EXECUTABLE = {PROGRAM, LAUNCHER, JOB}
BUILD_FILES = (PROGRAM, LAUNCHER, ACCELERATE_CONFIG, JOB, MANIFEST)  # every name a build may write


def sha256(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def manifest_of(plan: Plan, files: dict[str, str]) -> Manifest:
    """The point's manifest: versioned, deterministic (no time, no host). `files` maps a file
    name to its text."""
    return Manifest(
        experiment=plan.experiment,
        target=plan.target.name,
        point=plan.point,
        smoke=plan.smoke,
        spec_path=plan.spec.path,
        spec_sha256=plan.spec.sha256,
        spec_files=tuple(FileHash(p, h) for p, h in plan.spec.files),
        files=tuple(FileHash(name, sha256(text)) for name, text in sorted(files.items())),
        # the plan, with its roofline (plan/roofline.py) as numbers: the report sets each run
        # against the bound that applies to it
        plan=ManifestPlan({**plan.to_dict(), "roofline": roofline(plan).record() if plan.cost else None}),
        compiler={"name": "benchc", "version": __version__},
        run={
            "launcher": launcher_kind(plan),
            "nodes": plan.cluster.nodes,
            "processes_per_node": plan.cluster.devices_per_node,
            "processes": plan.cluster.world_size,
            "launch": usage(plan)[0],
            "slurm": f"sbatch {JOB}" if JOB in files else None,
            "metrics": "metrics.json",
            "metrics_schema": f"benchc-metrics/{METRICS_SCHEMA_VERSION}",
        },
        checked_with=checked_with(plan.target.family),
    )


def render_manifest(plan: Plan, files: dict[str, str]) -> str:
    """manifest.json's text."""
    return manifest_of(plan, files).text()


def render_point(plan: Plan, env: jinja2.Environment | None = None, sbatch: bool = False) -> dict[str, str]:
    """All files of one build point, by name. `sbatch`: write job.sbatch for cpu points too."""
    files = {PROGRAM: render_program(plan, env), LAUNCHER: render_launcher(plan, env)}
    if launcher_kind(plan) == "accelerate":
        files[ACCELERATE_CONFIG] = render_accelerate_config(plan, env)
    if wants_job(plan, sbatch):
        files[JOB] = render_job(plan, env)
    files[MANIFEST] = render_manifest(plan, files)
    return files
