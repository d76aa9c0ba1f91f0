"""Report sections as Markdown or HTML tables (the layout of `benchc report`).

Numbers are shown to 3 significant figures. Every text from the store is escaped for the
format it lands in: in HTML every character that means markup; in Markdown (CommonMark with
GFM tables and strikethrough) every character that could open a link, an image, emphasis,
code, strikethrough, an autolink, raw HTML, an entity or a table column, and a block marker
(list, quote, heading) at the start of a line. benchc's own Markdown (headings, tables, the
links to its charts, the bold status of a failed run) is written around the escaped texts."""

from __future__ import annotations

import html
import re

from ..figures import sig
from .ceilings import calibration_of, ceiling_lines, decode_copy_share, has_measured, measured_mfu
from .collect import Row, Section
from .energy import energy_lines
from .explain import bound_lines, cost_lines, runtime_lines, split_lines, tier_lines
from .latency import latency_lines
from .prices import Prices, valid_currency, valid_price
from .profile import kernel_lines, profile_lines, profile_table, profiled
from .setup import setup_lines


def _as_is(text) -> str:
    return str(text)


def _ms(seconds: float | None) -> float | None:
    return None if seconds is None else seconds * 1e3


def _summary(s) -> str:
    text = sig(s.median)
    if s.ci_low is not None:
        text += f" [{sig(s.ci_low)}, {sig(s.ci_high)}]"
    if s.noisy:
        text += " (noisy)"
    return text


def _reference(row: Row, text=_as_is) -> str:
    if not row.references:
        return "-"
    return "; ".join(f"{sig(r.value)} {text(r.unit)} (published)" for r in row.references)


def _world(row: Row) -> str:
    """Processes, and the hosts they ran on where the metrics say."""
    if row.hosts is None:
        return str(row.world_size)
    return f"{row.world_size} on {row.hosts} host{'s' if row.hosts != 1 else ''}"


def headline_header(section: Section, text=_as_is) -> str:
    """The headline column's title; `text` escapes what came from the store (the unit)."""
    m, unit = section.metric, section.rows[0].headline_unit if section.rows else ""
    return f"{m.label} ({text(unit)}{', lower is better' if m.lower_is_better else ''})"


def table(section: Section, text=_as_is) -> tuple[list[str], list[list[str]]]:
    """The header and cells of a section's table; `text` escapes each text from the store (the
    cells' own punctuation, such as a confidence interval's brackets, is left as it is)."""
    base, m = section.baseline, section.metric
    latency_headline = m.section is not None
    runtimes = any(r.runtime != "torch" for r in section.rows)
    header = ["point", "target", *(["runtime"] if runtimes else []), headline_header(section, text),
              f"vs {text(base)} (>1 = better)" if base else "ratio", "tier"]  # fmt: skip
    unit = text(section.rows[0].unit if section.rows else "")
    if latency_headline:
        header.append(f"throughput ({unit})")
    header += ["per device", "step p50 (ms)", "step p90 (ms)"]
    generation = any(r.ttft_s is not None for r in section.rows) and m.name not in ("ttft_s", "tpot_s")
    images = any(r.s_per_image is not None for r in section.rows)
    if generation:
        header += ["TTFT (ms)", "TPOT (ms)"]
    # generation's decode is bound by memory bandwidth: its achieved bytes/s per device against
    # the datasheet's HBM bandwidth, and (calibrated) the measured copy bandwidth, not a matmul MFU
    decoding = any(r.ttft_s is not None or r.decode_bytes_per_s is not None for r in section.rows)
    if decoding:
        header += ["decode (GB/s per device)", "decode / HBM"]
    if images:
        header += ["denoise s/image"] if m.name == "s_per_image" else ["s/image", "denoise s/image"]
    measured = has_measured(section)
    measured_header = "decode / copy (measured)" if decoding else "MFU (measured)"
    header += ["peak memory (GiB)", "MFU", *([measured_header] if measured else []), "world", "trials",
               "reference"]  # fmt: skip
    swept = len(section.points) > 1  # each point against its target's first point
    if swept:
        header.append(f"vs {text(section.points[0])} (same target)")
    rows = []
    for row in section.rows:
        cells = [text(row.point), text(row.target), *([text(row.runtime)] if runtimes else []),
                 _summary(row.headline), f"{sig(row.ratio)}x" if row.ratio is not None else "-",
                 text(row.optimize) if row.optimize else "-"]  # fmt: skip
        if latency_headline:
            cells.append(_summary(row.throughput))
        cells += [sig(row.per_device), sig(row.step_p50 * 1e3), sig(row.step_p90 * 1e3)]
        if generation:
            cells += [sig(_ms(row.ttft_s)), sig(_ms(row.tpot_s))]
        if decoding:
            moved = row.decode_bytes_per_s
            cells += [sig(moved / 1e9) if moved is not None else "-", _percent(row.decode_hbm_utilisation)]
        if images:
            if m.name != "s_per_image":
                cells.append(sig(row.s_per_image))
            cells.append(sig(row.denoise_s_per_image))
        cells += [
            sig(row.peak_memory_bytes / 2**30) if row.peak_memory_bytes is not None else "-",
            f"{sig(row.mfu * 100)}%" if row.mfu is not None else "-",
            *([(_measured_decode if decoding else _measured_mfu)(section, row)] if measured else []),
            _world(row), str(row.throughput.n), _reference(row, text),
        ]  # fmt: skip
        if swept:
            cells.append(f"{sig(row.sweep_ratio)}x" if row.sweep_ratio is not None else "-")
        rows.append(cells)
    return header, rows


