"""The simulator's OpenAI-compatible API over real HTTP on loopback, through the official `openai` client."""

from __future__ import annotations

import asyncio
import json
import socket
import time

import aiohttp
import openai
import pytest

from llmtriage.parse.prom import parse_metrics

from .conftest import RunningSim

SMALL = ("--model", "meta-llama/Llama-3.2-1B-Instruct", "--gpu", "L4", "--max-model-len", "2048", "--speed", "50")


@pytest.fixture
def sim(start_sim) -> RunningSim:  # type: ignore[no-untyped-def]
    running: RunningSim = start_sim(*SMALL)
    assert running.wait_ready()
    return running


def client(sim: RunningSim) -> openai.OpenAI:
    return openai.OpenAI(base_url=sim.url + "/v1", api_key="unused", max_retries=0)


def test_models_completions_and_chat(sim: RunningSim) -> None:
    api = client(sim)
    (model,) = api.models.list().data
    assert model.id == "meta-llama/Llama-3.2-1B-Instruct"
    done = api.completions.create(model=model.id, prompt="hello " * 40, max_tokens=7)
    assert done.choices[0].finish_reason == "length"
    assert done.usage is not None and done.usage.completion_tokens == 7 and done.usage.prompt_tokens == 60
    chat = api.chat.completions.create(model=model.id, messages=[{"role": "user", "content": "hi"}], max_tokens=5)
    assert chat.choices[0].message.role == "assistant" and chat.choices[0].message.content


def test_streaming_with_usage(sim: RunningSim) -> None:
    api = client(sim)
    chunks = list(
        api.chat.completions.create(
            model="meta-llama/Llama-3.2-1B-Instruct",
            messages=[{"role": "user", "content": "count"}],
            max_tokens=12,
            stream=True,
            stream_options={"include_usage": True},
        )
    )
    assert chunks[0].choices[0].delta.role == "assistant" and chunks[0].choices[0].delta.content == ""
    content = [c for c in chunks if c.choices and c.choices[0].delta.content]
    assert len(content) == 12
    assert content[-1].choices[0].finish_reason == "length"
    assert chunks[-1].choices == [] and chunks[-1].usage is not None and chunks[-1].usage.completion_tokens == 12


def test_vllm_error_bodies(sim: RunningSim) -> None:
    api = client(sim)
    with pytest.raises(openai.BadRequestError) as too_long:
        api.completions.create(model="meta-llama/Llama-3.2-1B-Instruct", prompt="x" * 4 * 3000, max_tokens=5)
    assert "maximum context length is 2048 tokens" in str(too_long.value)
    assert "at least 2049 input tokens" in str(too_long.value)
    with pytest.raises(openai.NotFoundError) as wrong:
        api.completions.create(model="nope", prompt="x", max_tokens=1)
    assert "The model `nope` does not exist" in str(wrong.value)
    trimmed = api.completions.create(model="meta-llama/Llama-3.2-1B-Instruct", prompt="x" * 4 * 2000, max_tokens=10**9)
    assert trimmed.usage is not None and trimmed.usage.completion_tokens == 48
    with pytest.raises(openai.BadRequestError):
        api.completions.create(model="meta-llama/Llama-3.2-1B-Instruct", prompt="hi", max_tokens=0)


def test_malformed_and_unknown_fields(sim: RunningSim) -> None:
    with socket.create_connection(("127.0.0.1", sim.port)) as s:
        body = b"{not json"
        s.sendall(b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                  b"Content-Length: %d\r\n\r\n%s" % (len(body), body))  # fmt: skip
        reply = s.recv(4096).decode()
    assert reply.startswith("HTTP/1.1 400") and "BadRequestError" in reply
    api = client(sim)
    ok = api.completions.create(
        model="meta-llama/Llama-3.2-1B-Instruct", prompt="hi", max_tokens=2, extra_body={"frobnicate": 1}
    )
    assert ok.usage is not None and ok.usage.completion_tokens == 2
    time.sleep(0.2)
    assert "were present in the request but ignored: {'frobnicate'}" in sim.log()


def test_clients_that_disconnect_mid_stream_leak_nothing(start_sim) -> None:  # type: ignore[no-untyped-def]
    sim: RunningSim = start_sim(*SMALL[:-1], "1")  # speed 1: streams stay open long enough to cut
    assert sim.wait_ready()

    async def cut_streams() -> None:
        async with aiohttp.ClientSession() as session:

            async def one() -> None:
                payload = {"prompt": "hello " * 100, "max_tokens": 1500, "stream": True, "ignore_eos": True}
                async with session.post(sim.url + "/v1/completions", json=payload) as resp:
                    async for _ in resp.content:
                        break  # read one event, then drop the connection

            await asyncio.gather(*(one() for _ in range(20)))

    asyncio.run(cut_streams())
    deadline = time.monotonic() + 10
    gauges: dict[str, float] = {}
    while time.monotonic() < deadline:
        snap, _ = parse_metrics(sim.get("/metrics")[1], "m")
        gauges = snap.gauges
        if gauges.get("running") == 0 and gauges.get("waiting") == 0:
            break
        time.sleep(0.2)
    assert gauges["running"] == 0 and gauges["waiting"] == 0
    snap, _ = parse_metrics(sim.get("/metrics")[1], "m")
    assert snap.gauges["kv_usage_ratio"] == 0


def test_health_version_and_gpu_telemetry(sim: RunningSim) -> None:
    assert sim.get("/health")[0] == 200
    assert json.loads(sim.get("/version")[1]) == {"version": "0.32.0"}
    telemetry = json.loads(sim.get("/llmtriage/gpu")[1])
    (gpu,) = telemetry["gpus"]
    assert gpu["name"] == "NVIDIA L4" and gpu["memory_total_bytes"] > gpu["memory_used_bytes"] > 0
    assert gpu["processes"][0]["name"] == "VLLM::EngineCore"
