"""The simulator's llama.cpp personality against what a real llama-server printed (tests/fixtures/llamacpp-cpu):
the same /metrics families, HELP text and types, /health, /slots keys, the 400 of a prompt over a slot's context,
and log lines that parse and diagnose like the real ones."""

from __future__ import annotations

import io
import json
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from pathlib import Path

from prometheus_client.parser import text_string_to_metric_families

from llmtriage.diagnose.engine import diagnose
from llmtriage.evidence.bundle import LooseFiles, read_evidence
from llmtriage.facts import LogFacts
from llmtriage.parse.logs import read_log

from ..conftest import FIXTURES, drive
from .conftest import RunningSim

REAL = FIXTURES / "llamacpp-cpu"


def _shape(text: str) -> dict[str, tuple[str, str]]:
    """Each family: its type and HELP text."""
    return {f.name: (f.type, f.documentation) for f in text_string_to_metric_families(text)}


def _post(url: str, body: dict[str, object]) -> tuple[int, dict[str, object]]:
    req = urllib.request.Request(
        url + "/v1/completions", json.dumps(body).encode(), {"Content-Type": "application/json"}
    )
    try:
        with urllib.request.urlopen(req, timeout=10) as r:
            return r.status, json.loads(r.read())
    except urllib.error.HTTPError as e:
        return e.code, json.loads(e.read())


def _facts(text: str, name: str) -> LogFacts:
    facts = LogFacts()
    read_log(io.BytesIO(text.encode()), name, facts)
    return facts


def _llama(start_sim, *args: str) -> RunningSim:  # type: ignore[no-untyped-def]
    sim: RunningSim = start_sim("--engine", "llama_cpp", "--speed", "50", *args)
    assert sim.wait_ready(), sim.log()
    return sim


def test_metrics_health_and_slots_have_the_real_shapes(start_sim) -> None:  # type: ignore[no-untyped-def]
    sim = _llama(start_sim)
    assert drive(sim.url, [{"prompt": "word " * 80, "max_tokens": 16, "stream": True}] * 6, 3) == [200] * 6
    ours = _shape(sim.get("/metrics")[1])
    assert ours == _shape((REAL / "metrics" / "healthy-after.txt").read_text())
    listed = [line.split() for line in (REAL / "metrics" / "metric-names-types.txt").read_text().splitlines()]
    assert [(name, kind) for name, (kind, _) in ours.items()] == [(n, k) for n, k in listed]
    assert json.loads(sim.get("/health")[1]) == json.loads((REAL / "http" / "health.json").read_text())
    slots = json.loads(sim.get("/slots")[1])
    real = json.loads((REAL / "http" / "slots-idle.json").read_text())
    assert len(slots) == 4 and not any(s["is_processing"] for s in slots)
    assert [s.keys() for s in slots] == [s.keys() for s in real]
    assert slots[0]["params"].keys() == real[0]["params"].keys()
    assert slots[0]["next_token"][0].keys() == real[0]["next_token"][0].keys()
    assert {s["n_ctx"] for s in slots} == {4096}  # 4 slots sharing -c 4096, as the real default
    counters = {f.name: f.samples[0].value for f in text_string_to_metric_families(sim.get("/metrics")[1])}
    assert counters["llamacpp:tokens_predicted"] == 6 * 16 and counters["llamacpp:n_decode"] > 0


def test_a_prompt_over_the_slot_context_is_refused_like_the_real_server(start_sim) -> None:  # type: ignore[no-untyped-def]
    sim = _llama(start_sim, "--ctx-size", "256", "--parallel", "1")
    status, body = _post(sim.url, {"prompt": "word " * 400, "max_tokens": 8})
    real_status, real_body = (REAL / "http" / "fault-a-prompt-exceeds-ctx-size.http.txt").read_text().split("\n", 1)
    assert f"HTTP {status}" == real_status
    real_error = json.loads(real_body)["error"]
    error = body["error"]
    assert isinstance(error, dict) and error.keys() == real_error.keys()
    assert (error["type"], error["n_ctx"]) == (real_error["type"], 256)
    assert "exceeds the available context size (256 tokens), try increasing it" in str(error["message"])
    assert _post(sim.url, {"prompt": "word " * 20, "max_tokens": 8})[0] == 200
    sim.stop()
    log = sim.log()
    real_log = (REAL / "logs" / "fault-a-prompt-exceeds-ctx-size.log").read_text()
    assert "I srv    load_model: initializing, n_slots = 1, n_ctx_slot = 256, kv_unified = 'false'" in log
    ours, real = _facts(log, "sim.log"), _facts(real_log, "real.log")
    assert ours.engine == real.engine == "llama_cpp"

    def kinds(facts: LogFacts) -> set[tuple[str, str, tuple[str, ...]]]:
        return {(e.signature, e.role, tuple(name for name, _ in e.values)) for e in facts.events}

    assert kinds(real) and kinds(real) <= kinds(ours)
    assert ours.memory.max_seq_len == real.memory.max_seq_len == 256
    result = diagnose(read_evidence(loose=LooseFiles(logs=[sim.log_path])))
    assert (result.symptom_class, result.causes[0].id) == ("request_rejected", "prompt_exceeds_max_model_len")
    assert result.causes[0].fixes[0].startswith("A slot holds 256 tokens"), result.causes[0].fixes


