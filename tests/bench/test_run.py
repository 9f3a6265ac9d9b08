"""Whole runs against real HTTP servers on 127.0.0.1: known timings, load shapes, and every way a server can
fail (each failure a record of its kind, never an exception)."""

from __future__ import annotations

import asyncio
import json
import socket
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from dataclasses import replace
from time import perf_counter
from typing import TypeVar

import pytest

from llmtriage import aio
from llmtriage.bench import result, runner
from llmtriage.bench.client import STALE_CONNECTION_ATTEMPTS
from llmtriage.bench.model import Arrival, BenchConfig, Endpoint, RequestClass, RunOutcome
from llmtriage.bench.summary import Summary

from .servers import Behaviour, RawServer, StreamServer, plain_reply, sse_reply, token_event

T = TypeVar("T")
SHORT = (RequestClass("default", 200, 16),)


@asynccontextmanager
async def serving(server: StreamServer | RawServer) -> AsyncIterator[str]:
    url = await server.start()
    try:
        yield url
    finally:
        await server.stop()


def run(scenario: Callable[[], Awaitable[T]]) -> T:
    return aio.run(asyncio.wait_for(scenario(), 60))  # the CLI's event loop (uvloop where installed)


async def bench(url: str, stop: asyncio.Event | None = None, **kw: object) -> tuple[RunOutcome, Summary]:
    config = replace(BenchConfig(base_url=url, classes=SHORT, requests=8, concurrency=2), **kw)  # type: ignore[arg-type]
    outcome = await runner.run(config, stop or asyncio.Event())
    return outcome, result.build(outcome).summary


def test_sleep_until_never_wakes_before_its_deadline() -> None:
    """uvloop rounds a sleep to whole ms from its cached clock: 3.4 ms sleeps end ~0.4 ms early, every time."""

    async def lateness_ms() -> list[float]:
        late = []
        for _ in range(50):
            deadline = perf_counter() + 0.0034
            await aio.sleep_until(deadline)
            late.append((perf_counter() - deadline) * 1000)
        return late

    assert min(run(lateness_ms)) >= 0.0


def test_timings_match_what_the_server_did() -> None:
    server = StreamServer(Behaviour(ttft_s=0.05, step_s=0.005))

    async def scenario() -> tuple[RunOutcome, Summary]:
        async with serving(server) as url:
            return await bench(url, requests=12, concurrency=3)

    outcome, s = run(scenario)
    assert (s.completed, s.failed, server.max_running) == (12, 0, 3)
    assert outcome.config.model == "tiny-llama"
    for r in outcome.records:
        known = server.timings[r.request_id]
        server_ttft_ms = (known.write_s[0] - known.recv_s) * 1000
        assert r.ttft_ms is not None and 0 <= r.ttft_ms - server_ttft_ms < 50
        assert r.output_tokens_client == r.output_tokens_server == 16 == len(known.write_s)
    assert s.ttft_ms.min is not None and s.ttft_ms.min >= 50.0  # the server waited 50 ms: nothing can be faster
    assert s.tpot_ms.mean == pytest.approx(5.0, abs=2.5)
    assert s.output_tokens_total == 12 * 16


def test_ttft_is_measured_from_the_send_not_the_schedule() -> None:
    """Capped at one request in flight, an open loop at 50/s holds each request back until the one before ends
    (~100 ms): TTFT counted from the schedule would add that wait; counted from the send it is the server's delay."""
    server = StreamServer(Behaviour(ttft_s=0.1))

    async def scenario() -> tuple[RunOutcome, Summary]:
        async with serving(server) as url:
            return await bench(url, request_rate_per_s=50.0, arrival=Arrival.constant, requests=4, concurrency=1)

    outcome, s = run(scenario)
    assert s.completed == 4
    assert [r.queue_ms > 60 for r in outcome.records] == [False, True, True, True]  # the schedule and the send differ
    for r in outcome.records:
        known = server.timings[r.request_id]
        server_ttft_ms = (known.write_s[0] - known.recv_s) * 1000
        assert r.ttft_ms is not None and 0 <= r.ttft_ms - server_ttft_ms < 50


def test_role_chunk_is_not_the_first_token_but_reasoning_is() -> None:
    # The server sends the empty role chunk at once, then thinks 100 ms: a client counting the role chunk says ~0.
    server = StreamServer(Behaviour(ttft_s=0.1, reasoning_tokens=3))

    async def scenario() -> tuple[RunOutcome, Summary]:
        async with serving(server) as url:
            return await bench(url, endpoint=Endpoint.chat, requests=2, concurrency=1)

    outcome, s = run(scenario)
    assert s.completed == 2 and s.ttft_ms.min is not None and s.ttft_ms.min >= 100.0
    assert all(r.output_tokens_client == 16 for r in outcome.records)


