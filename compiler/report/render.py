"""Report sections as Markdown or HTML tables (the layout of `benchc report`)."""

from __future__ import annotations

import html

from .collect import Row, Section


def _number(value: float | None, digits: int = 1) -> str:
    if value is None:
        return "-"
    return f"{value:,.{digits}f}"


def _ms(seconds: float | None) -> float | None:
    return None if seconds is None else seconds * 1e3


def _throughput(row: Row) -> str:
    s = row.throughput
    text = _number(s.median)
    if s.ci_low is not None:
        text += f" [{_number(s.ci_low)}, {_number(s.ci_high)}]"
    if s.noisy:
        text += " (noisy)"
    return text


def _world(row: Row) -> str:
    """Processes, and the hosts they ran on where the metrics say."""
    if row.hosts is None:
        return str(row.world_size)
    return f"{row.world_size} on {row.hosts} host{'s' if row.hosts != 1 else ''}"


def _reference(row: Row) -> str:
    if not row.references:
        return "-"
    return "; ".join(f"{r.value:,g} {r.unit} (published)" for r in row.references)


def table(section: Section) -> tuple[list[str], list[list[str]]]:
    base = section.baseline
    header = ["point", "target", f"throughput ({section.rows[0].unit})" if section.rows else "throughput",
              "per device", f"vs {base}" if base else "ratio", "step p50 (ms)", "step p90 (ms)",
              "peak memory (GiB)", "MFU", "world", "trials", "reference"]  # fmt: skip
    generation = any(r.ttft_s is not None for r in section.rows)
    images = any(r.s_per_image is not None for r in section.rows)
    if generation:
        header[7:7] = ["TTFT (ms)", "TPOT (ms)"]
    if images:
        header[7:7] = ["s/image", "denoise s/image"]
    rows = []
    for row in section.rows:
        latency = [_number(_ms(row.ttft_s)), _number(_ms(row.tpot_s), 2)] if generation else []
        if images:
            latency = [_number(row.s_per_image, 3), _number(row.denoise_s_per_image, 3)]
        rows.append([
            row.point, row.target, _throughput(row), _number(row.per_device),
            f"{row.ratio:.2f}x" if row.ratio is not None else "-",
            _number(row.step_p50 * 1e3), _number(row.step_p90 * 1e3), *latency,
            _number(row.peak_memory_bytes / 2**30, 2) if row.peak_memory_bytes is not None else "-",
            f"{row.mfu:.1%}" if row.mfu is not None else "-", _world(row),
            str(row.throughput.n), _reference(row),
        ])  # fmt: skip
    return header, rows


def _title(section: Section) -> str:
    return (
        f"{section.experiment}{' (smoke: tiny model on the CPU, not a comparison)' if section.smoke else ''}"
    )


NOTES = (
    "Throughput is the median over trials for the whole job; [a, b] is the 95% confidence "
    "interval of the mean over trials (t distribution), shown from 2 trials; (noisy) marks a "
    "coefficient of variation above 5%. Ratios compare targets at the same sweep point. MFU is "
    "model FLOP/s per device over the target's dense peak; '-' where the peak is unknown. "
    "References are published figures from the spec, not measurements."
)


def markdown(sections: list[Section], chart_names: dict[str, str]) -> str:
    out = ["# benchc report", ""]
    for section in sections:
        out += [f"## {_title(section)}", ""]
        if section.rows:
            header, rows = table(section)
            out.append("| " + " | ".join(header) + " |")
            out.append("|" + "---|" * len(header))
            out += ["| " + " | ".join(cell.replace("|", "\\|") for cell in row) + " |" for row in rows]
            out.append("")
            chart = chart_names.get(_key(section))
            if chart:
                out += [f"![{section.experiment}]({chart})", ""]
        for run in section.failed:
            out.append(f"- run {run.id} ({run.target} / {run.point}): **{run.status}**: {run.cause}")
        if section.failed:
            out.append("")
    out += [NOTES, ""]
    return "\n".join(out)


def html_page(sections: list[Section], chart_names: dict[str, str]) -> str:
    out = ["<!doctype html>", "<meta charset='utf-8'>", "<title>benchc report</title>",
           "<style>body{font-family:sans-serif}table{border-collapse:collapse}"
           "td,th{border:1px solid #999;padding:4px 8px;text-align:right}</style>",
           "<h1>benchc report</h1>"]  # fmt: skip
    for section in sections:
        out.append(f"<h2>{html.escape(_title(section))}</h2>")
        if section.rows:
            header, rows = table(section)
            out.append("<table><tr>" + "".join(f"<th>{html.escape(h)}</th>" for h in header) + "</tr>")
            for row in rows:
                out.append("<tr>" + "".join(f"<td>{html.escape(c)}</td>" for c in row) + "</tr>")
            out.append("</table>")
            chart = chart_names.get(_key(section))
            if chart:
                out.append(f"<p><img src='{html.escape(chart)}' alt='{html.escape(section.experiment)}'></p>")
        for run in section.failed:
            where = html.escape(f"{run.id} ({run.target} / {run.point})")
            what = f"<b>{html.escape(run.status)}</b>: {html.escape(run.cause or '')}"
            out.append(f"<p>run {where}: {what}</p>")
    out.append(f"<p>{html.escape(NOTES)}</p>")
    return "\n".join(out) + "\n"


def _key(section: Section) -> str:
    return f"{section.experiment}{'-smoke' if section.smoke else ''}"
