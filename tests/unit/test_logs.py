"""Log parsing on real recorded logs: root lines, memory numbers, stats series, HTTP statuses."""

from __future__ import annotations

import io

from llmtriage.facts import LogFacts
from llmtriage.parse.logs import read_log

from ..conftest import FIXTURES

LOGS = FIXTURES / "vllm-cpu" / "logs"


def _read(name: str) -> LogFacts:
    facts = LogFacts()
    with (LOGS / name).open("rb") as f:
        read_log(f, name, facts)
    return facts


def _read_text(text: str) -> LogFacts:
    facts = LogFacts()
    read_log(io.BytesIO(text.encode()), "inline.log", facts)
    return facts


def test_startup_log_identifies_engine_version_and_kv_capacity() -> None:
    facts = _read("startup-ok.log")
    assert facts.engine == "vllm"
    assert facts.meta.engine_version == "0.32.0"
    assert facts.memory.kv_cache_tokens == 1_048_576
    assert facts.memory.max_concurrency == 512.0
    assert facts.memory.concurrency_context_tokens == 2048
    assert facts.memory.device == "CPU"
    assert facts.memory.available_kv_gib == 1.0
    assert facts.launch_hints["max_model_len"] == "2048"
    assert sum(facts.http_status.values()) == 279
    assert not [e for e in facts.events if e.role == "error"]


def test_kv_too_small_is_read_with_its_numbers() -> None:
    facts = _read("fault-b-kv-cache-too-small.log")
    errors = [e for e in facts.events if e.role == "error"]
    assert errors[0].signature == "vllm_max_seq_len_gt_kv_v1"
    assert errors[0].line == 76
    assert facts.memory.max_seq_len == 2048
    assert facts.memory.estimated_max_model_len == 896
    wrappers = {e.signature for e in facts.events if e.role == "wrapper"}
    assert {"vllm_engine_core_init_failed", "vllm_enginecore_failed_to_start"} <= wrappers


def test_periodic_stats_become_a_series() -> None:
    facts = _read("fault-c-kv-pressure.log")
    waiting = [p.waiting for p in facts.stats]
    assert waiting[:4] == [29, 28, 22, 6]
    assert max(p.kv_usage_ratio or 0 for p in facts.stats) == 1.0
    assert facts.stats[0].prompt_tps == 435.7
    statuses = {status for (_, _, status) in facts.http_status}
    assert statuses == {200, 400, 404}


def test_v0_memory_profile_lines() -> None:
    facts = _read_text(
        "INFO 12-20 20:25:46 worker.py:241] the current vLLM instance can use total_gpu_memory (15.77GiB)"
        " x gpu_memory_utilization (0.90) = 14.20GiB\n"
        "INFO 12-20 20:25:46 worker.py:241] model weights take 7.51GiB; non_torch_memory takes 0.39GiB;"
        " PyTorch activation peak memory takes 2.53GiB; the rest of the memory reserved for KV Cache is 3.76GiB.\n"
        "INFO 12-20 20:25:46 distributed_gpu_executor.py:57] # GPU blocks: 3852, # CPU blocks: 4096\n"
    )
    m = facts.memory
    assert (m.total_memory_gib, m.gpu_memory_utilization, m.budget_gib) == (15.77, 0.90, 14.20)
    assert (m.weights_gib, m.non_torch_gib, m.activation_peak_gib, m.available_kv_gib) == (7.51, 0.39, 2.53, 3.76)
    assert m.num_gpu_blocks == 3852


def test_torch_oom_sizes_are_converted_to_gib() -> None:
    facts = _read_text(
        "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 1.16 GiB. GPU 0 has a total capacity of"
        " 22.04 GiB of which 471.69 MiB is free. Process 19239 has 14.26 GiB memory in use. Of the allocated"
        " memory 15.03 GiB is allocated by PyTorch, and 1.00 GiB is reserved by PyTorch but unallocated.\n"
    )
    m = facts.memory
    assert m.tried_alloc_gib == 1.16
    assert m.total_memory_gib == 22.04
    assert m.free_memory_gib is not None and abs(m.free_memory_gib - 471.69 / 1024) < 1e-9
    assert m.reserved_unallocated_gib == 1.00
    assert [e.signature for e in facts.events if e.role == "error"] == ["torch_oom_new"]


def test_shutdown_stage_marks_the_sigterm_artefact() -> None:
    facts = _read("start-eager.log")
    dead = [e for e in facts.events if e.signature == "vllm_engine_dead"]
    assert dead and all(e.stage == "shutdown" for e in dead)


def test_non_utf8_and_ansi_colours() -> None:
    facts = _read_text("\x1b[31mERROR\x1b[0m \xff\xfe OSError: [Errno 98] Address already in use\n")
    assert facts.events[0].signature == "server_port_in_use"
    assert "\x1b" not in facts.events[0].text


def test_events_per_signature_are_bounded_but_counted() -> None:
    line = (
        "Sequence group 1 is preempted by PreemptionMode.RECOMPUTE mode because there is not enough KV cache space.\n"
    )
    facts = _read_text(line * 1000)
    events = [e for e in facts.events if e.signature == "vllm_preempted_v0"]
    assert len(events) == 201
    assert events[-1].line == 1000
    assert facts.event_counts["vllm_preempted_v0"] == 1000
