"""The fingerprint of an incident: its error signatures with the variable parts normalised away, hashed.

Two incidents of the same fault on different hosts, days or models give the same fingerprint: the error
events of the log's last lifecycle (and the GPU and kernel errors) are reduced to their signature id and
their message from the match onwards, with timestamps, ids, hex, paths and numbers replaced by
placeholders. Pure: evidence in, a digest out.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Callable
from dataclasses import dataclass
from functools import cache

from llmtriage import catalog
from llmtriage.diagnose.scene import Scene
from llmtriage.facts import Evidence, LogEvent

# A log excerpt holds at least this many characters from the match on (parse.logs.excerpt: 360 - 60).
MESSAGE_CHARS = 300
# Of the normalised message, this much takes part: the same error clipped differently still agrees.
NORMALISED_CHARS = 160
DIGEST_HEX_CHARS = 16

_NORMALISE: tuple[tuple[re.Pattern[str], str], ...] = (
    (re.compile(r"\d{4}-\d{2}-\d{2}[T ]\d{2}:\d{2}:\d{2}(?:[.,]\d+)?(?:Z|[+-]\d{2}:?\d{2})?"), "<time>"),
    (re.compile(r"\b\d{1,2}-\d{1,2} \d{1,2}:\d{2}:\d{2}(?:[.,]\d+)?"), "<time>"),
    (re.compile(r"\b\d{1,2}:\d{2}:\d{2}(?:[.,]\d+)?"), "<time>"),
    (re.compile(r"\b[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}\b", re.IGNORECASE), "<id>"),
    (re.compile(r"\b0x[0-9a-f]+\b", re.IGNORECASE), "<hex>"),
    (re.compile(r"\b(?=[0-9a-f]*\d)(?=[0-9a-f]*[a-f])[0-9a-f]{8,}\b", re.IGNORECASE), "<hex>"),
    (re.compile(r"[\w.@+~-]*(?:/[\w.@+~-]+)+/?"), "<path>"),
    (re.compile(r"\d+(?:\.\d+)?"), "<n>"),
    (re.compile(r"\s+"), " "),
)
# Where a kernel message starts after dmesg's or syslog's prefix (time, host).
_KERNEL_MESSAGE = re.compile(r"NVRM:|Out of memory:")


@dataclass(frozen=True, slots=True)
class Fingerprint:
    """The digest of an incident's normalised error signatures, and the signature ids that went in."""

    digest: str
    signatures: tuple[str, ...]


def normalise(message: str) -> str:
    """``message`` with timestamps, uuids, hex, paths and numbers replaced by placeholders, lowercased."""
    for pattern, placeholder in _NORMALISE:
        message = pattern.sub(placeholder, message)
    return message.strip().lower()


@cache
def _signature_patterns() -> dict[str, re.Pattern[str]]:
    return {s.id: s.regex for s in catalog.signatures()}


def _message(event: LogEvent) -> str:
    """The error message from the signature's match on: the log prefix (time, pid, level) is left out."""
    text = event.text
    pattern = _signature_patterns().get(event.signature)
    if pattern is not None and (m := pattern.search(text)) is not None:
        text = text[m.start() :]
    return text[:MESSAGE_CHARS]


def _kernel_message(text: str) -> str:
    m = _KERNEL_MESSAGE.search(text)
    return text if m is None else text[m.start() :]


def fingerprint(evidence: Evidence, redact: Callable[[str], str]) -> Fingerprint | None:
    """The fingerprint of the errors in ``evidence`` (None when there is no error at all).

    ``redact`` runs over every message first, so that a secret never reaches the digest.
    """
    scene = Scene(evidence, catalog.thresholds())
    events = [e for e in scene.events if e.role == "error"] + list(scene.gpu.errors)
    parts = {(e.signature, normalise(redact(_message(e)))[:NORMALISED_CHARS]) for e in events}
    for k in scene.kernel.events:
        kind = f"kernel_{k.kind}" if k.xid is None else f"kernel_{k.kind}_{k.xid}"
        parts.add((kind, normalise(redact(_kernel_message(k.text)))[:NORMALISED_CHARS]))
    if not parts:
        return None
    text = "\n".join(f"{name}\t{message}" for name, message in sorted(parts))
    digest = hashlib.sha256(text.encode("utf-8")).hexdigest()[:DIGEST_HEX_CHARS]
    return Fingerprint(digest=digest, signatures=tuple(sorted({name for name, _ in parts})))
