"""The HTTP seam of a capture: one GET with a timeout and a size cap, answered as data, never raised.

Proxies from the environment are not used: the server being captured is reached directly.

``user:password@`` in a URL becomes a Basic ``Authorization`` header (urllib would read it as a port).
"""

from __future__ import annotations

import base64
import http.client
import time
import urllib.error
import urllib.parse
import urllib.request
from dataclasses import dataclass
from typing import Protocol


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


class UrllibFetcher:
    """GETs with the standard library (one short connection per request, no proxy: the server is local)."""

    def __init__(self) -> None:
        self._opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))

    def get(self, url: str, timeout_s: float, max_bytes: int) -> HttpResult:
        """See :meth:`Fetcher.get`."""
        started = time.monotonic()
        request = _request(url)
        try:
            with self._opener.open(request, timeout=timeout_s) as response:
                body: bytes = response.read(max_bytes + 1)
                status: int = response.status
        except urllib.error.HTTPError as e:
            return HttpResult(url, e.code, b"", time.monotonic() - started, error=f"HTTP {e.code} {e.reason}")
        except (urllib.error.URLError, http.client.HTTPException, OSError, ValueError) as e:
            reason = getattr(e, "reason", None) or e
            return HttpResult(url, None, b"", time.monotonic() - started, error=str(reason))
        truncated = len(body) > max_bytes
        return HttpResult(url, status, body[:max_bytes], time.monotonic() - started, truncated=truncated)


def _request(url: str) -> urllib.request.Request:
    parts = urllib.parse.urlsplit(url)
    headers = {"Accept": "text/plain, application/json", "User-Agent": "llmtriage-capture"}
    if parts.username is not None:
        credentials = f"{urllib.parse.unquote(parts.username)}:{urllib.parse.unquote(parts.password or '')}"
        headers["Authorization"] = "Basic " + base64.b64encode(credentials.encode()).decode()
        host = parts.hostname or ""
        netloc = f"[{host}]" if ":" in host else host
        if parts.port is not None:
            netloc += f":{parts.port}"
        url = urllib.parse.urlunsplit(parts._replace(netloc=netloc))
    return urllib.request.Request(url, headers=headers)
