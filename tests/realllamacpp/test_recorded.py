"""The recorded real llama-server outputs (tests/fixtures/llamacpp-cpu): each fault is named with llama.cpp's own
fix, the healthy run stays healthy, and its /metrics read as the engine-independent signals. No server needed."""

from __future__ import annotations

import json

import pytest

from llmtriage import catalog
from llmtriage.diagnose.engine import diagnose
from llmtriage.diagnose.model import Diagnosis
from llmtriage.evidence.bundle import LooseFiles, read_evidence
from llmtriage.facts import LogFacts
from llmtriage.parse.logs import read_log
from llmtriage.parse.prom import parse_metrics

from ..conftest import FIXTURES
from . import cases

RECORDED = FIXTURES / "llamacpp-cpu"

CASES = [
    # (log, symptom class, cause, a llama.cpp flag or action the first fix names)
    ("fault-a-prompt-exceeds-ctx-size", "request_rejected", "prompt_exceeds_max_model_len", "-c (--ctx-size)"),
    ("fault-c-kv-unified-exhausted", "runtime_oom", "concurrency_exceeds_kv_pool", "--cache-type-k"),
    ("fault-d-port-in-use", "startup_failure", "port_in_use", "--port"),
    ("fault-e-model-missing", "startup_failure", "model_path_or_permission", "-m path"),
    ("fault-e2-gguf-truncated", "startup_failure", "model_path_or_permission", "complete GGUF"),
    ("fault-e3-not-gguf", "startup_failure", "model_path_or_permission", "complete GGUF"),
]  # fmt: skip


def _diagnose(log: str, *metrics: str) -> Diagnosis:
    loose = LooseFiles(logs=[RECORDED / "logs" / f"{log}.log"])
    loose.metrics_texts.extend((name, (RECORDED / "metrics" / name).read_text(), None) for name in metrics)
    return diagnose(read_evidence(loose=loose))


@pytest.mark.parametrize(("log", "symptom", "cause", "fix"), CASES, ids=[c[0] for c in CASES])
def test_recorded_fault_is_named_with_llama_cpps_fix(log: str, symptom: str, cause: str, fix: str) -> None:
    result = _diagnose(log)
    assert result.engine == "llama_cpp"
    assert result.symptom_class == symptom
    assert result.causes[0].id == cause, [(c.id, round(c.confidence, 2)) for c in result.causes]
    assert fix in result.causes[0].fixes[0], result.causes[0].fixes


def test_the_slot_context_fills_the_fix() -> None:
    """The log's n_ctx_slot (256 with -c 256 --parallel 1) is the limit the fix quotes."""
    fixes = _diagnose("fault-a-prompt-exceeds-ctx-size").causes[0].fixes
    assert fixes[0].startswith("A slot holds 256 tokens"), fixes


def test_port_in_use_names_the_port_it_could_not_bind() -> None:
    log = (RECORDED / "logs" / "fault-d-port-in-use.log").read_text()
    port = log.split("port: ")[1].split()[0]
    assert f"grep :{port}`" in _diagnose("fault-d-port-in-use").causes[0].fixes[0]


def test_the_healthy_logs_match_no_error_signature() -> None:
    """llama-server's normal chatter (the security warning, slot selection, timings) is not an error."""
    for log in ("startup-ok", "fault-b-queue-one-slot"):
        facts = LogFacts()
        with (RECORDED / "logs" / f"{log}.log").open("rb") as f:
            read_log(f, log, facts)
        assert not [e.signature for e in facts.events if e.role in ("error", "wrapper")], log
        assert {e.signature for e in facts.events} >= {"llamacpp_ready", "llamacpp_slot_serving"}, log


def test_the_healthy_run_is_healthy_with_and_without_its_metrics() -> None:
    for metrics in ((), ("healthy-before.txt", "healthy-after.txt")):
        result = _diagnose("startup-ok", *metrics)
        assert (result.symptom_class, result.causes) == ("healthy", []), metrics


def test_a_queue_behind_one_slot_shows_only_in_the_metrics() -> None:
    """At its default verbosity llama-server logs no queue: the log alone is healthy; its /metrics show 20 and
    more requests deferred behind the one slot, and the diagnosis names the queue with llama.cpp's fix."""
    assert _diagnose("fault-b-queue-one-slot").symptom_class == "healthy"
    result = _diagnose("fault-b-queue-one-slot", "queue-before.txt", "queue-peak.txt", "queue-after.txt")
    assert result.symptom_class == "slow_ttft"
    assert result.causes[0].id == "queueing_over_capacity"
    assert "--parallel" in result.causes[0].fixes[0]


def test_the_real_metrics_read_as_running_waiting_and_tokens() -> None:
    peak, _ = parse_metrics((RECORDED / "metrics" / "queue-peak.txt").read_text(), "queue-peak.txt")
    after, _ = parse_metrics((RECORDED / "metrics" / "healthy-after.txt").read_text(), "healthy-after.txt")
    assert peak.engine == "llama_cpp"
    raw = (RECORDED / "metrics" / "queue-peak.txt").read_text()
    assert (peak.gauges["running"], peak.gauges["waiting"]) == (1.0, cases.deferred(raw))
    assert peak.gauges["waiting"] >= 20
    assert after.counters["generation_tokens"] == 8 * 64  # 8 requests of 64 tokens, ignore_eos
    assert after.counters["prompt_tokens"] > 0


def test_the_catalogs_llamacpp_series_are_in_the_real_scrape_but_the_kv_gauge() -> None:
    """This build exports no KV gauge: llamacpp:kv_cache_usage_ratio is kept in the catalog for older builds."""
    scraped = {line.split()[0] for line in (RECORDED / "metrics" / "metric-names-types.txt").read_text().splitlines()}
    named = {
        name.removesuffix("_total")
        for kind in ("gauges", "counters", "histograms")
        for spec in catalog.load_yaml("metrics.yaml")[kind].values()
        for alternative in (spec if isinstance(spec, list) else [spec])
        for name in alternative["names"]
        if name.startswith("llamacpp:")
    }
    assert named - scraped == {"llamacpp:kv_cache_usage_ratio"}


def test_the_recorded_replies_are_llama_cpps_own() -> None:
    overflow = (RECORDED / "http" / "fault-a-prompt-exceeds-ctx-size.http.txt").read_text().splitlines()
    assert overflow[0] == "HTTP 400"
    error = json.loads(overflow[1])["error"]
    assert (error["type"], error["n_ctx"]) == ("exceed_context_size_error", 256)
    full = (RECORDED / "http" / "fault-c-kv-unified-exhausted.http.txt").read_text()
    assert "HTTP 500" in full and "Context size has been exceeded." in full
    slots = json.loads((RECORDED / "http" / "slots-idle.json").read_text())
    assert [s["is_processing"] for s in slots] == [False] * 4


def test_every_recorded_file_is_described() -> None:
    readme = (RECORDED / "README.md").read_text()
    undescribed = [p.name for p in RECORDED.rglob("*") if p.is_file() and p.name not in readme]
    assert undescribed == ["README.md"], undescribed
