"""One watched endpoint, replayed from real vLLM 0.32 scrapes (tests/fixtures/vllm-cpu/metrics/): windows from
histogram deltas, counter resets, bucket changes, stalls; and the breaches and incidents they make."""

from __future__ import annotations

import dataclasses

from llmtriage import catalog
from llmtriage.facts import MetricSnapshot
from llmtriage.parse import prom
from llmtriage.watch.breach import STALL, IncidentTracker, breaches
from llmtriage.watch.endpoint import EndpointState

from ..conftest import FIXTURES
from .conftest import fast_thresholds

METRICS = FIXTURES / "vllm-cpu" / "metrics"
URL = "http://10.0.0.1:8000/metrics"
READER = prom.ScrapeReader()


def scrape(name: str, at_s: float, text: str | None = None) -> MetricSnapshot:
    snap, problems = READER.read(text if text is not None else (METRICS / name).read_text(), name, at_s)
    assert not problems
    return snap


def state(window_s: float = 30.0) -> EndpointState:
    return EndpointState(URL, window_s=window_s, retention_s=window_s + 10)


def test_the_window_is_made_of_deltas_not_lifetime_totals() -> None:
    endpoint = state()
    endpoint.observe(scrape("after-load.txt", 0.0))
    endpoint.observe(scrape("after-load.txt", 30.0))
    frame = endpoint.frame(30.0)
    lifetime = prom.quantile(scrape("after-load.txt", 0).histograms["ttft_seconds"], 0.95)
    assert lifetime is not None and lifetime > 0
    assert frame.ttft_p95_s is None  # no request finished inside the window
    assert frame.generation_tokens_per_s == 0.0 and frame.prompt_tokens_per_s == 0.0


def test_kv_pressure_replay() -> None:
    endpoint = state()
    endpoint.observe(scrape("kv-pressure-at-peak-waiting.txt", 0.0))
    endpoint.observe(scrape("kv-pressure-after.txt", 20.0))
    frame = endpoint.frame(20.0)
    assert frame.preemptions_per_s == 62 / 20
    assert frame.generation_tokens_per_s == (32000 - 1166) / 20
    window_only = prom.histogram_delta(
        scrape("kv-pressure-at-peak-waiting.txt", 0).histograms["ttft_seconds"],
        scrape("kv-pressure-after.txt", 20).histograms["ttft_seconds"],
    )
    assert frame.ttft_p95_s == prom.quantile(window_only, 0.95)
    assert frame.tpot_from_itl is False and frame.tpot_p95_s is not None
    found = [b.kind for b in breaches(frame, catalog.thresholds())]
    assert "ttft_p95" in found


def test_a_counter_reset_restarts_the_window() -> None:
    endpoint = state()
    endpoint.observe(scrape("after-load.txt", 0.0))
    events = endpoint.observe(scrape("before-load.txt", 10.0))  # the server restarted: counters back at 0
    assert [e.kind for e in events] == ["reset"]
    assert "fell from 20971 to 0 (server restarted?)" in events[0].message
    assert endpoint.frame(10.0).generation_tokens_per_s is None  # one scrape since the restart: no rate yet
    endpoint.observe(scrape("before-load.txt", 20.0))
    assert endpoint.frame(20.0).generation_tokens_per_s == 0.0  # never negative


def test_histogram_buckets_that_change_restart_the_window() -> None:
    text = (METRICS / "after-load.txt").read_text()
    endpoint = state()
    endpoint.observe(scrape("after-load.txt", 0.0, text))
    rebucketed = text.replace('le="2.5"', 'le="3.0"')  # a bucket layout changed by an upgrade (crafted)
    events = endpoint.observe(scrape("after-load.txt", 5.0, rebucketed))
    assert [e.kind for e in events] == ["buckets_changed"]
    assert len(endpoint.history) == 1


def test_down_then_up() -> None:
    endpoint = state()
    endpoint.observe(scrape("after-load.txt", 0.0))
    assert [e.kind for e in endpoint.observe_failure("cannot connect", 1.0)] == ["down"]
    assert endpoint.observe_failure("cannot connect", 2.0) == []
    frame = endpoint.frame(2.0)
    assert not frame.up and frame.error == "cannot connect" and breaches(frame, catalog.thresholds()) == []
    assert [e.kind for e in endpoint.observe(scrape("after-load.txt", 3.0))] == ["up"]


def test_a_stall_needs_busy_still_tokens_and_health() -> None:
    thresholds = fast_thresholds(3.0)
    endpoint = state(window_s=10.0)
    for t in range(6):  # 32 requests in, the token counter standing still
        endpoint.observe(scrape("kv-pressure-at-peak-waiting.txt", float(t)))
    assert endpoint.tokens_still_s(5.0) == 5.0
    stalled = breaches(endpoint.frame(5.0, health_ok=True), thresholds)
    assert stalled[0].kind == STALL and "32 requests running or waiting" in stalled[0].message
    assert STALL not in {b.kind for b in breaches(endpoint.frame(5.0, health_ok=False), thresholds)}
    assert STALL not in {b.kind for b in breaches(endpoint.frame(2.0, health_ok=True), thresholds)}
    idle = state()
    for t in range(6):
        idle.observe(scrape("after-load.txt", float(t)))
    assert idle.tokens_still_s(5.0) is None  # nothing running or waiting: idle, not stalled
    probed = dataclasses.replace(idle.frame(5.0, health_ok=True), probe_waiting_s=4.0)
    assert breaches(probed, thresholds)[0].kind == STALL


def test_one_incident_per_run_of_breaches() -> None:
    thresholds = fast_thresholds(3.0)
    endpoint = state(window_s=10.0)
    tracker = IncidentTracker(URL, quiet_s=5.0)
    opened, grown = [], []
    for t in range(12):
        endpoint.observe(scrape("kv-pressure-at-peak-waiting.txt", float(t)))
        change = tracker.update(breaches(endpoint.frame(float(t), health_ok=True), thresholds), float(t))
        opened.append(change.opened)
        grown.extend(change.new_kinds)
    assert opened.count(True) == 1 and tracker.current is not None
    assert tracker.current.kinds == grown == ["queue", STALL]  # 29 waiting from the start, stalled from 3 s
    assert tracker.update([], 14.0).closed is None
    closed = tracker.update([], 16.5).closed
    assert closed is not None and closed.ended_s == 16.5 and tracker.current is None
