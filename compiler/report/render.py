"""Report sections as Markdown or HTML tables (the layout of `benchc report`).

Numbers are shown to 3 significant figures. Every text from the store is escaped for the
format it lands in."""

from __future__ import annotations

import html

from .collect import Row, Section
from .explain import bound_lines, cost_lines, runtime_lines, split_lines, tier_lines
from .headline import sig
from .prices import Prices


def _ms(seconds: float | None) -> float | None:
    return None if seconds is None else seconds * 1e3


def _summary(s) -> str:
    text = sig(s.median)
    if s.ci_low is not None:
        text += f" [{sig(s.ci_low)}, {sig(s.ci_high)}]"
    if s.noisy:
        text += " (noisy)"
    return text


def _reference(row: Row) -> str:
    if not row.references:
        return "-"
    return "; ".join(f"{sig(r.value)} {r.unit} (published)" for r in row.references)


def _world(row: Row) -> str:
    """Processes, and the hosts they ran on where the metrics say."""
    if row.hosts is None:
        return str(row.world_size)
    return f"{row.world_size} on {row.hosts} host{'s' if row.hosts != 1 else ''}"


def headline_header(section: Section) -> str:
    m, unit = section.metric, section.rows[0].headline_unit if section.rows else ""
    return f"{m.label} ({unit}{', lower is better' if m.lower_is_better else ''})"


def table(section: Section) -> tuple[list[str], list[list[str]]]:
    base, m = section.baseline, section.metric
    latency_headline = m.section is not None
    runtimes = any(r.runtime != "torch" for r in section.rows)
    header = ["point", "target", *(["runtime"] if runtimes else []), headline_header(section),
              f"vs {base} (>1 = better)" if base else "ratio", "tier"]  # fmt: skip
    unit = section.rows[0].unit if section.rows else ""
    if latency_headline:
        header.append(f"throughput ({unit})")
    header += ["per device", "step p50 (ms)", "step p90 (ms)"]
    generation = any(r.ttft_s is not None for r in section.rows) and m.name not in ("ttft_s", "tpot_s")
    images = any(r.s_per_image is not None for r in section.rows)
    if generation:
        header += ["TTFT (ms)", "TPOT (ms)"]
    if images:
        header += ["denoise s/image"] if m.name == "s_per_image" else ["s/image", "denoise s/image"]
    header += ["peak memory (GiB)", "MFU", "world", "trials", "reference"]
    rows = []
    for row in section.rows:
        cells = [row.point, row.target, *([row.runtime] if runtimes else []), _summary(row.headline),
                 f"{sig(row.ratio)}x" if row.ratio is not None else "-", row.optimize or "-"]  # fmt: skip
        if latency_headline:
            cells.append(_summary(row.throughput))
        cells += [sig(row.per_device), sig(row.step_p50 * 1e3), sig(row.step_p90 * 1e3)]
        if generation:
            cells += [sig(_ms(row.ttft_s)), sig(_ms(row.tpot_s))]
        if images:
            if m.name != "s_per_image":
                cells.append(sig(row.s_per_image))
            cells.append(sig(row.denoise_s_per_image))
        cells += [
            sig(row.peak_memory_bytes / 2**30) if row.peak_memory_bytes is not None else "-",
            f"{sig(row.mfu * 100)}%" if row.mfu is not None else "-",
            _world(row), str(row.throughput.n), _reference(row),
        ]  # fmt: skip
        rows.append(cells)
    return header, rows


def _title(section: Section) -> str:
    return (
        f"{section.experiment}{' (smoke: tiny model on the CPU, not a comparison)' if section.smoke else ''}"
    )


NOTES = (
    "The headline is the spec's measure.metric: the median over trials, with the 95% confidence "
    "interval of the mean over trials (t distribution) from 2 trials on; (noisy) marks a "
    "coefficient of variation above 5%. Ratios compare targets at the same sweep point and read "
    "as 'x better' (for a lower-is-better metric, the baseline's value over this one). MFU is "
    "model FLOP/s per device over the target's dense peak; '-' where the peak is unknown. "
    "The tier is the optimisation tier each run had (optimize = tuned or plain; '-' where its "
    "metrics predate tiers): a ratio between rows of different tiers is not the hardware's alone. "
    "References are published figures from the spec, not measurements. Numbers have 3 "
    "significant figures."
)


