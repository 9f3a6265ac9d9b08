"""A real vLLM (CPU) serving: healthy, a request over max-model-len, KV pressure under load, a killed worker.

One server of the recorded configuration (3,072-token KV cache, max-model-len 1,024) is shared by the first
tests; the killed-worker test starts its own.
"""

from __future__ import annotations

import asyncio
import json
import math
import os
import signal
import statistics
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from prometheus_client.parser import text_string_to_metric_families

from llmtriage.bench import result as bench_result
from llmtriage.bench import runner as bench_runner
from llmtriage.bench.model import BenchConfig, RequestClass
from llmtriage.diagnose.engine import diagnose
from llmtriage.evidence.bundle import LooseFiles, read_evidence
from llmtriage.lab.vllm_cpu import SERVED_NAME, VllmCpuServer
from llmtriage.parse.prom import parse_metrics

from ..conftest import drive
from ..sim.test_conformance import log_facts, metric_shape
from .conftest import CACHE, VllmEnv

STARVED_RUN_TRIES = 4
"""Bench runs tried before the API server counts as starved for good."""

FLAGGED_RUN_TRIES = 4
"""Bench runs tried while bench flags buffered responses and disagrees with the engine."""

PRESSURE_ARGS = ("--kv-cache-memory-bytes", "3145728", "--max-model-len", "1024", "--enforce-eager")


def _prompt(tokens: int) -> str:
    # The tiny tokenizer reads " def" as one token (trained on Python sources).
    return " def" * tokens


