"""Startup faults: the simulator exits like vLLM, and `diagnose` attributes its log to the right cause."""

from __future__ import annotations

import socket
from pathlib import Path

import pytest

from llmtriage.diagnose.engine import diagnose
from llmtriage.evidence.bundle import LooseFiles, read_evidence

CASES = [
    (
        ("--model", "meta-llama/Llama-3.1-70B-Instruct", "--gpu", "L4"),
        "startup_oom",
        "weights_kv_exceed_memory",
        "No available memory for the cache blocks",
    ),
    (
        ("--model", "meta-llama/Llama-3.1-8B-Instruct", "--gpu", "L4"),
        "startup_oom",
        "kv_cache_too_small_for_max_model_len",
        "estimated maximum model length is",
    ),
    (
        ("--model", "meta-llama/Llama-3.1-8B-Instruct", "--gpu", "H100 SXM", "--fault", "other-process:memory_gib=20"),
        "startup_oom",
        "other_process_holds_memory",
        "on startup is less than desired GPU memory utilization",
    ),
    (
        ("--model", "meta-llama/Llama-3.1-8B-Instruct", "--gpu", "H100 SXM", "--max-model-len", "200000"),
        "startup_failure",
        "max_model_len_exceeds_model",
        "is greater than the derived max_model_len",
    ),
]


@pytest.mark.parametrize(("args", "symptom", "cause", "text"), CASES, ids=[c[2] for c in CASES])
def test_startup_fault(start_sim, tmp_path: Path, args: tuple[str, ...], symptom: str, cause: str, text: str) -> None:  # type: ignore[no-untyped-def]
    sim = start_sim(*args)
    assert sim.wait_exit() == 1
    log = sim.log()
    assert text in log
    result = diagnose(read_evidence(loose=LooseFiles(logs=[sim.log_path])))
    assert result.symptom_class == symptom
    assert result.causes[0].id == cause, [(c.id, round(c.confidence, 2)) for c in result.causes]


def test_port_in_use(start_sim) -> None:  # type: ignore[no-untyped-def]
    with socket.socket() as holder:
        holder.bind(("127.0.0.1", 0))
        holder.listen()
        port = holder.getsockname()[1]
        sim = start_sim("--port", str(port))
        assert sim.wait_exit() == 1
    result = diagnose(read_evidence(loose=LooseFiles(logs=[sim.log_path])))
    assert (result.symptom_class, result.causes[0].id) == ("startup_failure", "port_in_use")


def test_unknown_model_and_gpu_suggest_close_matches(start_sim) -> None:  # type: ignore[no-untyped-def]
    sim = start_sim("--model", "Llama-3.1-8B-Instrukt")
    assert sim.wait_exit() == 2
    assert sim.proc.stderr is not None and "did you mean" in sim.proc.stderr.read()
    sim = start_sim("--gpu", "H1OO")
    assert sim.wait_exit() == 2
