"""Escaping for the HTML report: every string that reaches the page goes through :func:`esc`."""

from __future__ import annotations

import html
import re

# C0 controls (but tab and newline) and DEL become their visible Unicode pictures (ESC -> ␛).
_CONTROLS = {i: 0x2400 + i for i in range(32) if i not in (9, 10)} | {0x7F: 0x2421}
_BACKTICKS = re.compile(r"`([^`]+)`")


def esc(value: object) -> str:
    """``value`` as HTML text (also safe inside a quoted attribute); control characters shown, not obeyed."""
    return html.escape(str(value).translate(_CONTROLS), quote=True)


def esc_code(value: object) -> str:
    """Like :func:`esc`, with ```spans``` in backticks set as ``<code>`` (for the catalog's fixes and commands)."""
    return _BACKTICKS.sub(r"<code>\1</code>", esc(value))