def _post(url: str, body: dict[str, object]) -> tuple[int, dict[str, object]]:
    req = urllib.request.Request(url, data=json.dumps(body).encode(), headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(req, timeout=120) as r:
            return r.status, json.loads(r.read())
    except urllib.error.HTTPError as e:
        return e.code, json.loads(e.read())


def _scrape(server: VllmCpuServer) -> tuple[str, float]:
    with urllib.request.urlopen(server.url + "/metrics", timeout=10) as r:
        return r.read().decode(), time.time()


def _evidence(server: VllmCpuServer, scrapes: list[tuple[str, float]]) -> LooseFiles:
    loose = LooseFiles(logs=[server.log_path])
    loose.metrics_texts.extend((f"scrape-{i}", text, when) for i, (text, when) in enumerate(scrapes))
    return loose


@pytest.fixture(scope="module")
def pressure_server(vllm_env: VllmEnv, tmp_path_factory: pytest.TempPathFactory) -> Iterator[VllmCpuServer]:
    server = VllmCpuServer(
        python=vllm_env.python,
        model=vllm_env.model,
        cache=CACHE,
        log_path=tmp_path_factory.mktemp("vllm") / "server.log",
        args=PRESSURE_ARGS,
        kv_cache_space_gib=None,
    ).start()
    try:
        assert server.wait(), server.log()[-2000:]
        yield server
    finally:
        server.stop()


def test_healthy_under_light_load(pressure_server: VllmCpuServer) -> None:
    before = _scrape(pressure_server)
    payloads = [{"prompt": _prompt(50), "max_tokens": 32, "stream": True, "ignore_eos": True} for _ in range(8)]
    assert drive(pressure_server.url, payloads, concurrency=2) == [200] * 8
    after = _scrape(pressure_server)
    result = diagnose(read_evidence(loose=_evidence(pressure_server, [before, after])))
    assert result.symptom_class == "healthy" and result.causes == []


def test_bench_agrees_with_the_servers_own_metrics(pressure_server: VllmCpuServer) -> None:
    """Client E2E (bench) against vLLM's own histogram over the same requests: within 10%; TTFT: the engine's
    plus the API server's own path.

    vLLM's clocks start when its engine receives a request and stop when the engine emits a token; the API
    server's path (HTTP, tokenizing, detokenizing, writing the event) lies outside them: 3-5 ms here, which
    is 12-20% of this tiny model's ~25 ms TTFT but ~2% of its E2E. (bench's own bias, measured against a
    server's write times by benchmarks/bench_client.py, is ~0.4 ms.) On these two cores the API server is
    sometimes starved and then writes a whole response at once (client TTFT = E2E while the engine's TTFT
    was short): bench flags those (`buffered_responses`) and their TTFT is left out, as is the odd delayed
    first token (the median). One or two such responses in 16 leave E2E within 2-4%; a starved core (a CPU
    hog beside the server) puts it 10-20% over the engine's. Only a run bench flagged is run again.
    """
    drive(pressure_server.url, [{"prompt": _prompt(400), "max_tokens": 8}] * 2, 1)  # first requests are slow
    config = BenchConfig(
        base_url=pressure_server.url,
        concurrency=1,
        requests=16,
        classes=(RequestClass("agree", 3200, 64, 1.0),),
        ignore_eos=True,
        metrics_url=pressure_server.url + "/metrics",
    )
    runs = []
    for _ in range(FLAGGED_RUN_TRIES):
        done = bench_result.build(asyncio.run(bench_runner.run(config, asyncio.Event())))
        comparison = _client_against_server(done)
        runs.append(comparison)
        if comparison.agrees or comparison.held == 0:
            break
    assert comparison.agrees, runs


@dataclass(frozen=True)
class _Comparison:
    held: int
    client_e2e_ms: float
    server_e2e_ms: float
    client_ttft_ms: float
    server_ttft_ms: float

    @property
    def agrees(self) -> bool:
        return (
            abs(self.client_e2e_ms - self.server_e2e_ms) <= 0.10 * self.server_e2e_ms
            and 0.9 * self.server_ttft_ms <= self.client_ttft_ms <= 1.1 * self.server_ttft_ms + 5.0
        )


def _client_against_server(done: bench_result.BenchResult) -> _Comparison:
    assert done.summary.completed == 16 and done.server is not None
    server_ttft, server_e2e = done.server.ttft_ms, done.server.e2e_ms
    assert server_ttft is not None and server_e2e is not None and server_ttft.count == server_e2e.count == 16
    assert server_ttft.mean and server_e2e.mean
    records = done.outcome.records
    streamed = [r.ttft_ms for r in records if not r.arrived_in_one_piece and r.ttft_ms is not None]
    held = len(records) - len(streamed)
    assert ("buffered_responses" in {w.code for w in done.summary.warnings}) == (held > 0)
    return _Comparison(
        held=held,
        client_e2e_ms=statistics.fmean(r.e2e_ms for r in records if r.e2e_ms is not None),
        server_e2e_ms=server_e2e.mean,
        client_ttft_ms=statistics.median(streamed) if len(streamed) >= 8 else math.inf,
        server_ttft_ms=server_ttft.mean,
    )


def test_the_simulator_matches_the_live_server(pressure_server: VllmCpuServer, start_sim) -> None:  # type: ignore[no-untyped-def]
    """The sim's /metrics families, types, labels and buckets, and its log shapes, against this live real server."""
    drive(pressure_server.url, [{"prompt": _prompt(30), "max_tokens": 16, "stream": True}] * 4, 2)
    sim = start_sim("--model", str(pressure_server.model), "--gpu", "L4", "--max-model-len", "1024", "--speed", "100")
    assert sim.wait_ready()
    drive(sim.url, [{"prompt": "hello " * 30, "max_tokens": 16, "stream": True}] * 4, 2)
    real_text, _ = _scrape(pressure_server)
    sim_text = sim.get("/metrics")[1]
    real, ours = metric_shape(real_text), metric_shape(sim_text)
    served = {k: v for k, v in real.items() if k.startswith(("vllm:", "http_"))}
    assert {k: ours.get(k) for k in served} == served
    real_snap, _ = parse_metrics(real_text, "real")
    sim_snap, _ = parse_metrics(sim_text, "sim")
    for name, hist in real_snap.histograms.items():
        assert [b for b, _ in sim_snap.histograms[name].buckets] == [b for b, _ in hist.buckets], name
    sim.stop()
    real_log = log_facts(pressure_server.log(), "real")
    sim_log = log_facts(sim.log(), "sim")
    assert real_log.meta.engine_version == sim_log.meta.engine_version
    assert real_log.launch_hints.keys() <= sim_log.launch_hints.keys()


def test_capture_of_a_running_server_is_complete(pressure_server: VllmCpuServer, tmp_path: Path) -> None:
    assert pressure_server.process is not None
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "llmtriage",
            "capture",
            "--pid",
            str(pressure_server.process.pid),
            "--metrics-url",
            pressure_server.url + "/metrics",
            "--duration",
            "2s",
            "--interval",
            "0.5s",
            "--out",
            str(tmp_path),
            "--label",
            "real-vllm",
            "--no-diagnose",
        ],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 0, proc.stderr
    bundle = Path(proc.stdout.splitlines()[0])
    manifest = json.loads((bundle / "manifest.json").read_text())
    status = {s["name"]: s["status"] for s in manifest["sources"]}
    for source in ("launch.process", "env.process", "logs.process", "metrics", "model.config"):
        assert status[source] == "ok", (source, manifest["sources"])
    # No GPU here: NVML and nvidia-smi cannot answer, and the manifest says so instead of faking samples.
    assert status["gpu.samples"] == "failed"
    assert "vllm.entrypoints.openai.api_server" in (bundle / "config" / "launch.txt").read_text()
    assert json.loads((bundle / "config" / "config.json").read_text())["num_hidden_layers"] == 2
    assert len(list((bundle / "metrics").glob("scrape-*.prom"))) >= 3
    result = diagnose(read_evidence(bundle))
    assert result.symptom_class == "healthy"
    assert result.engine == "vllm" and result.engine_version == "0.32.0"


