"""Multi-pattern line scanning over byte streams of any size.

The scanner reads fixed-size chunks cut at line ends, so memory stays bounded however large the log.
Hyperscan (when importable) matches all signatures in one pass; elsewhere each pattern runs over the
chunk with Python's ``re``. Both report the same thing: for every line that matched, its number, its
bytes and the indices of the patterns it matched. Callers re-run the exact Python regex on those few
lines to extract values, so the scanner only has to find a superset of the matching lines.
"""

from __future__ import annotations

import platform
import re
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any, BinaryIO, Protocol

from llmtriage import usercache

hyperscan: Any
try:
    import hyperscan
except ImportError:  # pragma: no cover - platforms without a Hyperscan wheel
    hyperscan = None

CHUNK_BYTES = 4 << 20
# A "line" longer than this (binary junk without newlines) is cut, so one chunk never grows unbounded.
MAX_LINE_BYTES = 1 << 20


@dataclass(frozen=True, slots=True)
class LineMatch:
    """A line that matched at least one pattern."""

    line_no: int
    line: bytes
    pattern_ids: frozenset[int]
    offset: int = 0
    """Where the line starts in its :class:`Block`."""


@dataclass(slots=True)
class ScanTotals:
    """How much was read."""

    bytes: int = 0
    lines: int = 0


@dataclass(frozen=True, slots=True)
class Block:
    """A run of whole lines of the stream: its bytes, the number of its first line, the lines that matched one of
    the line-by-line patterns, and which of the bulk patterns occur in it (their lines are left to the caller)."""

    data: bytes
    line_base: int
    hits: list[LineMatch]
    bulk: frozenset[int]


class _BlockMatcher(Protocol):
    def match_ends(self, block: bytes) -> list[tuple[int, int]]:
        """(end offset, pattern index) of every match in ``block``; a bulk pattern's first match only."""


class _HyperscanMatcher:
    def __init__(self, patterns: Sequence[str], bulk: frozenset[int]) -> None:
        expressions = [_to_hyperscan(p).encode("utf-8") for p in patterns]
        # A bulk pattern is reported once a block: whether it occurs is all the scan needs to know of it.
        flags = [
            hyperscan.HS_FLAG_MULTILINE | (hyperscan.HS_FLAG_SINGLEMATCH if i in bulk else 0)
            for i in range(len(patterns))
        ]
        self._db = _database(expressions, flags)

    def match_ends(self, block: bytes) -> list[tuple[int, int]]:
        hits: list[tuple[int, int]] = []

        def on_match(pattern_id: int, start: int, end: int, flags: int, context: object) -> None:
            hits.append((end, pattern_id))

        self._db.scan(block, match_event_handler=on_match)
        return hits


def _compile_database(expressions: list[bytes], flags: list[int]) -> Any:
    db = hyperscan.Database(mode=hyperscan.HS_MODE_BLOCK)
    db.compile(expressions=expressions, ids=list(range(len(expressions))), elements=len(expressions), flags=flags)
    return db


def _database_key(expressions: list[bytes], flags: list[int]) -> str:
    # A serialized database is only valid for the Hyperscan build and the platform that compiled it (another CPU
    # generation shows as a scan error, below).
    build = f"{hyperscan.__version__} {platform.machine()} {flags}".encode()
    return usercache.key("hyperscan", build, *expressions)


def _database(expressions: list[bytes], flags: list[int]) -> Any:
    """The database for ``expressions``: the one an earlier run compiled and stored, else compiled (and stored) now.
    Compiling the catalog's signatures takes ~140 ms, loading them well under 1 ms."""
    entry = _database_key(expressions, flags)
    serialized = usercache.read(entry)
    if serialized is not None:
        try:
            db = hyperscan.loadb(serialized, hyperscan.HS_MODE_BLOCK)
            db.scratch = hyperscan.Scratch(db)
            db.scan(b"")
            return db
        except hyperscan.error:
            pass  # another CPU's or build's database: compile and replace it
    db = _compile_database(expressions, flags)
    usercache.write(entry, hyperscan.dumpb(db))
    return db


class _RegexMatcher:
    def __init__(self, patterns: Sequence[str], bulk: frozenset[int]) -> None:
        self._regexes = [re.compile(single_line(p).encode("utf-8"), re.MULTILINE) for p in patterns]
        self._bulk = bulk

    def match_ends(self, block: bytes) -> list[tuple[int, int]]:
        ends: list[tuple[int, int]] = []
        for i, rx in enumerate(self._regexes):
            if i in self._bulk:
                m = rx.search(block)
                ends.extend(() if m is None else ((m.end(), i),))
            else:
                ends.extend((m.end(), i) for m in rx.finditer(block))
        return ends


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
    """Finds the lines of a stream that match any of ``patterns``.

    The patterns whose indices are in ``bulk`` (lines a log holds by the million: access and stats lines) are only
    said to occur in a block, or not; the caller reads their lines from the block in one pass of its own, instead
    of this scanner making an object of each.
    """

    def __init__(
        self, patterns: Sequence[str], *, use_hyperscan: bool | None = None, bulk: frozenset[int] = frozenset()
    ) -> None:
        wanted = hyperscan is not None if use_hyperscan is None else use_hyperscan
        if wanted and hyperscan is None:
            raise RuntimeError("hyperscan is not installed")
        self._bulk = bulk
        self._matcher: _BlockMatcher = _HyperscanMatcher(patterns, bulk) if wanted else _RegexMatcher(patterns, bulk)
        self.engine = "hyperscan" if wanted else "re"

    def scan(self, stream: BinaryIO, totals: ScanTotals) -> Iterator[LineMatch]:
        """Yield every line of ``stream`` that matched a pattern not in ``bulk``, in order; ``totals`` counts what
        was read."""
        for block in self.scan_blocks(stream, totals):
            yield from block.hits

    def scan_blocks(self, stream: BinaryIO, totals: ScanTotals) -> Iterator[Block]:
        """Yield ``stream`` a block of whole lines at a time, in order; ``totals`` counts what was read."""
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
                yield self._block(block, line_base)
                newlines = block.count(b"\n")
                line_base += newlines + (0 if block.endswith(b"\n") else 1)
            if not data:
                totals.lines = line_base - 1
                return

    def _block(self, block: bytes, line_base: int) -> Block:
        ends = self._matcher.match_ends(block)
        bulk = frozenset(i for _, i in ends if i in self._bulk)
        if bulk:
            ends = [hit for hit in ends if hit[1] not in bulk]
        return Block(block, line_base, list(self._lines(block, line_base, ends)), bulk)

    def _lines(self, block: bytes, line_base: int, hits: list[tuple[int, int]]) -> Iterator[LineMatch]:
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
            yield LineMatch(line_no=line_no, line=line, pattern_ids=frozenset(by_start[start]), offset=start)
