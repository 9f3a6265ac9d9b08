"""JSON as every reader parses it: a number that is not finite (NaN, Infinity) is written as null, never as the
bare NaN/Infinity tokens Python's json module writes by default and strict parsers (jq, JavaScript) reject."""

from __future__ import annotations

import json
import math
from typing import Any


def finite(value: Any) -> Any:
    """``value`` with every NaN or infinite float replaced by None, at any depth."""
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, dict):
        return {k: finite(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [finite(v) for v in value]
    return value


def dumps(data: Any) -> str:
    """``data`` as indented strict JSON, non-ASCII kept, with a final newline."""
    return json.dumps(finite(data), indent=2, ensure_ascii=False, allow_nan=False) + "\n"