def test_prompt_over_max_model_len_is_rejected_and_diagnosed(pressure_server: VllmCpuServer, tmp_path: Path) -> None:
    status, body = _post(
        pressure_server.url + "/v1/completions", {"model": SERVED_NAME, "prompt": _prompt(1100), "max_tokens": 10}
    )
    assert status == 400
    message = str(body["error"]["message"])  # type: ignore[index]
    assert "maximum context length is 1024 tokens" in message
    reply = tmp_path / "reply.txt"
    reply.write_text(json.dumps(body))
    result = diagnose(read_evidence(loose=LooseFiles(logs=[reply])))
    assert (result.symptom_class, result.causes[0].id) == ("request_rejected", "prompt_exceeds_max_model_len")


def test_kv_pressure_preempts_and_queues(pressure_server: VllmCpuServer) -> None:
    before = _scrape(pressure_server)
    peak: list[tuple[str, float]] = []

    def watch() -> None:
        best = -1.0
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline and not done.is_set():
            text, when = _scrape(pressure_server)
            waiting = next(
                (
                    s.value
                    for f in text_string_to_metric_families(text)
                    for s in f.samples
                    if s.name == "vllm:num_requests_waiting"
                ),
                0.0,
            )
            if waiting > best:
                best, peak[:] = waiting, [(text, when)]
            time.sleep(0.5)

    done = threading.Event()
    watcher = threading.Thread(target=watch, daemon=True)
    watcher.start()
    payloads = [{"prompt": _prompt(450), "max_tokens": 500, "stream": True, "ignore_eos": True} for _ in range(64)]
    assert drive(pressure_server.url, payloads, concurrency=32) == [200] * 64
    done.set()
    watcher.join()
    after = _scrape(pressure_server)
    result = diagnose(read_evidence(loose=_evidence(pressure_server, [before, *peak, after])))
    assert result.symptom_class == "slow_ttft"
    assert result.causes[0].id == "kv_pressure_preemption", [(c.id, round(c.confidence, 2)) for c in result.causes]


def test_killed_worker(vllm_server) -> None:  # type: ignore[no-untyped-def]
    server: VllmCpuServer = vllm_server("--enforce-eager")
    assert server.wait()
    load = threading.Thread(
        target=drive,
        args=(server.url, [{"prompt": _prompt(20), "max_tokens": 1500, "stream": True, "ignore_eos": True}] * 8, 8),
        daemon=True,
    )
    load.start()
    time.sleep(2)
    (worker,) = server.worker_pids()
    os.kill(worker, signal.SIGKILL)
    server.wait_exit(timeout_s=60)
    load.join(timeout=60)
    result = diagnose(read_evidence(loose=LooseFiles(logs=[server.log_path])))
    assert (result.symptom_class, result.causes[0].id) == ("request_failure", "worker_process_killed")
