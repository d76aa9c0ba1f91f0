"""The summary of a part of benchmarks/gpu_check.sh: OUT/summary.md and OUT/summary.json,
rewritten after every run, so a part cut short still reports what finished.

    python benchmarks/gpu_summary.py write OUT [--print]   # read OUT/events.tsv and the files
    python benchmarks/gpu_summary.py peak ESTIMATE.json    # the dense peak FLOP/s it names

gpu_check.sh appends one tab-separated line to OUT/events.tsv for each thing it plans or does
(the first field names the kind; the last line about a run wins):

    part   PART TARGET MODE(gpu|dry-run) PART_BUDGET_S CALL_S KILL_AFTER_S FIXED_S
    plan   RUN LIMIT_S LEAST_S required|optional DESCRIPTION
    ratio  LABEL NUMERATOR_RUN DENOMINATOR_RUN OP BOUND MEANING [FIELD]
                                  value = FIELD / FIELD (default step_median_s); OP BOUND "- -": no target
    check  RUN FIELD OP BOUND     FIELD: any of a run's row (mfu, p90_p10, startup_s, compile_s,
                                  decode_hbm_utilisation, decode_roofline_fraction, s_per_image, ...)
    fit    LABEL Y_FIELD X_NAME RUN=X ...   Y = a + b X, least squares over the runs that finished
    start  RUN LIMIT_S            the limit it got (the plan's, or what was left)
    end    RUN EXIT_STATUS ELAPSED_S
    skip   RUN REASON

Each run's files: OUT/RUN.json (a benchc metrics file, or the hand-written loop's line, same
field names), OUT/RUN.estimate.json (`benchc estimate --json` of the same settings: the
roofline's bound on the timed unit, phase by phase), OUT/RUN.log.

Fractions of the roofline (1.0 = at the bound): a run's timed unit (a training step, a
generate call, a pipeline call) is the estimate's least time / the measured median; for
generation also the prefill (its bound / TTFT) and the decode (its bound per decode step /
TPOT), beside the programs' own decode bytes/s and HBM utilisation. An inference program
that writes no compile_s gets its first (warmup) call's time, as training's compile_s is its
first warmup step.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from gpu_summary_md import markdown  # noqa: E402

OPS = {">=": lambda a, b: a >= b, "<=": lambda a, b: a <= b}
GIB = 2**30


def read_events(out: Path) -> list[list[str]]:
    path = out / "events.tsv"
    if not path.exists():
        return []
    return [line.split("\t") for line in path.read_text().splitlines() if line.strip()]


def load_json(path: Path):
    """The parsed file, None when absent, or the string 'unreadable'."""
    try:
        return json.loads(path.read_text())
    except FileNotFoundError:
        return None
    except (OSError, ValueError):
        return "unreadable"


def number(value) -> float | None:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    return float(value) if math.isfinite(value) else None


def roofline(estimate) -> dict:
    """The roofline record of the run's single point ({} when there is none)."""
    if not isinstance(estimate, dict) or not estimate.get("estimates"):
        return {}
    return estimate["estimates"][0].get("roofline") or {}


def roofline_bound(estimate) -> float | None:
    """The roofline's least time for one timed unit (a training step, a generate call, a
    pipeline call) of the run's single point."""
    return number(roofline(estimate).get("seconds"))


def phase_bound(estimate, name: str) -> float | None:
    """The least time of one phase of the timed unit (prefill, decode, ...)."""
    for phase in roofline(estimate).get("phases") or []:
        if isinstance(phase, dict) and phase.get("name") == name:
            return number(phase.get("seconds"))
    return None


def share(part: float | None, whole: float | None) -> float | None:
    return part / whole if part and whole else None


def run_row(out: Path, name: str, plan: dict, state: dict, mode: str) -> dict:
    row = {
        "run": name,
        "description": plan.get("description", ""),
        "required": plan.get("required", True),
        "planned_limit_s": plan.get("limit_s"),
        "limit_s": state.get("limit_s"),
        "exit_status": state.get("exit_status"),
        "elapsed_s": state.get("elapsed_s"),
    }
    metrics = load_json(out / f"{name}.json")
    event = state.get("event")
    if isinstance(metrics, dict):  # gpu_check.sh removes the file before the run starts
        status = metrics.get("status", "unknown")
        row["status"] = status
        if status != "ok":
            message = (metrics.get("error") or {}).get("message", "")
            row["status"] = f"{status}: {' '.join(str(message).split())[:160]}"
        fill_measures(row, metrics, load_json(out / f"{name}.estimate.json"))
        return row
    limit = state.get("limit_s")
    if metrics == "unreadable":
        row["status"] = "metrics file unreadable"
    elif event == "end":
        rc = state["exit_status"]
        why = {124: f"timed out at {limit} s", 137: f"killed after {limit} s"}.get(rc, f"exit status {rc}")
        row["status"] = f"{why}, no metrics (see {name}.log)"
    elif event == "start":
        row["status"] = f"running or cut short (limit {limit} s), no metrics yet"
    elif event == "skip":
        row["status"] = f"skipped: {state['reason']}"
    else:
        row["status"] = "dry run: compiled, not run" if mode == "dry-run" else "not run yet"
    return row


