"""Evidence -> the series the report plots: windows between scrapes, GPU samples, throttle bands, the log's stats."""

from __future__ import annotations

import dataclasses
import shutil
import time
from itertools import pairwise
from pathlib import Path

import pytest

from llmtriage import catalog
from llmtriage.evidence.bundle import read_evidence
from llmtriage.facts import GpuFacts, MetricsFacts
from llmtriage.parse import prom
from llmtriage.parse.nvidia_smi import parse_csv
from llmtriage.report import timeseries
from llmtriage.report.bench import read_bundle_bench
from llmtriage.report.timeseries import Chart

from ..conftest import FIXTURES
from . import series
from .conftest import SURGE_SECONDS, Rendered

LIMITS = catalog.thresholds()


def chart(charts: list[Chart], chart_id: str) -> Chart:
    return next(c for c in charts if c.id == chart_id)


def values(c: Chart, name: str) -> list[float | None]:
    return [y for _, y in next(s for s in c.series if s.name == name).points]


def test_latency_p95_per_window_between_consecutive_scrapes(surge: Rendered) -> None:
    assert surge.evidence.metrics is not None
    snaps = surge.evidence.metrics.snapshots
    assert len(snaps) == SURGE_SECONDS
    charts = timeseries.metric_charts(surge.evidence.metrics, LIMITS)
    ttft, decode = chart(charts, "ttft"), chart(charts, "decode")
    expected = [
        prom.quantile(prom.histogram_delta(a.histograms["ttft_seconds"], b.histograms["ttft_seconds"]), 0.95)
        for a, b in pairwise(snaps)
    ]
    assert values(ttft, "TTFT p95") == expected
    assert [x for x, _ in ttft.series[0].points] == [float(i) for i in range(1, SURGE_SECONDS)]
    itl = values(decode, "ITL p95")
    window = prom.histogram_delta(snaps[9].histograms["itl_seconds"], snaps[10].histograms["itl_seconds"])
    assert itl[9] == pytest.approx(1000.0 * (prom.quantile(window, 0.95) or 0.0))
    # The surge shows: calm TTFT well under the SLO, the peak far above it.
    ttft_values = [v for v in expected if v is not None]
    assert ttft_values[0] < LIMITS.slo.ttft_p95_s < max(ttft_values)
    assert values(ttft, f"SLO {LIMITS.slo.ttft_p95_s:g} s") == [LIMITS.slo.ttft_p95_s] * 2


def test_gauges_and_rates(surge: Rendered) -> None:
    assert surge.evidence.metrics is not None
    snaps = surge.evidence.metrics.snapshots
    charts = timeseries.metric_charts(surge.evidence.metrics, LIMITS)
    assert values(chart(charts, "requests"), "waiting") == [s.gauges["waiting"] for s in snaps]
    kv = values(chart(charts, "kv"), "KV cache usage")
    assert kv == [pytest.approx(100.0 * s.gauges["kv_usage_ratio"]) for s in snaps]
    generation = values(chart(charts, "throughput"), "generation")
    assert generation[4] == snaps[5].counters["generation_tokens"] - snaps[4].counters["generation_tokens"]
    assert chart(charts, "kv").y_max == 100.0


def test_gpu_series_from_the_samples(surge: Rendered) -> None:
    gpu = surge.evidence.gpu
    assert gpu is not None and len(gpu.samples) == SURGE_SECONDS
    charts = timeseries.gpu_charts(gpu)
    assert [c.id for c in charts] == ["gpu-memory", "gpu-power", "gpu-temperature", "gpu-clock"]
    memory = chart(charts, "gpu-memory")
    assert values(memory, "used") == [pytest.approx((s.memory_used_mib or 0) / 1024) for s in gpu.samples]
    assert set(values(memory, "total")) == {series.GPU_TOTAL_MIB / 1024}
    xs = [x for x, _ in memory.series[0].points]
    assert xs[0] == 0.0 and xs[-1] == pytest.approx(SURGE_SECONDS - 1, abs=1.0)
    assert memory.caption.startswith("t = 0 at 2026/11/29 14:08:20.")


def test_throttle_reasons_are_marked_where_they_were_active(surge: Rendered) -> None:
    gpu = surge.evidence.gpu
    assert gpu is not None
    clock = chart(timeseries.gpu_charts(gpu), "gpu-clock")
    capped = [s for s in gpu.samples if s.clocks_event_reasons and "sw_power_cap" in s.clocks_event_reasons]
    assert 0 < len(capped) < len(gpu.samples)
    assert len(clock.bands) == len(capped)
    assert {b.label for b in clock.bands} == {"SW Power Cap"}
    assert clock.band_legend == f"Shaded: clocks held down by SW Power Cap ({len(capped)} samples)"


