"""Evidence -> the time series the HTML report plots: GPU samples, windows between metric scrapes, log stats.

Pure: facts in, :class:`Chart` values out (every point kept; :mod:`llmtriage.report.svg` downsamples for
drawing). Times are seconds from the first sample of the chart's source; GPU samples (the host's local
clock, as ``nvidia-smi`` prints it) and scrapes (epoch seconds) each keep their own origin, named in the
chart's caption.
"""

from __future__ import annotations

import time
from collections import defaultdict
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import datetime
from itertools import pairwise

from llmtriage import catalog
from llmtriage.catalog import Thresholds
from llmtriage.facts import GpuFacts, GpuSample, LogFacts, MetricsFacts, MetricSnapshot, StatsPoint
from llmtriage.parse import prom

_EPOCH = datetime(1970, 1, 1)
_GPU_TIME_FORMATS = ("%Y/%m/%d %H:%M:%S.%f", "%Y/%m/%d %H:%M:%S", "%Y-%m-%dT%H:%M:%S.%f", "%Y-%m-%dT%H:%M:%S")


@dataclass(frozen=True, slots=True)
class Series:
    """One line of a chart: ``(x, y)`` points in x order; ``y`` None is a gap (nothing measured there)."""

    name: str
    points: tuple[tuple[float, float | None], ...]
    dashed: bool = False


@dataclass(frozen=True, slots=True)
class Band:
    """A shaded stretch of the x axis, e.g. clocks held down by a throttle reason."""

    start: float
    end: float
    label: str


@dataclass(frozen=True, slots=True)
class Chart:
    """A chart to draw: series over time (``x_kind`` "time": seconds) or over a sequence ("index", as the caption
    says: scrape, sample or stats line number)."""

    id: str
    title: str
    unit: str
    series: tuple[Series, ...]
    caption: str
    x_kind: str = "time"
    bands: tuple[Band, ...] = ()
    band_legend: str = ""
    y_max: float | None = None

    @property
    def samples(self) -> int:
        """Measured points of the longest series."""
        return max((sum(1 for _, y in s.points if y is not None) for s in self.series), default=0)


# ---------------------------------------------------------------- GPU samples


def gpu_time_s(timestamp: str | None) -> float | None:
    """An ``nvidia-smi`` timestamp (``2026/11/29 14:08:20.123``, local clock) as seconds on a naive axis."""
    if not timestamp:
        return None
    text = timestamp.strip()
    for fmt in _GPU_TIME_FORMATS:
        try:
            return (datetime.strptime(text, fmt) - _EPOCH).total_seconds()
        except ValueError:
            continue
    return None


def _gpu_axis(samples: Sequence[GpuSample]) -> tuple[list[float], str, str]:
    """The x of each sample, the caption saying what x is, and the axis kind."""
    times = [gpu_time_s(s.timestamp) for s in samples]
    known = [t for t in times if t is not None]
    if len(known) == len(times) and known:
        origin = min(known)
        first = samples[known.index(origin)].timestamp
        return [t - origin for t in known], f"t = 0 at {first} (first GPU sample, the GPU host's clock)", "time"
    # No usable timestamps: the rows of each GPU in file order.
    counters: dict[int | None, int] = defaultdict(int)
    xs = []
    for s in samples:
        xs.append(float(counters[s.index]))
        counters[s.index] += 1
    return xs, "x = sample number (the GPU samples carry no readable timestamps)", "index"


def _per_gpu(samples: Sequence[GpuSample], xs: Sequence[float]) -> dict[int | None, list[tuple[float, GpuSample]]]:
    groups: dict[int | None, list[tuple[float, GpuSample]]] = defaultdict(list)
    for x, s in zip(xs, samples, strict=True):
        groups[s.index].append((x, s))
    for rows in groups.values():
        rows.sort(key=lambda row: row[0])
    return dict(sorted(groups.items(), key=lambda kv: -1 if kv[0] is None else kv[0]))


def _gpu_name(index: int | None, many: bool) -> str:
    if not many:
        return ""
    return "GPU ?" if index is None else f"GPU {index}"


def _gpu_series(
    groups: dict[int | None, list[tuple[float, GpuSample]]],
    value: Callable[[GpuSample], float | None],
    name: str,
    dashed: bool = False,
) -> list[Series]:
    many = len(groups) > 1
    out = []
    for index, rows in groups.items():
        points = tuple((x, value(s)) for x, s in rows)
        if any(y is not None for _, y in points):
            label = " ".join(p for p in (_gpu_name(index, many), name) if p)
            out.append(Series(label, points, dashed))
    return out


def _mib_to_gib(value: float | None) -> float | None:
    return None if value is None else value / 1024.0


