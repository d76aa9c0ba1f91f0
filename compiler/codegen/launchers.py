"""Render a build point's shell files: launch.sh (start the program on a node) and job.sbatch
(a Slurm batch job that starts launch.sh on the allocation).

Which launcher a point gets follows each ecosystem's own convention:

- one device, any target: the program alone (`python bench.py`);
- cpu and cuda: torchrun, standalone on one node, a c10d rendezvous across nodes (every node
  runs launch.sh; under Slurm the rendezvous host is the first node of the allocation);
- gaudi, one node: mpirun with one rank per card bound to its share of the cores of its
  socket, as optimum-habana's gaudi_spawn does; DeepSpeed's launcher for ZeRO training;
- gaudi, several nodes: DeepSpeed's launcher with a hostfile, started on the first node only
  (optimum-habana's multi-node runs go through DeepSpeed's launcher).

launch.sh runs the command in a process group of its own and waits for it: a stop signal to
launch.sh reaches the whole group (torch.compile's compile workers too), and what is left of
it is killed STOP_GRACE_S seconds later, or as soon as the command has ended.

launch.sh.j2 holds what every launcher shares (the header, the process group, the family's
environment: on Gaudi none, as bench.py sets every Habana variable from its plan); the command
is one small template per launcher kind, launch_<kind>.sh.j2, which launcher_template() picks
here, as programs pick their adapter. The layout each decision reads
(world size, nodes, DeepSpeed) is the plan's, plan.dims (plan/parallel.py).

Every value a shell file prints from a plan is a number, a name the validator restricted to
a safe alphabet, or a word quoted by the `sh` filter (shlex.quote).
"""

from __future__ import annotations

import math
import re

import jinja2

from ..plan.types import Plan
from .environment import environment

LAUNCHER = "launch.sh"
JOB = "job.sbatch"
ACCELERATE_CONFIG = "accelerate.yaml"
# the repeated block of each model: what accelerate's FSDP plugin wraps (transformer_blocks)
BLOCK_CLASSES = {"mmdit": "JointTransformerBlock"}  # a causal LM's: its census's decoder layer
JOB_MARGIN_MIN = 10  # a derived job time limit: every trial's timeout plus this
# launch.sh: seconds from the first stop signal until what is left of the command's process
# group is killed; above the program's own watchdog (20 s after SIGTERM, bench.py's
# STOP_GRACE_S), so a program that stops by itself is never cut short
STOP_GRACE_S = 30
_SAFE = re.compile(r"[^A-Za-z0-9_.+-]")


def block_class(plan: Plan) -> str:
    """The class name of the model's repeated block: what accelerate's FSDP plugin wraps."""
    census = getattr(plan.model, "census", None)
    if hasattr(census, "block_classes"):  # Flux: both kinds of block
        return ",".join(census.block_classes)
    return census.layer_class if census is not None else BLOCK_CLASSES.get(plan.model.kind, "")


LAUNCHER_KINDS = ("python", "torchrun", "mpirun", "deepspeed", "accelerate")


def launcher_kind(plan: Plan) -> str:
    """python | torchrun | mpirun | deepspeed | accelerate (see the module docstring)."""
    dims = plan.dims
    if plan.runtime == "accelerate":
        return "accelerate"
    if not dims.distributed:
        return "python"
    if plan.target.family == "hpu":
        return "deepspeed" if dims.multi_node or dims.deepspeed else "mpirun"
    return "torchrun"


def launcher_template(kind: str) -> str:
    """The template of launch.sh's command for a launcher kind (included by launch.sh.j2)."""
    assert kind in LAUNCHER_KINDS, kind
    return f"launch_{kind}.sh.j2"


def per_node_launcher(plan: Plan) -> bool:
    """Does every node run launch.sh (torchrun's rendezvous), or the first node alone?"""
    return launcher_kind(plan) in ("python", "torchrun", "accelerate")


def safe_name(text: str) -> str:
    """A word for a job name or rendezvous id: letters, digits and . _ + - only."""
    return _SAFE.sub("-", text)[:200]


