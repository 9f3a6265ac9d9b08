"""A real llama-server serving: healthy, a prompt over the slot's context, a queue behind one slot (seen by
`diagnose` and by `watch`), a shared KV cache exhausted by concurrent slots, and its keep-alive behaviour."""

from __future__ import annotations

import asyncio
import dataclasses
import http.client
import json
import re
import subprocess
import sys
import threading
import time
from pathlib import Path

from llmtriage import catalog
from llmtriage.diagnose.engine import diagnose
from llmtriage.diagnose.model import Diagnosis
from llmtriage.evidence.bundle import LooseFiles, read_evidence
from llmtriage.lab.llamacpp_cpu import LlamaServer
from llmtriage.watch.breach import STALL
from llmtriage.watch.watcher import Target, WatchConfig, Watcher

from ..conftest import drive
from . import cases
from .conftest import ServerFactory

# A queue that outlasts a few seconds of watching: 24 requests of 2,000 tokens behind one slot.
LONG_QUEUE_TOKENS = 2000


def _diagnose(log: Path, scrapes: list[tuple[str, float]]) -> Diagnosis:
    loose = LooseFiles(logs=[log])
    loose.metrics_texts.extend((f"scrape-{i}", text, when) for i, (text, when) in enumerate(scrapes))
    return diagnose(read_evidence(loose=loose))


def test_healthy_with_its_slots_and_metrics(llama_server: ServerFactory) -> None:
    server = llama_server()
    assert server.wait(), server.log()[-2000:]
    assert json.loads(cases.get(server.url, "/health")) == {"status": "ok"}
    before = cases.scrape(server.url)
    assert drive(server.url, [cases.completion(i, 100, 32) for i in range(8)], 2) == [200] * 8
    after = cases.scrape(server.url)
    slots = json.loads(cases.get(server.url, "/slots"))
    assert len(slots) == 4 and not any(s["is_processing"] for s in slots)
    server.stop()
    result = _diagnose(server.log_path, [before, after])
    assert (result.engine, result.symptom_class, result.causes) == ("llama_cpp", "healthy", [])


def test_prompt_over_the_slot_context_is_refused_and_diagnosed(llama_server: ServerFactory) -> None:
    server = llama_server(*cases.CTX_OVERFLOW_ARGS)
    assert server.wait(), server.log()[-2000:]
    status, body = cases.post(server.url, cases.completion(0, 400, 8, stream=False))
    assert status == 400 and json.loads(body)["error"]["type"] == "exceed_context_size_error"
    server.stop()  # llama.cpp logs from a thread of its own: the error line may follow the reply
    result = _diagnose(server.log_path, [])
    assert (result.symptom_class, result.causes[0].id) == ("request_rejected", "prompt_exceeds_max_model_len")
    assert result.causes[0].fixes[0].startswith("A slot holds 256 tokens"), result.causes[0].fixes


def _queue_up(server: LlamaServer) -> list[tuple[str, float]]:
    """Send 24 long generations at once to the one slot; the scrapes until 20 or more wait (within 30 s)."""
    payloads = [cases.completion(i, 100, LONG_QUEUE_TOKENS) for i in range(cases.QUEUE_REQUESTS)]
    threading.Thread(target=drive, args=(server.url, payloads, 64, 120), daemon=True).start()
    scrapes = [cases.scrape(server.url)]
    deadline = time.monotonic() + 30
    while cases.deferred(scrapes[-1][0]) < 20:
        assert time.monotonic() < deadline, f"no queue formed: {[cases.deferred(t) for t, _ in scrapes]}"
        time.sleep(0.1)
        scrapes.append(cases.scrape(server.url))
    return scrapes


def test_a_queue_behind_one_slot_is_diagnosed_from_the_metrics(llama_server: ServerFactory) -> None:
    server = llama_server(*cases.QUEUE_ARGS)
    assert server.wait(), server.log()[-2000:]
    scrapes = _queue_up(server)
    time.sleep(1.0)
    scrapes.append(cases.scrape(server.url))
    server.stop()  # ends the load
    result = _diagnose(server.log_path, scrapes)
    assert (result.symptom_class, result.causes[0].id) == ("slow_ttft", "queueing_over_capacity")
    assert "--parallel" in result.causes[0].fixes[0]


