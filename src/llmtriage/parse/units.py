"""Numbers with units as servers print them."""

from __future__ import annotations

import re

_SIZE = re.compile(r"^\s*(-?[\d.,]+)\s*([KMGT]?i?B)?\s*$", re.IGNORECASE)
_FACTORS_TO_GIB = {
    "b": 1 / 2**30,
    "kib": 1 / 2**20,
    "mib": 1 / 2**10,
    "gib": 1.0,
    "tib": 2**10,
    # Servers print "GB" for GiB-sized numbers (vLLM V0 'Loading model weights took 5.2 GB' is bytes/2**30).
    "kb": 1 / 2**20,
    "mb": 1 / 2**10,
    "gb": 1.0,
    "tb": 2**10,
}


def number(text: str) -> float | None:
    """``'1,048,576'`` -> 1048576.0; None when it is not a number."""
    try:
        return float(text.replace(",", "").strip())
    except ValueError:
        return None


def size_to_gib(text: str) -> float | None:
    """``'471.69 MiB'`` -> 0.4606...; a bare number is taken as GiB; None when unreadable."""
    m = _SIZE.match(text)
    if not m:
        return None
    value = number(m.group(1))
    if value is None:
        return None
    unit = (m.group(2) or "GiB").lower()
    return value * _FACTORS_TO_GIB[unit]
