"""Read a live server over HTTP: a /metrics scrape and a /health probe. The only network code of diagnose."""

from __future__ import annotations

import time
import urllib.error
import urllib.parse
import urllib.request
from dataclasses import dataclass

from llmtriage.errors import UnavailableError

MAX_SCRAPE_BYTES = 32 << 20


class FetchError(UnavailableError):
    """The server could not be read (refused, timed out, HTTP error)."""


@dataclass(frozen=True, slots=True)
class Scrape:
    """One /metrics body and when it was taken."""

    url: str
    text: str
    timestamp_s: float


def fetch(url: str, timeout_s: float = 5.0) -> str:
    """GET ``url`` and return the body as text; raises FetchError with the reason."""
    request = urllib.request.Request(url, headers={"Accept": "text/plain", "User-Agent": "llmtriage"})
    try:
        with urllib.request.urlopen(request, timeout=timeout_s) as response:
            body: bytes = response.read(MAX_SCRAPE_BYTES)
    except urllib.error.HTTPError as e:
        raise FetchError(f"{url}: HTTP {e.code} {e.reason}", "is this the server's /metrics URL?") from e
    except (urllib.error.URLError, TimeoutError, ConnectionError, OSError) as e:
        reason = getattr(e, "reason", e)
        raise FetchError(f"{url}: {reason}", "is the server running, and is the port right?") from e
    return body.decode("utf-8", "replace")


def scrape(url: str, timeout_s: float = 5.0) -> Scrape:
    """One /metrics scrape."""
    text = fetch(url, timeout_s)
    return Scrape(url=url, text=text, timestamp_s=time.time())


def server_url(metrics_url: str) -> str:
    """``http://host:port`` of the server behind a /metrics URL."""
    parts = urllib.parse.urlsplit(metrics_url)
    return urllib.parse.urlunsplit((parts.scheme, parts.netloc, "", "", ""))


def health_status(base_url: str, timeout_s: float = 2.0) -> int | None:
    """The HTTP status of GET ``base_url``/health; None when nothing answers."""
    try:
        with urllib.request.urlopen(base_url + "/health", timeout=timeout_s) as response:
            return int(response.status)
    except urllib.error.HTTPError as e:
        return int(e.code)
    except (urllib.error.URLError, ConnectionError, TimeoutError, OSError):
        return None


def healthy(base_url: str, timeout_s: float = 3.0) -> bool:
    """True when GET ``base_url``/health answers 2xx."""
    status = health_status(base_url, timeout_s)
    return status is not None and 200 <= status < 300
