"""Energy over the measured work (issue 36, item 2), read the way the generated programs read it:
the CPU's RAPL counters on a powercap tree laid out as Linux lays it out (this machine has
none), the meter's sums and reasons, the power sampler's integral; what the CUDA and Gaudi
programs ask NVML and hl-smi, held to nvidia-ml-py's source and hl-smi's documented fields.
The real runs' energy objects are checked where they run (test_run_cpu.py: energy_checks)."""

from __future__ import annotations

import ast
import os
import re
import time

import pytest
from codegen_helpers import spec_files
from program_helpers import load_program

# hl-smi's documented query fields (Intel Gaudi docs, System Management Interface Tool,
# "Possible queries"): the Gaudi programs ask for no other
HL_SMI_FIELDS = {
    "timestamp", "name", "bus_id", "driver_version", "temperature.aip", "module_id",
    "utilization.aip", "memory.total", "memory.free", "memory.used", "index", "serial", "uuid",
    "power.draw",
}  # fmt: skip


@pytest.fixture(scope="module")
def program(tmp_path_factory):
    """The CPU program of S1 (smoke), loaded as a module: its own RaplCounter, EnergyMeter and
    PowerSampler."""
    folder = tmp_path_factory.mktemp("cpu")
    (folder / "bench.py").write_text(spec_files("sd3.bench", "cpu", smoke=True)["bench.py"])
    return load_program(folder / "bench.py")


def zone(root, name: str, label: str, energy_uj: int, wrap: int = 10**9) -> None:
    folder = root / name
    folder.mkdir()
    (folder / "name").write_text(label + "\n")
    (folder / "energy_uj").write_text(f"{energy_uj}\n")
    (folder / "max_energy_range_uj").write_text(f"{wrap}\n")


def test_rapl_counts_the_packages_once_and_undoes_a_counter_s_wrap(program, tmp_path):
    """Two packages (one wraps between the reads), their core and DRAM sub-zones, a psys zone
    and an MMIO zone: only the packages count, each once."""
    zone(tmp_path, "intel-rapl:0", "package-0", 999_000_000, wrap=1_000_000_000)
    zone(tmp_path, "intel-rapl:0:0", "core", 5)
    zone(tmp_path, "intel-rapl:0:1", "dram", 5)
    zone(tmp_path, "intel-rapl:1", "package-1", 7_000_000)
    zone(tmp_path, "intel-rapl:2", "psys", 9)
    zone(tmp_path, "intel-rapl-mmio:0", "package-0", 11)
    reading = program.rapl_reader(str(tmp_path))
    assert reading[2] is None and reading[1] == "RAPL (the host's CPU packages): 2 package zones"
    meter = program.EnergyMeter(reading)
    meter.begin()
    # package 0 passes its range (1,000 J) and reads 2 J: 1 J before the wrap, 2 J after it
    (tmp_path / "intel-rapl:0" / "energy_uj").write_text("2000000\n")
    (tmp_path / "intel-rapl:1" / "energy_uj").write_text("12000000\n")  # + 5 J
    for name in ("intel-rapl:0:0", "intel-rapl:2", "intel-rapl-mmio:0"):  # not counted
        (tmp_path / name / "energy_uj").write_text("999999999\n")
    time.sleep(0.05)
    meter.end()
    energy = meter.summary(units=4, world=1, device=None)
    assert energy["joules"] == pytest.approx(1 + 2 + 5)
    assert energy["per_unit_j"] == pytest.approx(8 / 4)
    assert energy["seconds"] >= 0.05 and energy["mean_w"] == pytest.approx(8 / energy["seconds"])
    assert energy["why"] is None


def test_without_readable_rapl_the_energy_is_null_with_the_reason(program, tmp_path):
    absent = tmp_path / "absent"
    _, _, why = program.rapl_reader(str(absent))
    assert why == f"RAPL not readable: no {absent} here (no powercap in this kernel or container)"
    zone(tmp_path, "intel-rapl:0", "psys", 1)  # a platform zone only: no package
    reading = program.rapl_reader(str(tmp_path))
    assert reading[0] is None and reading[2] == f"RAPL not readable: no intel-rapl package zone in {tmp_path}"
    meter = program.EnergyMeter(reading)
    meter.begin()
    meter.end()
    energy = meter.summary(units=4, world=1, device=None)
    assert energy == {"joules": None, "per_unit_j": None, "mean_w": None, "seconds": None,
                      "source": "RAPL (the host's CPU packages)", "why": reading[2]}  # fmt: skip


