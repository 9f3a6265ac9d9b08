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
from llmtriage.report.timeseries import Band, Chart, Series

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
_TIME_STEPS = (1, 2, 5, 10, 15, 30, 60, 120, 300, 600, 900, 1800, 3600, 7200, 10800, 21600, 43200, 86400)


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


def line_chart(chart: Chart) -> str:
    """``chart`` as one ``<svg>`` element (series colours follow :data:`PALETTE`, as :func:`legend` shows)."""
    runs = [_runs(s) for s in chart.series]
    xs = [x for series_runs in runs for run in series_runs for x, _ in run]
    xs += [edge for band in chart.bands for edge in (band.start, band.end)]
    x_lo, x_hi = (min(xs), max(xs)) if xs else (0.0, 1.0)
    if x_hi <= x_lo:
        x_lo, x_hi = x_lo - 1.0, x_hi + 1.0
    y_lo, y_hi = _y_range(chart, runs)
    x_of = Scale(x_lo, x_hi, LEFT, PLOT_W)
    y_of = Scale(y_lo, y_hi, TOP, PLOT_H, flip=True)
    label = esc(f"{chart.title} ({chart.unit})")
    parts = [
        f'<svg class="chart" viewBox="0 0 {WIDTH} {HEIGHT}" role="img" aria-label="{label}">',
        f'<rect class="plot" x="{LEFT}" y="{TOP}" width="{PLOT_W}" height="{PLOT_H}"/>',
    ]
    for a, b, text in _merge_bands(chart.bands, x_of):
        parts.append(
            f'<rect class="band" x="{_num(a)}" y="{TOP}" width="{_num(b - a)}" height="{PLOT_H}">'
            f"<title>{esc(text)}</title></rect>"
        )
    parts.extend(_y_grid(y_lo, y_hi, y_of))
    for value, text in _x_ticks(x_lo, x_hi, chart.x_kind):
        px = _num(x_of(value))
        parts.append(f'<path class="grid" d="M{px} {TOP}V{TOP + PLOT_H}"/>')
        parts.append(f'<text class="xt" x="{px}" y="{HEIGHT - 8}">{esc(text)}</text>')
    for i, (series, series_runs) in enumerate(zip(chart.series, runs, strict=True)):
        colour = PALETTE[i % len(PALETTE)]
        path = []
        for run in series_runs:
            drawn = envelope(run, x_of)
            path.append("M" + "L".join(f"{_num(x_of(x))} {_num(y_of(y))}" for x, y in drawn))
        dash = ' stroke-dasharray="5 4"' if series.dashed else ""
        if path:
            parts.append(
                f'<path class="line" d="{"".join(path)}" stroke="{colour}"{dash}><title>{esc(series.name)}</title></path>'
            )
        few = sum(len(run) for run in series_runs) <= MARKERS_UP_TO
        dots = [p for run in series_runs if few or len(run) == 1 for p in run]
        for x, y in dots:
            parts.append(f'<circle cx="{_num(x_of(x))}" cy="{_num(y_of(y))}" r="2.5" fill="{colour}"/>')
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


def histogram(title: str, unit: str, values: Sequence[float], markers: Sequence[Marker], bins: int = 40) -> str:
    """A histogram of ``values`` (bars up to the 99.5th percentile, the rest in the last bar) as an ``<svg>``."""
    ordered = sorted(values)
    first, cut = ordered[0], ordered[min(len(ordered) - 1, math.ceil(0.995 * len(ordered)) - 1)]
    spread = cut - first
    # From 0, unless the values sit far from it: then from just below the lowest, so a tight cluster shows.
    step = nice_step(spread, 6)
    lo = min(0.0, first) if first <= spread else math.floor((first - 0.05 * spread) / step) * step
    hi = cut if cut > lo else lo + 1.0
    width = (hi - lo) / bins
    counts = [0] * bins
    for v in ordered:
        counts[min(bins - 1, max(0, int((v - lo) / width)))] += 1
    x_of = Scale(lo, hi, LEFT, PLOT_W)
    y_top = max(counts)
    y_hi = math.ceil(y_top / nice_step(y_top)) * nice_step(y_top)
    y_of = Scale(0.0, y_hi, TOP, PLOT_H, flip=True)
    label = esc(f"{title} ({unit})")
    parts = [
        f'<svg class="chart" viewBox="0 0 {WIDTH} {HEIGHT}" role="img" aria-label="{label}">',
        f'<rect class="plot" x="{LEFT}" y="{TOP}" width="{PLOT_W}" height="{PLOT_H}"/>',
    ]
    parts.extend(_y_grid(0.0, y_hi, y_of))
    for value, tick in _x_ticks(lo, hi, "value"):
        parts.append(f'<text class="xt" x="{_num(x_of(value))}" y="{HEIGHT - 8}">{esc(tick)}</text>')
    bar = PLOT_W / bins
    for i, count in enumerate(counts):
        if count:
            y = y_of(count)
            parts.append(
                f'<rect class="bar" x="{_num(LEFT + i * bar + 0.5)}" y="{_num(y)}" width="{_num(bar - 1)}" '
                f'height="{_num(TOP + PLOT_H - y)}"><title>{count}</title></rect>'
            )
    for i, marker in enumerate(m for m in markers if lo <= m.value <= hi):
        x = _num(x_of(marker.value))
        parts.append(f'<path class="marker" d="M{x} {TOP}V{TOP + PLOT_H}"/>')
        parts.append(f'<text class="mt" x="{x}" y="{TOP + 10 + 12 * i}">{esc(marker.label)}</text>')
    parts.append("</svg>")
    return "".join(parts)
