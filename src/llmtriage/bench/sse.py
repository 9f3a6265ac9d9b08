"""Server-sent events of an OpenAI-compatible stream -> token times, usage, finish, errors. Pure; never raises.

A token is any event that carries output: a completion ``text`` (an empty one too, unless the event only
finishes the stream: the server held back a partial character), or a chat ``delta`` with ``content``,
``reasoning_content``/``reasoning``, ``tool_calls`` or ``function_call``. The empty role chunk
(``{"role": "assistant", "content": ""}``) and finish-only or usage-only events are not tokens.

``feed`` takes the bytes of one read with the time the read returned: events that arrived together share
that time (their gaps are 0), which is what the client saw.
"""

from __future__ import annotations

import json
import json.scanner
from collections.abc import Callable
from typing import Any, cast

_DATA = b"data:"
_DONE = b"[DONE]"
_EXCERPT_CHARS = 160
# json's own C scanner, without json.loads' layers (encoding detection, whitespace regexes): 2x faster here.
_scan: Callable[[str, int], tuple[Any, int]] = json.scanner.make_scanner(cast(Any, json.JSONDecoder()))


def _loads(payload: bytes) -> Any:
    """The JSON value of ``payload``; None when it isn't exactly one JSON value."""
    try:
        text = payload.decode()
        value, end = _scan(text, 0)
    except (UnicodeDecodeError, StopIteration, ValueError):
        try:
            return json.loads(payload)  # leading whitespace, or really not JSON
        except ValueError:
            return None
    if end != len(text) and text[end:].strip():
        return None
    return value


def clip(text: str, chars: int) -> str:
    """``text`` cut to ``chars`` characters, the last an ellipsis when it was cut."""
    return text if len(text) <= chars else text[: chars - 1] + "…"


class StreamParser:
    """Reads one streamed response, read by read."""

    __slots__ = (
        "_pending",
        "done_s",
        "error",
        "events",
        "finish_reason",
        "first_token_s",
        "gaps_s",
        "last_token_s",
        "malformed",
        "malformed_excerpt",
        "prompt_tokens",
        "tokens",
        "usage_tokens",
    )

    def __init__(self) -> None:
        self._pending = b""
        self.first_token_s: float | None = None
        self.last_token_s: float | None = None
        self.gaps_s: list[float] = []
        self.tokens = 0
        self.events = 0
        self.usage_tokens: int | None = None
        self.prompt_tokens: int | None = None
        self.finish_reason: str | None = None
        self.done_s: float | None = None
        self.error: str | None = None
        self.malformed = 0
        self.malformed_excerpt: str | None = None

    def feed(self, chunk: bytes, now: float) -> None:
        """Take the bytes of one read, which returned at ``now`` (perf_counter seconds)."""
        data = self._pending + chunk if self._pending else chunk
        held = b""
        if b"\r" in data:
            if data.endswith(b"\r"):  # maybe the first half of a CRLF split across reads
                data, held = data[:-1], b"\r"
            data = data.replace(b"\r\n", b"\n").replace(b"\r", b"\n")
        start = 0
        find = data.find
        while (end := find(b"\n\n", start)) >= 0:
            block = data[start:end]
            start = end + 2
            if block.startswith(_DATA) and b"\n" not in block:
                self._event(block[6:] if block[5:6] == b" " else block[5:], now)
            elif (payload := self._payload(block)) is not None:
                self._event(payload, now)
        self._pending = (data[start:] + held) if start < len(data) or held else b""

    def _payload(self, block: bytes) -> bytes | None:
        """The data of a multi-line event; None for comments and events without data."""
        lines: list[bytes] = []
        for line in block.split(b"\n"):
            if line.startswith(_DATA):
                lines.append(line[6:] if line[5:6] == b" " else line[5:])
            elif line.startswith(b"event:") and line[6:].strip() == b"error":
                self.error = self.error or "the server sent an error event"
        return b"\n".join(lines) if lines else None

    def _event(self, payload: bytes, now: float) -> None:
        self.events += 1
        if payload == _DONE:
            self.done_s = now
            return
        obj = _loads(payload)
        if not isinstance(obj, dict):
            self.malformed += 1
            self.malformed_excerpt = self.malformed_excerpt or clip(
                payload.decode("utf-8", "replace").strip(), _EXCERPT_CHARS
            )
            return
        choices = obj.get("choices")
        if choices and isinstance(choices, list) and isinstance(choice := choices[0], dict):
            reason = choice.get("finish_reason")
            text = choice.get("text")
            # An empty text before the finish is still a generated token: the detokenizer holds back a
            # partial UTF-8 sequence or a special token. Only the finish-only chunk carries no token.
            token = isinstance(text, str) and (bool(text) or reason is None)
            if not token and isinstance(delta := choice.get("delta"), dict):
                token = bool(
                    delta.get("content")
                    or delta.get("reasoning_content")
                    or delta.get("reasoning")
                    or delta.get("tool_calls")
                    or delta.get("function_call")
                )
            if reason and isinstance(reason, str):
                self.finish_reason = reason
            if token:
                if self.last_token_s is None:
                    self.first_token_s = now
                else:
                    self.gaps_s.append(now - self.last_token_s)
                self.last_token_s = now
                self.tokens += 1
        usage = obj.get("usage")
        if isinstance(usage, dict):
            completion, prompt = usage.get("completion_tokens"), usage.get("prompt_tokens")
            if isinstance(completion, int):
                self.usage_tokens = completion
            if isinstance(prompt, int):
                self.prompt_tokens = prompt
        if (error := obj.get("error")) is not None:
            message = error.get("message") if isinstance(error, dict) else error
            self.error = clip(str(message).strip(), _EXCERPT_CHARS)

    @property
    def finished(self) -> bool:
        """The stream said it was complete: ``[DONE]``, or a finish reason (some servers omit ``[DONE]``)."""
        return self.done_s is not None or self.finish_reason is not None

    @property
    def leftover(self) -> bytes:
        """Bytes after the last complete event (a stream that ends here was cut)."""
        return self._pending
