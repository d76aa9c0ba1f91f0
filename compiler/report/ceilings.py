"""Measured ceilings beside the datasheet's: what `benchc calibrate` stored of a target (the
latest calibration, results/calibrations.py) as roofline ceilings (plan/roofline.py's
`Ceilings`), and each report row against them: its MFU against the measured matmul peak of its
precision, or for generation, whose decode is bound by memory bandwidth, its decode's achieved
bytes/s against the measured copy bandwidth.

A measured MFU is the run's achieved model FLOP/s per device (its metrics' flops summary) over
the calibrated matmul FLOP/s of the run's precision: how close the software came to what the
device really reaches, where the datasheet's MFU also counts what the device cannot reach. A
decode's share of the copy bandwidth is the bytes its decode steps must move per device (the
roofline's decode memory bound) over their measured time, over the calibrated copy bandwidth."""

from __future__ import annotations

from ..figures import sig
from ..plan.roofline import Ceilings
from ..results.calibrations import Calibration
from .collect import Row, Section


def measured_ceilings(calibration: Calibration, plan=None) -> Ceilings:
    """The calibration as the ceilings of a roofline (per device). Its collectives' bus
    bandwidths count only for a plan of the layout they ran on (the calibration.same_layout
    rule); another layout's links are bounded by the datasheet's figures."""
    peaks = {p: calibration.peak_flops(p) for p in calibration.matmul_tflops}
    known = {p: v for p, v in peaks.items() if v}
    bus = dict(calibration.bus_gb_s)
    if plan is not None and not collectives_apply(calibration, plan):
        bus = {}
    return Ceilings(known, calibration.memory_tb_s, bus)


def collectives_apply(calibration: Calibration, plan) -> bool:
    dims = plan.dims
    return calibration.same_layout(dims.nodes, dims.devices_per_node, plan.target.family)


def calibration_json(calibration: Calibration | None) -> dict | None:
    """What `estimate --json` says of the calibration it used (None: none stored)."""
    if calibration is None:
        return None
    return {
        "id": calibration.id, "target": calibration.target, "host": calibration.host,
        "date": calibration.date, "measured_at": calibration.measured_at, "smoke": calibration.smoke,
        "world_size": calibration.world_size, "nodes": calibration.nodes,
        "device_name": calibration.device_name,
        "matmul_tflops": dict(calibration.matmul_tflops), "memory_tb_s": calibration.memory_tb_s,
        "host_to_device_gb_s": calibration.host_to_device_gb_s, "bus_gb_s": dict(calibration.bus_gb_s),
        "launch_us": calibration.launch_us, "provenance": calibration.provenance(),
    }  # fmt: skip


def source(calibration: Calibration) -> str:
    """Where measured ceilings come from: "benchc calibrate, HOST, DATE" (and ", smoke sizes")."""
    sizes = ", smoke sizes" if calibration.smoke else ""
    return f"benchc calibrate, {calibration.host}, {calibration.date}{sizes}"


def calibration_of(section: Section, row: Row) -> Calibration | None:
    return (section.calibrations or {}).get(row.target)


def measured_peak(row: Row, calibration: Calibration | None) -> float | None:
    """The calibrated matmul FLOP/s of the run's precision (None: not calibrated or not known)."""
    if calibration is None or row.precision is None:
        return None
    return calibration.peak_flops(row.precision)


def measured_mfu(row: Row, calibration: Calibration | None) -> float | None:
    peak = measured_peak(row, calibration)
    if peak is None or row.achieved_per_device is None:
        return None
    return row.achieved_per_device / peak


def generation(row: Row) -> bool:
    """A generation run (it recorded TTFT or its decode traffic): bound by memory bandwidth."""
    return row.ttft_s is not None or row.decode_bytes_per_s is not None


def decode_copy_share(row: Row, calibration: Calibration | None) -> float | None:
    """The decode's achieved bytes/s per device over the calibrated copy bandwidth (None: not
    calibrated, the copy not measured, or no decode traffic recorded)."""
    if calibration is None or not calibration.memory_bytes_s or row.decode_bytes_per_s is None:
        return None
    return row.decode_bytes_per_s / calibration.memory_bytes_s


