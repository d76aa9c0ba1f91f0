"""The summary of a part of benchmarks/gpu_check.sh: OUT/summary.md and OUT/summary.json,
rewritten after every run, so a part cut short still reports what finished.

    python benchmarks/gpu_summary.py write OUT [--print]   # read OUT/events.tsv and the files
    python benchmarks/gpu_summary.py peak ESTIMATE.json    # the dense peak FLOP/s it names

gpu_check.sh appends one tab-separated line to OUT/events.tsv for each thing it plans or does
(the first field names the kind; the last line about a run wins):

    part   PART TARGET MODE(gpu|dry-run) PART_BUDGET_S CALL_S KILL_AFTER_S FIXED_S
    plan   RUN LIMIT_S LEAST_S required|optional DESCRIPTION
    ratio  LABEL NUMERATOR_RUN DENOMINATOR_RUN OP BOUND MEANING   value = step median / step median
    check  RUN FIELD OP BOUND                       FIELD: mfu, p90_p10, startup_s, compile_s, ...
    start  RUN LIMIT_S                              the limit it got (the plan's, or what was left)
    end    RUN EXIT_STATUS ELAPSED_S
    skip   RUN REASON

Each run's files: OUT/RUN.json (a benchc metrics file, or the hand-written loop's line, same
field names), OUT/RUN.estimate.json (`benchc estimate --json` of the same settings: the
roofline's step-time bound), OUT/RUN.log.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import sys
import tempfile
from pathlib import Path

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


def roofline_bound(estimate) -> float | None:
    """The roofline's least time for one timed unit (a training step, a generate call, a
    pipeline call) of the run's single point."""
    if not isinstance(estimate, dict) or not estimate.get("estimates"):
        return None
    return number((estimate["estimates"][0].get("roofline") or {}).get("seconds"))


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
        roofline_fraction=bound / median if bound and median else None,
        startup_s=number(m.get("startup_s")),
        compile_s=number(m.get("compile_s")),
        peak_memory_gib=memory / GIB if memory is not None else None,
    )


def summarize(out: Path) -> dict:
    part: dict = {}
    plans: dict[str, dict] = {}
    states: dict[str, dict] = {}
    ratios, checks = [], []
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
                        "bound": float(rest[4]),
                        "meaning": rest[5],
                    }
                )
            elif kind == "check":
                checks.append({"run": rest[0], "field": rest[1], "op": rest[2], "bound": float(rest[3])})
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
        a = by_run.get(ratio["numerator"], {}).get("step_median_s")
        b = by_run.get(ratio["denominator"], {}).get("step_median_s")
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
    }


def verdict(value, op: str, bound: float) -> str:
    if value is None:
        return "not measured"
    return "met" if OPS[op](value, bound) else "missed"


def fmt(value, spec: str = ".4g", suffix: str = "") -> str:
    return "" if value is None else f"{value:{spec}}{suffix}"


def markdown(s: dict) -> str:
    b = s["budget"]
    lines = [f"# GPU check, part {s['part']}: target {s['target']} ({s['mode']})", ""]
    if s["gpu"]:
        lines += [f"GPU: {'; '.join(s['gpu'])}", ""]
    optional = ", ".join(f"{name} {limit} s" for name, limit in b["optional"].items()) or "none"
    lines += [
        f"Budget: one call of {b['call_s']} s; planned {b['planned_total_s']} s = fixed {b['fixed_s']} s + "
        f"limits {' + '.join(map(str, b['required_limits_s']))} s + {b['kill_after_s']} s SIGKILL grace "
        f"each; optional runs only in the time left ({optional}); no run outlasts {b['part_budget_s']} s.",
        "",
    ]
    lines += [
        "| run | status | s used / limit | step median (s) | p90/p10 | throughput | MFU | of roofline | "
        "startup s | compile s | peak GiB |",
        "|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in s["runs"]:
        throughput = f"{r['throughput']:.4g} {r.get('unit') or ''}".strip() if r.get("throughput") else ""
        lines.append(
            f"| {r['run']}: {r['description']} | {r['status']} | {fmt(r['elapsed_s'], 'd', ' / ')}"
            f"{r['limit_s'] or r['planned_limit_s']} | "
            f"{fmt(r.get('step_median_s'))} | {fmt(r.get('p90_p10'), '.3f')} | {throughput} | "
            f"{fmt(r.get('mfu'), '.1%')} | {fmt(r.get('roofline_fraction'), '.1%')} | {fmt(r.get('startup_s'), '.1f')} | "  # noqa: E501
            f"{fmt(r.get('compile_s'), '.1f')} | {fmt(r.get('peak_memory_gib'), '.1f')} |"
        )
    if s["ratios"]:
        lines += ["", "| ratio | value | target | result | meaning |", "|---|---|---|---|---|"]
        for q in s["ratios"]:
            lines.append(
                f"| {q['ratio']} | {fmt(q['value'], '.3f')} | {q['op']} {q['bound']:g} | {q['result']} | "
                f"{q['meaning']} |"
            )
    if s["checks"]:
        lines += ["", "| target | value | bound | result |", "|---|---|---|---|"]
        for c in s["checks"]:
            spec = ".1%" if c["field"] == "mfu" else ".3g"
            bound = f"{c['bound']:.0%}" if c["field"] == "mfu" else f"{c['bound']:g}"
            lines.append(
                f"| {c['run']} {c['field']} | {fmt(c['value'], spec)} | {c['op']} {bound} | {c['result']} |"
            )
    lines += [
        "",
        "MFU: model FLOPs per second / the target's dense peak. Of roofline: `benchc estimate`'s "
        "least step time / the measured median step (1.0 = at the bound). p90/p10: spread of the "
        "measured steps.",
    ]
    return "\n".join(lines) + "\n"


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