def test_a_rank_that_leaves_the_host_to_its_first_rank_reads_nothing_and_misses_nothing(program):
    device = program.Device(0)
    device.counts_host = False  # as start_processes sets it on the host's second rank
    reader, source, why = device.energy_reader()
    assert reader is None and why is None and source == "RAPL (read by the host's first rank)"


def test_the_power_sampler_integrates_the_power_over_the_measured_parts_only(program):
    """40 W sampled every 10 ms: a measured part of ~0.2 s counts ~8 J; the time between two
    parts is not counted."""
    reading = (program.PowerSampler(lambda: 40.0, 0.01), "sampled", None)
    meter = program.EnergyMeter(reading)
    for _ in range(2):
        meter.begin()
        time.sleep(0.1)
        meter.end()
        time.sleep(0.1)  # between the parts: not counted
    energy = meter.summary(units=2, world=1, device=None)
    assert energy["seconds"] == pytest.approx(0.2, rel=0.25)
    assert energy["joules"] == pytest.approx(40 * energy["seconds"], rel=0.02)
    assert energy["mean_w"] == pytest.approx(40, rel=0.02)
    assert not reading[0].thread.is_alive()  # the summary stopped the sampler


def test_a_tool_that_stops_answering_leaves_the_reason_not_a_figure(program):
    answers = iter([30.0, 30.0])

    def watts():
        return next(answers)  # then StopIteration: the tool fails

    meter = program.EnergyMeter((program.PowerSampler(watts, 0.01), "sampled", None))
    meter.begin()
    time.sleep(0.1)
    meter.end()
    energy = meter.summary(units=2, world=1, device=None)
    assert energy["joules"] is None and energy["why"].startswith("sampled stopped answering")


def _calls(source: str, module: str) -> list[ast.Call]:
    return [node for node in ast.walk(ast.parse(source)) if isinstance(node, ast.Call)
            and isinstance(node.func, ast.Attribute) and isinstance(node.func.value, ast.Name)
            and node.func.value.id == module]  # fmt: skip


def test_the_cuda_program_reads_nvml_by_the_gpu_s_uuid_as_nvidia_ml_py_defines_it():
    """Every pynvml name the CUDA program uses exists in nvidia-ml-py, calls bind to their
    signatures (test_codegen_static binds them too), the error classes caught are NVMLError's,
    and the total-energy counter comes before power sampling."""
    import inspect

    import pynvml

    source = spec_files("sd3.bench", "h100")["bench.py"]
    calls = _calls(source, "pynvml")
    assert {c.func.attr for c in calls} == {"nvmlInit", "nvmlDeviceGetHandleByUUID",
                                            "nvmlDeviceGetTotalEnergyConsumption",
                                            "nvmlDeviceGetPowerUsage"}  # fmt: skip
    for call in calls:
        inspect.signature(getattr(pynvml, call.func.attr)).bind(*call.args)
    assert issubclass(pynvml.NVMLError_NotSupported, pynvml.NVMLError)
    caught = set(re.findall(r"except (pynvml\.\w+)", source))
    assert caught == {"pynvml.NVMLError", "pynvml.NVMLError_NotSupported"}
    assert '"GPU-" + str(torch.cuda.get_device_properties(self.device).uuid)' in source
    assert source.index("nvmlDeviceGetTotalEnergyConsumption") < source.index("nvmlDeviceGetPowerUsage")


@pytest.mark.parametrize("spec", ["sd3.bench", "beluga-infer.bench", "sd3-infer.bench"])
def test_the_gaudi_program_asks_hl_smi_only_for_documented_fields(spec):
    source = spec_files(spec, "gaudi2")["bench.py"]
    queries = re.findall(r'"-Q", "([^"]+)"', source)
    assert "module_id,power.draw" in queries
    for query in queries:
        assert set(query.split(",")) <= HL_SMI_FIELDS, query
    assert "PowerSampler(watts, 0.5)" in source and "HABANA_VISIBLE_MODULES" in source


