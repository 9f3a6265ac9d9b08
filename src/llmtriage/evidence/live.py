"""Read a live server over HTTP: a /metrics scrape and a /health probe. The only network code of diagnose.

Every GET has a total deadline, connection, headers and the whole body together (a server that trickles its
answer is cut at the deadline, never read for ever), and a size cap. Redirects are followed within the same
deadline. Proxies from the environment are not used: the server is reached directly. ``user:password@`` in a URL
becomes a Basic ``Authorization`` header.
"""

from __future__ import annotations

import base64
import contextlib
import http.client
import socket
import ssl
import threading
import time
import urllib.parse
from collections.abc import Mapping
from dataclasses import dataclass

from llmtriage.errors import UnavailableError
from llmtriage.parse.prom import has_samples
from llmtriage.urls import public_url

MAX_SCRAPE_BYTES = 32 << 20
SCRAPE_TIMEOUT_S = 10.0
HEALTH_TIMEOUT_S = 3.0
HEALTH_MAX_BYTES = 64 << 10
MAX_REDIRECTS = 5
EXCERPT_CHARS = 80
_READ_CHUNK = 1 << 16
_CUT_AGAIN_S = 0.05
_REDIRECTS = frozenset((301, 302, 303, 307, 308))


class FetchError(UnavailableError):
    """The server could not be read (refused, timed out, HTTP error, not Prometheus text); ``reason`` says why,
    without the URL."""

    def __init__(self, url: str, reason: str, hint: str = "") -> None:
        super().__init__(f"{public_url(url)}: {reason}", hint)
        self.reason = reason


@dataclass(frozen=True, slots=True)
class Answer:
    """One GET answered: its status, content type and body (at most the cap; ``truncated`` when cut there)."""

    url: str
    status: int
    reason: str
    content_type: str
    body: bytes
    truncated: bool = False

    @property
    def ok(self) -> bool:
        """A 2xx answer."""
        return 200 <= self.status < 300


@dataclass(frozen=True, slots=True)
class Scrape:
    """One /metrics body and when it was taken; ``truncated`` when it was cut at the size cap."""

    url: str
    text: str
    timestamp_s: float
    truncated: bool = False


class _Watchdog:
    """At the deadline, shuts the connection's socket down, which ends whatever read is blocked on it; then again
    every few milliseconds until stopped (a TLS handshake swaps the socket for another)."""

    def __init__(self, conn: http.client.HTTPConnection, seconds: float) -> None:
        self._conn = conn
        self._seconds = max(seconds, 0.0)
        self._lock = threading.Lock()
        self._stopped = threading.Event()
        self._fired = False
        threading.Thread(target=self._run, name="llmtriage-deadline", daemon=True).start()

    def _run(self) -> None:
        if self._stopped.wait(self._seconds):
            return
        with self._lock:
            if self._stopped.is_set():
                return
            self._fired = True
        while True:
            sock = self._conn.sock
            if sock is not None:
                with contextlib.suppress(OSError):  # closed, or not connected yet
                    socket.socket.shutdown(sock, socket.SHUT_RDWR)  # the plain socket's, under TLS too
            if self._stopped.wait(_CUT_AGAIN_S):
                return

    def finish(self) -> bool:
        """Stop watching; True when the deadline had passed before."""
        with self._lock:
            self._stopped.set()
            return self._fired


def _target(url: str, extra: Mapping[str, str]) -> tuple[str, str, int | None, str, dict[str, str]]:
    """Scheme, host, port, path with query, and headers of a GET of ``url``; ValueError when it is not one."""
    parts = urllib.parse.urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise ValueError(f"not an http:// URL: {url}")
    headers = {"Accept": "text/plain", "User-Agent": "llmtriage", **extra}
    if parts.username is not None:
        credentials = f"{urllib.parse.unquote(parts.username)}:{urllib.parse.unquote(parts.password or '')}"
        headers["Authorization"] = "Basic " + base64.b64encode(credentials.encode()).decode()
    path = (parts.path or "/") + (f"?{parts.query}" if parts.query else "")
    return parts.scheme, parts.hostname, parts.port, path, headers


def _reason(error: BaseException | None) -> str:
    if error is None:
        return "no answer"
    if isinstance(error, OSError) and error.strerror:
        return error.strerror
    return str(error) or type(error).__name__