def test_diagnose_reads_the_live_metrics_url(llama_server: ServerFactory) -> None:
    server = llama_server(*cases.QUEUE_ARGS)
    assert server.wait(), server.log()[-2000:]
    _queue_up(server)
    diagnosed = subprocess.run(
        [sys.executable, "-m", "llmtriage", "diagnose", "--log", str(server.log_path), "--metrics",
         server.url + "/metrics", "--format", "json", "--no-runbook"],
        capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    server.stop()
    result = json.loads(diagnosed.stdout)
    assert (result["engine"], result["symptom_class"]) == ("llama_cpp", "slow_ttft"), diagnosed.stdout[:2000]
    assert result["causes"][0]["id"] == "queueing_over_capacity"
    assert "--parallel" in result["causes"][0]["fixes"][0]


def test_watch_shows_the_slot_busy_and_the_queue(llama_server: ServerFactory, tmp_path: Path) -> None:
    """`watch` reads llama.cpp's own /metrics: run/wait is requests_processing/requests_deferred, and the breach
    of the queue objective is diagnosed as queueing with llama.cpp's fix."""
    server = llama_server(*cases.QUEUE_ARGS)
    assert server.wait(), server.log()[-2000:]
    _queue_up(server)
    result = subprocess.run(
        [sys.executable, "-m", "llmtriage", "watch", "--metrics-url", server.url + "/metrics", "--duration", "4s",
         "--interval", "0.5s", "--window", "2s", "--db", str(tmp_path / "w.db"), "--slo", "queue=10"],
        capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    server.stop()  # ends the load
    assert result.returncode == 1, result.stderr  # a breach
    waiting = [int(w) for r, w in re.findall(r"\b(\d+)/(\d+)\b", result.stderr) if r == "1"]
    assert waiting and max(waiting) >= 10, result.stderr
    assert "queueing_over_capacity" in result.stderr and "--parallel" in result.stderr, result.stderr


def test_capture_of_the_queue_diagnoses_it(llama_server: ServerFactory, tmp_path: Path) -> None:
    """`capture` keeps llama-server's log and /metrics scrapes in a bundle; `diagnose` of the bundle names the
    queue behind the one slot."""
    server = llama_server(*cases.QUEUE_ARGS)
    assert server.wait(), server.log()[-2000:]
    _queue_up(server)
    captured = subprocess.run(
        [sys.executable, "-m", "llmtriage", "capture", "--log-file", str(server.log_path), "--metrics-url",
         server.url + "/metrics", "--duration", "2s", "--interval", "0.5s", "--out", str(tmp_path / "out"),
         "--no-diagnose"],
        capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    server.stop()
    assert captured.returncode == 0, captured.stderr
    (bundle,) = (tmp_path / "out").iterdir()
    assert len(list((bundle / "metrics").glob("*.prom"))) >= 3
    # llama.cpp's own state as the capture began: the one slot busy, /health as the server answered it.
    slots = json.loads((bundle / "metrics" / "llamacpp-slots.json").read_text())
    assert [(s["n_ctx"], s["is_processing"]) for s in slots] == [(4096, True)], slots
    assert json.loads((bundle / "metrics" / "llamacpp-health.json").read_text()) == {"status": "ok"}
    diagnosed = subprocess.run(
        [sys.executable, "-m", "llmtriage", "diagnose", str(bundle), "--format", "json", "--no-runbook"],
        capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    result = json.loads(diagnosed.stdout)
    assert (result["engine"], result["symptom_class"]) == ("llama_cpp", "slow_ttft"), diagnosed.stdout[:2000]
    assert result["causes"][0]["id"] == "queueing_over_capacity"


def test_one_long_generation_is_not_a_stall(llama_server: ServerFactory) -> None:
    """llama.cpp counts a request's generated tokens only when it ends: during one long generation
    llamacpp:tokens_predicted_total stands still while llamacpp:n_decode_total moves. `watch` must not call that
    a stall (here with a 1 s stall threshold, the catalog's is 10 s)."""
    server = llama_server(*cases.QUEUE_ARGS)
    assert server.wait(), server.log()[-2000:]
    config = WatchConfig(
        targets=(Target(server.url + "/metrics"),),
        thresholds=dataclasses.replace(catalog.thresholds(), stall_seconds=1.0),
        interval_s=0.25,
        window_s=2.0,
        duration_s=3.0,
    )
    load = threading.Thread(target=drive, args=(server.url, [cases.completion(0, 20, 3900)], 1), daemon=True)
    load.start()
    first = cases.scrape(server.url)[0]
    state = asyncio.run(Watcher(config).run(asyncio.Event()))
    last = cases.scrape(server.url)[0]
    server.stop()
    assert load.is_alive() or "tokens_predicted_total 0" in first, "the generation ended before the watch did"
    assert "llamacpp:tokens_predicted_total 0\n" in last and "llamacpp:requests_processing 1\n" in last
    assert not [i for i in state.incidents if STALL in i.kinds], state.incidents


def test_a_shared_kv_cache_exhausted_by_the_slots(llama_server: ServerFactory) -> None:
    server = llama_server(*cases.KV_UNIFIED_ARGS)
    assert server.wait(), server.log()[-2000:]
    replies: list[tuple[int, str]] = []
    threads = [
        threading.Thread(target=lambda i=i: replies.append(cases.post(server.url, cases.completion(i, 100, 150, stream=False))))
        for i in range(cases.KV_UNIFIED_REQUESTS)
    ]  # fmt: skip
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert any(s == 500 and "Context size has been exceeded." in b for s, b in replies), replies
    server.stop()
    result = _diagnose(server.log_path, [])
    assert (result.symptom_class, result.causes[0].id) == ("runtime_oom", "concurrency_exceeds_kv_pool")
    assert any("--cache-type-k" in fix for fix in result.causes[0].fixes)


def test_llama_server_closes_the_connection_after_a_stream(llama_server: ServerFactory) -> None:
    """A fact a client must handle: after a streamed (chunked) response this build closes the connection although
    it announced `Keep-Alive: timeout=5, max=100`, so a request sent on the same connection finds it closed.
    (bench reuses connections: it sends such a request again, see the next test.)"""
    server = llama_server()
    assert server.wait(), server.log()[-2000:]
    conn = http.client.HTTPConnection("127.0.0.1", server.port, timeout=30)
    body = json.dumps(cases.completion(0, 20, 8))
    conn.request("POST", "/v1/completions", body, {"Content-Type": "application/json"})
    first = conn.getresponse()
    assert first.status == 200 and first.getheader("Keep-Alive") == "timeout=5, max=100"
    assert first.read().endswith(b"data: [DONE]\n\n")
    time.sleep(0.2)
    try:
        conn.request("POST", "/v1/completions", body, {"Content-Type": "application/json"})
        reused = conn.getresponse().status
    except (BrokenPipeError, ConnectionResetError, http.client.RemoteDisconnected):
        reused = None
    finally:
        conn.close()
    assert reused is None


def test_bench_loses_no_request_to_those_closed_connections(llama_server: ServerFactory, tmp_path: Path) -> None:
    server = llama_server()
    assert server.wait(), server.log()[-2000:]
    out = tmp_path / "bench"
    done = subprocess.run(
        [sys.executable, "-m", "llmtriage", "bench", "--base-url", server.url, "--concurrency", "4", "--requests", "24",
         "--prompt-chars", "40", "--max-tokens", "8", "--out", str(out), "--format", "json"],
        capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-2000:]
    result = json.loads((out / "result.json").read_text())
    counts = result["summary"]["requests"]
    assert (counts["completed"], counts["failed"]) == (24, 0), result["errors"]