FAKE_HL_SMI = r"""#!/bin/sh
# hl-smi as Habana's docs and public captures show its output (two cards)
case "$*" in
  "-Q module_id,power.draw -f csv,noheader,nounits") printf '0, 350\n1, 360\n' ;;
  "-Q driver_version -f csv,noheader") printf '1.18.0-ae3c4d3\n1.18.0-ae3c4d3\n' ;;
  "-v") echo "Habanalabs hl-smi/hlml version hl-1.18.0-fw-53.1.1.1 (Oct 10 2024 - 11:55:53)" ;;
  "-L") printf '%s\n' "[0] AIP (accel0) 0000:19:00.0" \
    "        Firmware [FIT] Version : Linux gaudi2 5.10.18-hl-gaudi2-1.18.0-fw-53.1.1-sec-9" \
    "        Firmware [SPI] Version : Preboot version hl-gaudi2-1.18.0-fw-53.1.1-sec-9 (Oct 10 2024)" ;;
  *) exit 2 ;;
esac
"""


@pytest.fixture(scope="module")
def gaudi_reading(tmp_path_factory):
    """The Gaudi program's own hl-smi readers (its Device.energy_reader and versions, the
    helpers they call and the PowerSampler), taken from its text and run where `hl-smi` is a
    script that prints what the real one does: habana_frameworks is not importable here, so
    the rest of the program is not loaded."""
    import contextlib
    import threading

    import torch

    source = spec_files("sd3.bench", "gaudi2")["bench.py"]
    tree = ast.parse(source)
    wanted = {"smi_output", "smi_rows", "query_smi", "PowerSampler", "EnergyMeter"}
    body = [node for node in tree.body if getattr(node, "name", None) in wanted]
    (device,) = [node for node in tree.body if getattr(node, "name", None) == "Device"]
    kept = ("energy_reader", "versions")
    device.body = [node for node in device.body if getattr(node, "name", None) in kept
                   or isinstance(node, ast.Assign)]  # fmt: skip
    namespace = {"os": os, "time": time, "threading": threading, "torch": torch, "contextlib": contextlib}
    exec(compile(ast.Module(body=[*body, device], type_ignores=[]), "gaudi2/bench.py", "exec"), namespace)
    folder = tmp_path_factory.mktemp("bin")
    (folder / "hl-smi").write_text(FAKE_HL_SMI)
    (folder / "hl-smi").chmod(0o755)
    return namespace, folder


def test_the_gaudi_program_sums_the_power_of_the_host_s_cards_of_the_job(gaudi_reading, monkeypatch):
    namespace, folder = gaudi_reading
    monkeypatch.setenv("PATH", f"{folder}:{os.environ['PATH']}")
    monkeypatch.delenv("HABANA_VISIBLE_MODULES", raising=False)
    device = namespace["Device"].__new__(namespace["Device"])
    device.host_ranks = 2  # as many ranks on the host as hl-smi lists cards: every card
    reading = device.energy_reader()
    assert reading[1:] == ("hl-smi power sampled every 0.5 s (2 cards)", None)
    meter = namespace["EnergyMeter"](reading)
    meter.begin()
    time.sleep(1.2)
    meter.end()
    energy = meter.summary(units=10, world=1, device=None)
    assert energy["mean_w"] == pytest.approx(350 + 360, rel=1e-3) and energy["joules"] > 0
    device.host_ranks = 1  # one rank, two cards: which one is not said
    _, _, why = device.energy_reader()
    assert why == ("hl-smi lists 2 cards and the job has 1 ranks on this host: set HABANA_VISIBLE_MODULES "
                   "to say which")  # fmt: skip
    monkeypatch.setenv("HABANA_VISIBLE_MODULES", "1")
    reader, source, why = device.energy_reader()
    assert why is None and source.endswith("(1 cards)") and reader.joules() >= 0
    assert reader.watts() == 360.0
    reader.close()
    device.counts_host = False  # the host's other ranks read nothing
    assert device.energy_reader() == (None, "hl-smi (read by the host's first rank)", None)


def test_the_gaudi_program_records_the_synapseai_release_and_the_firmware(gaudi_reading, monkeypatch):
    namespace, folder = gaudi_reading
    device = namespace["Device"].__new__(namespace["Device"])
    monkeypatch.setenv("PATH", f"{folder}:{os.environ['PATH']}")
    spi = "Preboot version hl-gaudi2-1.18.0-fw-53.1.1-sec-9 (Oct 10 2024)"
    assert device.versions() == {"driver": "1.18.0-ae3c4d3", "synapseai": "1.18.0", "firmware": "53.1.1.1",
                                 "card_firmware": spi}  # fmt: skip
    monkeypatch.setenv("PATH", "/nonexistent")  # no hl-smi: none, never a failure
    assert device.versions() == {"driver": None, "synapseai": None, "firmware": None}