def rate(bytes_per_s: float) -> str:
    """Bytes per second in decimal units: TB/s, GB/s or MB/s."""
    for scale, unit in ((1e12, "TB/s"), (1e9, "GB/s")):
        if bytes_per_s >= scale:
            return f"{sig(bytes_per_s / scale)} {unit}"
    return f"{sig(bytes_per_s / 1e6)} MB/s"


def measured_roof(row: Row, calibration: Calibration | None) -> tuple[float, float] | None:
    """(matmul FLOP/s, copy bytes/s) of the run's precision as measured (None: not both)."""
    peak = measured_peak(row, calibration)
    if peak is None or calibration.memory_bytes_s is None:
        return None
    return peak, calibration.memory_bytes_s


def has_measured(section: Section) -> bool:
    """Whether a row of the section has a calibration of its target (the table's measured column)."""
    return any(calibration_of(section, row) is not None for row in section.rows)


def _mfu_line(row: Row, calibration: Calibration) -> str:
    where = f"{row.target} at {row.point}: "
    precision = row.precision or "?"
    if row.mfu is not None and row.peak_per_device is not None:
        datasheet = f"MFU {sig(row.mfu * 100)}% of the datasheet's {sig(row.peak_per_device / 1e12)} TFLOP/s"
    else:
        datasheet = "MFU: the datasheet states no peak"
    peak = measured_peak(row, calibration)
    if row.precision is None:
        measured = "none against the measured ceilings: the run's precision is not recorded"
    elif peak is None:
        measured = f"none against the measured ceilings: the calibration measured no {precision} matmul"
    elif row.achieved_per_device is None:
        measured = "none against the measured ceilings: the run recorded no achieved FLOP/s"
    else:
        measured = (f"{sig(row.achieved_per_device / peak * 100)}% of the measured {sig(peak / 1e12)} "
                    f"TFLOP/s {precision}")  # fmt: skip
    return f"{where}{datasheet}, {measured} ({source(calibration)})"


def _decode_line(row: Row, calibration: Calibration) -> str:
    """Generation: its decode as achieved bytes/s against the measured copy bandwidth and the
    datasheet's HBM bandwidth (an MFU against the matmul peak says little of a decode)."""
    where = f"{row.target} at {row.point}: "
    if row.decode_bytes_per_s is None:
        return (f"{where}decode: none against the measured ceilings: the run recorded no decode traffic "
                f"({source(calibration)})")  # fmt: skip
    text = f"{where}decode moved {rate(row.decode_bytes_per_s)} per device"
    share = decode_copy_share(row, calibration)
    if share is None:
        text += ", none against the measured ceilings: the calibration measured no copy bandwidth"
    else:
        text += f", {sig(share * 100)}% of the measured {rate(calibration.memory_bytes_s)} copy bandwidth"
    if row.decode_hbm_utilisation:
        hbm = row.decode_bytes_per_s / row.decode_hbm_utilisation
        text += f" and {sig(row.decode_hbm_utilisation * 100)}% of the datasheet's {rate(hbm)} HBM bandwidth"
    else:
        text += "; the datasheet states no HBM bandwidth"
    return f"{text} ({source(calibration)}); decode is bound by memory, not by the matmul peak"


def ceiling_lines(section: Section) -> list[str]:
    """Each calibrated row against the measured ceilings: its MFU against both peaks, or for
    generation its decode's bytes/s against both bandwidths; and one line naming the targets
    with no calibration (plain text, escaped by the renderer). Nothing where the store was not
    asked."""
    if section.calibrations is None:
        return []
    lines = [(_decode_line if generation(row) else _mfu_line)(row, calibration_of(section, row))
             for row in section.rows if calibration_of(section, row) is not None]  # fmt: skip
    missing = sorted({row.target for row in section.rows if calibration_of(section, row) is None})
    if missing:
        target = missing[0] if len(missing) == 1 else "T for each"
        commands = f"benchc calibrate --target {target}"
        decoding = any(generation(row) for row in section.rows)
        what = ("decode bytes/s against the bandwidth the device really reaches" if decoding
                else "MFU against what the device really reaches")  # fmt: skip
        lines.append(f"no calibration of {', '.join(missing)} is stored: {commands} would add "
                     f"measured ceilings ({what}, a measured roofline)")  # fmt: skip
    return lines