@pytest.mark.parametrize(
    ("mask", "label"), [("0x0000000000000001", None), ("0x0000000000000040", "HW Thermal Slowdown")]
)
def test_only_power_and_heat_reasons_are_marked(mask: str, label: str | None) -> None:
    text = series.gpu_csv(SURGE_SECONDS).replace("0x0000000000000004", mask)
    clock = chart(timeseries.gpu_charts(GpuFacts(samples=parse_csv(text, "gpu/samples.csv").samples)), "gpu-clock")
    assert {b.label for b in clock.bands} == (set() if label is None else {label})  # idle holds nothing down


def test_several_gpus_get_a_line_each() -> None:
    parsed = parse_csv(series.gpu_csv(30, gpus=2), "gpu/samples.csv")
    charts = timeseries.gpu_charts(GpuFacts(samples=parsed.samples))
    names = [s.name for s in chart(charts, "gpu-power").series]
    assert names == ["GPU 0 draw", "GPU 1 draw", "GPU 0 limit", "GPU 1 limit"]
    assert all(len(s.points) == 30 for s in chart(charts, "gpu-power").series)


def test_without_timestamps_the_x_axis_is_the_sequence() -> None:
    text = series.gpu_csv(10).replace("2026/11/29", "sometime on")
    charts = timeseries.gpu_charts(GpuFacts(samples=parse_csv(text, "gpu/samples.csv").samples))
    memory = chart(charts, "gpu-memory")
    assert memory.x_kind == "index" and [x for x, _ in memory.series[0].points] == [float(i) for i in range(10)]
    assert memory.caption.startswith("x = sample number")


def test_scrapes_without_times_have_no_rates() -> None:
    metrics = FIXTURES / "vllm-cpu" / "metrics"
    snaps = []
    for name in ("kv-pressure-before.txt", "kv-pressure-at-peak-waiting.txt", "kv-pressure-after.txt"):
        snap, _ = prom.parse_metrics((metrics / name).read_text(), name, None)
        snaps.append(snap)
    charts = timeseries.metric_charts(MetricsFacts(snapshots=snaps), LIMITS)
    ids = [c.id for c in charts]
    assert "throughput" not in ids and "requests" in ids
    assert all(c.x_kind == "index" and c.caption.startswith("x = scrape number") for c in charts)
    assert values(chart(charts, "requests"), "waiting")[1] == 29.0


def test_the_logs_stats_lines_stand_in_for_missing_scrapes(tmp_path: Path) -> None:
    (tmp_path / "logs").mkdir()
    shutil.copy(FIXTURES / "vllm-cpu" / "logs" / "fault-c-kv-pressure.log", tmp_path / "logs" / "server.log")
    evidence = read_evidence(tmp_path)
    assert evidence.logs is not None and evidence.logs.stats
    plotted = timeseries.over_time(evidence.gpu, evidence.metrics, evidence.logs, LIMITS)
    charts = plotted.charts
    assert [c.id for c in charts] == ["log-requests", "log-kv", "log-throughput"]
    assert plotted.timeline is None and {c.x_kind for c in charts} == {"index"}  # no year, no zone: in log order
    kv = values(chart(charts, "log-kv"), "KV cache usage")
    assert kv == [
        None if p.kv_usage_ratio is None else pytest.approx(p.kv_usage_ratio * 100) for p in evidence.logs.stats
    ]
    assert max(v for v in kv if v is not None) == pytest.approx(100.0)  # the log line at the peak
    # With scrapes over the same span, the scrapes win.
    (tmp_path / "metrics").mkdir()
    for epoch_ms, name in ((1795961300000, "kv-pressure-before.txt"), (1795961310000, "kv-pressure-after.txt")):
        shutil.copy(FIXTURES / "vllm-cpu" / "metrics" / name, tmp_path / "metrics" / f"scrape-{epoch_ms}.prom")
    evidence = read_evidence(tmp_path)
    ids = [c.id for c in timeseries.over_time(evidence.gpu, evidence.metrics, evidence.logs, LIMITS).charts]
    assert not any(i.startswith("log-") for i in ids)


@pytest.mark.parametrize(
    ("stamp", "seconds"),
    [
        ("2026/11/29 14:08:20.137", 1795961300.137),
        ("2026/11/29 14:08:20", 1795961300.0),
        ("2026-11-29T14:08:20.5", 1795961300.5),
        ("[N/A]", None),
        ("", None),
        (None, None),
    ],
)
def test_gpu_time(stamp: str | None, seconds: float | None) -> None:
    got = timeseries.gpu_time_s(stamp)
    assert got == (None if seconds is None else pytest.approx(seconds))


