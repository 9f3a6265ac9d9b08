"""Prometheus parsing on real vLLM scrapes, quantiles, windows and resets."""

from __future__ import annotations

import math

import pytest

from llmtriage.facts import Histogram
from llmtriage.parse.prom import counter_delta, histogram_delta, parse_metrics, quantile, window

from ..conftest import FIXTURES

METRICS = FIXTURES / "vllm-cpu" / "metrics"


def _snap(name: str, t: float | None = None):  # type: ignore[no-untyped-def]
    snap, problems = parse_metrics((METRICS / name).read_text(), name, t)
    assert problems == []
    return snap


def test_real_vllm_v1_scrape_is_normalised() -> None:
    snap = _snap("kv-pressure-at-peak-waiting.txt")
    assert snap.engine == "vllm"
    assert snap.gauges["running"] == 3 and snap.gauges["waiting"] == 29
    assert snap.gauges["waiting_for_capacity"] == 29
    assert snap.gauges["kv_usage_ratio"] == pytest.approx(0.7826, abs=1e-4)
    assert snap.counters["generation_tokens"] == 1166
    assert snap.raw_names["preemptions"] == "vllm:num_preemptions_total"
    assert snap.labels["cache_config"]["kv_cache_size_tokens"] == "3072"
    assert snap.histograms["ttft_seconds"].count == 5


def test_window_quantile_and_counter_delta_over_real_scrapes() -> None:
    w = window([_snap("kv-pressure-before.txt", 100.0), _snap("kv-pressure-after.txt", 160.0)])
    assert w is not None and w.seconds == 60.0
    assert w.delta("preemptions") == 62
    assert w.rate("generation_tokens") == pytest.approx(32000 / 60)
    p95 = quantile(w.histogram("ttft_seconds"), 0.95)
    assert p95 is not None and 10 < p95 < 40


def test_quantile_interpolates_like_prometheus() -> None:
    hist = Histogram(buckets=((0.1, 10.0), (0.5, 90.0), (1.0, 100.0), (math.inf, 100.0)), total=30.0, count=100.0)
    assert quantile(hist, 0.5) == pytest.approx(0.1 + 0.4 * (50 - 10) / 80)
    assert quantile(hist, 0.99) == pytest.approx(0.5 + 0.5 * (99 - 90) / 10)
    over = Histogram(buckets=((1.0, 1.0), (math.inf, 10.0)), total=50.0, count=10.0)
    assert quantile(over, 0.9) == 1.0
    assert quantile(Histogram(buckets=((math.inf, 0.0),), total=0, count=0), 0.5) is None


def test_counter_reset_counts_from_zero() -> None:
    assert counter_delta(100.0, 130.0) == 30.0
    assert counter_delta(100.0, 7.0) == 7.0
    assert counter_delta(None, 7.0) is None


def test_histogram_reset_or_changed_buckets_restart_from_the_new_scrape() -> None:
    old = Histogram(buckets=((1.0, 50.0), (math.inf, 60.0)), total=40.0, count=60.0)
    new = Histogram(buckets=((1.0, 55.0), (math.inf, 70.0)), total=52.0, count=70.0)
    delta = histogram_delta(old, new)
    assert delta is not None and delta.buckets == ((1.0, 5.0), (math.inf, 10.0)) and delta.count == 10.0
    restarted = Histogram(buckets=((1.0, 2.0), (math.inf, 3.0)), total=1.0, count=3.0)
    assert histogram_delta(old, restarted) == restarted
    rebucketed = Histogram(buckets=((2.0, 60.0), (math.inf, 80.0)), total=60.0, count=80.0)
    assert histogram_delta(old, rebucketed) == rebucketed


def test_a_malformed_family_costs_only_itself() -> None:
    text = (
        "# HELP vllm:num_requests_running running\n# TYPE vllm:num_requests_running gauge\n"
        'vllm:num_requests_running{model_name="m"} 4.0\n'
        "# HELP vllm:num_requests_waiting waiting\n# TYPE vllm:num_requests_waiting gauge\n"
        'vllm:num_requests_waiting{model_name="m" 7.0 garbage\n'
    )
    snap, problems = parse_metrics(text, "bad.prom")
    assert snap.gauges == {"running": 4.0}
    assert problems and "malformed" in problems[0].message


def test_other_engines_names() -> None:
    text = (
        "# TYPE sglang:num_queue_reqs gauge\nsglang:num_queue_reqs 12\n"
        "# TYPE sglang:token_usage gauge\nsglang:token_usage 0.93\n"
    )
    snap, _ = parse_metrics(text, "s.prom")
    assert snap.engine == "sglang" and snap.gauges == {"waiting": 12.0, "kv_usage_ratio": 0.93}
    snap, _ = parse_metrics("# TYPE tgi_queue_size gauge\ntgi_queue_size 3\n", "t.prom")
    assert snap.engine == "tgi" and snap.gauges["waiting"] == 3.0


def test_not_prometheus_text() -> None:
    snap, _ = parse_metrics("- **Kimi-K3**: with 642K-token prompts in flight\n", "prose.prom")
    assert snap.sample_count == 0
