"""The watch's fast scrape reader reads every recorded scrape exactly as parse.prom.parse_metrics does."""

from __future__ import annotations

from pathlib import Path

import pytest

from llmtriage.parse import prom
from llmtriage.watch.reader import SnapshotReader

from ..conftest import FIXTURES

SCRAPES = sorted(p for p in (FIXTURES / "vllm-cpu" / "metrics").glob("*.txt") if "load" in p.name or "kv-" in p.name)
SIM_SCRAPE_LINES = 400


@pytest.mark.parametrize("path", SCRAPES, ids=lambda p: p.name)
def test_same_snapshot_as_the_parser(path: Path) -> None:
    text = path.read_text()
    reader = SnapshotReader()
    for _ in range(2):  # the second read comes from the remembered series
        fast, fast_problems = reader.read(text, path.name, 12.5)
        full, full_problems = prom.parse_metrics(text, path.name, 12.5)
        assert fast == full
        assert fast_problems == full_problems == []


def test_a_malformed_line_costs_only_itself() -> None:
    text = (FIXTURES / "vllm-cpu" / "metrics" / "after-load.txt").read_text()
    broken = text.replace(
        'vllm:num_requests_waiting{engine="0",model_name="tiny-llama"} 0.0',
        'vllm:num_requests_waiting{engine="0",model_name="tiny-llama" 0.0\nvllm:num_requests_running{engine=} x',
    )
    snap, problems = SnapshotReader().read(broken, "scrape", None)
    assert "waiting" not in snap.gauges
    assert snap.gauges["running"] == 0.0 and snap.histograms["ttft_seconds"].count == 275
    assert [p.message for p in problems] == ["2 malformed sample lines skipped"]


def test_timestamps_and_a_foreign_exposition() -> None:
    reader = SnapshotReader()
    snap, problems = reader.read('vllm:num_requests_waiting{model_name="m"} 7 1700000000000\n', "s", None)
    assert snap.gauges["waiting"] == 7.0 and snap.engine == "vllm" and not problems
    other, problems = reader.read("# HELP node_load1 x\nnode_load1 0.5\n", "node", None)
    assert not other.raw_names and [p.message for p in problems] == ["no known inference-server metrics in this scrape"]


def test_the_simulator_scrape() -> None:
    from llmtriage.sim.metrics import SimMetrics

    metrics = SimMetrics("m", 4096, {"block_size": "16", "num_gpu_blocks": "100"})
    metrics.ttft.observe(0.3)
    metrics.generation_tokens.inc(42)
    text = metrics.render().decode()
    assert len(text.splitlines()) > SIM_SCRAPE_LINES
    fast, _ = SnapshotReader().read(text, "sim", 1.0)
    full, _ = prom.parse_metrics(text, "sim", 1.0)
    assert fast == full and fast.counters["generation_tokens"] == 42