def test_open_loop_constant_rate_is_achieved() -> None:
    async def scenario() -> tuple[RunOutcome, Summary]:
        async with serving(StreamServer()) as url:
            return await bench(url, request_rate_per_s=40.0, arrival=Arrival.constant, requests=20, concurrency=None)

    outcome, s = run(scenario)
    assert [r.scheduled_s for r in outcome.records] == pytest.approx([i / 40 for i in range(20)])
    assert s.completed == 20 and s.achieved_rate_per_s == pytest.approx(40.0, rel=0.2)
    assert s.queue_ms.p50 is not None and s.queue_ms.p50 < 10.0


def test_duration_bounds_a_closed_loop_and_warmup_is_not_measured() -> None:
    async def scenario() -> tuple[RunOutcome, Summary]:
        async with serving(StreamServer(Behaviour(ttft_s=0.02))) as url:
            return await bench(url, requests=None, duration_s=0.4, warmup_requests=3, concurrency=2)

    outcome, s = run(scenario)
    assert [r.warmup for r in outcome.records[:3]] == [True] * 3 and not any(r.warmup for r in outcome.records[3:])
    assert s.warmup == 3 and s.measured == len(outcome.records) - 3 > 0
    assert max(r.scheduled_s for r in outcome.records) < 0.4


def test_requests_open_at_the_deadline_get_as_long_as_the_slowest_took() -> None:
    """--duration 0.5 s against a server answering in 0.3 s: the second pair, open at the deadline, completes within
    the grace (the slowest completed request's time) instead of ending as timeouts."""

    async def scenario() -> tuple[RunOutcome, Summary]:
        async with serving(StreamServer(Behaviour(ttft_s=0.3))) as url:
            return await bench(url, requests=None, duration_s=0.5, concurrency=2)

    outcome, s = run(scenario)
    assert (s.completed, s.failed) == (4, 0)
    assert max(r.end_s or 0 for r in outcome.records) > 0.5  # they did finish after the deadline


def test_mix_and_server_side_figures() -> None:
    server = StreamServer(Behaviour(ttft_s=0.03))
    classes = (RequestClass("long", 4000, 4, 1.0), RequestClass("short", 100, 8, 1.0))

    async def scenario() -> RunOutcome:
        async with serving(server) as url:
            outcome, _ = await bench(
                url, classes=classes, requests=10, metrics_url=url + "/metrics", scrape_interval_s=0.05
            )
            return outcome

    outcome = run(scenario)
    done = result.build(outcome)
    assert {c.name for c in done.summary.by_class} == {"long", "short"}
    assert all(r.prompt_chars == (4000 if r.class_name == "long" else 100) for r in outcome.records)
    server_side = done.server
    assert server_side is not None and server_side.scrapes >= 3
    assert server_side.requests_finished == 10 and server_side.engine == "vllm"
    assert server_side.ttft_ms is not None and server_side.ttft_ms.mean == pytest.approx(30.0, abs=15.0)
    assert server_side.kv_usage_peak_ratio is not None and server_side.running_peak is not None


def test_worker_processes_share_the_load() -> None:
    server = StreamServer(Behaviour(step_s=0.002))

    async def scenario() -> tuple[RunOutcome, Summary]:
        async with serving(server) as url:
            return await bench(url, requests=12, concurrency=4, workers=2)

    outcome, s = run(scenario)
    assert sorted(r.index for r in outcome.records) == list(range(12))
    assert [w.worker for w in outcome.workers] == [0, 1] and all(w.records for w in outcome.workers)
    assert s.completed == 12 and server.max_running <= 4


def test_workers_return_reports_larger_than_a_pipe_buffer() -> None:
    """A worker's records (every token gap) travel back whole, whatever the size, on uvloop's non-blocking polls."""
    server = StreamServer(Behaviour(metrics=False))

    async def scenario() -> tuple[RunOutcome, Summary]:
        async with serving(server) as url:
            classes = (RequestClass("long", 200, 256),)
            return await bench(url, requests=800, concurrency=32, workers=2, classes=classes)

    outcome, s = run(scenario)
    assert [w.error for w in outcome.workers] == [None, None]
    assert s.completed == 800 and sum(len(r.itl_ms) for r in outcome.records) == 800 * 255


@pytest.mark.parametrize("workers", [1, 2])
def test_stop_keeps_what_finished_and_marks_the_rest_interrupted(workers: int) -> None:
    server = StreamServer(Behaviour(tokens=400, step_s=0.01))

    async def scenario() -> tuple[RunOutcome, Summary]:
        stop = asyncio.Event()
        async with serving(server) as url:

            async def stop_when_streaming() -> None:
                while sum(len(t.write_s) for t in server.timings.values()) < 4:
                    await asyncio.sleep(0.01)
                stop.set()

            stopper = asyncio.create_task(stop_when_streaming())
            done = await bench(url, stop, requests=6, concurrency=2, workers=workers)
            await stopper
            return done

    outcome, s = run(scenario)
    assert outcome.interrupted and s.interrupted == 2 and s.completed == 0
    assert all(r.error_kind == "interrupted" and r.output_tokens_client > 0 for r in outcome.records)


def closed_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
    return port


