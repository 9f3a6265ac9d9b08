"""Real HTTP servers on 127.0.0.1 for the bench tests and benchmarks/bench_client.py.

``StreamServer`` is a well-behaved OpenAI-compatible streaming server (aiohttp) with known timings: the first
token after ``ttft_s``, then one token per running request per engine step of ``step_s`` (continuous
batching, as vLLM does), written straight to the socket so the server costs a few microseconds a token.
It records when it received each request and when it wrote each token (``perf_counter``, the same clock in
every process), keeps vLLM-named Prometheus metrics, and can misbehave on purpose (status codes, API keys,
early stops, reasoning and tool-call deltas, several tokens per event).

``RawServer`` answers every connection with scripted bytes, for broken protocols: cut streams, malformed
events, bodies that aren't JSON or SSE.

``python -m tests.bench.servers --tokens 64 --step-ms 10`` runs a StreamServer in its own process and prints
``listening on http://127.0.0.1:PORT``; ``GET /_timings`` returns (and forgets) the recorded timings.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import itertools
import json
import random
import threading
from collections.abc import Iterator
from dataclasses import dataclass, field
from functools import lru_cache
from time import perf_counter
from typing import Any

from aiohttp import web
from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest

from llmtriage import aio

BUCKETS_S = (0.001, 0.0025, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.15, 0.2, 0.3, 0.5, 0.75, 1.0, 2.5, 5.0)


@dataclass
class Behaviour:
    """How a StreamServer answers."""

    model: str = "tiny-llama"
    tokens: int | None = None  # stream this many tokens whatever max_tokens says (None: max_tokens)
    min_tokens: int | None = None  # with tokens: a length drawn per request id from [min_tokens, tokens]
    ttft_s: float = 0.0
    step_s: float = 0.0  # 0: all tokens back to back
    stop_after: int | None = None  # finish with "stop" (EOS) after this many tokens
    reasoning_tokens: int = 0  # chat: the first tokens as reasoning_content
    tool_call: bool = False  # chat: the first token as a tool-call delta
    usage: bool = True  # honour stream_options.include_usage
    tokens_per_event: int = 1  # usage counts this many tokens per event
    status: int = 200  # answer every completion with this status
    api_key: str | None = None
    kv_capacity: int = 64  # running requests at 100 % KV usage
    metrics: bool = True  # keep the Prometheus histograms (about 2 µs a token)
    stall: bool = False  # never answer a completion, not even its headers (a hung engine; the rest answers)


@dataclass
class Timing:
    """What the server knows about one request: when it arrived and when each token left."""

    recv_s: float
    write_s: list[float] = field(default_factory=list)


class _Metrics:
    def __init__(self) -> None:
        self.registry = CollectorRegistry()
        r = self.registry
        self.ttft = Histogram("vllm:time_to_first_token_seconds", "TTFT", buckets=BUCKETS_S, registry=r)
        self.itl = Histogram("vllm:inter_token_latency_seconds", "ITL", buckets=BUCKETS_S, registry=r)
        self.tpot = Histogram("vllm:request_time_per_output_token_seconds", "TPOT", buckets=BUCKETS_S, registry=r)
        self.e2e = Histogram("vllm:e2e_request_latency_seconds", "E2E", buckets=BUCKETS_S, registry=r)
        self.queue = Histogram("vllm:request_queue_time_seconds", "queue", buckets=BUCKETS_S, registry=r)
        self.generation = Counter("vllm:generation_tokens", "output tokens", registry=r)
        self.prompt = Counter("vllm:prompt_tokens", "prompt tokens", registry=r)
        self.success = Counter("vllm:request_success", "finished", ["finished_reason"], registry=r)
        for reason in ("stop", "length", "abort"):  # vLLM exposes every reason from the start
            self.success.labels(finished_reason=reason)
        self.running = Gauge("vllm:num_requests_running", "running", registry=r)
        self.waiting = Gauge("vllm:num_requests_waiting", "waiting", registry=r)
        self.kv = Gauge("vllm:kv_cache_usage_perc", "KV usage", registry=r)


def _frame(event: bytes) -> bytes:
    """One chunked-transfer frame holding one SSE event."""
    return b"%x\r\n%s\r\n" % (len(event), event)


def _event(obj: Any) -> bytes:
    return b"data: " + json.dumps(obj, separators=(",", ":")).encode() + b"\n\n"


class _Stream:
    """One response in flight: its frames, written one per engine step."""

    __slots__ = ("done", "frames", "next", "timing", "transport")

    def __init__(self, transport: asyncio.Transport, frames: list[bytes], timing: Timing, done: asyncio.Future[None]):
        self.transport = transport
        self.frames = frames
        self.next = 0
        self.timing = timing
        self.done = done

    def step(self) -> bool:
        """Write the next token; True when the stream has no more."""
        if self.transport.is_closing():
            self.next = len(self.frames)
        elif self.next < len(self.frames):
            self.transport.write(self.frames[self.next])
            self.timing.write_s.append(perf_counter())
            self.next += 1
        if self.next >= len(self.frames):
            if not self.done.done():
                self.done.set_result(None)
            return True
        return False


class _StampingHandler(web.RequestHandler):
    """aiohttp's connection protocol, noting when the bytes of the current request arrived: the handler runs
    later (after aiohttp's own work, and after other requests of a burst), and that wait is the server's."""

    arrived_s = 0.0

    def data_received(self, data: bytes) -> None:
        self.arrived_s = perf_counter()
        super().data_received(data)


class _StampingServer(web.Server):
    def __call__(self) -> web.RequestHandler:
        return _StampingHandler(self, loop=asyncio.get_running_loop(), access_log=None)


class StreamServer:
    """A well-behaved streaming server with known timings (see the module docstring)."""

    def __init__(self, behaviour: Behaviour | None = None) -> None:
        self.behaviour = behaviour or Behaviour()
        self.timings: dict[str, Timing] = {}
        self.bodies: list[dict[str, Any]] = []
        self.running = 0
        self.max_running = 0
        self.metrics = _Metrics()
        self._streams: list[_Stream] = []
        self._stopping = asyncio.Event()
        self._engine: asyncio.Task[None] | None = None
        self._runner: web.ServerRunner | None = None
        self.base_url = ""

    async def _dispatch(self, request: web.BaseRequest) -> web.StreamResponse:
        routes = {
            ("GET", "/v1/models"): self._models,
            ("POST", "/v1/completions"): self._completion,
            ("POST", "/v1/chat/completions"): self._completion,
            ("GET", "/metrics"): self._metrics,
            ("GET", "/health"): self._health,
            ("GET", "/_timings"): self._timings,
        }
        route = routes.get((request.method, request.path))
        if route is None:
            return self._error(404, f"no route {request.method} {request.path}")
        return await route(request)

    async def start(self, port: int = 0) -> str:
        """Listen on 127.0.0.1 (``port`` 0: any free port); returns the base URL."""
        self._runner = web.ServerRunner(_StampingServer(self._dispatch), handle_signals=False, shutdown_timeout=0.2)
        await self._runner.setup()
        site = web.TCPSite(self._runner, "127.0.0.1", port, backlog=4096)
        await site.start()
        bound = self._runner.addresses[0][1]
        self.base_url = f"http://127.0.0.1:{bound}"
        if self.behaviour.step_s > 0:
            self._engine = asyncio.create_task(self._steps())
        return self.base_url

    async def stop(self) -> None:
        """Stop listening and the engine; responses still streaming (or stalled) end at once."""
        self._stopping.set()
        for stream in self._streams:
            if not stream.done.done():
                stream.done.cancel()
        if self._engine is not None:
            self._engine.cancel()
            await asyncio.wait({self._engine})
        if self._runner is not None:
            await self._runner.cleanup()

    async def _steps(self) -> None:
        step = self.behaviour.step_s
        due = perf_counter()
        while True:
            due += step
            delay = due - perf_counter()
            if delay > 0:
                await asyncio.sleep(delay)
            else:
                due = perf_counter()  # behind: skip steps rather than burst
            self._streams = [s for s in self._streams if not s.step()]

    async def _models(self, request: web.BaseRequest) -> web.Response:
        model = {"id": self.behaviour.model, "object": "model", "root": self.behaviour.model}
        return web.json_response({"object": "list", "data": [model]})

    async def _health(self, request: web.BaseRequest) -> web.Response:
        return web.Response(text="")

    async def _metrics(self, request: web.BaseRequest) -> web.Response:
        return web.Response(body=generate_latest(self.metrics.registry), content_type="text/plain")

    async def _timings(self, request: web.BaseRequest) -> web.Response:
        data = {rid: {"recv_s": t.recv_s, "write_s": t.write_s} for rid, t in self.timings.items()}
        self.timings = {}
        return web.json_response(data)

    @staticmethod
    def _error(status: int, message: str) -> web.Response:
        body = {"error": {"message": message, "type": "BadRequestError", "code": status}}
        return web.json_response(body, status=status)

    async def _completion(self, request: web.BaseRequest) -> web.StreamResponse:
        protocol = request.protocol
        recv = protocol.arrived_s if isinstance(protocol, _StampingHandler) else perf_counter()
        b = self.behaviour
        body = await request.json()
        self.bodies.append({k: v for k, v in body.items() if k not in ("prompt", "messages")})
        if b.api_key is not None and request.headers.get("Authorization") != f"Bearer {b.api_key}":
            return self._error(401, "Unauthorized")
        if b.status != 200:
            return self._error(b.status, f"scripted status {b.status}")
        if body.get("model") not in (None, b.model):
            return self._error(404, f"The model `{body.get('model')}` does not exist.")
        chat = request.path.endswith("/chat/completions")
        request_id = request.headers.get("X-Request-Id", str(len(self.timings)))
        asked = b.tokens or body.get("max_tokens") or 16
        if b.tokens and b.min_tokens is not None:
            asked = random.Random(request_id).randint(b.min_tokens, b.tokens)
        count = min(asked, b.stop_after) if b.stop_after is not None else asked
        reason = "stop" if count < asked else "length"
        frames = [_frame(self._token(chat, i, reason if i == count - 1 else None)) for i in range(count)]
        tail = []
        if b.usage and (body.get("stream_options") or {}).get("include_usage"):
            prompt = body.get("prompt") or json.dumps(body.get("messages"))
            usage = {"prompt_tokens": len(prompt) // 4, "completion_tokens": count * b.tokens_per_event}
            tail.append(_frame(_event({"id": "x", "object": "chunk", "model": b.model, "choices": [], "usage": usage})))
        tail.append(_frame(b"data: [DONE]\n\n"))
        timing = self.timings[request_id] = Timing(recv)
        if b.stall:
            await self._stopping.wait()
            return self._error(503, "stalled until the server stopped")
        self.running += 1
        self.max_running = max(self.max_running, self.running)
        self.metrics.running.set(self.running)
        self.metrics.kv.set(min(1.0, self.running / b.kv_capacity))
        response = web.StreamResponse(headers={"Content-Type": "text/event-stream", "Cache-Control": "no-cache"})
        await response.prepare(request)
        transport = request.transport
        assert transport is not None
        try:
            if chat:
                transport.write(_frame(_event(_chunk({"role": "assistant", "content": ""}, None))))
            if b.ttft_s:
                await aio.sleep_until(recv + b.ttft_s)
            stream = _Stream(transport, frames, timing, asyncio.get_running_loop().create_future())
            if not stream.step():
                if b.step_s > 0:
                    self._streams.append(stream)
                else:
                    while not stream.step():
                        pass
            await stream.done
            for frame in tail:
                transport.write(frame)
            with contextlib.suppress(ConnectionError):  # the client may be gone
                await response.write_eof()
        finally:
            self.running -= 1
            self.metrics.running.set(self.running)
            self.metrics.kv.set(min(1.0, self.running / b.kv_capacity))
        if b.metrics:
            self._observe(timing, count, reason, len(body.get("prompt") or "") // 4)
        return response

    def _token(self, chat: bool, index: int, finish: str | None) -> bytes:
        b = self.behaviour
        if not chat:
            return _completion_event(b.model, index, finish)
        if index < b.reasoning_tokens:
            delta: dict[str, Any] = {"reasoning_content": f" think{index}"}
        elif index == 0 and b.tool_call:
            delta = {"tool_calls": [{"index": 0, "id": "call_0", "type": "function", "function": {"name": "f"}}]}
        else:
            delta = {"content": f" tok{index}"}
        return _event(_chunk(delta, finish, b.model))

    def _observe(self, timing: Timing, count: int, reason: str, prompt_tokens: int) -> None:
        m, writes = self.metrics, timing.write_s
        if not writes:
            return
        m.ttft.observe(writes[0] - timing.recv_s)
        for before, after in itertools.pairwise(writes):
            m.itl.observe(after - before)
        if len(writes) > 1:
            m.tpot.observe((writes[-1] - writes[0]) / (len(writes) - 1))
        m.e2e.observe(writes[-1] - timing.recv_s)
        m.queue.observe(0.0)
        m.generation.inc(count * self.behaviour.tokens_per_event)
        m.prompt.inc(prompt_tokens)
        m.success.labels(finished_reason=reason).inc()


def _chunk(delta: dict[str, Any], finish: str | None, model: str = "tiny-llama") -> dict[str, Any]:
    return {
        "id": "chatcmpl-1",
        "object": "chat.completion.chunk",
        "model": model,
        "choices": [{"index": 0, "delta": delta, "finish_reason": finish}],
    }


@lru_cache(maxsize=4096)
def _completion_event(model: str, index: int, finish: str | None) -> bytes:
    choice = {"index": 0, "text": f" tok{index}", "logprobs": None, "finish_reason": finish, "stop_reason": None}
    return _event({"id": "cmpl-1", "object": "text_completion", "model": model, "choices": [choice]})


class RawServer:
    """Answers every request with ``reply`` (bytes), then closes the connection."""

    def __init__(self, reply: bytes) -> None:
        self.reply = reply
        self.requests = 0
        self.base_url = ""
        self._server: asyncio.Server | None = None

    async def start(self) -> str:
        """Listen on 127.0.0.1; returns the base URL."""
        self._server = await asyncio.start_server(self._handle, "127.0.0.1", 0)
        port = self._server.sockets[0].getsockname()[1]
        self.base_url = f"http://127.0.0.1:{port}"
        return self.base_url

    async def stop(self) -> None:
        """Stop listening."""
        if self._server is not None:
            self._server.close()
            await self._server.wait_closed()

    async def _handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            head = await reader.readuntil(b"\r\n\r\n")
            length = 0
            for line in head.split(b"\r\n"):
                name, _, value = line.partition(b":")
                if name.strip().lower() == b"content-length":
                    length = int(value)
            await reader.readexactly(length)
            self.requests += 1
            writer.write(self.reply)
            await writer.drain()
        except (asyncio.IncompleteReadError, ConnectionError):
            pass
        finally:
            writer.close()


def sse_reply(*events: bytes, finish: bool = True) -> bytes:
    """A 200 event-stream reply of ``events`` (chunked); ``finish`` adds the terminating chunk."""
    head = (
        b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nTransfer-Encoding: chunked\r\nConnection: close\r\n\r\n"
    )
    return head + b"".join(_frame(e) for e in events) + (b"0\r\n\r\n" if finish else b"")


def plain_reply(status: str, content_type: str, body: bytes) -> bytes:
    """A complete reply with a Content-Length body."""
    head = (
        f"HTTP/1.1 {status}\r\nContent-Type: {content_type}\r\nContent-Length: {len(body)}\r\nConnection: close\r\n\r\n"
    )
    return head.encode() + body


def token_event(index: int) -> bytes:
    """A completions token event."""
    return _completion_event("tiny-llama", index, None)


@contextlib.contextmanager
def in_thread(server: StreamServer | RawServer) -> Iterator[str]:
    """Run ``server`` on its own event loop in a thread (for the CLI as a subprocess); yields its base URL."""
    loop = asyncio.new_event_loop()
    started = threading.Event()

    def serve() -> None:
        asyncio.set_event_loop(loop)
        loop.run_until_complete(server.start())
        started.set()
        loop.run_forever()
        loop.run_until_complete(server.stop())
        loop.close()

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    assert started.wait(10), "server did not start"
    try:
        yield server.base_url
    finally:
        loop.call_soon_threadsafe(loop.stop)
        thread.join(10)


def main() -> None:
    parser = argparse.ArgumentParser(description="A zero-latency streaming server with known timings.")
    parser.add_argument("--port", type=int, default=0)
    parser.add_argument("--tokens", type=int, default=None, help="tokens per response (default: max_tokens)")
    parser.add_argument("--min-tokens", type=int, default=None, help="with --tokens: lengths drawn from this up")
    parser.add_argument("--step-ms", type=float, default=0.0, help="engine step (0: tokens back to back)")
    parser.add_argument("--no-metrics", action="store_true", help="skip the Prometheus histograms")
    args = parser.parse_args()

    async def serve() -> None:
        behaviour = Behaviour(tokens=args.tokens, min_tokens=args.min_tokens, step_s=args.step_ms / 1000.0)
        behaviour.metrics = not args.no_metrics
        server = StreamServer(behaviour)
        print(f"listening on {await server.start(args.port)}", flush=True)
        await asyncio.Event().wait()

    with contextlib.suppress(KeyboardInterrupt):
        asyncio.run(serve())


if __name__ == "__main__":
    main()
