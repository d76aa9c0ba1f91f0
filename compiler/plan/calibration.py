"""The plan of a calibration (`benchc calibrate`): for one target, how many processes run and
what each measures, at which sizes. Frozen, decided here, and written into the calibration
program's CALIBRATION literal: the template only carries it out.

What is measured per device: dense matrix multiplies per precision (the precisions benchc
generates programs in, plus fp8 on a CUDA target that lists it, through torch._scaled_mm),
a large device copy, pinned host-to-device copies (not on cpu), the collectives all-reduce,
all-gather and reduce-scatter (over the world size, none in one process), and the launch
latency of a tiny operation. Smoke sizes check the program; they do not reach the ceiling.
"""

from __future__ import annotations

from dataclasses import replace

from ..catalog.targets import TARGETS, Target
from ..diagnostics import error
from ..records import frozen

CPU_DEFAULT_PROCESSES = 2  # cpu: two processes over gloo, so the collectives are measured
MAX_PROCESSES_PER_NODE = 64
MAX_NODES = 1024
COLLECTIVES = ("all_reduce", "all_gather", "reduce_scatter")


@frozen
class Sizes:
    """One family's sizes at full or smoke size (bytes are per process)."""

    matmul_n: tuple[int, ...]  # each an n x n by n x n product
    matmul_iterations: int  # products in one timed window
    copy_bytes: int  # the source of a device copy; read + written = twice this
    copy_iterations: int
    host_to_device_bytes: int | None  # None: the device is the host
    host_to_device_iterations: int
    collective_bytes: int  # the full buffer of each collective
    collective_iterations: int
    launch_iterations: int
    warmup: int  # untimed rounds before every timed window
    repetitions: int  # timed windows per measurement; the best is kept
    timeout_s: float


_MIB = 2**20
_SIZES = {
    ("cpu", False): Sizes((256, 512, 1024), 4, 128 * _MIB, 4, None, 0, 16 * _MIB, 4, 2000, 1, 3, 300.0),
    ("cpu", True): Sizes((128, 256), 2, 8 * _MIB, 2, None, 0, 1 * _MIB, 2, 200, 1, 2, 120.0),
    ("accelerator", False): Sizes(
        (2048, 4096, 8192), 20, 1024 * _MIB, 20, 256 * _MIB, 10, 256 * _MIB, 10, 2000, 3, 5, 600.0
    ),  # fmt: skip
    ("accelerator", True): Sizes((512, 1024), 5, 64 * _MIB, 5, 16 * _MIB, 5, 8 * _MIB, 5, 200, 2, 2, 300.0),
}


@frozen
class CalibrationPlan:
    target: str
    family: str  # cpu | cuda | hpu: the program's device section
    device_name: str
    backend: str  # torch.distributed backend (gloo, nccl, hccl)
    nodes: int
    devices_per_node: int
    smoke: bool
    precisions: tuple[str, ...]  # matrix-multiply precisions measured
    sizes: Sizes

    @property
    def world_size(self) -> int:
        return self.nodes * self.devices_per_node

    @property
    def collectives(self) -> tuple[str, ...]:
        return COLLECTIVES if self.world_size > 1 else ()

    @property
    def name(self) -> str:
        """The build folder's name: the target, with its sizes and layout."""
        layout = f"{self.nodes}x{self.devices_per_node}"
        return f"{self.target}-{layout}{'-smoke' if self.smoke else ''}"

    def literal(self) -> dict:
        """The program's CALIBRATION: plain values, nothing a user typed but numbers and the
        target's name (which is a key of the target table)."""
        s = self.sizes
        return {
            "schema_version": 1,
            "target": self.target,
            "family": self.family,
            "backend": self.backend,
            "nodes": self.nodes,
            "devices_per_node": self.devices_per_node,
            "world_size": self.world_size,
            "smoke": self.smoke,
            "precisions": list(self.precisions),
            "matmul_n": list(s.matmul_n),
            "matmul_iterations": s.matmul_iterations,
            "copy_bytes": s.copy_bytes,
            "copy_iterations": s.copy_iterations,
            "host_to_device_bytes": s.host_to_device_bytes,
            "host_to_device_iterations": s.host_to_device_iterations,
            "collectives": list(self.collectives),
            "collective_bytes": s.collective_bytes,
            "collective_iterations": s.collective_iterations,
            "launch_iterations": s.launch_iterations,
            "warmup": s.warmup,
            "repetitions": s.repetitions,
            "timeout_s": s.timeout_s,
        }


def measured_precisions(target: Target, not_generated: tuple[str, ...]) -> tuple[str, ...]:
    """The precisions benchc generates programs in for `target` (all it lists but
    `not_generated`, validate/capabilities.py's NOT_GENERATED_PRECISIONS, passed in: plan/ is
    below validate/), and fp8 where a CUDA target lists it (torch._scaled_mm); on Gaudi fp8
    needs Habana's own kernels, not measured."""
    chosen = [p for p in target.precisions if p not in not_generated]
    if target.family == "cuda" and "fp8" in target.precisions:
        chosen.append("fp8")
    return tuple(chosen)


def unknown_target(name: str):
    return error(f"unknown target '{name}'", None,
                 hint=f"the targets are: {', '.join(TARGETS)} (benchc targets lists them)")  # fmt: skip


def calibration_plan(target_name: str, *, not_generated: tuple[str, ...], smoke: bool = False,
                     devices: int | None = None, nodes: int = 1,
                     repeat: int | None = None) -> CalibrationPlan:  # fmt: skip
    """The plan for `target_name`: `devices` processes per node (default: 2 on cpu, the
    target's devices per node otherwise), `repeat` timed windows per measurement."""
    target = TARGETS.get(target_name)
    if target is None:
        raise unknown_target(target_name)
    per_node = devices or (CPU_DEFAULT_PROCESSES if target.family == "cpu" else target.devices_per_node or 1)
    if not 1 <= per_node <= MAX_PROCESSES_PER_NODE:
        raise error(f"--devices {per_node}: expected 1 to {MAX_PROCESSES_PER_NODE} processes per node", None)
    if target.devices_per_node and per_node > target.devices_per_node:
        raise error(f"--devices {per_node}: a {target.name} node has {target.devices_per_node} devices", None,
                    hint=f"use --devices {target.devices_per_node} or fewer")  # fmt: skip
    if not 1 <= nodes <= MAX_NODES:
        raise error(f"--nodes {nodes}: expected 1 to {MAX_NODES}", None)
    sizes = _SIZES[("cpu" if target.family == "cpu" else "accelerator", smoke)]
    if repeat is not None:
        sizes = replace(sizes, repetitions=repeat)
    return CalibrationPlan(
        target=target.name, family=target.family, device_name=target.device_name,
        backend=target.distributed_backend, nodes=nodes, devices_per_node=per_node, smoke=smoke,
        precisions=measured_precisions(target, not_generated), sizes=sizes,
    )  # fmt: skip
