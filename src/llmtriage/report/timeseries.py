"""Evidence -> the time series the HTML report plots: GPU samples, windows between metric scrapes, log stats.

Pure: facts in, :class:`Chart` values out (every point kept; :mod:`llmtriage.report.svg` downsamples for
drawing). :func:`over_time` puts every chart of a page on one axis, the incident's wall clock (UTC): scrapes carry
epoch seconds; the load test's requests are placed by its own scrape or start time; GPU samples and the log's
stats lines carry the host's local clock, shifted by the whole quarter hours that bring them next to the scrapes
(the host's zone; a bundle does not name it). Each :class:`Timeline` note says what was done. The breach of an
SLO and the first error are marked on it.
"""

from __future__ import annotations

import dataclasses
import re
import time
from collections import defaultdict
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import datetime
from itertools import pairwise

from llmtriage import catalog
from llmtriage.catalog import Thresholds
from llmtriage.facts import GpuFacts, GpuSample, LogEvent, LogFacts, MetricsFacts, MetricSnapshot, StatsPoint
from llmtriage.parse import prom
from llmtriage.report.bench import BenchRun

_EPOCH = datetime(1970, 1, 1)
# vLLM "INFO 12-01 11:44:48 [", SGLang "[2026-12-01 11:44:48]": the server host's local clock.
_LOG_TIME = re.compile(r"(?<!\d)(?:(\d{4})-)?(\d\d)-(\d\d)[ T](\d\d):(\d\d):(\d\d)(?!\d)")
ZONE_STEP_S = 900.0
"""Time zones are whole quarter hours from UTC."""
ZONE_SLACK_S = 300.0
"""A local clock this close to a quarter-hour shift of the reference is taken to be that zone."""
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
    dots: bool = False
    """Draw points only (one per request), no line."""

    @property
    def samples(self) -> int:
        """Measured points of the longest series (dashed lines are references, such as an SLO, not measurements)."""
        return max((sum(1 for _, y in s.points if y is not None) for s in self.series if not s.dashed), default=0)


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


# ---------------------------------------------------------------- one time axis for the page


@dataclass(frozen=True, slots=True)
class Event:
    """A moment marked on every time chart: ``kind`` "breach" (an SLO first exceeded) or "error" (the first one)."""

    at_s: float
    kind: str
    label: str


