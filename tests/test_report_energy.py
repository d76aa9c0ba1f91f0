"""Energy in the report, the CSV and show (issue 36, item 2): energy per 1,000 images, the
performance per watt and its ratio to the baseline where the maths is the same, the
electricity price from the prices file; a row without a figure says why. The HTML page is
read with html.parser, the CSV with csv."""

from __future__ import annotations

import csv
import io

import pytest
from test_report import benchc, parsed_html, store_trials

pytestmark = pytest.mark.integration

TRAIN = {"kind": "train", "precision": "bf16", "global_batch": 16, "micro_batch": 8, "seq_len": 4096,
         "steps": 20, "warmup": 5}  # fmt: skip
ENERGY = {  # target -> (joules per image, mean watts, source), None: no figure
    "h100": (0.5, 700.0, "NVML total energy counter"),
    "gaudi2": (1.0, 600.0, "hl-smi power sampled every 0.5 s (2 cards)"),
    "cpu": None,
}
NO_RAPL = "RAPL not readable: no /sys/class/powercap here (no powercap in this kernel or container)"


def _store(db):
    def plan(target, point):
        return {"workload": TRAIN, "overrides": [], "references": [], "declared_references": []}

    def energy(m, seconds_per_image):
        given = ENERGY[m["target"]]
        if given is None:
            m["energy"] = {"joules": None, "per_unit_j": None, "mean_w": None, "seconds": 0.12,
                           "source": "RAPL (the host's CPU packages)", "why": NO_RAPL}  # fmt: skip
            return
        per_image, watts, source = given
        m["energy"] = {"joules": per_image * 12, "per_unit_j": per_image, "mean_w": watts, "seconds": 0.12,
                       "source": source, "why": None}  # fmt: skip

    rows = {("h100", "batch-16"): [0.01, 0.01], ("gaudi2", "batch-16"): [0.02], ("cpu", "batch-16"): [0.5]}
    store_trials(db, rows, plan, energy)


def test_the_report_gives_energy_per_work_performance_per_watt_and_its_cost(tmp_path):
    db = tmp_path / "r.db"
    _store(db)
    prices = tmp_path / "prices.toml"
    prices.write_text('currency = "EUR"\nelectricity_per_kwh = 0.2\n[per_device_hour]\nh100 = 4.0\n')
    for page_format in ("md", "html"):
        proc = benchc("report", "--baseline", "gaudi2", "--prices", str(prices), "--format", page_format,
                      "-o", str(tmp_path / page_format), db=db)  # fmt: skip
        assert proc.returncode == 0, proc.stderr
    page = (tmp_path / "md" / "report.md").read_text()
    items = parsed_html((tmp_path / "html" / "report.html").read_text())["items"]
    h100 = ("h100 at batch-16: 500 J per 1,000 images (mean 700 W; NVML total energy counter, median of 2 "
            "trials); 2.00 images per joule (images/s per W); performance per watt 2.00x gaudi2 (>1 = less "
            "energy); electricity 0.0000278 EUR per 1,000 images at 0.200 EUR/kWh")  # fmt: skip
    gaudi2 = ("gaudi2 at batch-16: 1,000 J per 1,000 images (mean 600 W; hl-smi power sampled every 0.5 s "
              "(2 cards)); 1.00 images per joule (images/s per W); electricity 0.0000556 EUR per 1,000 "
              "images at 0.200 EUR/kWh")  # fmt: skip
    cpu = f"cpu at batch-16: no energy figure: {NO_RAPL}"
    for line in (h100, gaudi2, cpu):
        assert f"- {line}\n" in page and line in items, line
    assert page.index("Energy over the measured work") > page.index("Cost per unit of work")


def test_the_csv_and_show_carry_the_energy(tmp_path):
    db = tmp_path / "r.db"
    _store(db)
    proc = benchc("export", "--format", "csv", db=db)
    assert proc.returncode == 0, proc.stderr
    rows = {row["target"]: row for row in csv.DictReader(io.StringIO(proc.stdout))}
    assert float(rows["h100"]["energy_per_unit_j"]) == 0.5 and float(rows["h100"]["energy_j"]) == 6.0
    assert float(rows["h100"]["mean_power_w"]) == 700.0 and rows["h100"]["energy_why"] == ""
    assert rows["cpu"]["energy_j"] == "" and rows["cpu"]["energy_why"] == NO_RAPL
    assert rows["gaudi2"]["energy_source"].startswith("hl-smi power sampled")
    listed = benchc("runs", db=db)
    run_id = next(line.split()[0] for line in listed.stdout.splitlines() if " cpu " in f" {line} ")
    shown = benchc("show", run_id, db=db)
    assert NO_RAPL in shown.stdout, shown.stdout


def test_a_prices_file_with_a_bad_electricity_price_is_refused_where_it_is_written(tmp_path):
    db = tmp_path / "r.db"
    _store(db)
    prices = tmp_path / "prices.toml"
    prices.write_text('currency = "EUR"\nelectricity_per_kwh = "cheap"\n[per_device_hour]\nh100 = 4.0\n')
    proc = benchc("report", "--prices", str(prices), "-o", str(tmp_path / "out"), db=db)
    assert proc.returncode != 0 and "Traceback" not in proc.stderr
    refused = "error: electricity_per_kwh must be a number from 1e-06 to 1000 per kWh"
    assert f"{prices}:2:1: {refused}" in proc.stderr
    assert not (tmp_path / "out").exists()