def _throttle_bands(groups: dict[int | None, list[tuple[float, GpuSample]]]) -> tuple[list[Band], str]:
    """Stretches where a power or heat reason held the clocks down, and a line naming the reasons seen."""
    fields = catalog.nvidia_smi_fields()
    labels = {r.field: r.label for r in fields.reasons}
    bands: list[Band] = []
    seen: dict[str, int] = defaultdict(int)
    many = len(groups) > 1
    for index, rows in groups.items():
        steps = [b[0] - a[0] for a, b in pairwise(rows) if b[0] > a[0]]
        step = sorted(steps)[len(steps) // 2] if steps else 1.0
        for i, (x, sample) in enumerate(rows):
            active = [r for r in sample.clocks_event_reasons or () if fields.is_throttle(r)]
            if not active:
                continue
            for r in active:
                seen[labels.get(r, r)] += 1
            end = rows[i + 1][0] if i + 1 < len(rows) else x + step
            who = _gpu_name(index, many)
            text = ", ".join(labels.get(r, r) for r in active)
            bands.append(Band(x, end, f"{who}: {text}" if who else text))
    if not seen:
        return [], ""
    legend = "Shaded: clocks held down by " + ", ".join(f"{label} ({n} samples)" for label, n in sorted(seen.items()))
    return bands, legend


def gpu_charts(gpu: GpuFacts | None) -> list[Chart]:
    """GPU memory used/total, power, temperature and SM clock (throttle reasons shaded) over the samples."""
    if gpu is None or not gpu.samples:
        return []
    xs, caption, x_kind = _gpu_axis(gpu.samples)
    groups = _per_gpu(gpu.samples, xs)
    memory = [
        *_gpu_series(groups, lambda s: _mib_to_gib(s.memory_used_mib), "used"),
        *_gpu_series(groups, lambda s: _mib_to_gib(s.memory_total_mib), "total", dashed=True),
    ]
    power = [
        *_gpu_series(groups, lambda s: s.power_draw_w, "draw"),
        *_gpu_series(groups, lambda s: s.power_limit_w, "limit", dashed=True),
    ]
    temperature = _gpu_series(groups, lambda s: s.temperature_c, "temperature")
    clock = [
        *_gpu_series(groups, lambda s: s.sm_clock_mhz, "SM clock"),
        *_gpu_series(groups, lambda s: s.sm_clock_max_mhz, "max", dashed=True),
    ]
    bands, band_legend = _throttle_bands(groups)
    charts = [
        Chart("gpu-memory", "GPU memory", "GiB", tuple(memory), caption, x_kind),
        Chart("gpu-power", "GPU power", "W", tuple(power), caption, x_kind),
        Chart("gpu-temperature", "GPU temperature", "°C", tuple(temperature), caption, x_kind),
        Chart(
            "gpu-clock",
            "SM clock and throttle reasons",
            "MHz",
            tuple(clock),
            caption,
            x_kind,
            bands=tuple(bands),
            band_legend=band_legend,
        ),
    ]
    return [c for c in charts if c.series or c.bands]


# ---------------------------------------------------------------- metric scrapes


def _scrape_axis(snapshots: Sequence[MetricSnapshot]) -> tuple[list[float], str, str]:
    stamps = [s.timestamp_s for s in snapshots]
    if all(t is not None for t in stamps):
        known = [t for t in stamps if t is not None]
        origin = known[0]
        when = time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime(origin))
        return [t - origin for t in known], f"t = 0 at {when} (first scrape)", "time"
    return [float(i) for i in range(len(snapshots))], "x = scrape number (the scrapes carry no times)", "index"


def _window_p95(window: prom.Window, name: str, scale: float) -> float | None:
    value = prom.quantile(window.histogram(name), 0.95)
    return None if value is None else value * scale


def _slo_series(name: str, xs: Sequence[float], value: float) -> Series:
    return Series(name, ((xs[0], value), (xs[-1], value)), dashed=True)


