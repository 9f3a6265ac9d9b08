"""Many streams at once: the simulator's socket takes a burst of connects (its listen queue is as long as the kernel
allows, not aiohttp's 128), and every stream gets each of its tokens once, in order, as vLLM's compact SSE events,
whole at the end, however the engine groups them into writes."""

from __future__ import annotations

import asyncio
import json
import shutil
import socket
import subprocess
from pathlib import Path

import aiohttp
import pytest

from llmtriage.sim.server import LISTEN_BACKLOG
from llmtriage.sim.text import WORDS

from .conftest import RunningSim

SOMAXCONN = Path("/proc/sys/net/core/somaxconn")
STREAMS = 400  # three times aiohttp's default listen backlog
TOKENS = 200  # enough steps that the engine hands tokens out while it runs, not only at the end
COMPLETION_KEYS = ["id", "object", "created", "model", "choices"]
COMPLETION_CHOICE_KEYS = ["index", "text", "logprobs", "finish_reason", "stop_reason"]
CHAT_CHOICE_KEYS = ["index", "delta", "logprobs", "finish_reason"]


@pytest.mark.skipif(
    shutil.which("ss") is None or not SOMAXCONN.exists(), reason="needs iproute2's ss and Linux's somaxconn"
)
def test_the_listen_queue_is_as_long_as_the_kernel_allows(start_sim) -> None:  # type: ignore[no-untyped-def]
    sim: RunningSim = start_sim("--speed", "1000")
    assert sim.wait_ready()
    listening = subprocess.run(
        ["ss", "-ltnH", f"sport = :{sim.port}"], capture_output=True, text=True, check=True
    ).stdout.splitlines()
    (line,) = listening
    # For a listening socket, ss's Send-Q column is its backlog.
    assert int(line.split()[2]) == min(LISTEN_BACKLOG, int(SOMAXCONN.read_text()))


async def _one(session: aiohttp.ClientSession, url: str, chat: bool) -> bytes:
    payload: dict[str, object] = {"max_tokens": TOKENS, "stream": True, "ignore_eos": True}
    if chat:
        path = "/v1/chat/completions"
        payload["messages"] = [{"role": "user", "content": "count"}]
    else:
        path = "/v1/completions"
        payload["prompt"] = "benchmark " * 16
    async with session.post(url + path, json=payload) as resp:
        assert resp.status == 200
        return await resp.read()


async def _burst(url: str) -> list[bytes]:
    async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=0)) as session:
        return await asyncio.gather(*(_one(session, url, chat=i % 2 == 1) for i in range(STREAMS)))


def _check_stream(body: bytes, chat: bool) -> str:
    """The stream's id, after checking each event's bytes and order."""
    assert body.endswith(b"\n\n")
    events = body[:-2].split(b"\n\n")
    assert events[-1] == b"data: [DONE]"
    data = [e.removeprefix(b"data: ") for e in events[:-1]]
    chunks = [json.loads(d) for d in data]
    # Compact JSON, keys in vLLM's order: the bytes are what json.dumps writes back.
    assert [json.dumps(c, separators=(",", ":")).encode() for c in chunks] == data
    if chat:
        assert chunks[0]["choices"][0]["delta"] == {"role": "assistant", "content": ""}
        chunks = chunks[1:]
    assert len(chunks) == TOKENS
    assert all(list(c) == COMPLETION_KEYS for c in chunks)
    choices = [c["choices"][0] for c in chunks]
    assert all(list(c) == (CHAT_CHOICE_KEYS if chat else COMPLETION_CHOICE_KEYS) for c in choices)
    pieces = [c["delta"]["content"] if chat else c["text"] for c in choices]
    assert all(p.startswith(" ") and p[1:] in WORDS for p in pieces)
    assert [c["finish_reason"] for c in choices] == [None] * (TOKENS - 1) + ["length"]
    assert len({c["id"] for c in chunks}) == 1
    return str(chunks[0]["id"])


def test_a_burst_of_streams_gets_every_token_once_in_vllm_events(start_sim) -> None:  # type: ignore[no-untyped-def]
    sim: RunningSim = start_sim("--speed", "1000", "--max-num-seqs", str(STREAMS), "--max-model-len", "4096")
    assert sim.wait_ready()
    bodies = asyncio.run(_burst(sim.url))
    ids = [_check_stream(body, chat=i % 2 == 1) for i, body in enumerate(bodies)]
    assert len(set(ids)) == STREAMS


def test_an_http_1_0_client_reads_the_stream_unchunked(start_sim) -> None:  # type: ignore[no-untyped-def]
    sim: RunningSim = start_sim("--speed", "5")  # on time: the engine hands out each step's token as it comes
    assert sim.wait_ready()
    body = json.dumps({"prompt": "benchmark " * 16, "max_tokens": TOKENS, "stream": True, "ignore_eos": True}).encode()
    with socket.create_connection(("127.0.0.1", sim.port), timeout=30) as s:
        s.sendall(
            b"POST /v1/completions HTTP/1.0\r\nHost: x\r\nContent-Type: application/json\r\n"
            b"Content-Length: %d\r\n\r\n%s" % (len(body), body)
        )
        reply = b""
        while chunk := s.recv(65536):
            reply += chunk
    head, _, stream = reply.partition(b"\r\n\r\n")
    assert head.startswith(b"HTTP/1.0 200") and b"chunked" not in head.lower()
    _check_stream(stream, chat=False)