def _percent(share: float | None) -> str:
    return "-" if share is None else f"{sig(share * 100)}%"


def _measured_mfu(section: Section, row: Row) -> str:
    return _percent(measured_mfu(row, calibration_of(section, row)))


def _measured_decode(section: Section, row: Row) -> str:
    return _percent(decode_copy_share(row, calibration_of(section, row)))


def _smoke_note(section: Section) -> str:
    return " (smoke: tiny model on the CPU, not a comparison)" if section.smoke else ""


def _title(section: Section) -> str:
    return f"{section.experiment}{_smoke_note(section)}"


NOTES = (
    "The headline is the spec's measure.metric: the median over trials, with the 95% confidence "
    "interval of the mean over trials (t distribution) from 2 trials on; (noisy) marks a "
    "coefficient of variation above 5%. Ratios compare targets at the same sweep point and read "
    "as 'x better' (for a lower-is-better metric, the baseline's value over this one). MFU is "
    "model FLOP/s per device over the target's dense peak; '-' where the peak is unknown. "
    "Generation's decode is bound by memory bandwidth, not by the matmul peak: its decode GB/s is "
    "the bytes its decode steps must move per device (the roofline's) over their measured time, "
    "against the datasheet's HBM bandwidth and, where the target is calibrated, the measured copy "
    "bandwidth. "
    "The tier is the optimisation tier each run had (optimize = tuned or plain; '-' where its "
    "metrics predate tiers): a ratio between rows of different tiers is not the hardware's alone. "
    "References are published figures from the spec, not measurements. Numbers have 3 "
    "significant figures."
)


# Characters escaped wherever they stand: \ and ` * [ ] ~ | # (backslash escapes, which
# CommonMark allows before any ASCII punctuation), & and < (as entities: no entity, tag or
# autolink can start). An underscore between two letters or digits is left: it can neither
# open nor close emphasis. ( ) and ! need no escape once [ and ] have one: no link or image
# can form. A value is one line (its line breaks become spaces), so > and a leading marker
# matter only at the start of a line (_md_line).
_MD_ESCAPES = str.maketrans({**{c: "\\" + c for c in "\\`*[]~|#"}, "&": "&amp;", "<": "&lt;"})
_BLOCK_START = re.compile(r"[-+>=]|\d{1,9}[.)]")


def _md(text) -> str:
    """A text from the store as inert Markdown inline content: one line, no markup."""
    flat = " ".join(str(text).split()).translate(_MD_ESCAPES)
    return re.sub(r"(?<![^\W_])_|_(?![^\W_])", r"\_", flat)  # an _ not between letters or digits


def _md_line(text) -> str:
    """_md, for a text that starts a list item: a leading - + > = or 1. starts no block."""
    escaped = _md(text)
    start = _BLOCK_START.match(escaped)
    return escaped if start is None else escaped[: start.end() - 1] + "\\" + escaped[start.end() - 1 :]


def explanations(section: Section, prices) -> list[tuple[str, list[str]]]:
    """The paragraphs under a section's table: why each ratio, how close each run came to its
    roofline, and what the work costs (prices from --prices FILE, else the spec's)."""
    found = []
    given = [f"{r.target} at {r.point}: {', '.join(r.overrides)}" for r in section.rows if r.overrides]
    if given:
        found.append(("Settings given on the command line (--set), not the spec's", given))
    refused = [f"{r.target} at {r.point}: {r.no_ratio}" for r in section.rows if r.no_ratio]
    if refused:
        found.append(("No ratio where two runs did different maths (precision, batch or shapes: "
                      "the table shows -)", refused))  # fmt: skip
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
    measured = ceiling_lines(section)
    if measured:
        found.append(("Against the measured ceilings (benchc calibrate: what one device of the target "
                      "really reached; the roofline chart draws them dashed)", measured))  # fmt: skip
    if profiled(section):
        found.append(("Where each step's time goes (the profiled steps, by category; the bar chart "
                      "shows the shares)", profile_lines(section) + kernel_lines(section)))  # fmt: skip
    given = prices or spec_prices(section)
    found.append(("Cost per unit of work", cost_lines(section, given)))
    energies = energy_lines(section, given)
    if energies:
        found.append(("Energy over the measured work (the devices' own: GPU boards by NVML, Gaudi cards by "
                      "hl-smi, CPU packages by RAPL)", energies))  # fmt: skip
    latencies = latency_lines(section)
    if latencies:
        found.append(("Latency distributions (p50 / p90 / p99; each percentile the median over the "
                      "trials)", latencies))  # fmt: skip
    setups = setup_lines(section)
    if setups:
        found.append(("The setup behind the numbers (each target's latest runs)", setups))
    return found


