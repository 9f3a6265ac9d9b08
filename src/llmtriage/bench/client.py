"""Send one streaming request over aiohttp and time it with ``time.perf_counter``.

Whatever happens (refused connection, HTTP error, a body that isn't an event stream, malformed events, a
stream cut short, a timeout, a stop) becomes a :class:`RequestRecord` with an error kind: never an exception.

Error kinds: ``connect``, ``http`` (with the status), ``not_sse``, ``malformed_sse``, ``stream_error``,
``closed_mid_stream``, ``no_tokens``, ``timeout``, ``client`` (anything else aiohttp reports), and
``interrupted``.
"""

from __future__ import annotations

import asyncio
import json
import os
from time import perf_counter
from types import SimpleNamespace

import aiohttp

from llmtriage.bench.model import INTERRUPTED, PlannedRequest, RequestRecord
from llmtriage.bench.sse import StreamParser, clip

MAX_ERROR_BODY_BYTES = 4096
_MESSAGE_CHARS = 200
# A request the server closed before answering is sent again on another connection, at most this often in all.
STALE_CONNECTION_ATTEMPTS = 4


def _short(text: str) -> str:
    return clip(" ".join(text.split()), _MESSAGE_CHARS)


def connect_reason(error: aiohttp.ClientConnectorError) -> str:
    """Why a connection failed, as the OS names it ("Connection refused"), rather than asyncio's
    "[Errno 111] Connect call failed ('127.0.0.1', 9)"; names without an errno (DNS) as they come."""
    number = error.os_error.errno
    return os.strerror(number) if number and number > 0 else _short(str(error.os_error) or str(error))


def error_message(body: bytes) -> str:
    """The message of an error body: ``error.message`` / ``message`` / ``detail`` of JSON, else its first text."""
    text = body.decode("utf-8", "replace")
    try:
        data = json.loads(text)
    except ValueError:
        return _short(text) or "(empty body)"
    if isinstance(data, dict):
        error = data.get("error")
        for found in (
            error.get("message") if isinstance(error, dict) else error,
            data.get("message"),
            data.get("detail"),
        ):
            if found:
                return _short(str(found))
    return _short(text)


class _Timing:
    """What a request has seen so far; lets an interrupted or failed request keep its partial times."""

    __slots__ = ("first_byte", "parser", "status", "wire")

    def __init__(self) -> None:
        self.wire: float | None = None
        self.first_byte: float | None = None
        self.status: int | None = None
        self.parser = StreamParser()


async def _on_chunk_sent(
    session: aiohttp.ClientSession, context: SimpleNamespace, params: aiohttp.TraceRequestChunkSentParams
) -> None:
    timing = context.trace_request_ctx
    if isinstance(timing, _Timing) and timing.wire is None:
        timing.wire = perf_counter()


def wire_trace() -> aiohttp.TraceConfig:
    """The trace that notes when a request's body is handed to the socket: the moment it is sent.

    aiohttp writes the body from a task of its own (Python < 3.12), so a clock read before ``post()`` would
    charge the client's own backlog to the server's TTFT; that wait belongs to the client queue time.
    """
    trace = aiohttp.TraceConfig()
    trace.on_request_chunk_sent.append(_on_chunk_sent)
    return trace


