"""benchc report explains each ratio (peak x MFU x devices x work, an identity of the recorded
figures) and, with --prices FILE, what a unit of work costs; bad prices files get located
errors and write nothing."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from codegen_helpers import plan_literal
from scripted_points import ok_metrics

from benchc.catalog.targets import TARGETS
from benchc.figures import sig
from benchc.pipeline import plan_spec
from benchc.plan.roofline import roofline

from helpers import REPO

FLOPS = 2.0e12  # model FLOPs per image, the same model on every target


def benchc(*args, db):
    return subprocess.run([sys.executable, "-m", "benchc", *args, "--db", str(db)], cwd=REPO,
                          capture_output=True, text=True, timeout=300)  # fmt: skip


def metrics_for(target: str, throughput: float, world: int = 2) -> dict:
    m = ok_metrics(throughput, target=target, point="batch-16")
    m["world_size"] = world
    m["throughput"]["per_device"] = throughput / world
    achieved = throughput * FLOPS / world
    peak = TARGETS[target].peak_flops("bf16") if target != "cpu" else None
    m["flops"] = {"model_flops_per_sample": FLOPS, "achieved_per_device": achieved,
                  "peak_per_device": peak, "mfu": achieved / peak if peak else None}  # fmt: skip
    return m


def stored(tmp_path, *runs) -> object:
    db = tmp_path / "r.db"
    for index, m in enumerate(runs):
        path = tmp_path / f"m{index}.json"
        path.write_text(json.dumps(m))
        assert benchc("ingest", str(path), db=db).returncode == 0
    return db


@pytest.mark.integration
def test_each_ratio_is_split_into_peak_and_mfu_and_the_product_is_the_ratio(tmp_path):
    db = stored(tmp_path, metrics_for("gaudi2", 100.0), metrics_for("h100", 150.0), metrics_for("cpu", 10.0))
    proc = benchc("report", "--baseline", "gaudi2", "-o", str(tmp_path / "out"), db=db)
    assert proc.returncode == 0, proc.stderr
    page = (tmp_path / "out" / "report.md").read_text()
    peak = TARGETS["h100"].peak_flops("bf16") / TARGETS["gaudi2"].peak_flops("bf16")
    mfu = 1.5 / peak  # the same work at 1.5x the rate on a device peak x faster
    line = next(x for x in page.splitlines() if x.startswith("- h100 at batch-16"))
    assert f"1.50x gaudi2 = peak {sig(peak)}x" in line, line
    assert f"x MFU {sig(mfu)}x" in line and "product" not in line, line  # product == ratio
    assert "- cpu at batch-16: 0.100x gaudi2, not split: the dense peak of cpu is unknown" in page
    assert "No prices were given" in page
    assert "treatment" not in page  # no run recorded a tier: nothing is said of it, nothing guessed


def with_tier(m: dict, tier: str | None) -> dict:
    if tier is not None:
        m["optimize"] = tier
        m["optimize_detail"] = {"compile": "regional" if tier == "tuned" else "off"}
    return m


@pytest.mark.integration
def test_a_pair_of_targets_that_ran_different_tiers_is_not_explained_as_hardware(tmp_path):
    """Rows at one point under different tiers: the pair says the treatment was not equal and
    is not split into peak x MFU; a row whose metrics record no tier gets a note, not a guess."""
    db = stored(tmp_path, with_tier(metrics_for("gaudi2", 100.0), "tuned"),
                with_tier(metrics_for("h100", 150.0), "plain"), with_tier(metrics_for("a100", 80.0), None),
                with_tier(metrics_for("h200", 200.0), "tuned"))  # fmt: skip
    proc = benchc("report", "--baseline", "gaudi2", "-o", str(tmp_path / "out"), db=db)
    assert proc.returncode == 0, proc.stderr
    page = (tmp_path / "out" / "report.md").read_text()
    pairs = [x for x in page.splitlines() if x.startswith("- ") and (" = peak " in x or ", not split: " in x)]
    lines = {x.split(":")[0] + " / " + x.split("x ")[1].split(" ")[0].rstrip(","): x for x in pairs}
    unequal = "h100 ran plain, gaudi2 tuned: not equal treatment"
    assert lines["- h100 at batch-16 / gaudi2"] == f"- h100 at batch-16: 1.50x gaudi2, not split: {unequal}"
    assert lines["- h200 at batch-16 / h100"].endswith("h200 ran tuned, h100 plain: not equal treatment")
    same = lines["- h200 at batch-16 / gaudi2"]  # both tuned: split as before, with no note
    assert " = peak " in same and "treatment" not in same, same
    unknown = lines["- a100 at batch-16 / gaudi2"]
    assert " = peak " in unknown, unknown
    note = "; the tier of a100 is not recorded (an older program): equal treatment is not known"
    assert unknown.endswith(note), unknown
    table = [r.split("|") for r in page.splitlines() if r.startswith("| batch")]
    rows = {r[2].strip(): r[5].strip() for r in table}
    assert rows == {"gaudi2": "tuned", "h100": "plain", "a100": "-", "h200": "tuned"}


def test_the_chart_says_which_tier_each_bar_ran_where_the_tiers_at_a_point_differ():
    import matplotlib.pyplot as plt

    from benchc.report.collect import sections
    from benchc.report.plot import draw
    from benchc.results.store import RunRecord

    def record(target, value, tier, point):
        return RunRecord(id=target + point, experiment="e", target=target, point=point, point_values={},
                         smoke=False, spec_path=None, spec_sha256=None, build_path=None, log_path=None,
                         status="ok", cause=None, log_tail=None,
                         metrics=with_tier(ok_metrics(value, target=target, point=point), tier),
                         environment={}, plan={}, series=target + point, trial=1, source="run",
                         started_at="2026-01-01T00:00:00", ended_at=None)  # fmt: skip

    (section,) = sections([record("a", 100.0, "tuned", "p"), record("b", 50.0, "plain", "p"),
                           record("a", 10.0, "tuned", "q"), record("b", 20.0, "tuned", "q")])  # fmt: skip
    figure = draw(section)
    labels = sorted(t.get_text() for t in figure.axes[0].texts)
    assert labels == ["10.0", "100\n(tuned)", "20.0", "50.0\n(plain)"], labels  # q: equal, unmarked
    plt.close(figure)


@pytest.mark.integration
def test_different_device_counts_and_models_are_factors_of_their_own(tmp_path):
    big = metrics_for("h100", 300.0, world=4)
    small = metrics_for("gaudi2", 100.0, world=2)
    small["flops"]["model_flops_per_sample"] = FLOPS  # same work
    db = stored(tmp_path, small, big)
    proc = benchc("report", "--baseline", "gaudi2", "-o", str(tmp_path / "out"), db=db)
    assert proc.returncode == 0, proc.stderr
    line = next(
        x for x in (tmp_path / "out" / "report.md").read_text().splitlines() if x.startswith("- h100")
    )
    assert "x devices 2.00x (4 / 2)" in line and "product" not in line, line


@pytest.mark.integration
def test_prices_give_cost_per_unit_and_price_performance(tmp_path):
    db = stored(tmp_path, metrics_for("gaudi2", 100.0), metrics_for("h100", 150.0), metrics_for("cpu", 10.0))
    prices = tmp_path / "prices.toml"
    prices.write_text('currency = "USD"\n[per_device_hour]\nh100 = 4.0\ngaudi2 = 2.0\n')
    proc = benchc(
        "report", "--baseline", "gaudi2", "--prices", str(prices), "-o", str(tmp_path / "out"), db=db
    )
    assert proc.returncode == 0, proc.stderr
    page = (tmp_path / "out" / "report.md").read_text()
    h100 = 2 * 4.0 / 3600 / 150.0 * 1000  # 2 devices x price per second / images per second
    gaudi2 = 2 * 2.0 / 3600 / 100.0 * 1000
    assert (
        f"- gaudi2 at batch-16: {sig(gaudi2)} USD per 1,000 images (2 devices x 2.00 USD/device-hour)" in page
    )
    assert f"- h100 at batch-16: {sig(h100)} USD per 1,000 images" in page
    assert f"price-performance {sig(gaudi2 / h100)}x gaudi2 (>1 = cheaper)" in page
    assert f"no price in {prices} for: cpu" in page


@pytest.mark.integration
def test_a_bad_prices_file_is_a_located_error_and_nothing_is_written(tmp_path):
    db = stored(tmp_path, metrics_for("h100", 150.0))
    cases = {
        "unknown target": (
            "[per_device_hour]\nh100 = 4.0\nh101 = 3.0\n",
            ":3:1: error: unknown target 'h101'",
        ),
        "not toml": ("[per_device_hour\nh100 = 4\n", ":1:"),
        "negative": ("[per_device_hour]\nh100 = -4\n", ":2:1: error: the price of h100 must be above 0"),
        "a string": ('[per_device_hour]\nh100 = "4"\n', ":2:1: error: the price of h100 must be a number"),
        "no table": ('currency = "USD"\n', "has no [per_device_hour] table"),
        "unknown key": ("[per_device_hour]\nh100 = 4.0\n[extra]\n", "unknown key 'extra'"),
    }
    for name, (text, expected) in cases.items():
        prices = tmp_path / f"{name.replace(' ', '_')}.toml"
        prices.write_text(text)
        out = tmp_path / f"out-{name.replace(' ', '_')}"
        proc = benchc("report", "--prices", str(prices), "-o", str(out), db=db)
        assert proc.returncode == 2, (name, proc.stderr)
        assert expected in proc.stderr and "Traceback" not in proc.stderr, (name, proc.stderr)
        assert not out.exists(), name
    proc = benchc("report", "--prices", str(tmp_path / "missing.toml"), "-o", str(tmp_path / "o"), db=db)
    assert proc.returncode == 2 and "no such file" in proc.stderr


# ------------------------------------------------------------------ built points: roofline kept


def built_run(
    tmp_path, spec: str, target: str, share: float, overrides=(), name: str = "m"
) -> tuple[dict, Path]:
    """Compile one real point of a reference spec for `target` and write beside its manifest a
    run that reached `share` of the bound that applies to it (the memory bound for generation,
    the compute bound otherwise), as the program would record it."""
    from benchc.codegen.build import compile_plans
    from benchc.pipeline import plan_spec

    (plan,) = plan_spec(REPO / "specs" / spec, targets=[target], overrides=list(overrides)).plans
    (built,) = compile_plans((plan,), tmp_path / f"build-{name}-{target}")
    manifest = json.loads((built.path / "manifest.json").read_text())
    line = manifest["plan"]["roofline"]
    world = line["world"]
    generation = plan.workload.kind == "infer" and plan.model.kind == "causal_lm"
    job = share * (line["memory_bound_items_per_s"] if generation else line["items"] / line["seconds"])
    m = ok_metrics(job, target=target, point=plan.point)
    m.update(experiment=plan.experiment, smoke=False, workload=plan.workload.kind, metric=plan.measure.metric,
             world_size=world)  # fmt: skip
    m["throughput"] = {"unit": line["unit"], "job": job, "per_device": job / world, "samples_per_step": 1}
    peak = line["peak_flops_per_device"]
    achieved = job * line["flops_per_item"] / world
    m["flops"] = {"model_flops_per_sample": line["flops_per_item"], "achieved_per_device": achieved,
                  "peak_per_device": peak, "mfu": achieved / peak}  # fmt: skip
    if generation:
        w = plan.workload
        decode = plan_literal((built.path / "bench.py").read_text())["decode"]
        moved = decode["bytes_per_device"] / (0.02 * (w.output_tokens - 1))  # as the program does
        m["generation"] = {"batch": w.batch, "input_tokens": w.input_tokens, "output_tokens": w.output_tokens,
                           "ttft_s": 0.05, "tpot_s": 0.02, "first_sequence": [1, 2],
                           "decode_bytes_per_s": moved,
                           "decode_hbm_utilisation": moved / decode["hbm_bytes_per_s"]}  # fmt: skip
    path = built.path / "metrics.json"
    path.write_text(json.dumps(m))
    return line, path


def ingest_all(tmp_path, *paths) -> Path:
    db = tmp_path / "r.db"
    proc = benchc("ingest", *map(str, paths), db=db)
    assert proc.returncode == 0, proc.stderr
    return db


@pytest.mark.integration
def test_generation_ratios_split_into_bandwidth_and_its_utilisation(tmp_path):
    g_line, g = built_run(tmp_path, "beluga-infer.bench", "gaudi2", 0.30)
    h_line, h = built_run(tmp_path, "beluga-infer.bench", "h100", 0.20)
    db = ingest_all(tmp_path, g, h)
    proc = benchc("report", "--baseline", "gaudi2", "-o", str(tmp_path / "out"), db=db)
    assert proc.returncode == 0, proc.stderr
    page = (tmp_path / "out" / "report.md").read_text()
    line = next(x for x in page.splitlines() if x.startswith("- h100 at default:") and "HBM" in x)
    ratio = 0.20 * h_line["memory_bound_items_per_s"] / (0.30 * g_line["memory_bound_items_per_s"])
    hbm = TARGETS["h100"].hbm_tb_s / TARGETS["gaudi2"].hbm_tb_s
    assert f"{sig(ratio)}x gaudi2 = HBM bandwidth {sig(hbm)}x" in line, line
    assert f"bandwidth utilisation {sig(0.20 / 0.30)}x (20.0% / 30.0% of the throughput" in line, line
    assert "product" not in line, line  # the split multiplies back to the ratio
    # each run against its bound: prefill compute-bound, decode memory-bound (the plan's roofline)
    bound = next(x for x in page.splitlines() if x.startswith("- h100 at default: the roofline allows"))
    assert "prefill compute-bound, decode memory-bound" in bound, bound
    best = h_line["best"]
    assert f"at best {sig(best)} output tokens/s" in bound
    assert f"{sig(0.20 * h_line['memory_bound_items_per_s'] / best * 100)}% of it" in bound, bound
    # decode as memory traffic, beside MFU: the bytes of the decode phase over its time
    (plan,) = plan_spec(REPO / "specs" / "beluga-infer.bench", targets=["h100"]).plans
    decode_bytes = next(b.amount for p in roofline(plan).phases if p.name == "decode" for b in p.bounds
                        if b.name == "memory")  # fmt: skip
    moved = decode_bytes / (0.02 * (plan.workload.output_tokens - 1))
    expected = f"decode moved {sig(moved / 1e12)} TB/s per device, {sig(moved / 3.35e12 * 100)}% of its HBM"
    assert expected in bound, bound


@pytest.mark.integration
def test_every_pair_of_targets_is_explained_and_runs_sit_on_a_roofline_chart(tmp_path):
    shares = {"gaudi2": 0.5, "h100": 0.25, "a100": 0.4}
    lines = {t: built_run(tmp_path, "sd3.bench", t, s, ["train.batch=16"]) for t, s in shares.items()}
    db = ingest_all(tmp_path, *(path for _, path in lines.values()))
    proc = benchc("report", "--baseline", "gaudi2", "-o", str(tmp_path / "out"), db=db)
    assert proc.returncode == 0, proc.stderr
    page = (tmp_path / "out" / "report.md").read_text()
    pairs = [x for x in page.splitlines() if x.startswith("- ") and " = peak " in x]
    assert [x.split(":")[0] + " vs " + x.split("x ")[1].split(" =")[0] for x in pairs] == [
        "- a100 at batch-16 vs gaudi2", "- h100 at batch-16 vs gaudi2", "- h100 at batch-16 vs a100",
    ], pairs  # fmt: skip
    mfu = {t: json.loads(path.read_text())["flops"]["mfu"] for t, (_, path) in lines.items()}
    assert f"x MFU {sig(mfu['h100'] / mfu['a100'])}x" in pairs[-1], pairs[-1]
    for target, share in shares.items():  # each run against its bound, at the share it reached
        bound = next(x for x in page.splitlines() if x.startswith(f"- {target} at batch-16: the roofline"))
        assert f"{sig(share * 100)}% of it" in bound, bound
        assert "(forward+backward " in bound and "-bound, optimizer memory-bound)" in bound, bound
    chart = tmp_path / "out" / "sd3_mmdit_train-roofline.png"
    assert chart.exists() and chart.stat().st_size > 10_000
    assert "sd3_mmdit_train-roofline.png" in page
    from benchc.report.collect import sections
    from benchc.report.plot import roofline_points
    from benchc.results.store import Store

    with Store(db) as store:
        (section,) = sections(store.latest_runs(None), "gaudi2")
    placed = {label: (x, y) for label, x, y, _, _ in roofline_points(section)}
    assert set(placed) == {"gaudi2 batch-16", "h100 batch-16", "a100 batch-16"}
    for target, (line, _) in lines.items():
        x, y = placed[f"{target} batch-16"]
        assert x == line["intensity_flops_per_byte"] > 0
        assert abs(y / (mfu[target] * line["peak_flops_per_device"]) - 1) < 1e-9  # achieved FLOP/s


@pytest.mark.integration
def test_a_run_without_a_kept_roofline_says_why_it_has_no_bound(tmp_path):
    db = stored(tmp_path, metrics_for("gaudi2", 100.0), metrics_for("h100", 150.0))
    proc = benchc("report", "-o", str(tmp_path / "out"), db=db)
    assert proc.returncode == 0, proc.stderr
    page = (tmp_path / "out" / "report.md").read_text()
    assert "- h100 at batch-16: no bound: the run kept no roofline" in page
    assert not (tmp_path / "out" / "sd3_mmdit_train-roofline.png").exists()


@pytest.mark.integration
def test_the_specs_prices_are_used_and_a_prices_file_replaces_them(tmp_path):
    spec = tmp_path / "priced.bench"
    text = (REPO / "specs" / "sd3.bench").read_text()
    spec.write_text(text.rstrip().removesuffix("}") + '\n  prices {\n    currency = "EUR"\n'
                    "    per_device_hour { h100 = 4.0; gaudi2 = 2.0 }\n  }\n}\n")  # fmt: skip
    for include in (REPO / "specs" / "common").glob("*.bench"):
        (tmp_path / "common").mkdir(exist_ok=True)
        (tmp_path / "common" / include.name).write_text(include.read_text())
    paths = []
    for target in ("gaudi2", "h100"):
        from benchc.codegen.build import compile_plans
        from benchc.pipeline import plan_spec

        (plan,) = plan_spec(spec, targets=[target], overrides=["train.batch=16"]).plans
        assert plan.prices.currency == "EUR" and dict(plan.prices.per_device_hour)["h100"] == 4.0
        (built,) = compile_plans((plan,), tmp_path / f"b-{target}")
        m = metrics_for(target, 100.0 if target == "gaudi2" else 150.0)
        m["experiment"] = plan.experiment
        (built.path / "metrics.json").write_text(json.dumps(m))
        paths.append(built.path / "metrics.json")
    db = ingest_all(tmp_path, *paths)
    proc = benchc("report", "--baseline", "gaudi2", "-o", str(tmp_path / "out"), db=db)
    assert proc.returncode == 0, proc.stderr
    page = (tmp_path / "out" / "report.md").read_text()
    assert f"- h100 at batch-16: {sig(2 * 4.0 / 3600 / 150.0 * 1000)} EUR per 1,000 images" in page
    prices = tmp_path / "prices.toml"
    prices.write_text('currency = "USD"\n[per_device_hour]\nh100 = 8.0\n')
    proc = benchc("report", "--prices", str(prices), "-o", str(tmp_path / "out2"), db=db)
    assert proc.returncode == 0, proc.stderr
    page = (tmp_path / "out2" / "report.md").read_text()
    assert f"- h100 at batch-16: {sig(2 * 8.0 / 3600 / 150.0 * 1000)} USD per 1,000 images" in page
    assert "EUR" not in page and f"no price in {prices} for: gaudi2" in page


@pytest.mark.integration
def test_a_bad_prices_block_is_refused_by_check_at_its_place(tmp_path):
    spec = tmp_path / "bad.bench"
    spec.write_text(
        'experiment e {\n  model mmdit { preset = "sd3-medium" }\n  train { batch = 16 }\n'
        "  targets = [h100]\n  prices {\n    currency = \"U S D\"\n"
        "    per_device_hour { h10 = 4.0; h100 = 0 }\n  }\n  sweep prices.currency = [\"A\", \"B\"]\n}\n"
    )  # fmt: skip
    proc = subprocess.run([sys.executable, "-m", "benchc", "check", str(spec)], cwd=REPO,
                          capture_output=True, text=True, timeout=120)  # fmt: skip
    assert proc.returncode == 2 and "Traceback" not in proc.stderr
    assert f'{spec}:6:16: error: "U S D" is not a valid prices.currency' in proc.stderr
    assert f"{spec}:7:23: error: unknown target 'h10' in prices" in proc.stderr
    assert f"{spec}:7:41: error: prices.per_device_hour.h100 must be at least 0.0001, not 0" in proc.stderr
    spec.write_text(spec.read_text().replace('"U S D"', '"USD"').replace("h10 = 4.0; h100 = 0", "h100 = 4"))
    proc = subprocess.run([sys.executable, "-m", "benchc", "check", str(spec)], cwd=REPO,
                          capture_output=True, text=True, timeout=120)  # fmt: skip
    assert proc.returncode == 2 and "'prices.currency' cannot be swept" in proc.stderr, proc.stderr


@pytest.mark.integration
def test_where_each_vendors_path_differs_in_maths_the_ratio_says_so(tmp_path):
    """S4 as the spec writes it: FSDP2 in fp16 with torch's foreach AdamW on h100 (the fused
    kernel fails under FSDP2's sharded gradient scaler), DeepSpeed ZeRO-3 in bf16 with
    Habana's FusedAdamW on gaudi2. The ratio's line names each difference; two runs of the
    same path name none."""
    paths = {}
    for target in ("gaudi2", "h100", "a100"):
        _, path = built_run(tmp_path, "beluga-train.bench", target, 0.4)
        m = json.loads(path.read_text())
        knobs = plan_literal((path.parent / "bench.py").read_text())["optimize"]["knobs"]
        m.update(optimize="tuned", optimize_detail=knobs)
        path.write_text(json.dumps(m))
        paths[target] = path
    db = ingest_all(tmp_path, *paths.values())
    proc = benchc("report", "--baseline", "gaudi2", "-o", str(tmp_path / "out"), db=db)
    assert proc.returncode == 0, proc.stderr
    page = (tmp_path / "out" / "report.md").read_text()
    line = next(x for x in page.splitlines() if x.startswith("- h100 at default:") and "gaudi2" in x)
    said = (
        "the two paths differ in maths: precision fp16 vs bf16; torch's foreach AdamW vs Habana's "
        "FusedAdamW (the same update rule, other kernels and rounding); FSDP2 vs DeepSpeed ZeRO-3"
    )
    assert said in line, line
    same = next(x for x in page.splitlines() if x.startswith("- h100 at default:") and "a100 =" in x)
    assert "differ in maths" not in same, same
