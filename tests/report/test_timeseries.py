"""Evidence -> the series the report plots: windows between scrapes, GPU samples, throttle bands, the log's stats."""

from __future__ import annotations

import shutil
from itertools import pairwise
from pathlib import Path

import pytest

from llmtriage import catalog
from llmtriage.evidence.bundle import read_evidence
from llmtriage.facts import GpuFacts, MetricsFacts
from llmtriage.parse import prom
from llmtriage.parse.nvidia_smi import parse_csv
from llmtriage.report import timeseries
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
    charts = timeseries.charts(evidence.gpu, evidence.metrics, evidence.logs, LIMITS)
    assert [c.id for c in charts] == ["log-requests", "log-kv", "log-throughput"]
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
    ids = [c.id for c in timeseries.charts(evidence.gpu, evidence.metrics, evidence.logs, LIMITS)]
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
