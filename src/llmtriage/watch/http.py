"""The network side of ``watch``: scrapes, ``/health``, GPU telemetry and the synthetic probe, over one aiohttp
session. Every call answers with data (a body or why there is none); nothing here raises on a bad server.
"""

from __future__ import annotations

import asyncio
import json
import os
import time
from dataclasses import dataclass

import aiohttp

from llmtriage.watch.endpoint import ProbeState

MAX_BODY_BYTES = 32 << 20
PROBE_PROMPT = "ping"


@dataclass(frozen=True, slots=True)
class Answer:
    """One GET: the body, or why there is none."""

    url: str
    status: int | None
    body: bytes
    error: str | None = None

    @property
    def ok(self) -> bool:
        """A 2xx answer read whole."""
        return self.error is None and self.status is not None and 200 <= self.status < 300


def session(connections: int) -> aiohttp.ClientSession:
    """A session for ``connections`` servers, keeping connections alive between ticks; no proxy from the
    environment (the servers are reached directly)."""
    connector = aiohttp.TCPConnector(limit=max(connections * 2, 10), keepalive_timeout=60)
    return aiohttp.ClientSession(connector=connector, trust_env=False, headers={"User-Agent": "llmtriage-watch"})


async def get(http: aiohttp.ClientSession, url: str, timeout_s: float) -> Answer:
    """GET ``url``: connection, headers and the whole body within ``timeout_s``, the body at most MAX_BODY_BYTES."""
    try:
        async with asyncio.timeout(timeout_s):
            async with http.get(url, timeout=aiohttp.ClientTimeout(total=timeout_s)) as response:
                # read(n) answers what has arrived so far: read until the end, or past the cap
                body = bytearray()
                while chunk := await response.content.read(MAX_BODY_BYTES + 1 - len(body)):
                    body += chunk
                    if len(body) > MAX_BODY_BYTES:
                        return Answer(url, response.status, b"", f"answer larger than {MAX_BODY_BYTES >> 20} MiB")
                if response.status >= 300:
                    reason = f"HTTP {response.status} {response.reason or ''}".strip()
                    return Answer(url, response.status, bytes(body), reason)
                return Answer(url, response.status, bytes(body))
    except TimeoutError:
        return Answer(url, None, b"", f"no answer within {timeout_s:g} s")
    except (aiohttp.ClientError, OSError, ValueError) as e:
        return Answer(url, None, b"", _describe(e))


def _describe(error: Exception) -> str:
    if isinstance(error, aiohttp.ClientConnectorError):
        why = os.strerror(error.os_error.errno) if error.os_error.errno else str(error.os_error)
        return f"cannot connect to {error.host}:{error.port}: {why}"
    return f"{type(error).__name__}: {error}" if str(error) else type(error).__name__


async def served_model(http: aiohttp.ClientSession, base: str, timeout_s: float) -> str | None:
    """The first model of ``/v1/models``, or None when it cannot be read."""
    answer = await get(http, base + "/v1/models", timeout_s)
    if not answer.ok:
        return None
    try:
        data = json.loads(answer.body).get("data") or []
        first = data[0].get("id") if data and isinstance(data[0], dict) else None
    except (ValueError, AttributeError):
        return None
    return str(first) if first else None


async def probe(http: aiohttp.ClientSession, base: str, model: str | None, state: ProbeState, timeout_s: float) -> None:
    """Send one streamed one-token completion and note how long its first token took (or why none came)."""
    body: dict[str, object] = {"prompt": PROBE_PROMPT, "max_tokens": 1, "stream": True, "temperature": 0}
    if model:
        body["model"] = model
    state.in_flight_since_s = time.time()
    started = time.monotonic()
    try:
        async with asyncio.timeout(timeout_s):
            async with http.post(base + "/v1/completions", json=body) as response:
                if response.status != 200:
                    state.last_error = f"HTTP {response.status}"
                    return
                async for line in response.content:
                    if line.startswith(b"data:") and b"[DONE]" not in line:
                        state.last_first_token_s = time.monotonic() - started
                        state.last_error = None
                        return
                state.last_error = "the answer ended without a token"
    except TimeoutError:
        state.last_error = f"no token within {timeout_s:g} s"
    except (aiohttp.ClientError, OSError, ValueError) as e:
        state.last_error = _describe(e)
    finally:
        state.in_flight_since_s = None
