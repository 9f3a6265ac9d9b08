"""Escaping for the HTML report: every string that reaches the page goes through :func:`esc`."""

from __future__ import annotations

import html
import re

# C0 controls (but tab and newline) and DEL become their visible Unicode pictures (ESC -> ␛); C1 controls (a
# terminal reads 0x9B as CSI) become the replacement character.
_CONTROLS = (
    {i: 0x2400 + i for i in range(32) if i not in (9, 10)} | {0x7F: 0x2421} | {i: 0xFFFD for i in range(0x80, 0xA0)}
)
_BACKTICKS = re.compile(r"`([^`]+)`")


def visible(value: object) -> str:
    """``value`` with control characters shown, not obeyed: a log line cannot retitle, clear or recolour the
    terminal (OSC, DCS, CSI sequences) it is printed on."""
    return str(value).translate(_CONTROLS)


def esc(value: object) -> str:
    """``value`` as HTML text (also safe inside a quoted attribute); control characters shown, not obeyed."""
    return html.escape(visible(value), quote=True)


def esc_code(value: object) -> str:
    """Like :func:`esc`, with ```spans``` in backticks set as ``<code>`` (for the catalog's fixes and commands)."""
    return _BACKTICKS.sub(r"<code>\1</code>", esc(value))