def default_job_name(plan: Plan) -> str:
    return safe_name(f"benchc-{plan.experiment}-{plan.target.name}-{plan.point}")


def wants_job(plan: Plan, requested: bool = False) -> bool:
    """job.sbatch is written beside every accelerator or multi-node point, for every point of
    a spec with a slurm block, and on request (`compile --sbatch`, `submit`)."""
    return requested or plan.slurm.requested or plan.target.family != "cpu" or plan.dims.multi_node


def usage(plan: Plan) -> list[str]:
    """How to start this point, as the launcher's header and the manifest say it."""
    kind, nodes = launcher_kind(plan), plan.dims.nodes
    slurm = f"under Slurm: sbatch {JOB} (or benchc submit)"
    if not plan.dims.multi_node:
        return [f"bash {LAUNCHER} [--metrics FILE]", slurm]
    if kind == "deepspeed":
        return [
            f"on the first node only: HOSTFILE=<hostfile> bash {LAUNCHER} [--metrics FILE]",
            f"{slurm}; the hostfile is written from the allocation",
        ]
    if kind == "accelerate":
        return [
            f"on each of the {nodes} nodes: MACHINE_RANK=<0..{nodes - 1}> MASTER_ADDR=<first node> "
            f"[MASTER_PORT=29500] bash {LAUNCHER}",
            f"{slurm}; srun starts one launcher per node (machine rank: SLURM_NODEID)",
        ]
    return [
        f"on each of the {nodes} nodes: MASTER_ADDR=<first node> [MASTER_PORT=29400] "
        f"[RDZV_ID=<id>] bash {LAUNCHER}",
        f"{slurm}; srun starts one launcher per node",
    ]


_HOW = {
    "python": "One device: the program runs alone.",
    "torchrun": "torchrun: standalone on one node, a c10d rendezvous across nodes.",
    "mpirun": "mpirun: one rank per Gaudi card, bound to cores as optimum-habana's gaudi_spawn does.",
    "deepspeed": "DeepSpeed's launcher, as optimum-habana runs DeepSpeed and multi-node jobs.",
    "accelerate": "accelerate launch with this build's accelerate.yaml (the runtime is accelerate).",
}


def _header(plan: Plan) -> dict:
    """What both shell files say of the point in their first lines."""
    kind, dims = launcher_kind(plan), plan.dims
    return {
        "experiment": plan.experiment,
        "target": plan.target.name,
        "point": plan.point,
        "nodes": dims.nodes,
        "per_node": dims.devices_per_node,
        "world": dims.world_size,
        "how": _HOW[kind],
    }


def render_launcher(plan: Plan, env: jinja2.Environment | None = None) -> str:
    kind, family, dims = launcher_kind(plan), plan.target.family, plan.dims
    context = {
        **_header(plan),
        "family": family,
        "command": launcher_template(kind),
        "multi_node": dims.multi_node,  # NNODES: the nodes the launcher checks for
        # NPROC: the processes per node, for a distributed launcher and the cpu's thread share
        "nproc": kind not in ("python", "accelerate") or family == "cpu",
        "deepspeed": dims.deepspeed,
        "accelerate_config": ACCELERATE_CONFIG,
        "usage": usage(plan),
        "rdzv_id": default_job_name(plan),
        "stop_grace_s": STOP_GRACE_S,
    }
    return (env or environment()).get_template("launch.sh.j2").render(context)


def job_time(plan: Plan) -> str:
    """The job's time limit: the spec's, else every trial's timeout plus a margin (HH:MM:SS)."""
    if plan.slurm.time is not None:
        return plan.slurm.time
    return trials_time(plan.measure.repeat, plan.measure.timeout_s)


def trials_time(trials: int, timeout_s: float) -> str:
    """A job time limit for `trials` trials of at most `timeout_s` each, plus a margin: the one
    rule for measure.repeat (job.sbatch's #SBATCH --time) and submit --repeat (its --time)."""
    minutes = math.ceil(trials * timeout_s / 60) + JOB_MARGIN_MIN
    return f"{minutes // 60:02d}:{minutes % 60:02d}:00"