async def send(
    session: aiohttp.ClientSession,
    url: str,
    planned: PlannedRequest,
    headers: dict[str, str],
    origin_s: float,
    scheduled_s: float,
) -> RequestRecord:
    """Send ``planned`` now; times in the record are relative to ``origin_s``.

    ``session`` must carry :func:`wire_trace`, else the send time is the moment ``send`` was called.
    """
    timing = _Timing()
    called = perf_counter()
    try:
        for attempt in range(1, STALE_CONNECTION_ATTEMPTS + 1):
            try:
                kind, message, end = await _exchange(session, url, planned, headers, timing)
                break
            except (aiohttp.ServerDisconnectedError, aiohttp.ClientOSError) as e:
                # Closed before any answer: a kept-alive connection the server had already closed (llama-server
                # closes after each stream though it announces Keep-Alive). Nothing was served: send it again.
                if timing.status is not None or isinstance(e, aiohttp.ClientConnectorError):
                    raise
                if attempt == STALE_CONNECTION_ATTEMPTS:
                    raise
                timing = _Timing()
    except asyncio.CancelledError:
        kind, message, end = INTERRUPTED, "cut short: the run was stopped", perf_counter()
    except aiohttp.ClientConnectorError as e:
        kind, message, end = "connect", connect_reason(e), perf_counter()
    except (aiohttp.ServerDisconnectedError, aiohttp.ClientPayloadError) as e:
        kind, message, end = "closed_mid_stream", _short(f"{type(e).__name__}: {e}"), perf_counter()
    except TimeoutError:
        kind, message, end = "timeout", "no complete answer within the request timeout", perf_counter()
    except (aiohttp.ClientError, OSError, UnicodeError) as e:
        kind, message, end = "client", _short(f"{type(e).__name__}: {e}"), perf_counter()
    parser = timing.parser
    sent = called if timing.wire is None else timing.wire
    return RequestRecord(
        index=planned.index,
        request_id=planned.request_id,
        class_name=planned.class_name,
        warmup=planned.warmup,
        prompt_chars=planned.prompt_chars,
        max_tokens=planned.max_tokens,
        scheduled_s=scheduled_s - origin_s,
        sent_s=sent - origin_s,
        first_byte_s=None if timing.first_byte is None else timing.first_byte - origin_s,
        first_token_s=None if parser.first_token_s is None else parser.first_token_s - origin_s,
        end_s=end - origin_s,
        itl_ms=tuple(gap * 1000.0 for gap in parser.gaps_s),
        output_tokens_client=parser.tokens,
        output_tokens_server=parser.usage_tokens,
        prompt_tokens_server=parser.prompt_tokens,
        finish_reason=parser.finish_reason,
        status=timing.status,
        error_kind=kind,
        error=message,
    )


async def _exchange(
    session: aiohttp.ClientSession, url: str, planned: PlannedRequest, headers: dict[str, str], timing: _Timing
) -> tuple[str | None, str | None, float]:
    """POST and read the stream; returns (error kind, message, end time)."""
    headers = {**headers, "X-Request-Id": planned.request_id}
    async with session.post(url, data=planned.body, headers=headers, trace_request_ctx=timing) as response:
        timing.first_byte = perf_counter()
        timing.status = response.status
        if response.status != 200:
            body = await response.content.read(MAX_ERROR_BODY_BYTES)
            return "http", error_message(body), perf_counter()
        content_type = response.headers.get("Content-Type", "")
        if not content_type.startswith("text/event-stream"):
            body = await response.content.read(MAX_ERROR_BODY_BYTES)
            shown = content_type or "no content type"
            return "not_sse", _short(f"expected text/event-stream, got {shown}: {error_message(body)}"), perf_counter()
        parser = timing.parser
        feed, read = parser.feed, response.content.readany
        end = timing.first_byte
        while chunk := await read():
            end = perf_counter()
            feed(chunk, end)
        return (*_verdict(parser), end if parser.done_s is None else parser.done_s)


def _verdict(parser: StreamParser) -> tuple[str | None, str | None]:
    if parser.error is not None:
        return "stream_error", parser.error
    if parser.malformed:
        return "malformed_sse", f"{parser.malformed} event(s) not JSON, first: {parser.malformed_excerpt}"
    if not parser.finished:
        cut = f" ({len(parser.leftover)} bytes of an unfinished event)" if parser.leftover else ""
        return "closed_mid_stream", f"the stream ended before [DONE] after {parser.tokens} token(s){cut}"
    if parser.tokens == 0:
        return "no_tokens", "the stream finished without a token"
    return None, None
