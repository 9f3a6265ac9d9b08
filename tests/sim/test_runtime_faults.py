"""Faults while serving: each produces the evidence that `diagnose` attributes to the right cause."""

from __future__ import annotations

import threading
import time
from pathlib import Path

from llmtriage.diagnose.engine import diagnose
from llmtriage.evidence.bundle import LooseFiles, read_evidence

from ..conftest import completion, drive
from .conftest import RunningSim


def _evidence(sim: RunningSim, scrapes: list[tuple[str, float]]) -> LooseFiles:
    loose = LooseFiles(logs=[sim.log_path])
    for i, (text, when) in enumerate(scrapes):
        loose.metrics_texts.append((f"scrape-{i}", text, when))
    return loose


def _scrape(sim: RunningSim) -> tuple[str, float]:
    return sim.get("/metrics")[1], time.time()


def test_runtime_oom_past_a_concurrency_threshold(start_sim) -> None:  # type: ignore[no-untyped-def]
    sim: RunningSim = start_sim("--model", "meta-llama/Llama-3.1-8B-Instruct", "--gpu", "H100 SXM", "--max-model-len", "8192",
                                "--speed", "20", "--fault", "runtime-oom:running=24")  # fmt: skip
    assert sim.wait_ready()
    before = _scrape(sim)
    statuses = drive(sim.url, [completion(500, 400) for _ in range(40)], concurrency=40)
    assert sim.wait_exit() == 1
    assert 200 in statuses or 500 in statuses
    log = sim.log()
    assert "torch.OutOfMemoryError: CUDA out of memory" in log and "EngineDeadError" in log
    result = diagnose(read_evidence(loose=_evidence(sim, [before])))
    assert result.symptom_class == "runtime_oom"
    assert result.causes[0].id == "concurrency_exceeds_kv_pool", [(c.id, round(c.confidence, 2)) for c in result.causes]


def test_stall_while_health_answers(start_sim) -> None:  # type: ignore[no-untyped-def]
    sim: RunningSim = start_sim("--model", "meta-llama/Llama-3.2-1B-Instruct", "--gpu", "L4", "--max-model-len", "4096",
                                "--speed", "10", "--fault", "stall@2s")  # fmt: skip
    assert sim.wait_ready()
    load = threading.Thread(target=drive, args=(sim.url, [completion(100, 3000) for _ in range(8)], 8), daemon=True)
    load.start()
    time.sleep(4.5)  # 45 simulated seconds: the stall began at 2 s with requests in flight; 4 stats lines since
    first = _scrape(sim)
    time.sleep(0.5)
    second = _scrape(sim)
    assert sim.get("/health")[0] == 200
    result = diagnose(read_evidence(loose=_evidence(sim, [first, second])))
    assert result.symptom_class == "engine_stalled"
    assert result.causes[0].id == "engine_stalled"


def test_kv_pressure_preempts_and_queues(start_sim, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    sim: RunningSim = start_sim("--model", "meta-llama/Llama-3.1-8B-Instruct", "--gpu", "L4", "--max-model-len", "8192",
                                "--gpu-memory-utilization", "0.8", "--speed", "100")  # fmt: skip
    assert sim.wait_ready()
    before = _scrape(sim)
    drive(sim.url, [completion(2000, 1500) for _ in range(32)], concurrency=32)
    after = _scrape(sim)
    result = diagnose(read_evidence(loose=_evidence(sim, [before, after])))
    assert result.symptom_class in ("slow_ttft", "slow_generation")
    assert result.causes[0].id == "kv_pressure_preemption", [(c.id, round(c.confidence, 2)) for c in result.causes]


def test_prefill_jam_of_long_prompts_among_short_ones(start_sim) -> None:  # type: ignore[no-untyped-def]
    sim: RunningSim = start_sim("--model", "meta-llama/Llama-3.1-8B-Instruct", "--gpu", "L40S", "--max-model-len", "32768",
                                "--no-enable-chunked-prefill",
                                "--max-num-batched-tokens", "32768", "--speed", "20")  # fmt: skip
    assert sim.wait_ready()
    before = _scrape(sim)
    mix = [completion(30000, 16) if i % 8 == 0 else completion(200, 32) for i in range(48)]
    drive(sim.url, mix, concurrency=12)
    after = _scrape(sim)
    result = diagnose(read_evidence(loose=_evidence(sim, [before, after])))
    assert result.symptom_class == "slow_ttft"
    assert result.causes[0].id == "prefill_congestion", [(c.id, round(c.confidence, 2)) for c in result.causes]