def test_requests_beyond_the_slots_are_deferred_and_diagnosed_as_a_queue(start_sim) -> None:  # type: ignore[no-untyped-def]
    sim = _llama(start_sim, "--parallel", "1", "--speed", "1")
    payloads = [{"prompt": "word " * 200, "max_tokens": 400, "stream": True}] * 12
    threading.Thread(target=drive, args=(sim.url, payloads, 12, 120), daemon=True).start()
    scrapes = []
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline:
        text = sim.get("/metrics")[1]
        scrapes.append((text, time.time()))
        if "llamacpp:requests_deferred 11" in text:
            break
        time.sleep(0.1)
    assert "llamacpp:requests_processing 1" in scrapes[-1][0], scrapes[-1][0]
    assert "llamacpp:requests_deferred 11" in scrapes[-1][0], scrapes[-1][0]
    busy = [s for s in json.loads(sim.get("/slots")[1]) if s["is_processing"]]
    assert len(busy) == 1 and busy[0]["next_token"][0]["n_remain"] > 0
    sim.stop()
    loose = LooseFiles(logs=[sim.log_path])
    loose.metrics_texts.extend((f"scrape-{i}", text, when) for i, (text, when) in enumerate(scrapes))
    result = diagnose(read_evidence(loose=loose))
    assert (result.engine, result.symptom_class, result.causes[0].id) == (
        "llama_cpp",
        "slow_ttft",
        "queueing_over_capacity",
    )
    assert "--parallel" in result.causes[0].fixes[0]


def test_faults_and_unknown_engines_are_usage_errors() -> None:
    for args in (["--engine", "llama_cpp", "--fault", "stall"], ["--engine", "tgi"], ["--engine", "llama_cpp",
                 "--ctx-size", "2", "--parallel", "4"]):  # fmt: skip
        done = subprocess.run(
            [sys.executable, "-m", "llmtriage", "sim", "--port", "1", *args], capture_output=True, text=True, timeout=60
        )
        assert done.returncode == 2 and "Traceback" not in done.stderr, (args, done.stderr)


def _capture(url: str, out: Path) -> tuple[Path, dict[str, dict[str, object]]]:
    done = subprocess.run(
        [sys.executable, "-m", "llmtriage", "capture", "--metrics-url", url + "/metrics", "--duration", "1s",
         "--interval", "0.5s", "--out", str(out), "--no-diagnose"],
        capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    (bundle,) = out.iterdir()
    manifest = json.loads((bundle / "manifest.json").read_text())
    return bundle, {s["name"]: s for s in manifest["sources"]}


def test_capture_keeps_llama_cpp_slots_and_health(start_sim, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    sim = _llama(start_sim, "--parallel", "2", "--speed", "1")
    payloads = [{"prompt": "word " * 50, "max_tokens": 2000, "stream": True}] * 3
    threading.Thread(target=drive, args=(sim.url, payloads, 3, 60), daemon=True).start()
    deadline = time.monotonic() + 10
    while "llamacpp:requests_deferred 1" not in sim.get("/metrics")[1]:
        assert time.monotonic() < deadline, sim.get("/metrics")[1]
        time.sleep(0.05)
    bundle, sources = _capture(sim.url, tmp_path / "out")
    assert sources["llamacpp.state"]["status"] == "ok", sources["llamacpp.state"]
    slots = json.loads((bundle / "metrics" / "llamacpp-slots.json").read_text())
    assert [s["is_processing"] for s in slots] == [True, True] and {s["n_ctx"] for s in slots} == {2048}
    assert json.loads((bundle / "metrics" / "llamacpp-health.json").read_text()) == {"status": "ok"}
    assert len(list((bundle / "metrics").glob("scrape-*.prom"))) >= 2


def test_capture_of_a_vllm_server_skips_the_llama_cpp_state(start_sim, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    sim = start_sim("--model", "meta-llama/Llama-3.2-1B-Instruct", "--gpu", "L4", "--speed", "50")
    assert sim.wait_ready()
    bundle, sources = _capture(sim.url, tmp_path / "out")
    row = sources["llamacpp.state"]
    assert row["status"] == "skipped" and "HTTP 404" in str(row["reason"]), row
    assert not list((bundle / "metrics").glob("llamacpp-*"))