def _md(text: str) -> str:
    """A table cell or line from the store, inert in Markdown: one line, no tag, no column."""
    return " ".join(str(text).split()).replace("&", "&amp;").replace("<", "&lt;").replace("|", "\\|")


def explanations(section: Section, prices) -> list[tuple[str, list[str]]]:
    """The paragraphs under a section's table: why each ratio, how close each run came to its
    roofline, and what the work costs (prices from --prices FILE, else the spec's)."""
    found = []
    why = split_lines(section)
    if why:
        found.append(("Each ratio between two targets = peak ratio x MFU ratio for compute-bound work, "
                      "HBM bandwidth ratio x bandwidth utilisation ratio for generation (x device and "
                      "work ratios where they differ)", why))  # fmt: skip
    runtimes = runtime_lines(section)
    if runtimes:
        found.append(("The same point under each runtime (>1: accelerate is better)", runtimes))
    tiers = tier_lines(section)
    if tiers:
        found.append(("The same point under each tier (>1: tuned is faster)", tiers))
    found.append(("Against the roofline (benchc estimate: the least time compute, memory and "
                  "interconnect allow)", bound_lines(section)))  # fmt: skip
    found.append(("Cost per unit of work", cost_lines(section, prices or spec_prices(section))))
    return found


def spec_prices(section: Section) -> Prices | None:
    """The prices the spec's `prices` block gave, as its plan keeps them."""
    given = section.prices or {}
    table = given.get("per_device_hour")
    if not isinstance(table, dict) or not table:
        return None
    numbers = {}
    for name, value in table.items():
        if isinstance(value, (int, float)) and not isinstance(value, bool) and 0 < value < float("inf"):
            numbers[str(name)] = float(value)
    return Prices(str(given.get("currency") or "USD"), numbers, f"the spec of {section.experiment}")


def markdown(sections: list[Section], chart_names: dict[str, list[str]], prices=None) -> str:
    out = ["# benchc report", ""]
    for section in sections:
        out += [f"## {_md(_title(section))}", ""]
        if section.rows:
            header, rows = table(section)
            out.append("| " + " | ".join(_md(h) for h in header) + " |")
            out.append("|" + "---|" * len(header))
            out += ["| " + " | ".join(_md(cell) for cell in row) + " |" for row in rows]
            out.append("")
            for chart in chart_names.get(key(section), ()):
                out += [f"![{_md(section.experiment)}]({chart})", ""]
            for title, lines in explanations(section, prices):
                out += [f"{_md(title)}:", ""] + [f"- {_md(line)}" for line in lines] + [""]
        for label, why in section.unplaced:
            out.append(f"- reference {_md(label)} not shown: {_md(why)}")
        for run in section.failed:
            out.append(f"- run {_md(run.id)} ({_md(run.target)} / {_md(run.point)}): "
                       f"**{_md(run.status)}**: {_md(run.cause)}")  # fmt: skip
        if section.failed or section.unplaced:
            out.append("")
    out += [NOTES, ""]
    return "\n".join(out)


def html_page(sections: list[Section], chart_names: dict[str, list[str]], prices=None) -> str:
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
            for chart in chart_names.get(key(section), ()):
                out.append(f"<p><img src='{html.escape(chart)}' alt='{html.escape(section.experiment)}'></p>")
            for title, lines in explanations(section, prices):
                out.append(f"<p>{html.escape(title)}:</p><ul>")
                out += [f"<li>{html.escape(line)}</li>" for line in lines]
                out.append("</ul>")
        for label, why in section.unplaced:
            out.append(f"<p>reference {html.escape(label)} not shown: {html.escape(why)}</p>")
        for run in section.failed:
            where = html.escape(f"{run.id} ({run.target} / {run.point})")
            what = f"<b>{html.escape(run.status)}</b>: {html.escape(run.cause or '')}"
            out.append(f"<p>run {where}: {what}</p>")
    out.append(f"<p>{html.escape(NOTES)}</p>")
    return "\n".join(out) + "\n"


def key(section: Section) -> str:
    return f"{section.experiment}{'-smoke' if section.smoke else ''}"
