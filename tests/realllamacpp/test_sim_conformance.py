"""`llmtriage sim --engine llama_cpp` against a live llama-server: the same /metrics families (types and HELP),
/health, /slots keys, the 400 of a prompt over a slot's context, and log lines that the parsers read alike."""

from __future__ import annotations

import io
import json

from prometheus_client.parser import text_string_to_metric_families

from llmtriage.facts import LogFacts
from llmtriage.parse.logs import read_log

from ..conftest import drive
from ..sim.conftest import (
    RunningSim,
    start_sim,  # noqa: F401 - the simulator fixture, side by side with the real server
)
from . import cases
from .conftest import ServerFactory


def _shape(text: str) -> dict[str, tuple[str, str]]:
    return {f.name: (f.type, f.documentation) for f in text_string_to_metric_families(text)}


def _kinds(text: str) -> set[tuple[str, str, tuple[str, ...]]]:
    """The catalog signatures the log's lines match, with the values each read."""
    facts = LogFacts()
    read_log(io.BytesIO(text.encode()), "log", facts)
    assert facts.engine == "llama_cpp"
    return {(e.signature, e.role, tuple(name for name, _ in e.values)) for e in facts.events}


def _keys(slots: list[dict[str, object]]) -> list[tuple[frozenset[str], ...]]:
    def nested(slot: dict[str, object], key: str) -> frozenset[str]:
        value = slot[key]
        inner = value[0] if isinstance(value, list) else value
        return frozenset(inner) if isinstance(inner, dict) else frozenset()

    return [(frozenset(s), nested(s, "params"), nested(s, "next_token")) for s in slots]


def test_the_simulator_serves_like_the_live_server(llama_server: ServerFactory, start_sim) -> None:  # type: ignore[no-untyped-def]  # noqa: F811
    real = llama_server()
    assert real.wait(), real.log()[-2000:]
    sim: RunningSim = start_sim("--engine", "llama_cpp", "--speed", "50")
    assert sim.wait_ready(), sim.log()
    for url in (real.url, sim.url):
        assert drive(url, [cases.completion(i, 100, 32) for i in range(6)], 2) == [200] * 6
    assert _shape(sim.get("/metrics")[1]) == _shape(cases.get(real.url, "/metrics"))
    assert json.loads(sim.get("/health")[1]) == json.loads(cases.get(real.url, "/health"))
    real_slots, sim_slots = json.loads(cases.get(real.url, "/slots")), json.loads(sim.get("/slots")[1])
    assert _keys(sim_slots) == _keys(real_slots)
    assert [s["n_ctx"] for s in sim_slots] == [s["n_ctx"] for s in real_slots]
    real.stop()
    sim.stop()
    assert _kinds(real.log()) <= _kinds(sim.log())


def test_the_simulator_refuses_an_overlong_prompt_like_the_live_server(llama_server: ServerFactory, start_sim) -> None:  # type: ignore[no-untyped-def]  # noqa: F811
    real = llama_server(*cases.CTX_OVERFLOW_ARGS)
    assert real.wait(), real.log()[-2000:]
    sim: RunningSim = start_sim("--engine", "llama_cpp", "--speed", "50", *cases.CTX_OVERFLOW_ARGS)
    assert sim.wait_ready(), sim.log()
    # Over 256 tokens for both: the real tiny vocabulary reads a character a token, the simulator about four.
    replies = [cases.post(url, cases.completion(0, 1600, 8, stream=False)) for url in (real.url, sim.url)]
    (real_status, real_body), (sim_status, sim_body) = replies
    assert sim_status == real_status == 400
    real_error, sim_error = json.loads(real_body)["error"], json.loads(sim_body)["error"]
    assert sim_error.keys() == real_error.keys()
    assert (sim_error["type"], sim_error["n_ctx"]) == (real_error["type"], real_error["n_ctx"])
    real.stop()
    sim.stop()
    assert _kinds(real.log()) <= _kinds(sim.log()), (real.log()[-1500:], sim.log()[-1500:])
