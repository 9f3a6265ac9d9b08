"""URLs given on the command line: checked before anything is started, shown without their credentials."""

from __future__ import annotations

import re
import urllib.parse

from llmtriage.errors import UsageError

_USERINFO = re.compile(r"//[^/?#]*@")


def check_url(url: str, flag: str, example: str = "e.g. http://127.0.0.1:8000") -> str:
    """``url`` when it is an http:// or https:// URL with a host (and a port from 1 to 65535); else a UsageError
    naming ``flag``, with ``example`` as its hint. A password in the URL is never shown."""
    shown = _USERINFO.sub("//***@", url)
    if any(ch.isspace() or not ch.isprintable() for ch in url):
        raise UsageError(f"{flag} {shown!r}: a URL has no blanks or control characters", example)
    try:
        parts = urllib.parse.urlsplit(url)
        port = parts.port  # a port that is not a number from 0 to 65535 is a ValueError
    except ValueError as e:
        raise UsageError(f"{flag} {shown}: not a valid URL ({e})", example) from e
    if parts.scheme not in ("http", "https"):
        raise UsageError(f"{flag} {shown}: not an http(s) URL", example)
    if not parts.hostname or port == 0:
        raise UsageError(f"{flag} {shown}: {'port 0' if port == 0 else 'no host'} in the URL", example)
    return url


def public_url(url: str) -> str:
    """``url`` without user:password, fit to show or write down (a URL that does not parse: its credentials
    masked)."""
    try:
        parts = urllib.parse.urlsplit(url)
        port = parts.port
    except ValueError:
        return _USERINFO.sub("//***@", url)
    if not (parts.username or parts.password):
        return url
    host = parts.hostname or ""
    netloc = f"[{host}]" if ":" in host else host
    netloc += f":{port}" if port else ""
    return urllib.parse.urlunsplit(parts._replace(netloc=netloc))