def test_one_time_axis_for_scrapes_gpu_and_requests(surge: Rendered) -> None:
    bench = read_bundle_bench(surge.bundle)
    assert bench is not None and bench.origin_epoch_s is not None
    plotted = timeseries.over_time(surge.evidence.gpu, surge.evidence.metrics, surge.evidence.logs, LIMITS, bench)
    timeline = plotted.timeline
    assert timeline is not None and {c.x_kind for c in plotted.charts} == {"time"}
    # The GPU samples (local clock, written as UTC here) and the scrapes start in the same second: one origin.
    assert timeline.origin_epoch_s == pytest.approx(series.START_EPOCH_S, abs=1.0)
    ttft = chart(plotted.charts, "ttft")
    memory = chart(plotted.charts, "gpu-memory")
    assert ttft.series[0].points[0][0] == pytest.approx(1.0, abs=0.01)  # the window ending at the second scrape
    assert memory.series[0].points[0][0] == pytest.approx(0.0, abs=1.0)
    # The load test ran after the capture was written: its requests sit at their wall-clock time on the same axis.
    scatter = chart(plotted.charts, "requests-latency")
    first_sent = min(r.sent_s for r in bench.requests)
    assert scatter.series[0].points[0][0] >= bench.origin_epoch_s - timeline.origin_epoch_s + first_sent - 1e-6
    assert timeline.end_s >= max(x for c in plotted.charts for s in c.series for x, _ in s.points)
    # The surge's TTFT p95 crosses the 2 s SLO: the first window over it is the breach.
    breach = next(e for e in timeline.events if e.kind == "breach")
    over = next(x for x, y in ttft.series[0].points if y is not None and y > LIMITS.slo.ttft_p95_s)
    assert breach.at_s == over and "TTFT p95" in breach.label


@pytest.mark.parametrize(
    ("local", "reference", "shift"),
    [
        (1000.0, 1000.0 + 3600.0 + 20.0, 3600.0),  # local clock one hour behind UTC, sampled 20 s before
        (1000.0, 1000.0 - 5.5 * 3600.0, -5.5 * 3600.0),  # India
        (1000.0, 1000.0 + 1800.0 + 420.0, 0.0),  # 37 minutes apart: no quarter hour, read as UTC
        (1000.0, None, 0.0),
    ],
)
def test_zone_shift(local: float, reference: float | None, shift: float) -> None:
    assert timeseries.zone_shift(local, reference)[0] == shift


def test_log_time() -> None:
    vllm = "(APIServer pid=1) INFO 11-29 14:08:39 [loggers.py:335] Engine 000: Avg prompt throughput"
    assert timeseries.log_time_s(vllm, 2026) == pytest.approx(1795961319.0)
    assert timeseries.log_time_s("[2026-11-29 14:08:39] Decode batch", 1999) == pytest.approx(1795961319.0)
    assert timeseries.log_time_s("no time here", 2026) is None


def test_a_gpu_host_two_hours_east_lines_up_with_the_scrapes(surge: Rendered) -> None:
    gpu = surge.evidence.gpu
    assert gpu is not None

    def two_hours_later(stamp: str | None) -> str | None:
        seconds = timeseries.gpu_time_s(stamp)
        assert seconds is not None
        return time.strftime("%Y/%m/%d %H:%M:%S", time.gmtime(seconds + 7200)) + f".{round(seconds % 1 * 1000):03d}"

    local = dataclasses.replace(
        gpu, samples=[dataclasses.replace(s, timestamp=two_hours_later(s.timestamp)) for s in gpu.samples]
    )
    plotted = timeseries.over_time(local, surge.evidence.metrics, None, LIMITS)
    assert plotted.timeline is not None
    assert plotted.timeline.origin_epoch_s == pytest.approx(series.START_EPOCH_S, abs=1.0)
    memory = chart(plotted.charts, "gpu-memory")
    assert memory.series[0].points[0][0] == pytest.approx(0.0, abs=1.0)
    assert any("UTC+02:00" in note for note in plotted.timeline.notes)


def test_the_first_error_in_the_log_is_marked(tmp_path: Path) -> None:
    (tmp_path / "logs").mkdir()
    shutil.copy(FIXTURES / "vllm-cpu" / "logs" / "fault-c-kv-pressure.log", tmp_path / "logs" / "server.log")
    (tmp_path / "metrics").mkdir()
    for epoch_ms, name in ((1795961300000, "kv-pressure-before.txt"), (1795961310000, "kv-pressure-after.txt")):
        shutil.copy(FIXTURES / "vllm-cpu" / "metrics" / name, tmp_path / "metrics" / f"scrape-{epoch_ms}.prom")
    with (tmp_path / "logs" / "server.log").open("a") as f:
        f.write(
            "(EngineCore_DP0 pid=20122) ERROR 11-29 14:08:25 [core.py:1510] torch.OutOfMemoryError: CUDA out of "
            "memory. Tried to allocate 1.42 GiB. GPU 0 has a total capacity of 79.19 GiB of which 486.54 MiB is free.\n"
        )
    evidence = read_evidence(tmp_path)
    assert evidence.logs is not None and any(e.role == "error" for e in evidence.logs.events)
    plotted = timeseries.over_time(evidence.gpu, evidence.metrics, evidence.logs, LIMITS)
    assert plotted.timeline is not None
    error = next(e for e in plotted.timeline.events if e.kind == "error")
    # 14:08:25 in the log (UTC here, as the scrapes): 5 s after the first scrape at 14:08:20.
    assert plotted.timeline.origin_epoch_s + error.at_s == pytest.approx(1795961305.0)
    assert "logs/server.log:" in error.label