def fill_measures(row: dict, m: dict, estimate) -> None:
    steps = m.get("step_time_s") or {}
    median, p10, p90 = number(steps.get("median")), number(steps.get("p10")), number(steps.get("p90"))
    throughput = m.get("throughput") or {}
    flops = m.get("flops") or {}
    bound = roofline_bound(estimate)
    memory = number(m.get("peak_memory_bytes"))
    compile_s, compile_from = number(m.get("compile_s")), "program"
    if compile_s is None and m.get("workload") == "infer":  # the first call holds the compilation
        compile_s, compile_from = number(m.get("first_step_s")), "first call"
    row.update(
        optimize=m.get("optimize"),
        optimize_detail=m.get("optimize_detail"),
        device_name=m.get("device_name"),
        step_median_s=median,
        p90_p10=p90 / p10 if p90 and p10 else None,
        throughput=number(throughput.get("job")),
        unit=throughput.get("unit"),
        mfu=number(flops.get("mfu")),
        roofline_bound_s=bound,
        roofline_fraction=share(bound, median),
        startup_s=number(m.get("startup_s")),
        compile_s=compile_s,
        compile_from=compile_from if compile_s is not None else None,
        peak_memory_gib=memory / GIB if memory is not None else None,
    )
    energy = m.get("energy")
    if isinstance(energy, dict):  # the devices' energy over the measured work, or why none
        row.update(energy_per_unit_j=number(energy.get("per_unit_j")),
                   mean_power_w=number(energy.get("mean_w")), energy_source=energy.get("source"),
                   energy_why=energy.get("why"))  # fmt: skip
    generation, pipeline = m.get("generation"), m.get("pipeline")
    if isinstance(generation, dict):
        ttft, tpot = number(generation.get("ttft_s")), number(generation.get("tpot_s"))
        steps = (number(generation.get("output_tokens")) or 0) - 1  # decode steps of a call
        decode = phase_bound(estimate, "decode")
        per_step = decode / steps if decode is not None and steps > 0 else None
        row.update(
            ttft_s=ttft,
            tpot_s=tpot,
            decode_bytes_per_s=number(generation.get("decode_bytes_per_s")),
            decode_hbm_utilisation=number(generation.get("decode_hbm_utilisation")),
            prefill_roofline_fraction=share(phase_bound(estimate, "prefill"), ttft),
            decode_bound_per_token_s=per_step,
            decode_roofline_fraction=share(per_step, tpot),
        )
    if isinstance(pipeline, dict):
        row.update(
            s_per_image=number(pipeline.get("s_per_image")),
            denoise_s_per_image=number(pipeline.get("denoise_s_per_image")),
        )


def fit_line(label: str, y_field: str, x_name: str, runs: list[tuple[str, float]], by_run: dict) -> dict:
    """y = a + b x by least squares over the runs whose y was measured: exact with 2 points,
    not enough with fewer (or with every x the same)."""
    points = [(name, x, by_run.get(name, {}).get(y_field)) for name, x in runs]
    done = [(name, x, y) for name, x, y in points if y is not None]
    fit = {"fit": label, "y": y_field, "x": x_name, "runs": [n for n, _, _ in points], "a": None, "b": None,
           "points": [{"run": n, "x": x, "y": y} for n, x, y in done], "max_residual": None}  # fmt: skip
    xs = [x for _, x, _ in done]
    if len(set(xs)) < 2:
        fit["note"] = f"not enough runs finished ({len(done)} of {len(points)}; 2 needed)"
        return fit
    mean_x, mean_y = sum(xs) / len(done), sum(y for _, _, y in done) / len(done)
    b = sum((x - mean_x) * (y - mean_y) for _, x, y in done) / sum((x - mean_x) ** 2 for x in xs)
    a = mean_y - b * mean_x
    fit.update(a=a, b=b, max_residual=max(abs(y - a - b * x) for _, x, y in done))
    if len(done) == 2:
        fit["note"] = "exact: 2 points (no check that the cost is linear)"
    else:
        fit["note"] = f"least squares over {len(done)} points"
    return fit


