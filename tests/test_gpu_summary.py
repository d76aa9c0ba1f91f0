"""benchmarks/gpu_summary.py (and gpu_summary_md.py): the summary of a gpu_check.sh part from
synthetic events, metrics and estimate files, as the script and the programs write them: the
training part's ratios and targets, runs skipped, cut short or unreadable, and the inference
part's generation measures, fractions of the roofline, S3's figures and the fit of TPOT."""

from __future__ import annotations

import importlib.util
import json

import pytest

from helpers import REPO

# the inference part's runs, in the order gpu_check.sh plans and starts them
INFERENCE_RUNS = ["s5_l40_tuned", "s3", "s5_l40_plain", "s5_l2_tuned", "s5_l10_tuned"]


def load(name: str):
    spec = importlib.util.spec_from_file_location(name, REPO / "benchmarks" / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def metrics(median: float, spread: float = 0.02, **extra) -> dict:
    """A benchc metrics file of a finished run, as the generated programs write them."""
    times = [median * (1 - spread), median, median * (1 + spread)]
    flops = 1736469577728.0
    images = 16 / median
    return {
        "schema": "benchc-metrics", "schema_version": 1, "status": "ok", "experiment": "sd3_mmdit_train",
        "target": "h200", "point": "default", "smoke": False, "workload": "train", "error": None,
        "device_name": "NVIDIA H200", "startup_s": 12.5, "compile_s": None, "warmup_s": 40.0,
        "steps": {"total": 50, "warmup": 10, "measured": 40},
        "step_time_s": {"median": median, "p10": times[0], "p90": times[2], "mean": median, "all": times},
        "throughput": {"unit": "images/s", "job": images, "per_device": images, "samples_per_step": 16},
        "flops": {"model_flops_per_sample": flops, "achieved_per_device": flops * images,
                  "peak_per_device": 989e12, "mfu": flops * images / 989e12},
        "peak_memory_bytes": 40 * 2**30, **extra,
    }  # fmt: skip


def test_the_summary_turns_metrics_files_into_the_expected_ratios(tmp_path):
    """Tuned 50 ms, plain 100 ms, hand-written 49.5 ms, batch 32 failed, S4 timed out without
    metrics; a line cut short by a kill is ignored."""
    summary_module = load("gpu_summary")
    events = [
        "part\ttraining\th200\tgpu\t470\t480\t10\t15",
        "plan\ts1_b16_tuned\t150\t100\trequired\tS1 batch 16, tuned",
        "plan\ts1_b16_plain\t60\t45\trequired\tS1 batch 16, plain",
        "plan\thand_b16\t120\t60\trequired\thand-written tuned loop, batch 16",
        "plan\ts1_b32_tuned\t90\t60\trequired\tS1 batch 32, tuned",
        "plan\ts4\t120\t90\toptional\tS4",
        "ratio\ttuned/plain\ts1_b16_plain\ts1_b16_tuned\t>=\t1.8\tspeedup",
        "ratio\tgenerated/hand-written\ts1_b16_tuned\thand_b16\t<=\t1.02\tstep / step",
        "check\ts1_b16_tuned\tmfu\t>=\t0.35",
        "check\ts1_b16_tuned\tp90_p10\t<=\t1.05",
        "check\ts1_b16_tuned\tcompile_s\t<=\t90",
        "check\ts1_b32_tuned\tmfu\t>=\t0.35",
        "start\ts1_b16_tuned\t150", "end\ts1_b16_tuned\t0\t71",
        "start\ts1_b16_plain\t60", "end\ts1_b16_plain\t0\t29",
        "start\thand_b16\t120", "end\thand_b16\t0\t55",
        "start\ts1_b32_tuned\t90", "end\ts1_b32_tuned\t1\t33",
        "start\ts4\t120", "end\ts4\t124\t130",
        "end\ts4\t0",  # cut short by SIGKILL while being written
    ]  # fmt: skip
    (tmp_path / "events.tsv").write_text("\n".join(events) + "\n")
    tuned = metrics(0.050, optimize="tuned", compile_s=61.0, optimize_detail={"compile": "regional"})
    tuned["energy"] = {"joules": 350.0, "per_unit_j": 2.19, "mean_w": 700.0, "seconds": 0.5,
                       "source": "NVML total energy counter", "why": None}  # fmt: skip
    (tmp_path / "s1_b16_tuned.json").write_text(json.dumps(tuned))
    (tmp_path / "s1_b16_plain.json").write_text(json.dumps(metrics(0.100, spread=0.1, optimize="plain")))
    hand = metrics(0.0495, optimize="handwritten", compile_s=30.0)
    hand["schema"] = "handwritten-train"
    (tmp_path / "hand_b16.json").write_text(json.dumps(hand))
    failed = {**metrics(0.1), "status": "failed", "step_time_s": None, "throughput": None, "flops": None,
              "error": {"type": "OutOfMemoryError", "message": "CUDA out of memory.\nTried to allocate 2 GiB",
                        "rank": 0, "traceback": ""}}  # fmt: skip
    (tmp_path / "s1_b32_tuned.json").write_text(json.dumps(failed))
    estimate = {"estimates": [{"roofline": {"seconds": 0.0281, "peak_flops_per_device": 989e12}}]}
    (tmp_path / "s1_b16_tuned.estimate.json").write_text(json.dumps(estimate))

    assert summary_module.main(["write", str(tmp_path)]) == 0
    summary = json.loads((tmp_path / "summary.json").read_text())
    ratios = {r["ratio"]: r for r in summary["ratios"]}
    assert ratios["tuned/plain"]["value"] == pytest.approx(2.0) and ratios["tuned/plain"]["result"] == "met"
    gen = ratios["generated/hand-written"]
    assert gen["value"] == pytest.approx(0.050 / 0.0495) and gen["result"] == "met"
    runs = {row["run"]: row for row in summary["runs"]}
    t = runs["s1_b16_tuned"]
    assert t["status"] == "ok" and t["optimize"] == "tuned" and t["elapsed_s"] == 71
    assert t["mfu"] == pytest.approx(1736469577728.0 * 16 / 0.05 / 989e12)  # 56.2 %
    assert t["roofline_fraction"] == pytest.approx(0.0281 / 0.050)
    assert t["p90_p10"] == pytest.approx(1.02 / 0.98) and t["compile_s"] == 61.0 and t["startup_s"] == 12.5
    assert t["peak_memory_gib"] == pytest.approx(40.0) and t["throughput"] == pytest.approx(320.0)
    assert runs["s1_b16_plain"]["roofline_fraction"] is None  # no estimate file for it
    assert (t["energy_per_unit_j"], t["mean_power_w"], t["energy_why"]) == (2.19, 700.0, None)
    assert "energy_per_unit_j" not in runs["s1_b16_plain"]  # its metrics record none
    assert runs["s1_b32_tuned"]["status"] == "failed: CUDA out of memory. Tried to allocate 2 GiB"
    assert runs["s4"]["status"] == "timed out at 120 s, no metrics (see s4.log)"
    assert runs["s4"]["exit_status"] == 124
    checks = {(c["run"], c["field"]): (c["value"], c["result"]) for c in summary["checks"]}
    assert checks[("s1_b16_tuned", "mfu")][1] == "met" and checks[("s1_b16_tuned", "p90_p10")][1] == "met"
    assert checks[("s1_b16_tuned", "compile_s")] == (61.0, "met")
    assert checks[("s1_b32_tuned", "mfu")] == (None, "not measured")
    assert summary["budget"]["planned_total_s"] == 15 + 150 + 60 + 120 + 90 + 4 * 10
    text = (tmp_path / "summary.md").read_text()
    assert "| tuned/plain | 2.000 | >= 1.8 | met | speedup |" in text
    row = "| s1_b16_tuned: S1 batch 16, tuned | ok | 71 / 150 | 0.05 | 1.041 | 320 images/s | 56.2% | 56.2% |"
    assert row in text

    # cut short: hand_b16 still running when the part was killed, the rest never started
    (tmp_path / "events.tsv").write_text("\n".join(events[:17]) + "\n")
    (tmp_path / "hand_b16.json").unlink()
    summary = summary_module.summarize(tmp_path)
    runs = {row["run"]: row["status"] for row in summary["runs"]}
    assert runs["hand_b16"] == "running or cut short (limit 120 s), no metrics yet"
    assert runs["s4"] == "not run yet" and runs["s1_b16_tuned"] == "ok"
    ratios = {r["ratio"]: (r["value"], r["result"]) for r in summary["ratios"]}
    assert ratios["generated/hand-written"] == (None, "not measured")
    assert ratios["tuned/plain"][1] == "met"


def test_the_summary_reports_skipped_and_unreadable_runs(tmp_path):
    (tmp_path / "events.tsv").write_text(
        "part\tinference\th200\tgpu\t470\t480\t10\t15\n"
        "plan\ts5\t180\t120\trequired\tS5\nplan\ts3\t250\t150\trequired\tS3\n"
        "start\ts5\t180\nend\ts5\t137\t190\nskip\ts3\tonly 100 s left of the part's 470 s, it needs 150\n"
    )
    (tmp_path / "s5.json").write_text('{"status": "ok", "step_')
    assert load("gpu_summary").main(["write", str(tmp_path), "--print"]) == 0
    runs = json.loads((tmp_path / "summary.json").read_text())["runs"]
    assert [r["status"] for r in runs] == [
        "metrics file unreadable",
        "skipped: only 100 s left of the part's 470 s, it needs 150",
    ]


def generation_metrics(tpot: float, ttft: float = 0.2, utilisation: float | None = None, **extra) -> dict:
    """A metrics file of a finished S5 run as the generation programs write it: 128 sequences,
    128 -> 2048 tokens, one timed generate call."""
    call = ttft + 2047 * tpot
    bandwidth = None if utilisation is None else utilisation * 4.8e12  # the H200's HBM
    return {
        "schema": "benchc-metrics", "schema_version": 1, "status": "ok", "experiment": "beluga_70b_infer",
        "target": "h200", "point": "default", "smoke": False, "workload": "infer", "error": None,
        "startup_s": 17.0, "first_step_s": call + 45.0, "warmup_s": call + 45.0,
        "steps": {"total": 2, "warmup": 1, "measured": 1},
        "step_time_s": {"median": call, "p10": call, "p90": call, "mean": call, "all": [call]},
        "throughput": {"unit": "output tokens/s", "job": 128 * 2048 / call, "per_device": 128 * 2048 / call,
                       "samples_per_step": 128},
        "generation": {"batch": 128, "input_tokens": 128, "output_tokens": 2048, "ttft_s": ttft,
                       "tpot_s": tpot, "decode_bytes_per_s": bandwidth,
                       "decode_hbm_utilisation": utilisation, "first_sequence": [1, 2]},
        "peak_memory_bytes": 17 * 2**30, **extra,
    }  # fmt: skip


def inference_events(*finished: str) -> list[str]:
    """The inference part's events as gpu_check.sh writes them, the named runs finished."""
    plans = [("s5_l40_tuned", 105, 85, "required"), ("s3", 160, 115, "required"),
             ("s5_l40_plain", 105, 80, "required"), ("s5_l2_tuned", 40, 30, "required"),
             ("s5_l10_tuned", 60, 45, "optional")]  # fmt: skip
    events = ["part\tinference\th200\tgpu\t470\t480\t10\t15"]
    events += [
        f"plan\t{name}\t{limit}\t{least}\t{kind}\t{name} described" for name, limit, least, kind in plans
    ]
    events += [
        "ratio\ttuned/plain TPOT\ts5_l40_plain\ts5_l40_tuned\t-\t-\tspeedup of tuned\ttpot_s",
        "check\ts5_l40_tuned\tdecode_hbm_utilisation\t>=\t0.6",
        "check\ts5_l40_tuned\tdecode_roofline_fraction\t>=\t0.6",
        "check\ts3\tstartup_s\t<=\t20", "check\ts3\tcompile_s\t<=\t120", "check\ts3\ts_per_image\t<=\t3.8",
        "fit\tTPOT = a + b x layers\ttpot_s\tlayers\ts5_l2_tuned=2\ts5_l10_tuned=10\ts5_l40_tuned=40",
    ]  # fmt: skip
    for name in finished:
        events += [f"start\t{name}\t100", f"end\t{name}\t0\t60"]
    return events


def test_the_summary_of_the_inference_part_shows_generation_s3_the_targets_and_the_fit(tmp_path):
    """TPOT 0.625, 1.3 and 3.95 ms at 2, 10 and 40 layers; plain 5.925 ms at 40; S3 3.5 s an
    image, its first call 95 s (no compile_s of its own); the estimates of the rank model
    (prefill 142.2 ms, decode 5.3857 s over 2047 steps) and of S3 (1.888 s a call)."""
    import statistics

    summary_module = load("gpu_summary")
    (tmp_path / "events.tsv").write_text("\n".join(inference_events(*INFERENCE_RUNS)) + "\n")
    tpots = {
        "s5_l2_tuned": 0.000625,
        "s5_l10_tuned": 0.0013,
        "s5_l40_tuned": 0.00395,
        "s5_l40_plain": 0.005925,
    }
    for name, tpot in tpots.items():
        utilisation = 0.67 if name == "s5_l40_tuned" else None
        (tmp_path / f"{name}.json").write_text(json.dumps(generation_metrics(tpot, utilisation=utilisation)))
    phases = [{"name": "prefill", "seconds": 0.1422}, {"name": "decode", "seconds": 5.3857}]
    rank = {"estimates": [{"roofline": {"seconds": 5.5279, "phases": phases}}]}
    (tmp_path / "s5_l40_tuned.estimate.json").write_text(json.dumps(rank))
    s3 = {**metrics(3.5), "workload": "infer", "first_step_s": 95.0, "startup_s": 14.0,
          "pipeline": {"s_per_image": 3.5, "denoise_s_per_image": 3.1, "denoising_steps": 30}}  # fmt: skip
    (tmp_path / "s3.json").write_text(json.dumps(s3))
    (tmp_path / "s3.estimate.json").write_text(json.dumps({"estimates": [{"roofline": {"seconds": 1.888}}]}))

    assert summary_module.main(["write", str(tmp_path)]) == 0
    summary = json.loads((tmp_path / "summary.json").read_text())
    runs = {row["run"]: row for row in summary["runs"]}
    t = runs["s5_l40_tuned"]
    call = 0.2 + 2047 * 0.00395
    assert t["tpot_s"] == 0.00395 and t["ttft_s"] == 0.2 and t["decode_hbm_utilisation"] == 0.67
    assert t["roofline_fraction"] == pytest.approx(5.5279 / call)  # tokens/s over the roofline's best
    assert t["prefill_roofline_fraction"] == pytest.approx(0.1422 / 0.2)
    assert t["decode_bound_per_token_s"] == pytest.approx(5.3857 / 2047)
    assert t["decode_roofline_fraction"] == pytest.approx(5.3857 / 2047 / 0.00395)  # 66.6 %
    assert t["decode_bytes_per_s"] == pytest.approx(0.67 * 4.8e12)
    assert t["compile_s"] == pytest.approx(call + 45) and t["compile_from"] == "first call"
    assert runs["s5_l2_tuned"]["decode_roofline_fraction"] is None  # no estimate file for it
    r3 = runs["s3"]
    assert (r3["s_per_image"], r3["denoise_s_per_image"], r3["compile_s"], r3["compile_from"]) == (
        3.5, 3.1, 95.0, "first call")  # fmt: skip
    assert r3["roofline_fraction"] == pytest.approx(1.888 / 3.5)
    checks = {(c["run"], c["field"]): (c["value"], c["result"]) for c in summary["checks"]}
    assert checks[("s5_l40_tuned", "decode_hbm_utilisation")] == (0.67, "met")
    assert checks[("s5_l40_tuned", "decode_roofline_fraction")][1] == "met"
    assert checks[("s3", "startup_s")] == (14.0, "met") and checks[("s3", "compile_s")] == (95.0, "met")
    assert checks[("s3", "s_per_image")] == (3.5, "met")
    (ratio,) = summary["ratios"]
    assert ratio["value"] == pytest.approx(1.5) and ratio["result"] == "recorded (no target)"
    (fit,) = summary["fits"]
    expected = statistics.linear_regression([2, 10, 40], [0.000625, 0.0013, 0.00395])
    assert fit["a"] == pytest.approx(expected.intercept) and fit["b"] == pytest.approx(expected.slope)
    assert fit["note"] == "least squares over 3 points" and 0 < fit["max_residual"] < 5e-5
    text = (tmp_path / "summary.md").read_text()
    row = "| s5_l40_tuned | 31,638 | 200 ms | 3.95 ms | 2.631 ms | 3,216 | 67.0% | 66.7% | 71.1% | 66.6% |"
    assert row in text
    assert "| s3 | 3.500 | 3.100 | 14.0 | 95.0 (first call) | 53.9% |" in text
    assert "| tuned/plain TPOT | 1.500 | none | recorded (no target) | speedup of tuned |" in text
    assert "| s5_l40_tuned decode_hbm_utilisation | 67.0% | >= 60% | met |" in text
    assert "| s3 s_per_image | 3.5 | <= 3.8 | met |" in text
    a, b = fit["a"] * 1e3, fit["b"] * 1e3
    fitted = f"Fit TPOT = a + b x layers: **a = {a:.4g} ms, b = {b:.4g} ms**; least squares over 3 points"
    assert fitted in text

    # the 10-layer run cut short, then the 2-layer one too: the fit is exact, then not possible
    (tmp_path / "events.tsv").write_text("\n".join(inference_events(*INFERENCE_RUNS[:4])) + "\n")
    (tmp_path / "s5_l10_tuned.json").unlink()
    (fit,) = summary_module.summarize(tmp_path)["fits"]
    assert fit["b"] == pytest.approx((0.00395 - 0.000625) / 38)
    assert fit["max_residual"] == pytest.approx(0, abs=1e-15)
    assert fit["note"] == "exact: 2 points (no check that the cost is linear)"
    (tmp_path / "s5_l2_tuned.json").unlink()
    (fit,) = summary_module.summarize(tmp_path)["fits"]
    assert fit["a"] is None and fit["note"] == "not enough runs finished (1 of 3; 2 needed)"
    text = summary_module.markdown(summary_module.summarize(tmp_path))
    assert "Finished: s5_l40_tuned (layers = 40: 3.95 ms)." in text


def test_the_fit_needs_two_distinct_points():
    fit_line = load("gpu_summary").fit_line
    rows = {"a": {"y": 1.0}, "b": {"y": 3.0}, "c": {"y": None}, "d": {"y": 5.0}}
    line = fit_line("y = a + b x", "y", "x", [("a", 1), ("b", 2), ("c", 3), ("d", 3)], rows)
    assert (line["a"], line["b"]) == (pytest.approx(-1.0), pytest.approx(2.0)) and len(line["points"]) == 3
    same = fit_line("y = a + b x", "y", "x", [("a", 1), ("b", 1)], rows)
    assert same["a"] is None and same["note"] == "not enough runs finished (2 of 2; 2 needed)"