def spec_prices(section: Section) -> Prices | None:
    """The prices the spec's `prices` block gave, as its plan keeps them: those a prices file
    may hold (a price out of range, or every price where the currency is no label, is not used,
    and the report says which targets have no price)."""
    given = section.prices or {}
    table = given.get("per_device_hour")
    if not isinstance(table, dict) or not table:
        return None
    currency = given.get("currency", "USD")  # the store is not trusted: the prices file's rules apply
    numbers = {str(name): float(value) for name, value in table.items() if valid_price(value)}
    if not valid_currency(currency):  # a currency is never guessed: no price is used
        currency, numbers = "", {}
    return Prices(currency, numbers, f"the spec of {section.experiment}")


def markdown(sections: list[Section], chart_names: dict[tuple[str, bool], list[str]], prices=None) -> str:
    """The report as Markdown; `chart_names` maps key(section) to its charts' file names (made
    of letters, digits and . _ - only, as the links' destinations need)."""
    out = ["# benchc report", ""]
    for section in sections:
        out += [f"## {_md(section.experiment)}{_smoke_note(section)}", ""]
        if section.description:
            out += [_md(section.description), ""]
        if section.rows:
            header, rows = table(section, _md)
            out.append("| " + " | ".join(header) + " |")
            out.append("|" + "---|" * len(header))
            out += ["| " + " | ".join(row) + " |" for row in rows]
            out.append("")
            for chart in chart_names.get(key(section), ()):
                out += [f"![{_md(section.experiment)}]({chart})", ""]
            if profiled(section):
                header, rows = profile_table(section, _md)
                out += ["Shares of the profiled step time:", "", "| " + " | ".join(header) + " |",
                        "|" + "---|" * len(header), *("| " + " | ".join(r) + " |" for r in rows),
                        ""]  # fmt: skip
            for title, lines in explanations(section, prices):
                out += [f"{title}:", ""] + [f"- {_md_line(line)}" for line in lines] + [""]
        for label, why in section.unplaced:
            out.append(f"- reference {_md(label)} not shown: {_md(why)}")
        for run in section.failed:
            out.append(f"- run {_md(run.id)} ({_md(run.target)} / {_md(run.point)}): "
                       f"**{_md(run.status) or '-'}**: {_md(run.cause or '')}")  # fmt: skip
        if section.failed or section.unplaced:
            out.append("")
    out += [NOTES, ""]
    return "\n".join(out)


def html_page(sections: list[Section], chart_names: dict[tuple[str, bool], list[str]], prices=None) -> str:
    out = ["<!doctype html>", "<meta charset='utf-8'>", "<title>benchc report</title>",
           "<style>body{font-family:sans-serif}table{border-collapse:collapse}"
           "td,th{border:1px solid #999;padding:4px 8px;text-align:right}</style>",
           "<h1>benchc report</h1>"]  # fmt: skip
    for section in sections:
        out.append(f"<h2>{html.escape(_title(section))}</h2>")
        if section.description:
            out.append(f"<p>{html.escape(section.description)}</p>")
        if section.rows:
            header, rows = table(section)
            out.append("<table><tr>" + "".join(f"<th>{html.escape(h)}</th>" for h in header) + "</tr>")
            for row in rows:
                out.append("<tr>" + "".join(f"<td>{html.escape(c)}</td>" for c in row) + "</tr>")
            out.append("</table>")
            for chart in chart_names.get(key(section), ()):
                out.append(f"<p><img src='{html.escape(chart)}' alt='{html.escape(section.experiment)}'></p>")
            if profiled(section):
                header, rows = profile_table(section)
                out.append("<p>Shares of the profiled step time:</p><table><tr>"
                           + "".join(f"<th>{html.escape(h)}</th>" for h in header) + "</tr>")  # fmt: skip
                out += ["<tr>" + "".join(f"<td>{html.escape(c)}</td>" for c in r) + "</tr>" for r in rows]
                out.append("</table>")
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


def key(section: Section) -> tuple[str, bool]:
    """What tells sections apart: (experiment, smoke). Never a joined text: experiment `a` in
    smoke and experiment `a-smoke` are two sections, with two sets of charts."""
    return section.experiment, section.smoke