def summarize(out: Path) -> dict:
    part: dict = {}
    plans: dict[str, dict] = {}
    states: dict[str, dict] = {}
    ratios, checks, fits = [], [], []
    for fields in read_events(out):
        kind, rest = fields[0], fields[1:]
        try:
            if kind == "part":
                part = {
                    "part": rest[0],
                    "target": rest[1],
                    "mode": rest[2],
                    "part_budget_s": int(rest[3]),
                    "call_s": int(rest[4]),
                    "kill_after_s": int(rest[5]),
                    "fixed_s": int(rest[6]),
                }
            elif kind == "plan":
                plans[rest[0]] = {
                    "limit_s": int(rest[1]),
                    "least_s": int(rest[2]),
                    "required": rest[3] == "required",
                    "description": rest[4],
                }
            elif kind == "ratio":
                ratios.append(
                    {
                        "ratio": rest[0],
                        "numerator": rest[1],
                        "denominator": rest[2],
                        "op": rest[3],
                        "bound": None if rest[4] == "-" else float(rest[4]),
                        "meaning": rest[5],
                        "field": rest[6] if len(rest) > 6 else "step_median_s",
                    }
                )
            elif kind == "check":
                checks.append({"run": rest[0], "field": rest[1], "op": rest[2], "bound": float(rest[3])})
            elif kind == "fit":
                runs = [(run, float(x)) for run, x in (item.split("=") for item in rest[3:])]
                fits.append((rest[0], rest[1], rest[2], runs))
            elif kind == "start":
                states[rest[0]] = {"event": "start", "limit_s": int(rest[1])}
            elif kind == "end":
                states[rest[0]] = {
                    **states.get(rest[0], {}),
                    "event": "end",
                    "exit_status": int(rest[1]),
                    "elapsed_s": int(rest[2]),
                }
            elif kind == "skip":
                states[rest[0]] = {"event": "skip", "reason": rest[1]}
        except (IndexError, ValueError):
            continue  # a line cut short by a kill: the rest still counts
    mode = part.get("mode", "gpu")
    rows = [run_row(out, name, plan, states.get(name, {}), mode) for name, plan in plans.items()]
    by_run = {row["run"]: row for row in rows}
    for ratio in ratios:
        a = by_run.get(ratio["numerator"], {}).get(ratio["field"])
        b = by_run.get(ratio["denominator"], {}).get(ratio["field"])
        ratio["value"] = a / b if a and b else None
        ratio["result"] = verdict(ratio["value"], ratio["op"], ratio["bound"])
    for check in checks:
        check["value"] = by_run.get(check["run"], {}).get(check["field"])
        check["result"] = verdict(check["value"], check["op"], check["bound"])
    required = [p["limit_s"] for p in plans.values() if p["required"]]
    grace = part.get("kill_after_s", 0)
    planned = sum(required) + grace * len(required) + part.get("fixed_s", 0)
    budget = {
        **{k: part.get(k) for k in ("call_s", "part_budget_s", "kill_after_s", "fixed_s")},
        "required_limits_s": required,
        "planned_total_s": planned,
        "optional": {n: p["limit_s"] for n, p in plans.items() if not p["required"]},
    }
    gpu = (out / "gpu.csv").read_text().strip().splitlines()[1:] if (out / "gpu.csv").exists() else []
    return {
        "part": part.get("part"),
        "target": part.get("target"),
        "mode": mode,
        "gpu": gpu,
        "budget": budget,
        "runs": rows,
        "ratios": ratios,
        "checks": checks,
        "fits": [fit_line(*fit, by_run) for fit in fits],
    }


def verdict(value, op: str, bound: float | None) -> str:
    if value is None:
        return "not measured"
    if bound is None:
        return "recorded (no target)"
    return "met" if OPS[op](value, bound) else "missed"


def write_atomically(path: Path, text: str) -> None:
    handle, temporary = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.")
    with os.fdopen(handle, "w") as f:
        f.write(text)
    os.replace(temporary, path)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description="the summary of a gpu_check.sh part")
    sub = p.add_subparsers(dest="command", required=True)
    w = sub.add_parser("write", help="rewrite OUT/summary.md and OUT/summary.json")
    w.add_argument("out", type=Path)
    w.add_argument("--print", action="store_true", help="also print summary.md")
    k = sub.add_parser("peak", help="print the dense peak FLOP/s of an estimate file")
    k.add_argument("estimate", type=Path)
    args = p.parse_args(argv)
    if args.command == "peak":
        estimate = load_json(args.estimate)
        peak = (
            number(estimate["estimates"][0]["roofline"]["peak_flops_per_device"])
            if isinstance(estimate, dict)
            else None
        )
        if peak is None:
            print(f"no peak in {args.estimate}", file=sys.stderr)
            return 1
        print(f"{peak:g}")
        return 0
    summary = summarize(args.out)
    text = markdown(summary)
    write_atomically(args.out / "summary.json", json.dumps(summary, indent=1) + "\n")
    write_atomically(args.out / "summary.md", text)
    if args.print:
        print(text, end="")
    return 0


if __name__ == "__main__":
    sys.exit(main())
