"""Real vLLM startup failures: each log names the right class and cause."""

from __future__ import annotations

import socket

import pytest

from llmtriage.diagnose.engine import diagnose
from llmtriage.evidence.bundle import LooseFiles, read_evidence
from llmtriage.lab.vllm_cpu import VllmCpuServer

CASES = [
    # (args, kv_gib, env, class, cause, a line the log must hold)
    (("--max-model-len", "4096"), 1, {}, "startup_failure", "max_model_len_exceeds_model",
     "is greater than the derived max_model_len"),
    (("--kv-cache-memory-bytes", "1M", "--enforce-eager"), None, {}, "startup_oom",
     "kv_cache_too_small_for_max_model_len", "estimated maximum model length"),
    (("--enforce-eager",), 0, {}, "startup_oom", "weights_kv_exceed_memory", "No available memory for the cache blocks"),
    (("--enforce-eager",), 100, {}, "startup_oom", "gpu_mem_util_too_high", "less than requested memory for kv"),
]  # fmt: skip


@pytest.mark.parametrize(("args", "kv_gib", "env", "symptom", "cause", "line"), CASES, ids=[c[4] for c in CASES])
def test_real_startup_failure(vllm_server, args, kv_gib, env, symptom, cause, line) -> None:  # type: ignore[no-untyped-def]
    server: VllmCpuServer = vllm_server(*args, kv_gib=kv_gib, env=env)
    assert server.wait() is False, "vLLM started where it should have failed"
    assert line in server.log()
    result = diagnose(read_evidence(loose=LooseFiles(logs=[server.log_path])))
    assert result.symptom_class == symptom
    assert result.causes[0].id == cause, [(c.id, round(c.confidence, 2)) for c in result.causes]


def test_real_port_in_use(vllm_server) -> None:  # type: ignore[no-untyped-def]
    with socket.socket() as holder:
        holder.bind(("127.0.0.1", 0))
        holder.listen()
        server: VllmCpuServer = vllm_server("--enforce-eager", port=holder.getsockname()[1])
        assert server.wait() is False
    result = diagnose(read_evidence(loose=LooseFiles(logs=[server.log_path])))
    assert (result.symptom_class, result.causes[0].id) == ("startup_failure", "port_in_use")


def test_real_missing_model_path(vllm_server, tmp_path) -> None:  # type: ignore[no-untyped-def]
    server: VllmCpuServer = vllm_server("--enforce-eager", model=tmp_path / "does-not-exist")
    assert server.wait() is False
    result = diagnose(read_evidence(loose=LooseFiles(logs=[server.log_path])))
    assert (result.symptom_class, result.causes[0].id) == ("startup_failure", "model_path_or_permission")
