"""SLO strings like ``ttft_p95=2s,tpot_p95=100ms,error_rate=1%,queue=20``."""

from __future__ import annotations

import dataclasses
import re

from llmtriage.catalog import Slo
from llmtriage.errors import UsageError

_DURATION = re.compile(r"^\s*(?P<value>\d+(?:\.\d+)?)\s*(?P<unit>ms|s|m|h)?\s*$")
_UNITS = {"ms": 0.001, "s": 1.0, "m": 60.0, "h": 3600.0, None: 1.0}
_KEYS = {
    "ttft": "ttft_p95_s",
    "ttft_p95": "ttft_p95_s",
    "tpot": "itl_p95_s",
    "tpot_p95": "itl_p95_s",
    "itl": "itl_p95_s",
    "itl_p95": "itl_p95_s",
    "error_rate": "error_rate",
    "queue": "queue",
}


def parse_duration(text: str) -> float:
    """``'10s'`` -> 10.0, ``'100ms'`` -> 0.1, ``'2m'`` -> 120.0, a bare number is seconds."""
    m = _DURATION.match(text)
    if m is None:
        raise UsageError(f"not a duration: {text!r}", "use e.g. 500ms, 10s, 2m")
    return float(m.group("value")) * _UNITS[m.group("unit")]


def parse_slo(text: str, base: Slo) -> Slo:
    """Override ``base`` with the objectives in ``text``."""
    values = dataclasses.asdict(base)
    for part in filter(None, (p.strip() for p in text.split(","))):
        key, sep, raw = part.partition("=")
        field = _KEYS.get(key.strip().lower())
        if not sep or field is None:
            raise UsageError(f"unknown SLO {part!r}", f"known: {', '.join(sorted(_KEYS))}")
        raw = raw.strip()
        try:
            if field == "error_rate":
                value = float(raw[:-1]) / 100 if raw.endswith("%") else float(raw)
            elif field == "queue":
                value = float(raw)
            else:
                value = parse_duration(raw)
        except ValueError as e:
            raise UsageError(f"bad value in SLO {part!r}") from e
        if value < 0:
            raise UsageError(f"SLO {key} must not be negative")
        values[field] = value
    return Slo(**values)