def test_unreachable_server() -> None:
    outcome, s = run(lambda: bench(f"http://127.0.0.1:{closed_port()}", requests=3))
    assert s.completed == 0 and [(e.kind, e.count) for e in s.errors] == [("connect", 3)]
    assert outcome.config.model is None and "could not list models" in outcome.notes[0]


@pytest.mark.parametrize(
    ("behaviour", "kw", "kind", "status", "message"),
    [
        (Behaviour(api_key="secret"), {}, "http", 401, "Unauthorized"),
        (Behaviour(status=429), {"model": "tiny-llama"}, "http", 429, "scripted status 429"),
        (Behaviour(status=500), {"model": "tiny-llama"}, "http", 500, "scripted status 500"),
        (Behaviour(), {"model": "other"}, "http", 404, "The model `other` does not exist."),
    ],
)
def test_http_errors(behaviour: Behaviour, kw: dict[str, object], kind: str, status: int, message: str) -> None:
    async def scenario() -> tuple[RunOutcome, Summary]:
        async with serving(StreamServer(behaviour)) as url:
            return await bench(url, requests=3, **kw)

    _, s = run(scenario)
    assert s.completed == 0 and [(e.kind, e.status, e.message, e.count) for e in s.errors] == [
        (kind, status, message, 3)
    ]


def test_a_stalled_server_times_out() -> None:
    async def scenario() -> tuple[RunOutcome, Summary]:
        async with serving(StreamServer(Behaviour(ttft_s=5.0))) as url:
            return await bench(url, requests=2, timeout_s=0.3)

    outcome, s = run(scenario)
    assert [(e.kind, e.count) for e in s.errors] == [("timeout", 2)]
    assert all(r.first_byte_s is not None and r.e2e_ms is not None and r.e2e_ms >= 250 for r in outcome.records)


def test_api_key_is_sent_and_not_written() -> None:
    async def scenario() -> tuple[RunOutcome, Summary]:
        async with serving(StreamServer(Behaviour(api_key="secret"))) as url:
            return await bench(url, requests=2, api_key="secret")

    outcome, s = run(scenario)
    assert s.completed == 2 and outcome.config.model == "tiny-llama"
    assert "secret" not in json.dumps(result.to_dict(result.build(outcome)))


def test_credentials_in_the_url_are_not_written() -> None:
    async def scenario() -> tuple[RunOutcome, Summary]:
        async with serving(StreamServer()) as url:
            with_credentials = url.replace("http://", "http://user:hunter2@")
            return await bench(with_credentials, requests=2, metrics_url=with_credentials + "/metrics")

    outcome, s = run(scenario)
    assert s.completed == 2
    written = json.dumps(result.to_dict(result.build(outcome)))
    assert "hunter2" not in written and "user@" not in written


BROKEN = [
    ("cut mid-stream", sse_reply(token_event(0), token_event(1), finish=False), "closed_mid_stream"),
    ("no [DONE]", sse_reply(token_event(0)), "closed_mid_stream"),
    ("malformed", sse_reply(b'data: {"choices": [{"te\n\n', token_event(0), b"data: [DONE]\n\n"), "malformed_sse"),
    ("error event", sse_reply(token_event(0), b'data: {"error": {"message": "EngineDeadError"}}\n\n'), "stream_error"),
    ("no tokens", sse_reply(b"data: [DONE]\n\n"), "no_tokens"),
    ("html 200", plain_reply("200 OK", "text/html", b"<html><body>proxy login</body></html>"), "not_sse"),
    ("json 200", plain_reply("200 OK", "application/json", b'{"choices": [{"text": "hi"}]}'), "not_sse"),
    ("html 502", plain_reply("502 Bad Gateway", "text/html", b"<html>upstream down</html>"), "http"),
    ("not http", b"SSH-2.0-OpenSSH_9.6\r\n", "client"),
]


@pytest.mark.parametrize(("name", "reply", "kind"), BROKEN, ids=[b[0] for b in BROKEN])
def test_broken_protocols_become_records(name: str, reply: bytes, kind: str) -> None:
    server = RawServer(reply)

    async def scenario() -> tuple[RunOutcome, Summary]:
        async with serving(server) as url:
            return await bench(url, requests=2, concurrency=1, model="m")

    outcome, s = run(scenario)
    assert server.requests >= 1
    assert s.completed == 0 and [e.kind for e in s.errors] == [kind]
    assert all(r.error for r in outcome.records)
    if name == "html 502":
        assert s.errors[0].status == 502 and s.errors[0].message == "<html>upstream down</html>"


def test_a_request_closed_unanswered_is_sent_again_a_bounded_number_of_times() -> None:
    # What llama-server does to a kept-alive connection after a stream (tests/realllamacpp): read, close, no answer.
    server = RawServer(b"")

    async def scenario() -> tuple[RunOutcome, Summary]:
        async with serving(server) as url:
            return await bench(url, requests=2, concurrency=1, model="m")

    outcome, s = run(scenario)
    assert server.requests == 2 * STALE_CONNECTION_ATTEMPTS
    assert s.completed == 0 and [e.kind for e in s.errors] == ["closed_mid_stream"]
    assert all(r.status is None for r in outcome.records)