@dataclass(frozen=True, slots=True)
class Timeline:
    """The page's time axis: x is seconds after ``origin_epoch_s`` (UTC); every time chart spans 0..``end_s``."""

    origin_epoch_s: float
    end_s: float
    notes: tuple[str, ...]
    events: tuple[Event, ...] = ()

    def clock(self, x: float, tenths: bool = False) -> str:
        """``x`` as the wall-clock time of day, UTC: ``11:44:48``, or ``11:44:48.5`` with ``tenths``."""
        if not tenths:
            return time.strftime("%H:%M:%S", time.gmtime(round(self.origin_epoch_s + x)))
        at = round((self.origin_epoch_s + x) * 10)
        return time.strftime("%H:%M:%S", time.gmtime(at // 10)) + f".{at % 10}"

    def day(self) -> str:
        return time.strftime("%Y-%m-%d", time.gmtime(self.origin_epoch_s))


@dataclass(frozen=True, slots=True)
class OverTime:
    """What the page plots: its charts and, when any has times, the one axis they share."""

    charts: list[Chart]
    timeline: Timeline | None


def zone_shift(local_first_s: float, reference_first_s: float | None) -> tuple[float, str]:
    """The shift (seconds) that puts a local clock on UTC, and how it was found: the whole quarter hours between the
    source's first reading and the reference's (scrapes, the load test), when they are that close to one."""
    if reference_first_s is None:
        return 0.0, "read as UTC (nothing else in the bundle has a time to align it with)"
    gap = reference_first_s - local_first_s
    shift = round(gap / ZONE_STEP_S) * ZONE_STEP_S
    if abs(gap - shift) > ZONE_SLACK_S:
        return 0.0, f"read as UTC: its first reading is {gap:+,.0f} s from the scrapes, no whole time zone apart"
    if shift == 0:
        return 0.0, "on UTC, as the scrapes"
    hours, rest = divmod(abs(shift), 3600)
    zone = f"{'-' if shift > 0 else '+'}{int(hours):02d}:{int(rest // 60):02d}"
    return shift, f"a local clock, read as UTC{zone} to line up with the scrapes"


def log_time_s(text: str, year: int) -> float | None:
    """The timestamp of a log line (the server's local clock) as naive epoch seconds; ``year`` where it has none."""
    m = _LOG_TIME.search(text)
    if m is None:
        return None
    try:
        month, day, hour, minute, second = (int(g) for g in m.groups()[1:])
        when = datetime(int(m.group(1) or year), month, day, hour, minute, second)
    except ValueError:
        return None
    return (when - _EPOCH).total_seconds()


def _shifted(chart: Chart, dx: float, caption: str) -> Chart:
    series = tuple(dataclasses.replace(s, points=tuple((x + dx, y) for x, y in s.points)) for s in chart.series)
    bands = tuple(Band(b.start + dx, b.end + dx, b.label) for b in chart.bands)
    return dataclasses.replace(chart, series=series, bands=bands, caption=caption)


def _span(charts: Sequence[Chart]) -> tuple[float, float] | None:
    xs = [x for c in charts for s in c.series for x, y in s.points if y is not None]
    xs += [edge for c in charts for b in c.bands for edge in (b.start, b.end)]
    return (min(xs), max(xs)) if xs else None


def _request_charts(bench: BenchRun) -> list[Chart]:
    """TTFT and E2E of every request of the load test at the time it was sent (x: seconds after its origin)."""
    done = [r for r in bench.requests if not r.error_kind]
    failed = [r for r in bench.requests if r.error_kind]
    series = [
        Series("TTFT", tuple((r.sent_s, r.ttft_ms) for r in done if r.ttft_ms is not None)),
        Series("E2E latency", tuple((r.sent_s, r.e2e_ms) for r in done if r.e2e_ms is not None)),
        Series("failed (time to the error)", tuple((r.sent_s, r.e2e_ms or 0.0) for r in failed)),
    ]
    drawn = tuple(s for s in series if s.points)
    if not drawn:
        return []
    caption = "each dot: one request of the load test (bench/requests.csv), at the time it was sent"
    return [Chart("requests-latency", "Per-request latency (load test)", "ms", drawn, caption, dots=True)]


def _first_breach(charts: Sequence[Chart], bench: BenchRun | None, dx_bench: float | None) -> Event | None:
    found: list[Event] = []
    for chart_id, measured in (("ttft", "TTFT p95"), ("decode", "TPOT p95"), ("decode", "ITL p95")):
        chart = next((c for c in charts if c.id == chart_id), None)
        if chart is None:
            continue
        slo = next((s for s in chart.series if s.dashed), None)
        line = next((s for s in chart.series if s.name == measured), None)
        if slo is None or line is None or not slo.points or slo.points[0][1] is None:
            continue
        limit = slo.points[0][1]
        over = next(((x, y) for x, y in line.points if y is not None and y > limit), None)
        if over is not None:
            found.append(
                Event(
                    over[0],
                    "breach",
                    f"{measured} over the SLO ({over[1]:.3g} > {limit:g} {chart.unit}) in the window ending here",
                )
            )
    if bench is not None and dx_bench is not None and bench.slo_ttft_ms is not None:
        slow = [r for r in bench.requests if not r.error_kind and (r.ttft_ms or 0.0) > bench.slo_ttft_ms]
        if slow:
            first = min(slow, key=lambda r: r.sent_s + (r.ttft_ms or 0.0) / 1000.0)
            at = first.sent_s + (first.ttft_ms or 0.0) / 1000.0 + dx_bench
            found.append(Event(at, "breach", f"a request's TTFT over the SLO ({first.ttft_ms:,.0f} ms)"))
    return min(found, key=lambda e: e.at_s, default=None)


def _log_error(logs: LogFacts | None, year: int) -> tuple[float, LogEvent] | None:
    """The earliest error line of the log that carries a time: its local time (naive epoch seconds) and the line."""
    timed = [
        (at, event)
        for event in (logs.events if logs is not None else ())
        if event.role == "error" and (at := log_time_s(event.text, year)) is not None
    ]
    return min(timed, key=lambda pair: (pair[0], pair[1].line), default=None)


def _first_error(
    log_error: tuple[float, LogEvent] | None, log_dx: float | None, bench: BenchRun | None, dx_bench: float | None
) -> Event | None:
    found: list[Event] = []
    if log_error is not None and log_dx is not None:
        at, event = log_error
        where = f"{event.source}:{event.line}"
        found.append(
            Event(at + log_dx, "error", f"first error in the log ({where}; the log's times are whole seconds)")
        )
    if bench is not None and dx_bench is not None:
        failed = [r for r in bench.requests if r.error_kind]
        if failed:
            first = min(failed, key=lambda r: r.sent_s + (r.e2e_ms or 0.0) / 1000.0)
            at = first.sent_s + (first.e2e_ms or 0.0) / 1000.0 + dx_bench
            found.append(Event(at, "error", f"first failed request ({first.error_kind})"))
    return min(found, key=lambda e: e.at_s, default=None)


def _log_stats_timed(logs: LogFacts, charts: Sequence[Chart], year: int) -> list[Chart]:
    """The log's stats charts with x on the lines' local clock (naive epoch seconds), when every line has a time."""
    times = [log_time_s(p.text, year) for p in logs.stats]
    known = [t for t in times if t is not None]
    if not known or len(known) != len(times):
        return list(charts)
    return [
        dataclasses.replace(
            chart,
            series=tuple(
                dataclasses.replace(s, points=tuple((known[int(x)], y) for x, y in s.points)) for s in chart.series
            ),
            x_kind="time",
        )
        for chart in charts
    ]


def _log_first(logs: LogFacts | None, year: int) -> float | None:
    """The local time of the log's first stats line or, without one, of its first error: what its zone is found by."""
    if logs is None:
        return None
    first_stats = log_time_s(logs.stats[0].text, year) if logs.stats else None
    if first_stats is not None:
        return first_stats
    error = _log_error(logs, year)
    return error[0] if error is not None else None


WINDOW_NOTE = "each point: the window since the previous scrape"


def over_time(
    gpu: GpuFacts | None,
    metrics: MetricsFacts | None,
    logs: LogFacts | None,
    thresholds: Thresholds,
    bench: BenchRun | None = None,
) -> OverTime:
    """Every chart the evidence supports, on one time axis where the sources have times: GPU memory, the scrapes
    (or the log's stats lines for what scrapes lack), the load test's requests, the rest of the GPU's readings."""
    from_metrics = metric_charts(metrics, thresholds)
    from_gpu = gpu_charts(gpu)
    from_log = log_stats_charts(logs, {c.id for c in from_metrics})
    anchored = bench if bench is not None and bench.origin_epoch_s is not None else None
    from_bench = _request_charts(anchored) if anchored is not None else []
    scrape_first = None
    if metrics is not None and from_metrics and from_metrics[0].x_kind == "time":
        scrape_first = metrics.snapshots[0].timestamp_s
    gpu_local = None
    if gpu is not None and from_gpu and from_gpu[0].x_kind == "time":
        gpu_local = min(t for s in gpu.samples if (t := gpu_time_s(s.timestamp)) is not None)
    # Epoch seconds that fix the axis; without one, the local clocks are read as UTC.
    reference = scrape_first if scrape_first is not None else (anchored.origin_epoch_s if anchored else None)
    year_of = reference if reference is not None else gpu_local
    year = time.gmtime(year_of).tm_year if year_of is not None else None
    notes: list[str] = []
    firsts: dict[str, float] = {}  # epoch seconds, per source, of its charts' x = 0
    if scrape_first is not None:
        firsts["metrics"] = scrape_first
        notes.append("scrapes of /metrics: the scraper's clock (epoch seconds)")
    if gpu_local is not None:
        shift, how = zone_shift(gpu_local, reference)
        firsts["gpu"] = gpu_local + shift
        notes.append(f"GPU samples: {how}")
    log_shift: float | None = None
    log_local = _log_first(logs, year) if year is not None else None
    if logs is not None and year is not None and log_local is not None:
        log_shift, how = zone_shift(log_local, reference if reference is not None else gpu_local)
        if from_log:
            from_log = _log_stats_timed(logs, from_log, year)
            if from_log[0].x_kind == "time":
                firsts["log"] = log_shift  # the stats charts' x are already epoch seconds: shift only
                notes.append(f"the log's stats lines: {how}")
    if anchored is not None and anchored.origin_epoch_s is not None:
        firsts["bench"] = anchored.origin_epoch_s
        notes.append(f"the load test: {anchored.origin_note}")
    starts = [firsts[k] for k in ("metrics", "gpu", "bench") if k in firsts]
    log_error = _log_error(logs, year) if year is not None else None
    if log_shift is not None and log_error is not None:
        starts.append(log_error[0] + log_shift)  # the first error belongs on the axis, even before the first sample
    if "log" in firsts:
        starts.append(min(x for c in from_log for s in c.series for x, _ in s.points) + firsts["log"])
    if not starts:
        return OverTime([*from_gpu[:1], *from_metrics, *from_log, *from_gpu[1:]], None)
    origin = min(starts)

    def place(charts: Sequence[Chart], key: str, source: str) -> list[Chart]:
        if key not in firsts:
            return list(charts)
        dx = firsts[key] - origin
        return [
            _shifted(c, dx, source + ("; " + WINDOW_NOTE if WINDOW_NOTE in c.caption else ""))
            if c.x_kind == "time"
            else c
            for c in charts
        ]

    from_metrics = place(from_metrics, "metrics", "from the server's /metrics, scraped over time")
    from_gpu = place(from_gpu, "gpu", "from the GPU samples")
    from_log = place(from_log, "log", "from the server log's periodic stats lines")
    from_bench = place(from_bench, "bench", from_bench[0].caption if from_bench else "")
    charts = [*from_gpu[:1], *from_metrics, *from_log, *from_bench, *from_gpu[1:]]
    span = _span([c for c in charts if c.x_kind == "time"])
    dx_bench = firsts["bench"] - origin if "bench" in firsts else None
    log_dx = log_shift - origin if log_shift is not None else None
    events = [
        e
        for e in (
            _first_breach(from_metrics, anchored, dx_bench),
            _first_error(log_error, log_dx, anchored, dx_bench),
        )
        if e is not None and e.at_s >= 0.0
    ]
    end = max([span[1] if span else 0.0, *(e.at_s for e in events)])
    axis = "one time axis for every chart: the incident's wall clock, UTC"
    return OverTime(charts, Timeline(origin, end, (axis, *notes), tuple(sorted(events, key=lambda e: e.at_s))))
