"""The bounds a roofline is made of, and the measured ceilings it may be taken against. No torch.

One job: a `Bound` (the least time one resource needs for the work of a phase, with its
arithmetic) and, for `roofline(plan, ceilings)` (plan/roofline.py), the compute, memory and
interconnect bounds against `Ceilings` measured by `benchc calibrate` (report/ceilings.py makes
them from a stored calibration): the measured matmul FLOP/s of the plan's precision, the
measured copy bandwidth, each collective's measured bus bandwidth over scale-up. A figure the
calibration did not measure is the datasheet's, and its text says so; scale-out is the
datasheet's (a calibration runs on one host) except on a target that states none (the cpu,
whose processes share a host as the calibration's did).
"""

from __future__ import annotations

from ..figures import sig
from ..records import frozen
from .types import Plan


@frozen
class Ceilings:
    """Measured ceilings of one device, used instead of the datasheet's."""

    peak_flops: dict[str, float]  # precision -> dense matmul FLOP/s
    hbm_tb_s: float | None  # device copy bandwidth, TB/s
    bus_gb_s: dict[str, float]  # all_reduce | all_gather | reduce_scatter -> bus bandwidth, GB/s
    source: str = "measured"  # how a bound's arithmetic names them


@frozen
class Bound:
    name: str  # compute | memory | interconnect
    seconds: float | None  # None: the target lacks the figure
    detail: str  # the arithmetic
    amount: float = 0.0  # what the resource must do per device: FLOPs, or bytes moved
    ceiling: str = ""  # measured ceilings only: the figure it was taken at, e.g. "790 TFLOP/s bf16"


def gb(value: float) -> str:
    """Decimal units: GB, or MB/kB for a smoke model."""
    for scale, unit in ((1e9, "GB"), (1e6, "MB"), (1e3, "kB")):
        if abs(value) >= scale or unit == "kB":
            return f"{value / scale:,.1f} {unit}"


def measured_compute(plan: Plan, flops: float, what: str, ceilings: Ceilings) -> Bound:
    """Against the measured matmul FLOP/s of the precision, else (not measured) the datasheet's."""
    precision = plan.workload.precision
    peak = ceilings.peak_flops.get(precision)
    figure = f"{sig((peak or 0) / 1e12)} TFLOP/s {precision}"
    if peak is None:
        peak = plan.target.peak_flops(precision)
        figure = f"{(peak or 0) / 1e12:g} TFLOP/s {precision} (datasheet)"
    if peak is None:
        return Bound("compute", None, f"{flops:.3e} FLOPs; no {ceilings.source} {precision} matmul", flops)
    return Bound("compute", flops / peak, f"{flops:.3e} FLOPs ({what}) / {figure} {ceilings.source}", flops,
                 figure)  # fmt: skip


def measured_memory(plan: Plan, nbytes: float, what: str, ceilings: Ceilings) -> Bound:
    """Against the measured copy bandwidth, else (not measured) the datasheet's HBM bandwidth."""
    bandwidth = ceilings.hbm_tb_s or plan.target.hbm_tb_s
    if bandwidth is None:
        return Bound("memory", None, f"{gb(nbytes)} ({what}); no {ceilings.source} bandwidth", nbytes)
    figure = f"{sig(bandwidth)} TB/s" if ceilings.hbm_tb_s else f"{bandwidth:g} TB/s (datasheet)"
    return Bound("memory", nbytes / (bandwidth * 1e12), f"{gb(nbytes)} ({what}) / {figure} "
                 f"{ceilings.source}", nbytes, figure)  # fmt: skip


def collective_kind(what: str) -> str:
    """The calibration's name of a collective: "all-reduce of fp32 gradients" -> all_reduce."""
    return what.split(" of ", 1)[0].replace("-", "_")


def measured_interconnect(plan: Plan, collectives, ceilings: Ceilings, up: float, out: float) -> Bound:
    """Each collective at its measured bus bandwidth (nccl-tests' bus bandwidth is the volume
    per device over the time, so time = the volume this device moves / busbw) over scale-up,
    at the datasheet's scale-up figure where the calibration did not measure it; over scale-out
    at the datasheet's figure, or where the target states none (the cpu, whose processes share
    a host as the calibration's did) at the measured one."""
    n, g, t = plan.dims.nodes, plan.dims.devices_per_node, plan.target
    what = " + ".join(f"{count:g} x {name}" for name, _, _, count in collectives)
    up_s = out_s = 0.0
    figures: dict[str, str] = {}
    for name, size, k, count in collectives:
        kind = collective_kind(name)
        measured = ceilings.bus_gb_s.get(kind)
        bandwidth = measured or t.scale_up_gb_s
        up_volume = count * k * (g - 1) / g * size
        out_volume = count * k * (n - 1) / n * size / g
        out_bandwidth = t.scale_out_gb_s or measured
        if (up_volume and bandwidth is None) or (out_volume and out_bandwidth is None):
            return Bound("interconnect", None, f"no {ceilings.source} {kind} bus bandwidth", up + out)
        if up_volume:
            up_s += up_volume / (bandwidth * 1e9)
            figures[kind] = (f"{sig(measured)} GB/s {kind}" if measured
                             else f"{bandwidth:g} GB/s scale-up (datasheet)")  # fmt: skip
        if out_volume:
            out_s += out_volume / (out_bandwidth * 1e9)
            figures[f"out {kind}"] = (f"{t.scale_out_gb_s:g} GB/s scale-out (datasheet)" if t.scale_out_gb_s
                                      else f"{sig(measured)} GB/s {kind} across processes")  # fmt: skip
    figure = ", ".join(dict.fromkeys(figures.values()))
    return Bound("interconnect", max(up_s, out_s), f"{what}: {gb(up)} over scale-up, {gb(out)} over "
                 f"scale-out per device at {figure} {ceilings.source}", up + out, figure)  # fmt: skip
