"""The simulator stays honest: its /metrics and its log lines parse exactly like a real vLLM 0.32's."""

from __future__ import annotations

import io
import time

import openai
from prometheus_client.parser import text_string_to_metric_families

from llmtriage.facts import LogFacts, StatsPoint
from llmtriage.parse.logs import read_log
from llmtriage.parse.prom import parse_metrics

from ..conftest import FIXTURES
from .conftest import RunningSim

REAL_SCRAPE = FIXTURES / "vllm-cpu" / "metrics" / "after-load.txt"
REAL_LOG = FIXTURES / "vllm-cpu" / "logs" / "startup-ok.log"
# Families whose labels carry the process's own configuration: compared by name and type only.
CONFIG_LABELLED = {"vllm:cache_config_info", "python_info"}


def metric_shape(text: str) -> dict[str, tuple[str, frozenset[str]]]:
    shape = {}
    for family in text_string_to_metric_families(text):
        labels = frozenset(k for s in family.samples for k in s.labels if k not in ("le", "quantile"))
        shape[family.name] = (family.type, frozenset() if family.name in CONFIG_LABELLED else labels)
    return shape


def _served(start_sim) -> RunningSim:  # type: ignore[no-untyped-def]
    sim: RunningSim = start_sim(
        "--model", "meta-llama/Llama-3.2-1B-Instruct", "--gpu", "L4", "--max-model-len", "2048", "--speed", "200"
    )
    assert sim.wait_ready()
    api = openai.OpenAI(base_url=sim.url + "/v1", api_key="x", max_retries=0)
    api.models.list()
    for _ in range(3):
        api.completions.create(model="meta-llama/Llama-3.2-1B-Instruct", prompt="hello " * 50, max_tokens=8)
        api.chat.completions.create(
            model="meta-llama/Llama-3.2-1B-Instruct", messages=[{"role": "user", "content": "hi"}], max_tokens=8
        )
    return sim


def test_metric_families_types_and_labels_match_real_vllm(start_sim) -> None:  # type: ignore[no-untyped-def]
    sim = _served(start_sim)
    real = metric_shape(REAL_SCRAPE.read_text())
    ours = metric_shape(sim.get("/metrics")[1])
    vllm_real = {k: v for k, v in real.items() if k.startswith("vllm:") or k.startswith("http_")}
    vllm_ours = {k: v for k, v in ours.items() if k.startswith("vllm:") or k.startswith("http_")}
    assert set(vllm_ours) == set(vllm_real), (set(vllm_real) - set(vllm_ours), set(vllm_ours) - set(vllm_real))
    for name, shape in vllm_real.items():
        assert vllm_ours[name] == shape, name


def test_histogram_buckets_match_real_vllm(start_sim) -> None:  # type: ignore[no-untyped-def]
    sim = _served(start_sim)
    real, _ = parse_metrics(REAL_SCRAPE.read_text(), "real")
    ours, _ = parse_metrics(sim.get("/metrics")[1], "sim")
    assert set(ours.histograms) == set(real.histograms)
    for name, hist in real.histograms.items():
        assert [b for b, _ in ours.histograms[name].buckets] == [b for b, _ in hist.buckets], name
    assert set(ours.counters) == set(real.counters) and set(ours.gauges) == set(real.gauges)
    assert set(ours.labels["cache_config"]) <= set(real.labels["cache_config"])


def log_facts(text: str, name: str) -> LogFacts:
    facts = LogFacts()
    read_log(io.BytesIO(text.encode()), name, facts)
    return facts


def test_log_lines_parse_like_the_real_log(start_sim) -> None:  # type: ignore[no-untyped-def]
    sim = _served(start_sim)
    time.sleep(0.3)  # one stats line every 10 simulated seconds = 50 ms at speed 200
    sim.stop()  # the real recording ends with a stop too
    ours = log_facts(sim.log(), "sim.log")
    real = log_facts(REAL_LOG.read_text(), "real.log")
    assert ours.engine == real.engine == "vllm"
    assert ours.meta.engine_version == real.meta.engine_version == "0.32.0"

    def marks(facts: LogFacts) -> set[str | None]:
        return {e.marks for e in facts.events if e.role == "marker"}

    assert marks(real) <= marks(ours)
    assert ours.launch_hints.keys() == real.launch_hints.keys() == {"args_dict", "max_model_len"}
    assert (
        ours.memory.kv_cache_tokens and ours.memory.max_concurrency and ours.memory.concurrency_context_tokens == 2048
    )
    assert ours.stats and real.stats

    def filled(point: StatsPoint) -> set[str]:
        names = ("prompt_tps", "generation_tps", "running", "waiting", "kv_usage_ratio", "prefix_hit_ratio")
        return {k for k in names if getattr(point, k) is not None}

    assert filled(ours.stats[0]) == filled(real.stats[0])
    statuses = {s for (_, _, s) in ours.http_status}
    assert statuses == {200}
    assert not [e for e in ours.events if e.role in ("error", "wrapper")]
