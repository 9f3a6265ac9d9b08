"""Small inline SVG charts for the HTML report: line charts over time and histograms. Pure: values in, markup out.

A long series is drawn from its envelope: the points are bucketed by pixel column (:data:`BUCKET_PX` wide)
and each bucket keeps its lowest and highest point in time order, so a one-sample spike survives while a
30-minute capture at 1 s costs a few hundred points per line. Every label is escaped.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

from llmtriage.report.markup import esc
from llmtriage.report.timeseries import Band, Chart, Series, Timeline

WIDTH = 720
HEIGHT = 220
LEFT, RIGHT, TOP, BOTTOM = 58, 14, 10, 26
PLOT_W = WIDTH - LEFT - RIGHT
PLOT_H = HEIGHT - TOP - BOTTOM
BUCKET_PX = 2.0
"""Width of one downsampling bucket, in SVG pixels."""
MARKERS_UP_TO = 40
"""Series with at most this many points are drawn with a dot on each point."""
PALETTE = ("#4e79a7", "#e15759", "#59a14f", "#f28e2b", "#b07aa1", "#76b7b2", "#edc948", "#9c755f", "#ff9da7")
_TIME_STEPS = (0.1, 0.2, 0.5, 1, 2, 5, 10, 15, 30, 60, 120, 300, 600, 900, 1800, 3600, 7200, 10800, 21600, 43200, 86400)


def _num(value: float) -> str:
    """A coordinate with one decimal, without a trailing ``.0``."""
    text = f"{value:.1f}"
    return text[:-2] if text.endswith(".0") else text


def nice_step(span: float, target_ticks: int = 5) -> float:
    """A 1, 2 or 5 times a power of ten step that cuts ``span`` into about ``target_ticks`` parts."""
    if span <= 0 or not math.isfinite(span):
        return 1.0
    raw = span / target_ticks
    power = 10.0 ** math.floor(math.log10(raw))
    return next(factor * power for factor in (1.0, 2.0, 5.0, 10.0) if raw <= factor * power * (1 + 1e-9))


def format_value(value: float) -> str:
    """A tick label: 1.5k, 20, 0.25."""
    size = abs(value)
    if size >= 1e6:
        return f"{value / 1e6:g}M"
    if size >= 1e4:
        return f"{value / 1e3:g}k"
    if size >= 100 or value == int(value):
        return f"{value:.0f}"
    return f"{value:.3g}"


def format_elapsed(seconds: float) -> str:
    """``75`` -> ``1:15``, ``3725`` -> ``1:02:05``."""
    total = round(seconds)
    hours, rest = divmod(total, 3600)
    minutes, secs = divmod(rest, 60)
    return f"{hours}:{minutes:02d}:{secs:02d}" if hours else f"{minutes}:{secs:02d}"


@dataclass(frozen=True, slots=True)
class Scale:
    """A linear map of values ``lo``..``hi`` onto ``length`` pixels from ``start`` (``flip``: upwards, for y)."""

    lo: float
    hi: float
    start: float
    length: float
    flip: bool = False

    def __call__(self, value: float) -> float:
        ratio = (value - self.lo) / (self.hi - self.lo)
        return self.start + (1.0 - ratio if self.flip else ratio) * self.length


def envelope(points: Sequence[tuple[float, float]], x_of: Scale) -> list[tuple[float, float]]:
    """Per bucket of :data:`BUCKET_PX` pixels, its lowest and highest point in time order (one when equal)."""
    out: list[tuple[float, float]] = []
    bucket: list[tuple[float, float]] = []
    current: int | None = None
    for x, y in points:
        key = math.floor((x_of(x) - x_of.start) / BUCKET_PX)
        if key != current and bucket:
            out.extend(_extremes(bucket))
            bucket = []
        current = key
        bucket.append((x, y))
    if bucket:
        out.extend(_extremes(bucket))
    return out


def _extremes(bucket: list[tuple[float, float]]) -> list[tuple[float, float]]:
    if len(bucket) <= 2:
        return bucket
    low = min(bucket, key=lambda p: p[1])
    high = max(bucket, key=lambda p: p[1])
    if low is high:
        return [low]
    return [low, high] if low[0] <= high[0] else [high, low]


def _runs(series: Series) -> list[list[tuple[float, float]]]:
    """The stretches of measured points, split at gaps."""
    runs: list[list[tuple[float, float]]] = []
    current: list[tuple[float, float]] = []
    for x, y in series.points:
        if y is None or not math.isfinite(y):
            if current:
                runs.append(current)
                current = []
            continue
        current.append((x, y))
    if current:
        runs.append(current)
    return runs


def _x_ticks(lo: float, hi: float, kind: str) -> list[tuple[float, str]]:
    """Ticks of an x axis: elapsed time ("time"), a sequence ("index": whole steps) or plain values."""
    span = hi - lo
    label = format_elapsed if kind == "time" else format_value
    if kind == "time":
        step = next((float(s) for s in _TIME_STEPS if span / s <= 8), float(_TIME_STEPS[-1]))
    elif kind == "index":
        step = max(1.0, nice_step(span, 6))
    else:
        step = nice_step(span, 6)
    first = math.ceil(lo / step - 1e-9) * step
    count = int((hi - first) / step + 1e-9) + 1
    return [(first + i * step, label(first + i * step)) for i in range(count)]


def _clock_ticks(lo: float, hi: float, timeline: Timeline) -> list[tuple[float, str]]:
    """Ticks of the page's time axis at round wall-clock times, labelled with the time of day (UTC)."""
    span = hi - lo
    # Few ticks: a label such as 11:44:48.5 must still fit between two when the chart is a phone's width.
    step = next((float(s) for s in _TIME_STEPS if span / s <= 5), float(_TIME_STEPS[-1]))
    start = timeline.origin_epoch_s
    first = math.ceil((start + lo) / step - 1e-9) * step - start
    count = int((hi - first) / step + 1e-9) + 1
    ticks = []
    for i in range(count):
        x = first + i * step
        ticks.append((x, timeline.clock(x, tenths=step < 1)))
    return ticks