def sbatch_directives(plan: Plan) -> list[tuple[str, str | None]]:
    """(option, value) for the #SBATCH lines; value None for a flag."""
    s, dims, kind = plan.slurm, plan.dims, launcher_kind(plan)
    # mpirun reads its slots from the allocation: one task per rank on its node.
    tasks = dims.devices_per_node if kind == "mpirun" else 1
    lines: list[tuple[str, str | None]] = [
        ("job-name", s.job_name or default_job_name(plan)),
        ("nodes", str(dims.nodes)),
        ("ntasks-per-node", str(tasks)),
    ]
    if s.gres is not None:
        lines.append(("gres", s.gres))
    elif plan.target.family == "cuda":
        lines.append(("gpus-per-node", str(dims.devices_per_node)))
    if s.exclusive:
        lines.append(("exclusive", None))
    lines.append(("time", job_time(plan)))
    if s.partition is not None:
        lines.append(("partition", s.partition))
    if s.account is not None:
        lines.append(("account", s.account))
    lines.append(("output", s.log))
    for option, value in lines:  # the validator's patterns admit nothing else; say so loudly
        if value is not None and not re.fullmatch(r"[A-Za-z0-9_.+%:,/-]+", value):
            raise ValueError(f"unsafe #SBATCH value for --{option}: {value!r}")
    return lines


def render_job(plan: Plan, env: jinja2.Environment | None = None) -> str:
    gres_note = {
        "hpu": "Gaudi cards: sites name them differently (gres gpu:8, hpu:8, or none with "
        "--exclusive); set slurm.gres in the spec or pass --gres to sbatch.",
        "cuda": "GPUs: --gpus-per-node, or slurm.gres (e.g. gpu:8) where the site wants gres.",
        "cpu": "",
    }[plan.target.family]
    context = {
        **_header(plan),
        "per_node_launcher": per_node_launcher(plan),
        "directives": sbatch_directives(plan),
        "trials": plan.measure.repeat,
        "gres_note": gres_note,
        "launcher_file": LAUNCHER,
        "folder": "build point",
        "profile_flag": " [--profile]",
        "submit_line": "benchc submit <this build point>     # the same, recorded in the results store",
        "store_line": "as one series with: benchc ingest runs/slurm-<job id>/metrics-*.json",
    }
    return (env or environment()).get_template("job.sbatch.j2").render(context)


def _distributed_type(plan: Plan) -> tuple[str, str]:
    """accelerate's distributed_type for this plan, and why where it is not the obvious one."""
    dims = plan.dims
    if not dims.distributed:
        return "NO", ""
    if dims.deepspeed:
        return "DEEPSPEED", ""
    if dims.fsdp:
        return "FSDP", ""
    if plan.target.family == "hpu":
        return "MULTI_HPU", ""
    if plan.target.family == "cpu":  # MULTI_CPU would start one process (or need mpirun)
        return "MULTI_GPU", "MULTI_GPU starts the processes with torchrun; use_cpu keeps them on the CPU"
    return "MULTI_GPU", ""


def render_accelerate_config(plan: Plan, env: jinja2.Environment | None = None) -> str:
    """accelerate.yaml: what `accelerate launch` needs to start this point's processes, from
    the plan bench.py's Accelerator is built from (the two always agree)."""
    w, p, dims = plan.workload, plan.parallel, plan.dims
    distributed, why = _distributed_type(plan)
    context = {
        **_header(plan),
        "distributed_type": distributed,
        "distributed_note": why,
        "mixed_precision": {"bf16": "bf16", "fp16": "fp16"}.get(w.precision, "no"),
        "use_cpu": plan.target.family == "cpu" and not dims.deepspeed,
        "fsdp": distributed == "FSDP",
        "block": block_class(plan),
        "activation_checkpointing": p.activation_checkpointing,
        "deepspeed": distributed == "DEEPSPEED",
        "zero_stage": dims.zero_stage,
        "grad_accum": getattr(w, "grad_accum", 1),
        "grad_clip": getattr(w, "grad_clip", None),
        "precision": w.precision,
    }
    return (env or environment()).get_template("accelerate.yaml.j2").render(context)
