"""The HTTP seam of a capture: one GET with a timeout and a size cap, answered as data, never raised.

The GET is evidence.live's: connection, redirects, headers and body share one deadline (a server that trickles
its answer cannot stretch a sample), proxies from the environment are not used (the server is reached directly),
and ``user:password@`` in a URL becomes a Basic ``Authorization`` header.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Protocol

from llmtriage.evidence import live


@dataclass(frozen=True, slots=True)
class HttpResult:
    """One GET: the body, or why there is none."""

    url: str
    status: int | None
    body: bytes
    duration_s: float
    truncated: bool = False
    error: str | None = None

    @property
    def ok(self) -> bool:
        """True for a complete 2xx answer."""
        return self.error is None and self.status is not None and 200 <= self.status < 300


class Fetcher(Protocol):
    """GETs a URL."""

    def get(self, url: str, timeout_s: float, max_bytes: int) -> HttpResult:
        """GET ``url``, keeping at most ``max_bytes`` of the body."""


HEADERS = {"Accept": "text/plain, application/json", "User-Agent": "llmtriage-capture"}


class DeadlineFetcher:
    """GETs with evidence.live.get: everything of one GET within its timeout."""

    def get(self, url: str, timeout_s: float, max_bytes: int) -> HttpResult:
        """See :meth:`Fetcher.get`."""
        started = time.monotonic()
        try:
            answer = live.get(url, timeout_s, max_bytes, HEADERS)
        except live.FetchError as e:
            return HttpResult(url, None, b"", time.monotonic() - started, error=e.reason)
        elapsed = time.monotonic() - started
        if not answer.ok:
            error = f"HTTP {answer.status} {live.excerpt(answer.reason.encode())}".rstrip()
            return HttpResult(url, answer.status, b"", elapsed, error=error)
        return HttpResult(url, answer.status, answer.body, elapsed, truncated=answer.truncated)