def _events(timeline: Timeline, x_of: Scale) -> list[str]:
    """The breach and the first error as vertical lines across the plot, each with its label as a tooltip."""
    out = []
    for i, event in enumerate(timeline.events):
        px = x_of(event.at_s)
        x = _num(px)
        # Near the right edge the label goes to the left of its line, so it is not cut off.
        right = px > LEFT + PLOT_W - 70
        label_x, anchor = (_num(px - 3), ' style="text-anchor:end"') if right else (_num(px + 3), "")
        out.append(
            f'<path class="event {esc(event.kind)}" d="M{x} {TOP}V{TOP + PLOT_H}"><title>{esc(event.label)}</title></path>'
            f'<text class="et {esc(event.kind)}" x="{label_x}" y="{TOP + 14 + 18 * i}"{anchor}>{esc(event.kind)}</text>'
        )
    return out


def _y_grid(lo: float, hi: float, y_of: Scale) -> list[str]:
    """Horizontal grid lines with their labels."""
    step = nice_step(hi - lo)
    out = []
    for i in range(int((hi - lo) / step + 1e-6) + 1):
        value = lo + i * step
        y = _num(y_of(value))
        out.append(f'<path class="grid" d="M{LEFT} {y}H{LEFT + PLOT_W}"/>')
        out.append(f'<text class="yt" x="{LEFT - 6}" y="{y}">{esc(format_value(value))}</text>')
    return out


def _y_range(chart: Chart, runs: list[list[list[tuple[float, float]]]]) -> tuple[float, float]:
    values = [y for series_runs in runs for run in series_runs for _, y in run]
    top = max(values, default=1.0)
    bottom = min(0.0, min(values, default=0.0))
    if chart.y_max is not None:
        top = max(top, chart.y_max)
    if top <= bottom:
        top = bottom + 1.0
    step = nice_step(top - bottom)
    return bottom, math.ceil(top / step) * step


def _merge_bands(bands: Sequence[Band], x_of: Scale) -> list[tuple[float, float, str]]:
    """Bands in pixels, merged where less than a pixel apart (their labels joined, each once)."""
    merged: list[tuple[float, float, list[str]]] = []
    for band in sorted(bands, key=lambda b: b.start):
        a, b = x_of(band.start), max(x_of(band.end), x_of(band.start) + 1.0)
        if merged and a - merged[-1][1] < 1.0:
            start, end, labels = merged[-1]
            if band.label not in labels:
                labels.append(band.label)
            merged[-1] = (start, max(end, b), labels)
        else:
            merged.append((a, b, [band.label]))
    return [(a, b, "; ".join(labels)) for a, b, labels in merged]


