"""The server's own view of a run, from its /metrics scraped before, (optionally) during and after.

Histogram figures come from bucket deltas between the first and last scrape (``parse.prom.window``), so
they cover exactly the requests the server finished in between; their percentiles are interpolated inside
buckets (Prometheus' ``histogram_quantile``), their means are exact. Gauges (KV cache, queue) are peaks over
the scrapes: with only a before and an after scrape they miss the peak (both are usually idle, and a "running
peak 0" would be false), so peaks need ``PEAK_MIN_SCRAPES``, at least one inside the run: ``--scrape-interval``.
"""

from __future__ import annotations

from dataclasses import dataclass

from llmtriage.bench.model import RawScrape
from llmtriage.facts import Histogram, MetricSnapshot
from llmtriage.parse import prom
from llmtriage.urls import public_url

PEAK_MIN_SCRAPES = 3
"""Readable scrapes a peak needs: the one before and the one after the run, and at least one during it."""
PEAK_GAUGES = ("kv_usage_ratio", "waiting", "running")


@dataclass(frozen=True, slots=True)
class ServerLatency:
    """One server histogram over the run, in ms."""

    count: int
    mean: float | None
    p50: float | None
    p90: float | None
    p95: float | None
    p99: float | None


@dataclass(frozen=True, slots=True)
class ServerFigures:
    """What the server's metrics say about the run (None: the scrape didn't have it)."""

    metrics_url: str
    scrapes: int
    window_s: float | None
    engine: str | None
    ttft_ms: ServerLatency | None
    tpot_ms: ServerLatency | None
    itl_ms: ServerLatency | None
    queue_ms: ServerLatency | None
    e2e_ms: ServerLatency | None
    requests_finished: float | None
    generation_tokens: float | None
    prompt_tokens: float | None
    preemptions: float | None
    kv_usage_peak_ratio: float | None
    waiting_peak: float | None
    running_peak: float | None
    peak_scrapes: int
    """The readable scrapes carrying the peaks' gauges; below ``PEAK_MIN_SCRAPES`` the peaks are None."""
    problems: tuple[str, ...]


def _latency(hist: Histogram | None) -> ServerLatency | None:
    if hist is None or hist.count <= 0:
        return None

    def ms(value: float | None) -> float | None:
        return None if value is None else value * 1000.0

    return ServerLatency(
        count=int(hist.count),
        mean=ms(prom.mean(hist)),
        p50=ms(prom.quantile(hist, 0.5)),
        p90=ms(prom.quantile(hist, 0.9)),
        p95=ms(prom.quantile(hist, 0.95)),
        p99=ms(prom.quantile(hist, 0.99)),
    )


def _peak(snapshots: list[MetricSnapshot], name: str) -> float | None:
    values = [s.gauges[name] for s in snapshots if name in s.gauges]
    return max(values) if len(values) >= PEAK_MIN_SCRAPES else None


def server_figures(metrics_url: str, scrapes: tuple[RawScrape, ...]) -> ServerFigures:
    """Figures from the scrapes of one run; what could not be read is listed in ``problems``."""
    metrics_url = public_url(metrics_url)
    problems: list[str] = []
    snapshots: list[MetricSnapshot] = []
    for number, raw in enumerate(scrapes, start=1):
        if raw.text is None:
            problems.append(f"scrape {number}: {raw.error}")
            continue
        snapshot, found = prom.parse_metrics(raw.text, f"{metrics_url} (scrape {number})", raw.timestamp_s)
        problems.extend(f"{p.source}: {p.message}" for p in found)
        if snapshot.sample_count:
            snapshots.append(snapshot)
    span = prom.window(snapshots)
    if span is None and scrapes:
        problems.append("fewer than two readable scrapes: no figures for the run's window")
    peak_scrapes = sum(1 for s in snapshots if any(name in s.gauges for name in PEAK_GAUGES))
    if 0 < peak_scrapes < PEAK_MIN_SCRAPES:
        problems.append(
            f"KV usage, waiting and running peaks from {peak_scrapes} scrape(s) would miss the run's peak: "
            "not given; add --scrape-interval to read them during the run"
        )
    return ServerFigures(
        metrics_url=metrics_url,
        scrapes=len(snapshots),
        window_s=None if span is None else span.seconds,
        engine=snapshots[-1].engine if snapshots else None,
        ttft_ms=None if span is None else _latency(span.histogram("ttft_seconds")),
        tpot_ms=None if span is None else _latency(span.histogram("tpot_seconds")),
        itl_ms=None if span is None else _latency(span.histogram("itl_seconds")),
        queue_ms=None if span is None else _latency(span.histogram("queue_seconds")),
        e2e_ms=None if span is None else _latency(span.histogram("e2e_seconds")),
        requests_finished=None if span is None else span.delta("requests_finished"),
        generation_tokens=None if span is None else span.delta("generation_tokens"),
        prompt_tokens=None if span is None else span.delta("prompt_tokens"),
        preemptions=None if span is None else span.delta("preemptions"),
        kv_usage_peak_ratio=_peak(snapshots, "kv_usage_ratio"),
        waiting_peak=_peak(snapshots, "waiting"),
        running_peak=_peak(snapshots, "running"),
        peak_scrapes=peak_scrapes,
        problems=tuple(problems),
    )
