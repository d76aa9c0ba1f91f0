"""What every ok run's metrics say of energy (issue 36, item 2): figures that agree with each
other and with the run's work, or null figures and the reason."""

from __future__ import annotations

import os

import pytest

POWERCAP = "/sys/class/powercap"


def assert_energy(metrics: dict) -> None:
    """The energy object of an ok run: joules, per unit of work and mean watts consistent with
    the measured work (throughput x measured seconds), or all null with the reason. On a
    machine without powercap (this project's CI) the CPU's reason names the missing folder; a
    rank that only leaves the host's counter to the host's first rank is not a missing part."""
    energy = metrics["energy"]
    assert energy["source"].startswith("RAPL")
    if energy["joules"] is None:
        assert energy["per_unit_j"] is None and energy["mean_w"] is None
        assert energy["why"].startswith("RAPL not readable") and "ranks that read" not in energy["why"]
        if not os.path.isdir(POWERCAP):
            assert f"no {POWERCAP} here" in energy["why"]
        return
    units = metrics["throughput"]["job"] * sum(metrics["step_time_s"]["all"])
    assert energy["why"] is None and energy["joules"] > 0 and energy["seconds"] > 0
    assert energy["per_unit_j"] == pytest.approx(energy["joules"] / units, rel=1e-6)
    assert energy["mean_w"] == pytest.approx(energy["joules"] / energy["seconds"])
