"""The charts: downsampling that keeps spikes, gaps, bands, axes, histograms, escaping."""

from __future__ import annotations

import math
import re

import pytest

from llmtriage.report import svg
from llmtriage.report.markup import esc
from llmtriage.report.timeseries import Band, Chart, Series

from . import series


def line(points: list[tuple[float, float | None]], name: str = "used", **kwargs: object) -> Chart:
    return Chart("c", "GPU memory", "GiB", (Series(name, tuple(points)),), "t = 0 at ...", **kwargs)  # type: ignore[arg-type]


def drawn(chart_svg: str) -> list[list[tuple[float, float]]]:
    """The sub-paths of the first line: lists of (x, y) in SVG pixels."""
    d = re.search(r'<path class="line" d="([^"]+)"', chart_svg)
    assert d is not None
    return [
        [(float(x), float(y)) for x, y in (p.split(" ") for p in part.split("L"))]
        for part in d.group(1).split("M")
        if part
    ]


def test_a_one_sample_spike_survives_downsampling() -> None:
    points: list[tuple[float, float | None]] = [(float(t), 72.0 + (t % 7) * 0.01) for t in range(1800)]
    points[1234] = (1234.0, 79.5)
    chart_svg = svg.line_chart(line(points))
    (path,) = drawn(chart_svg)
    buckets = math.ceil(svg.PLOT_W / svg.BUCKET_PX) + 1
    assert len(path) <= 2 * buckets < 1800 / 2
    top = min(y for _, y in path)  # SVG y grows downwards
    spike = next((x, y) for x, y in path if y == top)
    x_of = (1234.0 - 0.0) / 1799.0 * svg.PLOT_W + svg.LEFT
    assert spike[0] == pytest.approx(x_of, abs=0.1)
    lows = [y for _, y in path if y != top]
    assert max(lows) - min(lows) < 2.0  # the rest stays one flat band


def test_envelope_keeps_time_order_of_lows_and_highs() -> None:
    scale = svg.Scale(0.0, 10.0, 0.0, 5.0)
    bucket = [(0.0, 5.0), (0.5, 9.0), (1.0, 1.0), (1.5, 4.0)]
    assert svg.envelope(bucket, scale) == [(0.5, 9.0), (1.0, 1.0)]
    assert svg.envelope([(0.0, 2.0), (3.0, 2.0)], scale) == [(0.0, 2.0), (3.0, 2.0)]


def test_gaps_split_the_line_and_lone_points_get_a_dot() -> None:
    points: list[tuple[float, float | None]] = [(float(t), 1.0) for t in range(100)]
    points[50] = (50.0, None)
    points[52] = (52.0, None)  # 51 stands alone
    chart_svg = svg.line_chart(line(points))
    assert len(drawn(chart_svg)) == 3
    assert chart_svg.count("<circle") == 1
    few = svg.line_chart(line([(0.0, 1.0), (1.0, 2.0), (2.0, 1.5)]))
    assert few.count("<circle") == 3


def test_bands_closer_than_a_pixel_merge() -> None:
    bands = tuple(Band(float(t), float(t) + 1.0, "SW Power Cap") for t in range(0, 1800, 2))
    bands += (Band(1700.0, 1701.0, "HW Slowdown"),)
    chart_svg = svg.line_chart(line([(float(t), 1.0) for t in range(1800)], bands=bands, band_legend="shaded"))
    rects = re.findall(r'<rect class="band"[^>]*><title>([^<]*)</title>', chart_svg)
    assert len(rects) == 1 and rects[0] == "SW Power Cap; HW Slowdown"


def test_axes() -> None:
    assert [svg.nice_step(s) for s in (0.0, 1.0, 7.0, 120.0, 0.03)] == [1.0, 0.2, 2.0, 50.0, 0.01]
    assert [svg.format_elapsed(s) for s in (0, 75, 3725)] == ["0:00", "1:15", "1:02:05"]
    assert [svg.format_value(v) for v in (0.25, 20.0, 1500.0, 25000.0, 2.5e6)] == ["0.25", "20", "1500", "25k", "2.5M"]
    chart_svg = svg.line_chart(line([(float(t), float(t)) for t in range(1801)]))
    labels = re.findall(r'<text class="xt"[^>]*>([^<]*)</text>', chart_svg)
    assert labels == ["0:00", "5:00", "10:00", "15:00", "20:00", "25:00", "30:00"]


def test_every_label_is_escaped() -> None:
    chart = line([(0.0, 1.0), (1.0, 2.0)], name=series.PLANTED, bands=(Band(0.0, 1.0, series.PLANTED_BARE),))
    chart_svg, legend = svg.line_chart(chart), svg.legend(chart)
    assert "<script" not in chart_svg + legend and "<img" not in chart_svg + legend
    assert esc(series.PLANTED) in chart_svg and esc(series.PLANTED) in legend
    assert esc(series.PLANTED_BARE) in chart_svg


def test_cdf() -> None:
    values = [100.0 + (i % 50) for i in range(996)] + [5000.0] * 4
    markers = [svg.Marker(124.0, "p50"), svg.Marker(5000.0, "p99")]
    chart_svg = svg.cdf("TTFT", "ms", values, markers)
    line = re.search(r'<path class="line" d="M([^"]+)"', chart_svg)
    assert line is not None
    points = [tuple(map(float, p.split(" "))) for p in line.group(1).split("L")]
    ys = [y for _, y in points]
    assert ys == sorted(ys, reverse=True)  # the share only grows (SVG y points down)
    assert ys[-1] == pytest.approx(svg.TOP)  # 100 % at the largest value
    assert len(points) < len(values) / 4  # drawn from its envelope
    assert re.findall(r'<text class="mt"[^>]*>([^<]*)</text>', chart_svg) == ["p50", "p99"]
