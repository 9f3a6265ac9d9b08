"""Reading a Hugging Face ``config.json``'s fields across architectures (shared by the config parser and `fit`, which
must not pay for the typed facts' classes at start-up)."""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

# No architecture field (layers, heads, sizes, lengths) comes near this; a bigger value is a broken file.
LARGEST_FIELD = 2**40


def first_int(data: Mapping[str, Any], *keys: str) -> int | None:
    """The first of ``keys`` (a field's spellings across architectures) that holds a plausible number (finite,
    0 to LARGEST_FIELD), as an int."""
    for key in keys:
        value = data.get(key)
        if isinstance(value, bool):
            continue
        if isinstance(value, int | float) and math.isfinite(value) and 0 <= value <= LARGEST_FIELD:
            return int(value)
    return None


def language_model_fields(data: Mapping[str, Any]) -> Mapping[str, Any]:
    """A multimodal config's ``text_config`` (or ``llm_config``) over its top level; other configs as they are."""
    text_config = data.get("text_config") or data.get("llm_config")
    return {**data, **text_config} if isinstance(text_config, Mapping) else data
