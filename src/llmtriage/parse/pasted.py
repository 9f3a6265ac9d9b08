"""A log pasted from a GitHub issue, a chat or a narrow terminal -> the log it quotes.

A paste wraps the log in Markdown: code fences (```` ``` ```` or ``~~~``, often with a language tag such as
```` ```log ````), ``>`` quoting (nested in replies), ``<details><summary>`` folds, and lines hard-wrapped at a
fixed width. :func:`unpaste` takes those away. Every line stays where it was (a removed line becomes empty, a
wrapped line is joined on its first piece), so a citation's line number is the paste's own.

Text that shows none of these signs is returned untouched: a real log never starts its lines with ```` ``` ```` or
``>``, and never has several different lines cut at exactly its longest line's width.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

_FENCE = re.compile(r"^(?P<indent> *)(?P<run>`{3,}|~{3,})(?P<info>\s*[\w+#.-]*\s*)$")
"""A fence with at most a language tag (```log, ~~~shell): a Python caret line cut to start with ``~~~^^^`` is
no fence."""
_QUOTE = re.compile(r"^(?: {0,3}> ?)+")
_FOLD_TAGS = r"(?:\s*</?(?:details|summary)\b[^>]*>)"
_FOLD = re.compile(rf"^{_FOLD_TAGS}+\s*$|^{_FOLD_TAGS}*\s*<summary\b[^>]*>.*</summary>{_FOLD_TAGS}*\s*$", re.I)
_FOLD_TAG = re.compile(r"<(?:/?details|/?summary)\b", re.I)
_PREFIX = (
    r"^(?:\[[^\]]{1,40}\]\s*)?"  # a CI or container timestamp, a tag: [2025-12-13T19:54:35Z], [GIN]
    r"(?:\([\w-][^)]{0,60}\)\s+)?"  # vLLM's process tag: (VllmWorker rank=0 pid=1), (APIServer pid=7)
)
LOG_PREFIX = re.compile(
    _PREFIX + r"(?:(?:INFO|WARNING|WARN|ERROR|DEBUG|CRITICAL|FATAL)\b"
    r"|\[?\d{4}[-/]\d{2}[-/]\d{2}[ T]\d"
    r"|\d+\.\d{2}\.\d{3}\.\d{3} [IWEDT] "  # llama.cpp's timed log
    r"|\d{2}-\d{2} \d{2}:\d{2}:\d{2}"
    r"|[IWEF]\d{4} \d{2}:\d{2}"  # glog, as TGI's and NCCL's C++ parts print
    r"|time=\d{4}-)"  # Ollama
)
"""A logger's prefix: a level or a timestamp, after a process tag or a bracketed stamp."""
LOG_START = re.compile(
    LOG_PREFIX.pattern
    + r"|"
    + _PREFIX
    + r"(?:Traceback \(most recent call last\)|[A-Za-z_][\w.]*(?:Error|Exception|Interrupt)\b:?)"
)
"""The start of a line a server printed: a logger's prefix, a traceback or an exception."""
CUT_LINE_CHARS = 160
"""A logged line at least this long that ends inside a word, followed by a line without a prefix that starts
inside one, was cut by the paste (a config dump broken after ``chunked_``)."""
_FRAME = re.compile(r"^\s*File \"")
_IN_WORD_END = re.compile(r"[A-Za-z0-9_]$")
_IN_WORD_START = re.compile(r"[a-z0-9_]")
_MARKERS = re.compile(r"^\s*[\^~]+\s*$")
_LOGFMT_RECORD = re.compile(r"^time=\S+ level=[A-Z]+ ")
_LOGFMT_CONTINUATION = re.compile(r'^\s+(?:[\w.-]+=(?:"(?:[^"\\]|\\.)*"|[^\s"=]*)(?:\s+|$))+$')
"""An indented line of only ``key=value`` pairs (quoted values may hold spaces)."""
SHAPE_CHARS = 10
"""A piece that starts as the cut line starts (digits and letters alike) is a line of its own."""
MIN_WRAP_WIDTH = 60
MIN_WRAPPED_LINES = 3


@dataclass(frozen=True, slots=True)
class Unpasted:
    """The log a paste holds, and what was taken away (empty: the text was no paste and is unchanged)."""

    text: str
    removed: tuple[str, ...] = ()


def unpaste(text: str) -> Unpasted:
    """The log inside ``text``: fences, quoting and folds removed, hard-wrapped lines joined again."""
    lines = text.split("\n")
    removed: list[str] = []
    quoted = [bool(_QUOTE.match(line)) for line in lines]
    quoting = _quoting(lines, quoted)
    if quoting:
        lines = [_QUOTE.sub("", line, count=1) for line in lines]
        removed.append("quoting")
    unfenced, inside, fenced = _fences(lines)
    if fenced:
        lines = unfenced
        removed.append("code fences")
    folds = False
    for i, line in enumerate(lines):
        if fenced and inside[i] is None:  # a fence line
            lines[i] = ""
        elif not inside[i] and _FOLD_TAG.search(line) and _FOLD.match(line):
            lines[i] = ""
            folds = True
        elif _prose(fenced, bool(inside[i]), quoting, quoted[i]) and not LOG_START.match(line):
            lines[i] = ""
    if folds:
        removed.append("HTML folds")
    if (fenced or quoting) and _join_cut(lines):
        removed.append("cut lines")
    if _join_logfmt(lines):
        removed.append("wrapped logfmt records")
    width = _wrap_width(lines)
    if width is not None:
        lines = _unwrap(lines, width)
        removed.append(f"lines wrapped at {width} columns")
    if not removed:
        return Unpasted(text)
    return Unpasted("\n".join(lines), tuple(removed))


def _prose(fenced: bool, in_block: bool, quoting: bool, quoted: bool) -> bool:
    """A line is around the log, not in it: outside the code blocks, or, without blocks, outside the quote.
    (A line the server printed is still kept wherever it stands.)"""
    if fenced:
        return not in_block
    return quoting and not quoted


def _quoting(lines: list[str], quoted: list[bool]) -> bool:
    """Most lines quoted, or a fence inside a quote: a reply quoting a log."""
    filled = [q for line, q in zip(lines, quoted, strict=True) if line.strip()]
    if not filled or not any(filled):
        return False
    if sum(filled) * 2 >= len(filled):
        return True
    return any(q and _FENCE.match(_QUOTE.sub("", line, count=1)) for line, q in zip(lines, quoted, strict=True))


def _fences(lines: list[str]) -> tuple[list[str], list[bool | None], bool]:
    """The lines with the blocks' contents unindented as far as their opening fence was; per line, inside a code
    block (True), outside (False) or a fence line itself (None); and whether the blocks hold the log. A block left
    open runs to the end. Fences in a real log (a prompt the server echoed) hold fewer of its lines than lie
    outside them: those are no paste."""
    lines = list(lines)
    inside: list[bool | None] = []
    opener: re.Match[str] | None = None
    for i, line in enumerate(lines):
        m = _FENCE.match(line.rstrip())
        if opener is None:
            if m is not None:
                opener = m
                inside.append(None)
            else:
                inside.append(False)
        elif (
            m is not None
            and m["run"][0] == opener["run"][0]
            and len(m["run"]) >= len(opener["run"])
            and not m["info"].strip()
        ):
            opener = None
            inside.append(None)
        else:
            indent = len(opener["indent"])
            lines[i] = line[min(indent, len(line) - len(line.lstrip(" "))) :]
            inside.append(True)
    logged = [bool(where) for line, where in zip(lines, inside, strict=True) if LOG_PREFIX.match(line)]
    found = None in inside and sum(logged) * 2 >= len(logged)
    return lines, inside, found


def _join_cut(lines: list[str]) -> bool:
    """Join a long logged line and the unprefixed line after it where the paste cut a word in two (at no fixed
    width: ``chunked_`` + ``prefill_enabled``). Whether any was joined."""
    joined = False
    for i in range(len(lines) - 1, 0, -1):
        line, previous = lines[i], lines[i - 1].rstrip("\r")
        if (
            len(previous) >= CUT_LINE_CHARS
            and LOG_PREFIX.match(previous)
            and _IN_WORD_END.search(previous)
            and _IN_WORD_START.match(line)
            and not LOG_START.match(line)
        ):
            lines[i - 1] = previous + line.rstrip("\r")
            lines[i] = ""
            joined = True
    return joined


def _join_logfmt(lines: list[str]) -> bool:
    """Join the indented lines of ``key=value`` pairs that continue a logfmt record (Ollama's, Go's slog text): the
    handler writes one record per line, quoting any newline in a value, so such a line is the paste's wrap. Whether
    any was joined."""
    joined = False
    head: int | None = None
    for i, line in enumerate(lines):
        if _LOGFMT_RECORD.match(line):
            head = i
        elif head is not None and _LOGFMT_CONTINUATION.match(line):
            lines[head] = lines[head].rstrip() + " " + line.strip()
            lines[i] = ""
            joined = True
        else:
            head = None
    return joined


def _same_shape(head: str, line: str) -> bool:
    """Both start alike, digits and letters aside, with a start that says something (not letters only)."""

    def shape(text: str) -> str:
        return re.sub(r"[A-Za-z]", "a", re.sub(r"\d", "0", text[:SHAPE_CHARS]))

    start = shape(head)
    return start == shape(line) and len(start) - start.count("a") >= 2


def _continues(head: str, cut: str, line: str) -> bool:
    """``line`` could be the rest of ``cut`` (the last piece so far of a line that began as ``head``): not empty,
    not the start of a line of its own (a log prefix, a traceback frame, a line shaped as ``head`` starts, an
    indented line after a piece that did not end in a space), and a row of ``^`` markers only after markers."""
    if not line.strip() or LOG_START.match(line) or _FRAME.match(line) or _same_shape(head, line):
        return False
    if line[:2].isspace() and not cut[-1:].isspace():
        return False
    return not _MARKERS.match(line) or cut.endswith((" ", "^", "~"))


def _wrap_width(lines: list[str]) -> int | None:
    """The width the text was hard-wrapped at: several different lines, all as long as the longest line, each
    followed by a line that continues it, and most lines that long are followed so."""
    lengths = [len(line.rstrip("\r")) for line in lines]
    width = max(lengths, default=0)
    if width < MIN_WRAP_WIDTH:
        return None
    full = [i for i, n in enumerate(lengths) if n >= width - 1]
    cut = {lines[i] for i in full if i + 1 < len(lines) and _continues(lines[i], lines[i], lines[i + 1])}
    if len(cut) < MIN_WRAPPED_LINES or len(cut) * 2 < len(full):
        return None
    return width


def _unwrap(lines: list[str], width: int) -> list[str]:
    """Join each cut line with the pieces that continue it; the pieces' own lines become empty."""
    out = list(lines)
    i = 0
    while i < len(out):
        head = i
        while (
            len(lines[i].rstrip("\r")) >= width - 1
            and i + 1 < len(lines)
            and _continues(lines[head], lines[i].rstrip("\r"), lines[i + 1])
        ):
            # A piece one short of the width lost a trailing space when it was copied.
            gap = " " if len(lines[i].rstrip("\r")) == width - 1 else ""
            out[head] = out[head].rstrip("\r") + gap + lines[i + 1].rstrip("\r")
            out[i + 1] = ""
            i += 1
        i += 1
    return out
