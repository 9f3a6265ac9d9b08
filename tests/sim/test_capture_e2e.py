"""Sim → capture → diagnose, end to end over loopback: GPU faults show in the captured telemetry."""

from __future__ import annotations

import subprocess
import sys
import threading
from pathlib import Path

from llmtriage.diagnose.engine import diagnose
from llmtriage.evidence.bundle import read_evidence

from ..conftest import completion, drive
from .conftest import RunningSim


def _capture_under_load(sim: RunningSim, out: Path, payloads: list[dict[str, object]], concurrency: int) -> Path:
    load = threading.Thread(target=drive, args=(sim.url, payloads, concurrency), daemon=True)
    load.start()
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "llmtriage",
            "capture",
            "--log-file",
            str(sim.log_path),
            "--metrics-url",
            sim.url + "/metrics",
            "--gpu",
            sim.url + "/llmtriage/gpu",
            "--duration",
            "4s",
            "--interval",
            "0.5s",
            "--out",
            str(out),
            "--label",
            "sim",
            "--no-diagnose",
        ],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 0, proc.stderr
    load.join(timeout=120)
    return Path(proc.stdout.splitlines()[0])


def test_thermal_throttling_is_seen_in_the_gpu_telemetry(start_sim, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    sim: RunningSim = start_sim("--model", "Qwen/Qwen2.5-14B-Instruct", "--gpu", "L40S", "--max-model-len", "8192",
                                "--speed", "5", "--fault", "throttle:kind=thermal,clock=0.5")  # fmt: skip
    assert sim.wait_ready()
    bundle = _capture_under_load(sim, tmp_path, [completion(300, 400) for _ in range(16)], concurrency=16)
    assert (bundle / "gpu" / "samples.csv").exists() and (bundle / "manifest.json").exists()
    result = diagnose(read_evidence(bundle))
    assert result.symptom_class == "slow_generation"
    assert result.causes[0].id == "power_thermal_throttling", [(c.id, round(c.confidence, 2)) for c in result.causes]


def test_another_process_on_the_gpu(start_sim, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    sim: RunningSim = start_sim("--model", "Qwen/Qwen2.5-14B-Instruct", "--gpu", "L40S", "--max-model-len", "8192",
                                "--speed", "5", "--fault", "contention:memory_gib=6,share=0.3")  # fmt: skip
    assert sim.wait_ready()
    bundle = _capture_under_load(sim, tmp_path, [completion(300, 400) for _ in range(16)], concurrency=16)
    result = diagnose(read_evidence(bundle))
    assert result.symptom_class == "slow_generation"
    assert result.causes[0].id == "gpu_contention_other_process", [
        (c.id, round(c.confidence, 2)) for c in result.causes
    ]


def test_runtime_oom_captured_while_it_happens(start_sim, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    sim: RunningSim = start_sim("--model", "meta-llama/Llama-3.1-8B-Instruct", "--gpu", "H100", "--max-model-len", "8192",
                                "--speed", "5", "--fault", "runtime-oom:running=24@3s")  # fmt: skip
    assert sim.wait_ready()
    bundle = _capture_under_load(sim, tmp_path, [completion(500, 2000) for _ in range(40)], concurrency=40)
    result = diagnose(read_evidence(bundle))
    assert result.symptom_class == "runtime_oom"
    assert result.causes[0].id == "concurrency_exceeds_kv_pool", [(c.id, round(c.confidence, 2)) for c in result.causes]
