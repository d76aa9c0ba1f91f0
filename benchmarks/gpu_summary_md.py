"""OUT/summary.md of a gpu_check.sh part, from the summary that benchmarks/gpu_summary.py builds
(the same data as OUT/summary.json): the runs, then for generation its latencies and decode
bandwidth, for image pipelines the seconds per image, then the ratios, the targets (checks)
and the fits, each with its result."""

from __future__ import annotations


def fmt(value, spec: str = ".4g", suffix: str = "") -> str:
    return "" if value is None else f"{value:{spec}}{suffix}"


def seconds(value) -> str:
    """Milliseconds under a second (TPOT, a fit's coefficients), else seconds."""
    if value is None:
        return ""
    return f"{value * 1e3:.4g} ms" if abs(value) < 1 else f"{value:.4g} s"


def is_share(field: str) -> bool:
    """Fields that are fractions, shown as percentages."""
    return field == "mfu" or field.endswith(("_fraction", "_utilisation"))


def _runs(s: dict) -> list[str]:
    lines = [
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
            f"{fmt(r.get('mfu'), '.1%')} | {fmt(r.get('roofline_fraction'), '.1%')} | "
            f"{fmt(r.get('startup_s'), '.1f')} | {fmt(r.get('compile_s'), '.1f')} | "
            f"{fmt(r.get('peak_memory_gib'), '.1f')} |"
        )
    return lines


def _generation(s: dict) -> list[str]:
    rows = [r for r in s["runs"] if "tpot_s" in r]
    if not rows:
        return []
    lines = [
        "",
        "| generation | output tokens/s | TTFT | TPOT | decode bound per token | decode GB/s | "
        "HBM utilisation | of roofline: call | prefill | decode |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        rate = r.get("decode_bytes_per_s")
        lines.append(
            f"| {r['run']} | {fmt(r.get('throughput'), ',.0f')} | {seconds(r.get('ttft_s'))} | "
            f"{seconds(r.get('tpot_s'))} | {seconds(r.get('decode_bound_per_token_s'))} | "
            f"{fmt(rate / 1e9 if rate else None, ',.0f')} | {fmt(r.get('decode_hbm_utilisation'), '.1%')} | "
            f"{fmt(r.get('roofline_fraction'), '.1%')} | {fmt(r.get('prefill_roofline_fraction'), '.1%')} | "
            f"{fmt(r.get('decode_roofline_fraction'), '.1%')} |"
        )
    return lines


def _pipeline(s: dict) -> list[str]:
    rows = [r for r in s["runs"] if "s_per_image" in r]
    if not rows:
        return []
    lines = [
        "",
        "| image pipeline | s per image | denoising s per image | startup s | compile s | of roofline |",
        "|---|---|---|---|---|---|",
    ]
    for r in rows:
        source = f" ({r['compile_from']})" if r.get("compile_from") == "first call" else ""
        lines.append(
            f"| {r['run']} | {fmt(r.get('s_per_image'), '.3f')} | "
            f"{fmt(r.get('denoise_s_per_image'), '.3f')} | {fmt(r.get('startup_s'), '.1f')} | "
            f"{fmt(r.get('compile_s'), '.1f')}{source} | {fmt(r.get('roofline_fraction'), '.1%')} |"
        )
    return lines


def _ratios_and_checks(s: dict) -> list[str]:
    lines = []
    if s["ratios"]:
        lines += ["", "| ratio | value | target | result | meaning |", "|---|---|---|---|---|"]
        for q in s["ratios"]:
            target = "none" if q["bound"] is None else f"{q['op']} {q['bound']:g}"
            value = fmt(q["value"], ".3f")
            lines.append(f"| {q['ratio']} | {value} | {target} | {q['result']} | {q['meaning']} |")
    if s["checks"]:
        lines += ["", "| target | value | bound | result |", "|---|---|---|---|"]
        for c in s["checks"]:
            percent = is_share(c["field"])
            bound = f"{c['bound']:.0%}" if percent else f"{c['bound']:g}"
            value = fmt(c["value"], ".1%" if percent else ".3g")
            lines.append(f"| {c['run']} {c['field']} | {value} | {c['op']} {bound} | {c['result']} |")
    return lines


def _fits(s: dict) -> list[str]:
    lines = []
    for f in s.get("fits") or []:
        points = ", ".join(f"{p['run']} ({f['x']} = {p['x']:g}: {seconds(p['y'])})" for p in f["points"])
        if f["a"] is None:
            lines += ["", f"Fit {f['fit']}: {f['note']}. Finished: {points or 'none'}."]
            continue
        lines += [
            "",
            f"Fit {f['fit']}: **a = {seconds(f['a'])}, b = {seconds(f['b'])}**; {f['note']}, largest "
            f"residual {seconds(f['max_residual'])}. Points: {points}.",
        ]
    return lines


def markdown(s: dict) -> str:
    b = s["budget"]
    check = "Gaudi check" if str(s["target"]).startswith("gaudi") else "GPU check"
    lines = [f"# {check}, part {s['part']}: target {s['target']} ({s['mode']})", ""]
    if s["gpu"]:
        lines += [f"GPU: {'; '.join(s['gpu'])}", ""]
    optional = ", ".join(f"{name} {limit} s" for name, limit in b["optional"].items()) or "none"
    lines += [
        f"Budget: one call of {b['call_s']} s; planned {b['planned_total_s']} s = fixed {b['fixed_s']} s + "
        f"limits {' + '.join(map(str, b['required_limits_s']))} s + {b['kill_after_s']} s SIGKILL grace "
        f"each; optional runs only in the time left ({optional}); no run outlasts {b['part_budget_s']} s.",
        "",
    ]
    lines += _runs(s) + _generation(s) + _pipeline(s) + _ratios_and_checks(s) + _fits(s)
    lines += [
        "",
        "MFU: model FLOPs per second / the target's dense peak. Of roofline: `benchc estimate`'s "
        "least time / the measured median (1.0 = at the bound), of a step, a generate call or a "
        "pipeline call; for generation also the prefill (its bound / TTFT) and the decode (its "
        "bound per decode step / TPOT). HBM utilisation: the decode's bytes per second (the "
        "program's own figure) / the HBM bandwidth. p90/p10: spread of the measured steps. "
        "Compile s of an inference program without its own figure: its first (warmup) call.",
    ]
    return "\n".join(lines) + "\n"
