"""Multi-pattern line scanning over byte streams of any size.

The scanner reads fixed-size chunks cut at line ends, so memory stays bounded however large the log.
Hyperscan (when importable) matches all signatures in one pass; elsewhere each pattern runs over the
chunk with Python's ``re``. Both report the same thing: for every line that matched, its number, its
bytes and the indices of the patterns it matched. Callers re-run the exact Python regex on those few
lines to extract values, so the scanner only has to find a superset of the matching lines.
"""

from __future__ import annotations

import re
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any, BinaryIO, Protocol

hyperscan: Any
try:
    import hyperscan
except ImportError:  # pragma: no cover - platforms without a Hyperscan wheel
    hyperscan = None

CHUNK_BYTES = 8 << 20
# A "line" longer than this (binary junk without newlines) is cut, so one chunk never grows unbounded.
MAX_LINE_BYTES = 1 << 20


@dataclass(frozen=True, slots=True)
class LineMatch:
    """A line that matched at least one pattern."""

    line_no: int
    line: bytes
    pattern_ids: frozenset[int]


@dataclass(slots=True)
class ScanTotals:
    """How much was read."""

    bytes: int = 0
    lines: int = 0


class _BlockMatcher(Protocol):
    def match_ends(self, block: bytes) -> list[tuple[int, int]]:
        """(end offset, pattern index) of every match in ``block``."""


class _HyperscanMatcher:
    def __init__(self, patterns: Sequence[str]) -> None:
        self._db = hyperscan.Database(mode=hyperscan.HS_MODE_BLOCK)
        self._db.compile(
            expressions=[_to_hyperscan(p).encode("utf-8") for p in patterns],
            ids=list(range(len(patterns))),
            elements=len(patterns),
            flags=[hyperscan.HS_FLAG_MULTILINE] * len(patterns),
        )

    def match_ends(self, block: bytes) -> list[tuple[int, int]]:
        hits: list[tuple[int, int]] = []

        def on_match(pattern_id: int, start: int, end: int, flags: int, context: object) -> None:
            hits.append((end, pattern_id))

        self._db.scan(block, match_event_handler=on_match)
        return hits


class _RegexMatcher:
    def __init__(self, patterns: Sequence[str]) -> None:
        self._regexes = [re.compile(single_line(p).encode("utf-8"), re.MULTILINE) for p in patterns]

    def match_ends(self, block: bytes) -> list[tuple[int, int]]:
        return [(m.end(), i) for i, rx in enumerate(self._regexes) for m in rx.finditer(block)]


_NAMED_GROUP = re.compile(r"\(\?P<\w+>")


def _to_hyperscan(pattern: str) -> str:
    # Hyperscan has no capture semantics; named groups become plain groups.
    return _NAMED_GROUP.sub("(?:", single_line(pattern))


_CLASS_SPACE = " \\t\\r\\f\\v"


def single_line(pattern: str) -> str:
    """``pattern`` unable to match across a newline when run over a block of lines: ``\\s`` and negated classes
    (``[^x]``) stop at line ends, as they do when the pattern is run over one line."""
    out: list[str] = []
    in_class = False
    i = 0
    while i < len(pattern):
        c = pattern[i]
        if c == "\\" and i + 1 < len(pattern):
            pair = pattern[i : i + 2]
            if pair == "\\s":
                out.append(_CLASS_SPACE if in_class else "[^\\S\\n]")
            else:
                out.append(pair)
            i += 2
            continue
        if c == "[" and not in_class:
            in_class = True
            if pattern.startswith("[^]", i):  # a `]` first in a class is a literal
                out.append("[^]\\n")
                i += 3
                continue
            if pattern.startswith("[^", i):
                out.append("[^\\n")
                i += 2
                continue
        elif c == "]" and in_class and out[-1] not in ("[", "[^\\n"):
            in_class = False
        out.append(c)
        i += 1
    return "".join(out)


class LineScanner:
    """Finds the lines of a stream that match any of ``patterns``."""

    def __init__(self, patterns: Sequence[str], *, use_hyperscan: bool | None = None) -> None:
        wanted = hyperscan is not None if use_hyperscan is None else use_hyperscan
        if wanted and hyperscan is None:
            raise RuntimeError("hyperscan is not installed")
        self._matcher: _BlockMatcher = _HyperscanMatcher(patterns) if wanted else _RegexMatcher(patterns)
        self.engine = "hyperscan" if wanted else "re"

    def scan(self, stream: BinaryIO, totals: ScanTotals) -> Iterator[LineMatch]:
        """Yield every matching line of ``stream`` in order; ``totals`` counts what was read."""
        carry = b""
        line_base = 1
        while True:
            data = stream.read(CHUNK_BYTES)
            buf = carry + data if carry else data
            if data:
                cut = buf.rfind(b"\n") + 1
                if cut == 0:
                    if len(buf) < MAX_LINE_BYTES:
                        carry = buf
                        continue
                    cut = len(buf)
            else:
                cut = len(buf)
            block, carry = buf[:cut], buf[cut:]
            totals.bytes += len(block)
            if block:
                yield from self._lines(block, line_base)
                newlines = block.count(b"\n")
                line_base += newlines + (0 if block.endswith(b"\n") else 1)
            if not data:
                totals.lines = line_base - 1
                return

    def _lines(self, block: bytes, line_base: int) -> Iterator[LineMatch]:
        hits = self._matcher.match_ends(block)
        if not hits:
            return
        hits.sort()
        by_start: dict[int, set[int]] = {}
        order: list[int] = []
        for end, pattern_id in hits:
            # `end` is exclusive; a match never includes the newline that ends its line.
            start = block.rfind(b"\n", 0, max(end - 1, 0)) + 1 if end else 0
            ids = by_start.get(start)
            if ids is None:
                by_start[start] = ids = set()
                order.append(start)
            ids.add(pattern_id)
        line_no = line_base
        counted_to = 0
        for start in order:
            line_no += block.count(b"\n", counted_to, start)
            counted_to = start
            stop = block.find(b"\n", start)
            line = block[start : stop if stop != -1 else len(block)]
            yield LineMatch(line_no=line_no, line=line, pattern_ids=frozenset(by_start[start]))
