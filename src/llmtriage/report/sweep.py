"""A ``bench sweep`` (its ``sweep.json``) as one self-contained HTML page: the knee and the peak goodput, latency
against the offered rate (the objectives dashed, the rates past the knee shaded), and every level.

Pure: :func:`build` takes the parsed ``sweep.json`` (as ``bench sweep`` writes it, or as a user kept it: every
value is checked, every string escaped) and gives the page; ``bench sweep --out`` and ``llmtriage report`` write it.
The page shares the incident report's stylesheet (:data:`llmtriage.report.html.CSS`), not its layout.
"""

from __future__ import annotations

from typing import Any

from llmtriage.bench.result import number_at
from llmtriage.report import svg
from llmtriage.report.html import CSS, page
from llmtriage.report.markup import esc
from llmtriage.report.timeseries import Band, Chart, Series

_CSS = CSS + "tr.knee td,tr.knee th{font-weight:700;background:#e8f1fb}td.miss{color:var(--bad)}\n"


def _levels(doc: dict[str, Any]) -> list[dict[str, Any]]:
    levels = doc.get("levels")
    return [lv for lv in levels if isinstance(lv, dict)] if isinstance(levels, list) else []


def sweep_chart(doc: dict[str, Any]) -> Chart | None:
    """TTFT p95 and TPOT p95 of each level against its rate (req/s), each objective as a dashed line, and the
    rates past the knee shaded. None with fewer than two levels that have a rate: a sentence, not a plot."""
    levels = [lv for lv in _levels(doc) if number_at(lv, "rate_per_s") is not None]
    levels.sort(key=lambda lv: number_at(lv, "rate_per_s") or 0.0)
    if len(levels) < 2:
        return None
    rates = [number_at(lv, "rate_per_s") or 0.0 for lv in levels]
    series = [
        Series(name, tuple((rate, number_at(lv, *path)) for rate, lv in zip(rates, levels, strict=True)))
        for name, path in (("TTFT p95", ("ttft_ms", "p95")), ("TPOT p95", ("tpot_ms", "p95")))
    ]
    for name, key in (("TTFT objective", "ttft_p95_ms"), ("TPOT objective", "tpot_p95_ms")):
        objective = number_at(doc, "slo", key)
        if objective is not None:
            series.append(Series(name, ((rates[0], objective), (rates[-1], objective)), dashed=True))
    knee = number_at(doc, "knee", "rate_per_s")
    bands: tuple[Band, ...] = ()
    if knee is None:
        caption = "no level meets the objectives"
        bands = (Band(rates[0], rates[-1], "every level misses an objective"),)
    else:
        caption = f"knee: {knee:,.2f} req/s, the highest rate that meets the objectives"
        if knee < rates[-1]:
            bands = (Band(knee, rates[-1], "past the knee"),)
    return Chart(
        id="plot-sweep",
        title="Latency by request rate (bench sweep)",
        unit="ms",
        series=tuple(series),
        caption=caption,
        x_kind="rate",
        bands=bands,
        band_legend="past the knee",
    )


def sweep_figure(doc: dict[str, Any]) -> str | None:
    """The chart of :func:`sweep_chart` as a ``<figure>``: title, ``<svg>``, legend and caption; None when there
    is nothing to plot."""
    chart = sweep_chart(doc)
    if chart is None:
        return None
    return (
        f'<figure id="{esc(chart.id)}"><figcaption>{esc(chart.title)} <span class="dim">({esc(chart.unit)})</span>'
        f'</figcaption>{svg.line_chart(chart)}{svg.legend(chart)}<p class="cap">{esc(chart.caption)}; '
        "x: request rate (req/s)</p></figure>"
    )


def _n(value: float | None, digits: int) -> str:
    return "" if value is None else f"{value:,.{digits}f}"


def _text(value: object) -> str:
    return value if isinstance(value, str) else ""


def _slo_line(doc: dict[str, Any]) -> str:
    ttft, tpot = number_at(doc, "slo", "ttft_p95_ms"), number_at(doc, "slo", "tpot_p95_ms")
    errors = number_at(doc, "slo", "error_rate")
    parts = [
        f"TTFT p95 ≤ {ttft:g} ms" if ttft is not None else "",
        f"TPOT p95 ≤ {tpot:g} ms" if tpot is not None else "",
        f"errors ≤ {errors:.0%}" if errors is not None else "",
    ]
    return ", ".join(p for p in parts if p) or "not recorded"