def line_chart(chart: Chart, timeline: Timeline | None = None) -> str:
    """``chart`` as one ``<svg>`` element (series colours follow :data:`PALETTE`, as :func:`legend` shows). On the
    page's ``timeline`` a time chart spans the whole axis, with wall-clock ticks and the timeline's events."""
    runs = [_runs(s) for s in chart.series]
    on_axis = timeline is not None and chart.x_kind == "time"
    if timeline is not None and on_axis:
        x_lo, x_hi = 0.0, timeline.end_s
    else:
        xs = [x for series_runs in runs for run in series_runs for x, _ in run]
        xs += [edge for band in chart.bands for edge in (band.start, band.end)]
        x_lo, x_hi = (min(xs), max(xs)) if xs else (0.0, 1.0)
    if x_hi <= x_lo:
        x_lo, x_hi = x_lo - 1.0, x_hi + 1.0
    y_lo, y_hi = _y_range(chart, runs)
    x_of = Scale(x_lo, x_hi, LEFT, PLOT_W)
    y_of = Scale(y_lo, y_hi, TOP, PLOT_H, flip=True)
    label = esc(f"{chart.title} ({chart.unit})")
    domain = f' data-x0="{_num(x_lo)}" data-x1="{_num(x_hi)}"' if on_axis else ""
    parts = [
        f'<svg class="chart" viewBox="0 0 {WIDTH} {HEIGHT}" role="img" aria-label="{label}"{domain}>',
        f'<rect class="plot" x="{LEFT}" y="{TOP}" width="{PLOT_W}" height="{PLOT_H}"/>',
    ]
    for a, b, text in _merge_bands(chart.bands, x_of):
        parts.append(
            f'<rect class="band" x="{_num(a)}" y="{TOP}" width="{_num(b - a)}" height="{PLOT_H}">'
            f"<title>{esc(text)}</title></rect>"
        )
    parts.extend(_y_grid(y_lo, y_hi, y_of))
    ticks = (
        _clock_ticks(x_lo, x_hi, timeline) if timeline is not None and on_axis else _x_ticks(x_lo, x_hi, chart.x_kind)
    )
    for value, text in ticks:
        px = _num(x_of(value))
        parts.append(f'<path class="grid" d="M{px} {TOP}V{TOP + PLOT_H}"/>')
        parts.append(f'<text class="xt" x="{px}" y="{HEIGHT - 8}">{esc(text)}</text>')
    if timeline is not None and on_axis:
        parts.extend(_events(timeline, x_of))
    for i, (series, series_runs) in enumerate(zip(chart.series, runs, strict=True)):
        colour = PALETTE[i % len(PALETTE)]
        path = []
        if not chart.dots:
            for run in series_runs:
                drawn = envelope(run, x_of)
                path.append("M" + "L".join(f"{_num(x_of(x))} {_num(y_of(y))}" for x, y in drawn))
        dash = ' stroke-dasharray="5 4"' if series.dashed else ""
        if path:
            parts.append(
                f'<path class="line" d="{"".join(path)}" stroke="{colour}"{dash}><title>{esc(series.name)}</title></path>'
            )
        few = sum(len(run) for run in series_runs) <= MARKERS_UP_TO
        dots = [p for run in series_runs if chart.dots or few or len(run) == 1 for p in run]
        radius = 2.0 if chart.dots else 2.5
        for x, y in dots:
            parts.append(f'<circle cx="{_num(x_of(x))}" cy="{_num(y_of(y))}" r="{radius}" fill="{colour}"/>')
    parts.append("</svg>")
    return "".join(parts)


def cdf(title: str, unit: str, values: Sequence[float], markers: Sequence[Marker]) -> str:
    """The share of ``values`` at or below each value (sorted; a step per value, or its envelope) as an ``<svg>``,
    with ``markers`` (percentiles, an SLO) as labelled vertical lines."""
    ordered = sorted(values)
    n = len(ordered)
    points = [(v, 100.0 * (i + 1) / n) for i, v in enumerate(ordered)]
    lo = min(0.0, ordered[0])
    hi = max([ordered[-1], *(m.value for m in markers)])
    if hi <= lo:
        hi = lo + 1.0
    x_of = Scale(lo, hi, LEFT, PLOT_W)
    y_of = Scale(0.0, 100.0, TOP, PLOT_H, flip=True)
    label = esc(f"{title} ({unit})")
    parts = [
        f'<svg class="chart" data-kind="cdf" viewBox="0 0 {WIDTH} {HEIGHT}" role="img" aria-label="{label}">',
        f'<rect class="plot" x="{LEFT}" y="{TOP}" width="{PLOT_W}" height="{PLOT_H}"/>',
    ]
    parts.extend(_y_grid(0.0, 100.0, y_of))
    for value, tick in _x_ticks(lo, hi, "value"):
        parts.append(f'<text class="xt" x="{_num(x_of(value))}" y="{HEIGHT - 8}">{esc(tick)}</text>')
    drawn = envelope(points, x_of)
    path = "M" + "L".join(f"{_num(x_of(x))} {_num(y_of(y))}" for x, y in drawn)
    parts.append(f'<path class="line" d="{path}" stroke="{PALETTE[0]}"><title>{esc(title)}</title></path>')
    for i, marker in enumerate(markers):
        x = _num(x_of(marker.value))
        parts.append(f'<path class="marker" d="M{x} {TOP}V{TOP + PLOT_H}"/>')
        parts.append(f'<text class="mt" x="{x}" y="{TOP + 10 + 12 * i}">{esc(marker.label)}</text>')
    parts.append("</svg>")
    return "".join(parts)


def legend(chart: Chart) -> str:
    """The series names with their colours, as an HTML list."""
    items = []
    for i, series in enumerate(chart.series):
        colour = PALETTE[i % len(PALETTE)]
        style = f"border-color:{colour}" + ("" if series.dashed else f";background:{colour}")
        kind = "dash" if series.dashed else "swatch"
        items.append(f'<li><i class="{kind}" style="{style}"></i>{esc(series.name)}</li>')
    if chart.bands:
        items.append(f'<li><i class="bandkey"></i>{esc(chart.band_legend)}</li>')
    return f'<ul class="legend">{"".join(items)}</ul>'


@dataclass(frozen=True, slots=True)
class Marker:
    """A labelled vertical line on a histogram (a percentile)."""

    value: float
    label: str