def metric_charts(metrics: MetricsFacts | None, thresholds: Thresholds) -> list[Chart]:
    """TTFT, TPOT and ITL p95 per window between consecutive scrapes, running/waiting, KV usage, token rates."""
    if metrics is None or not metrics.snapshots:
        return []
    snaps = metrics.snapshots
    xs, caption, x_kind = _scrape_axis(snaps)
    charts = []
    windows = [
        (xs[i], prom.Window(snaps[i - 1], snaps[i], xs[i] - xs[i - 1] if xs[i] > xs[i - 1] else None))
        for i in range(1, len(snaps))
    ]
    window_caption = caption + "; each point: the window since the previous scrape"
    ttft = Series("TTFT p95", tuple((x, _window_p95(w, "ttft_seconds", 1.0)) for x, w in windows))
    if ttft.points and any(y is not None for _, y in ttft.points):
        slo = _slo_series(
            f"SLO {thresholds.slo.ttft_p95_s:g} s", [p[0] for p in ttft.points], thresholds.slo.ttft_p95_s
        )
        charts.append(Chart("ttft", "Time to first token, p95", "s", (ttft, slo), window_caption, x_kind))
    decode = [
        Series(label, tuple((x, _window_p95(w, name, 1000.0)) for x, w in windows))
        for label, name in (("TPOT p95", "tpot_seconds"), ("ITL p95", "itl_seconds"))
    ]
    decode = [s for s in decode if any(y is not None for _, y in s.points)]
    if decode:
        slo_ms = thresholds.slo.itl_p95_s * 1000.0
        decode.append(_slo_series(f"SLO {slo_ms:g} ms", [p[0] for p in decode[0].points], slo_ms))
        charts.append(
            Chart(
                "decode",
                "Time per output token and inter-token latency, p95",
                "ms",
                tuple(decode),
                window_caption,
                x_kind,
            )
        )
    queue = [
        Series(label, tuple((x, s.gauges.get(name)) for x, s in zip(xs, snaps, strict=True)))
        for label, name in (("running", "running"), ("waiting", "waiting"))
    ]
    queue = [s for s in queue if any(y is not None for _, y in s.points)]
    if queue:
        charts.append(Chart("requests", "Requests running and waiting", "requests", tuple(queue), caption, x_kind))
    kv = Series(
        "KV cache usage",
        tuple(
            (x, None if (v := s.gauges.get("kv_usage_ratio")) is None else v * 100.0)
            for x, s in zip(xs, snaps, strict=True)
        ),
    )
    if any(y is not None for _, y in kv.points):
        high = _slo_series(f"nearly full ({thresholds.kv_usage_high:.0%})", xs, thresholds.kv_usage_high * 100.0)
        charts.append(Chart("kv", "KV cache usage", "%", (kv, high), caption, x_kind, y_max=100.0))
    if x_kind == "time":
        rates = [
            Series(label, tuple((x, w.rate(name)) for x, w in windows))
            for label, name in (("prompt", "prompt_tokens"), ("generation", "generation_tokens"))
        ]
        rates = [s for s in rates if any(y is not None for _, y in s.points)]
        if rates:
            charts.append(Chart("throughput", "Token throughput", "tokens/s", tuple(rates), window_caption, x_kind))
    return charts


# ---------------------------------------------------------------- the log's periodic stats lines


def _stats_series(stats: Sequence[StatsPoint], label: str, value: Callable[[StatsPoint], float | None]) -> Series:
    return Series(label, tuple((float(i), value(p)) for i, p in enumerate(stats)))


def log_stats_charts(logs: LogFacts | None, covered: set[str]) -> list[Chart]:
    """Requests, KV usage and token rates from the engine's periodic stats lines, for what scrapes did not cover."""
    if logs is None or not logs.stats:
        return []
    stats = logs.stats
    caption = f"x = periodic stats line of {stats[0].source}, in log order ({len(stats)} lines)"
    wanted: list[tuple[str, str, str, list[tuple[str, Callable[[StatsPoint], float | None]]], float | None]] = [
        (
            "requests",
            "Requests running and waiting",
            "requests",
            [("running", lambda p: p.running), ("waiting", lambda p: p.waiting)],
            None,
        ),
        (
            "kv",
            "KV cache usage",
            "%",
            [("KV cache usage", lambda p: None if p.kv_usage_ratio is None else p.kv_usage_ratio * 100.0)],
            100.0,
        ),
        (
            "throughput",
            "Token throughput",
            "tokens/s",
            [("prompt", lambda p: p.prompt_tps), ("generation", lambda p: p.generation_tps)],
            None,
        ),
    ]
    charts = []
    for chart_id, title, unit, lines, y_max in wanted:
        if chart_id in covered:
            continue
        series = [_stats_series(stats, label, value) for label, value in lines]
        series = [s for s in series if any(y is not None for _, y in s.points)]
        if series:
            charts.append(
                Chart(
                    f"log-{chart_id}",
                    title + " (server log)",
                    unit,
                    tuple(series),
                    caption,
                    "index",
                    y_max=y_max,
                )
            )
    return charts


def charts(
    gpu: GpuFacts | None, metrics: MetricsFacts | None, logs: LogFacts | None, thresholds: Thresholds
) -> list[Chart]:
    """Every chart the evidence supports: GPU memory, the scrapes, the log's stats for what scrapes lack, the GPU."""
    from_metrics = metric_charts(metrics, thresholds)
    covered = {c.id for c in from_metrics}
    from_gpu = gpu_charts(gpu)
    memory = [c for c in from_gpu if c.id == "gpu-memory"]
    rest = [c for c in from_gpu if c.id != "gpu-memory"]
    return [*memory, *from_metrics, *log_stats_charts(logs, covered), *rest]
