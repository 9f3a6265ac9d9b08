"""The server's figures from its scrapes: peaks are only peaks when a scrape fell inside the run."""

from __future__ import annotations

from dataclasses import replace

from rich.console import Console

from llmtriage.bench import render, result
from llmtriage.bench.model import BenchConfig, RawScrape
from llmtriage.bench.server_metrics import PEAK_MIN_SCRAPES, server_figures

from .test_summary import outcome, record

URL = "http://127.0.0.1:8000/metrics"


def vllm_scrape(at_s: float, running: int, waiting: int, kv_usage: float, finished: int) -> RawScrape:
    text = f"""# HELP vllm:num_requests_running running
# TYPE vllm:num_requests_running gauge
vllm:num_requests_running{{model_name="m"}} {running}
# HELP vllm:num_requests_waiting waiting
# TYPE vllm:num_requests_waiting gauge
vllm:num_requests_waiting{{model_name="m"}} {waiting}
# HELP vllm:kv_cache_usage_perc KV usage
# TYPE vllm:kv_cache_usage_perc gauge
vllm:kv_cache_usage_perc{{model_name="m"}} {kv_usage}
# HELP vllm:request_success_total finished
# TYPE vllm:request_success_total counter
vllm:request_success_total{{finished_reason="length",model_name="m"}} {finished}
"""
    return RawScrape(at_s, text)


BEFORE = vllm_scrape(100.0, running=0, waiting=0, kv_usage=0.0, finished=0)
DURING = vllm_scrape(105.0, running=12, waiting=3, kv_usage=0.4, finished=20)
AFTER = vllm_scrape(110.0, running=0, waiting=0, kv_usage=0.0, finished=40)


def test_peaks_from_before_and_after_only_are_unknown_not_zero() -> None:
    figures = server_figures(URL, (BEFORE, AFTER))
    assert figures.scrapes == 2 and figures.peak_scrapes == 2 < PEAK_MIN_SCRAPES
    assert (figures.running_peak, figures.waiting_peak, figures.kv_usage_peak_ratio) == (None, None, None)
    assert figures.requests_finished == 40  # the window's counters need only two
    assert any("--scrape-interval" in p for p in figures.problems)


def test_a_scrape_during_the_run_gives_the_peaks() -> None:
    figures = server_figures(URL, (BEFORE, DURING, AFTER))
    assert figures.peak_scrapes == 3
    assert (figures.running_peak, figures.waiting_peak, figures.kv_usage_peak_ratio) == (12, 3, 0.4)
    assert not any("--scrape-interval" in p for p in figures.problems)


def shown(scrapes: tuple[RawScrape, ...]) -> tuple[str, dict[str, object]]:
    run = replace(outcome([record(0)], BenchConfig(base_url="http://x", metrics_url=URL)), scrapes=scrapes)
    done = result.build(run)
    console = Console(width=300, record=True)
    console.print(render.build(done))
    return console.export_text(), result.to_dict(done)["server"]


def test_text_and_json_say_how_many_scrapes_the_peaks_came_from() -> None:
    text, server = shown((BEFORE, AFTER))
    assert "running peak 0" not in text and "running peaks n/a (2 scrapes)" in text and "--scrape-interval" in text
    assert server["peak_scrapes"] == 2 and server["running_peak"] is None
    text, server = shown((BEFORE, DURING, AFTER))
    assert "running peak 12" in text and "KV usage peak 40%" in text and "n/a" not in text
    assert server["peak_scrapes"] == 3 and server["running_peak"] == 12