def _headline(doc: dict[str, Any]) -> str:
    knee = number_at(doc, "knee", "rate_per_s")
    knee_level = _text(doc["knee"].get("level")) if isinstance(doc.get("knee"), dict) else ""
    if knee is not None:
        top = (
            f'<div class="cls">knee: {esc(_n(knee, 2))} req/s</div>'
            f"<p>the highest rate that meets the SLOs (level <code>{esc(knee_level)}</code>)</p>"
        )
    else:
        top = '<div class="cls">no level meets the SLOs</div><p>the lowest level\'s misses (below) say why</p>'
    best = number_at(doc, "best_goodput", "goodput_per_s")
    best_level = _text(doc["best_goodput"].get("level")) if isinstance(doc.get("best_goodput"), dict) else ""
    if best is not None:
        top += f"<p>peak goodput: {esc(_n(best, 2))} req/s (level <code>{esc(best_level)}</code>)</p>"
    top += f'<p class="small">SLOs: {esc(_slo_line(doc))}</p>'
    if doc.get("interrupted") is True:
        top += '<p class="bad">interrupted: the levels after the cut one did not run</p>'
    notes = doc.get("notes")
    for note in notes if isinstance(notes, list) else ():
        top += f'<p class="small dim">note: {esc(note)}</p>'
    healthy = " healthy" if knee is not None else ""
    return f'<div class="verdict{healthy}" id="verdict">{top}</div>'


def _failed_share(level: dict[str, Any]) -> str:
    measured, failed = number_at(level, "requests", "measured"), number_at(level, "requests", "failed")
    if not measured or failed is None:
        return ""
    return f"{failed / measured:.1%}"


def _table(doc: dict[str, Any]) -> str:
    """Every level from the lowest rate up (a level without a rate last), the knee's row marked."""
    levels = sorted(
        _levels(doc),
        key=lambda lv: (number_at(lv, "rate_per_s") is None, number_at(lv, "rate_per_s") or 0.0),
    )
    knee = doc["knee"].get("level") if isinstance(doc.get("knee"), dict) else None
    head = (
        "<tr><th>level</th><th>rate (req/s)</th><th>concurrency</th><th>TTFT p95 (ms)</th><th>TPOT p95 (ms)</th>"
        "<th>failed</th><th>goodput (req/s)</th><th>meets SLOs</th><th>missed</th></tr>"
    )
    rows = []
    for level in levels:
        name = _text(level.get("name"))
        concurrency = number_at(level, "concurrency")
        meets = level.get("meets_slo") is True
        missed = level.get("missed")
        cells = [
            f"<td class=n>{esc(_n(number_at(level, 'rate_per_s'), 2))}</td>",
            f"<td class=n>{esc('' if concurrency is None else f'{concurrency:g}')}</td>",
            f"<td class=n>{esc(_n(number_at(level, 'ttft_ms', 'p95'), 0))}</td>",
            f"<td class=n>{esc(_n(number_at(level, 'tpot_ms', 'p95'), 1))}</td>",
            f"<td class=n>{esc(_failed_share(level))}</td>",
            f"<td class=n>{esc(_n(number_at(level, 'goodput_per_s'), 2))}</td>",
            f"<td>{'yes' if meets else '<span class=bad>no</span>'}</td>",
            f"<td class=miss>{esc('; '.join(str(m) for m in missed) if isinstance(missed, list) else '')}</td>",
        ]
        marked = ' class="knee"' if knee is not None and name == knee else ""
        rows.append(f"<tr{marked}><th>{esc(name)}</th>{''.join(cells)}</tr>")
    if not rows:
        return "<p>No level ran.</p>"
    return f'<table id="levels">{head}{"".join(rows)}</table>'


def _plot(doc: dict[str, Any]) -> str:
    figure = sweep_figure(doc)
    if figure is not None:
        return figure
    return (
        '<p class="sparse" id="plot-sweep">Fewer than two levels with a request rate: nothing to draw a latency '
        "curve through. The table below has what was measured.</p>"
    )


def build(doc: dict[str, Any]) -> str:
    """The whole sweep page from a parsed ``sweep.json``."""
    label, model = _text(doc.get("label")), _text(doc.get("model"))
    about = f"sweep: <code>{esc(label or '(no label)')}</code>" + (f" · model: {esc(model)}" if model else "")
    return page(
        f"llmtriage bench sweep: {label}",
        _CSS,
        f'<h1>llmtriage bench sweep</h1><div class="dim small">{about}</div>\n'
        f"{_headline(doc)}\n"
        f'<section id="plot"><h2>Latency by request rate</h2>{_plot(doc)}</section>\n'
        f'<section id="table"><h2>Levels, lowest rate first</h2>{_table(doc)}'
        '<p class="small dim">Each level\'s files: <code>LEVEL/result.json</code> and <code>LEVEL/requests.csv</code> '
        "beside <code>sweep.json</code>.</p></section>\n",
    )