def _get_once(
    url: str, deadline: float, timeout_s: float, max_bytes: int, extra: Mapping[str, str]
) -> tuple[Answer, str | None]:
    """One GET of ``url`` before ``deadline`` (monotonic); the answer and its redirect target, if any."""
    try:
        scheme, host, port, path, headers = _target(url, extra)
    except ValueError as e:
        raise FetchError(url, str(e), "is this the server's /metrics URL?") from e
    remaining = deadline - time.monotonic()
    late = FetchError(url, f"no whole answer within {timeout_s:g} s", "is the server overloaded, or stuck?")
    if remaining <= 0:
        raise late
    conn: http.client.HTTPConnection
    if scheme == "https":
        conn = http.client.HTTPSConnection(host, port, timeout=remaining, context=ssl.create_default_context())
    else:
        conn = http.client.HTTPConnection(host, port, timeout=remaining)
    watchdog = _Watchdog(conn, remaining)
    failure: Exception | None = None
    answer, location = None, None
    try:
        conn.request("GET", path, headers=headers)
        response = conn.getresponse()
        body = bytearray()
        truncated = False
        while chunk := response.read1(min(_READ_CHUNK, max_bytes + 1 - len(body))):
            body += chunk
            if len(body) > max_bytes:
                truncated = True
                del body[max_bytes:]
                break
        location = response.getheader("Location") if response.status in _REDIRECTS else None
        answer = Answer(
            url=url,
            status=response.status,
            reason=response.reason or "",
            content_type=response.getheader("Content-Type") or "",
            body=bytes(body),
            truncated=truncated,
        )
    except (OSError, http.client.HTTPException, ValueError) as e:
        failure = e
    finally:
        too_late = watchdog.finish()
        conn.close()
    if too_late:  # what was read (if anything) is not the whole answer
        raise late from failure
    if failure is not None or answer is None:
        raise FetchError(url, _reason(failure), "is the server running, and is the port right?") from failure
    return answer, location


def get(url: str, timeout_s: float, max_bytes: int, headers: Mapping[str, str] | None = None) -> Answer:
    """GET ``url``: connection, redirects, headers and body all within ``timeout_s``, the body capped at
    ``max_bytes``; ``headers`` over the default ones (``Accept: text/plain``). Any HTTP status is an answer; what
    keeps one from coming (refused, reset, too slow, too many redirects) is a FetchError."""
    deadline = time.monotonic() + timeout_s
    for _ in range(MAX_REDIRECTS + 1):
        answer, location = _get_once(url, deadline, timeout_s, max_bytes, headers or {})
        if location is None:
            return answer
        url = urllib.parse.urljoin(url, location)
    raise FetchError(url, f"more than {MAX_REDIRECTS} redirects", "give the URL the redirects end at")


def excerpt(body: bytes) -> str:
    """The start of an answer, its whitespace and unprintable characters folded into single spaces, for a
    message."""
    text = body[: EXCERPT_CHARS * 8].decode("utf-8", "replace")
    line = " ".join("".join(ch if ch.isprintable() else " " for ch in text).split())
    return line[:EXCERPT_CHARS] + ("..." if len(line) > EXCERPT_CHARS else "")


def fetch(url: str, timeout_s: float = SCRAPE_TIMEOUT_S, max_bytes: int = MAX_SCRAPE_BYTES) -> Answer:
    """GET ``url`` and return its 2xx answer; raises FetchError with the reason otherwise."""
    answer = get(url, timeout_s, max_bytes)
    if not answer.ok:
        reason = excerpt(answer.reason.encode())
        raise FetchError(url, f"HTTP {answer.status} {reason}".rstrip(), "is this the server's /metrics URL?")
    return answer


def scrape(url: str, timeout_s: float = SCRAPE_TIMEOUT_S, max_bytes: int = MAX_SCRAPE_BYTES) -> Scrape:
    """One /metrics scrape. An answer without a single Prometheus sample (an HTML page, JSON, an empty body) is
    a FetchError that says what came instead. A body cut at the cap ends at its last whole line."""
    answer = fetch(url, timeout_s, max_bytes)
    text = answer.body.decode("utf-8", "replace")
    if answer.truncated:
        text = text[: text.rfind("\n") + 1]
    if not has_samples(text):
        kind = answer.content_type.split(";")[0].strip() or "no content type"
        what = excerpt(answer.body)
        raise FetchError(
            url,
            f"could not be read: it answered {kind}"
            + (f" starting {what!r}" if what else ", an empty body")
            + ", not Prometheus metrics",
            "is this the server's /metrics URL?",
        )
    return Scrape(url=url, text=text, timestamp_s=time.time(), truncated=answer.truncated)


def server_url(metrics_url: str) -> str:
    """``http://host:port`` of the server behind a /metrics URL."""
    parts = urllib.parse.urlsplit(metrics_url)
    return urllib.parse.urlunsplit((parts.scheme, parts.netloc, "", "", ""))


def health_status(base_url: str, timeout_s: float = 2.0) -> int | None:
    """The HTTP status of GET ``base_url``/health (within ``timeout_s`` in all); None when nothing answers."""
    try:
        return get(base_url + "/health", timeout_s, HEALTH_MAX_BYTES).status
    except FetchError:
        return None


def healthy(base_url: str, timeout_s: float = HEALTH_TIMEOUT_S) -> bool:
    """True when GET ``base_url``/health answers 2xx."""
    status = health_status(base_url, timeout_s)
    return status is not None and 200 <= status < 300
