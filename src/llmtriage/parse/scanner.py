"""Multi-pattern line scanning over byte streams of any size.

The scanner reads fixed-size chunks cut at line ends, so memory stays bounded however large the log.
Hyperscan (when importable) matches all signatures in one pass; elsewhere each pattern runs over the
chunk with Python's ``re``. Both report the same thing: for every line that matched, its number, its
bytes and the indices of the patterns it matched, and which lines are not ASCII. Callers re-run the exact
Python regex on those few lines to extract values, so the scanner only has to find a superset of the
matching lines: Hyperscan is given each pattern cut to its shortest tail (see shortest_tail), and a
pattern reported once a block only its fixed head (see fixed_head). A large regular file is matched by a forked
child while the caller reads the blocks it has already matched (see LineScanner._match_in_child).
"""

from __future__ import annotations

import io
import multiprocessing
import os
import platform
import re
import signal
import stat
import sys
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from functools import cache
from multiprocessing.connection import Connection
from pathlib import Path
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
# A regular file with at least this much left to read is matched by a child process (on Linux): below it, starting
# one would cost more than the overlap saves.
CHILD_MIN_BYTES = 32 << 20


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
    the line-by-line patterns, which of the bulk patterns occur in it (their lines are left to the caller, those of a
    located one found), and its lines that are not ASCII."""

    data: bytes
    line_base: int
    hits: list[LineMatch]
    bulk: frozenset[int]
    located: dict[int, list[tuple[int, int, int]]]
    """The number of each line a located bulk pattern matched, and where it starts and ends."""
    wide: list[tuple[int, int]]
    """Where each line holding a byte over 0x7f starts and ends: the rest of the block reads the same in Latin-1."""
    newlines: int
    """How many lines end in the block."""


# The pattern after the caller's: a line that is not ASCII, reported once, where it ends.
_WIDE_LINE = r"[\x80-\xff][^\n]*$"


class _BlockMatcher(Protocol):
    def match_ends(self, block: bytes) -> list[tuple[int, int]]:
        """(end offset, pattern index) of every match in ``block``; a bulk pattern's first match only (unless it is
        located); the end of every line that is not ASCII as pattern ``len(patterns)``."""


class _HyperscanMatcher:
    def __init__(self, patterns: Sequence[str], once: frozenset[int]) -> None:
        """``once``: the patterns reported once a block (whether they occur is all the scan needs to know of them)."""
        expressions = [*(unnamed_line_pattern(p) for p in patterns), _WIDE_LINE]
        flags = [
            hyperscan.HS_FLAG_MULTILINE | (hyperscan.HS_FLAG_SINGLEMATCH if i in once else 0)
            for i in range(len(expressions))
        ]
        self._db = stored_database(
            "hyperscan",
            Path(__file__).read_bytes(),  # this module translates the patterns (_compile_database)
            [e.encode("utf-8") for e in expressions],
            flags,
            lambda: _compile_database(expressions, flags),
        )

    def match_ends(self, block: bytes) -> list[tuple[int, int]]:
        hits: list[tuple[int, int]] = []

        def on_match(pattern_id: int, start: int, end: int, flags: int, context: object) -> None:
            hits.append((end, pattern_id))

        self._db.scan(block, match_event_handler=on_match)
        return hits


def _compile_database(expressions: list[str], flags: list[int]) -> Any:
    # Every match of a pattern reported line by line costs a call into Python: it is reported where its shortest
    # tail ends (the pattern cut to that is ~80 ms for the catalog, so only here, when compiling).
    # A pattern reported once a block only says that its lines may be there (the caller reads them with the pattern
    # itself): its fixed head will do, found by literal matching, ~5 times cheaper than a repeat Hyperscan follows.
    tails = [
        fixed_head(e) if f & hyperscan.HS_FLAG_SINGLEMATCH else shortest_tail(e)
        for e, f in zip(expressions, flags, strict=True)
    ]
    db = hyperscan.Database(mode=hyperscan.HS_MODE_BLOCK)
    db.compile(
        expressions=[t.encode("utf-8") for t in tails], ids=list(range(len(tails))), elements=len(tails), flags=flags
    )
    return db


def stored_database(
    kind: str,
    translation: bytes,
    expressions: Sequence[bytes],
    flags: Sequence[int],
    compile_database: Callable[[], Any],
) -> Any:
    """A Hyperscan block-mode database for ``expressions``: the one an earlier run stored under ``kind``, else
    ``compile_database()``'s, stored now. ``translation`` is the code that turns the expressions into what is compiled
    (a change to it compiles them again). Compiling the catalog's signatures takes ~0.5 s, loading them a few ms."""
    # A serialized database is only valid for the Hyperscan build and the platform that compiled it (another CPU
    # generation shows as a scan error, below).
    build = f"{hyperscan.__version__} {platform.machine()} {list(flags)}".encode()
    entry = usercache.key(kind, build, translation, *expressions)
    serialized = usercache.read(entry)
    if serialized is not None:
        try:
            db = hyperscan.loadb(serialized, hyperscan.HS_MODE_BLOCK)
            db.scratch = hyperscan.Scratch(db)
            db.scan(b"")
            return db
        except hyperscan.error:
            pass  # another CPU's or build's database: compile and replace it
    db = compile_database()
    usercache.write(entry, hyperscan.dumpb(db))
    return db


class _RegexMatcher:
    def __init__(self, patterns: Sequence[str], once: frozenset[int]) -> None:
        """``once``: the patterns reported once a block (whether they occur is all the scan needs to know of them)."""
        self._regexes = [re.compile(single_line(p).encode("utf-8"), re.MULTILINE) for p in [*patterns, _WIDE_LINE]]
        self._once = once

    def match_ends(self, block: bytes) -> list[tuple[int, int]]:
        ends: list[tuple[int, int]] = []
        for i, rx in enumerate(self._regexes):
            if i in self._once:
                m = rx.search(block)
                ends.extend(() if m is None else ((m.end(), i),))
            else:
                ends.extend((m.end(), i) for m in rx.finditer(block))
        return ends


_NAMED_GROUP = re.compile(r"\(\?P<\w+>")


def unnamed_line_pattern(pattern: str) -> str:
    """``single_line(pattern)`` with its named groups made plain: for Hyperscan, which has no captures, and for
    texts matched whole or patterns joined into one alternation (two may name the same group)."""
    return _NAMED_GROUP.sub("(?:", single_line(pattern))


_CLASS_SPACE = " \\t\\r\\f\\v"


def shortest_tail(pattern: str) -> str:
    """``pattern`` without what it may repeat or leave out at its end (``\\S.*`` becomes ``\\S``, ``\\w+`` ``\\w``): it
    matches in the same lines, but Hyperscan, which reports every offset where a match can end, reports it once
    where ``pattern`` reports it at each character of the tail. ``pattern`` itself when that would match nothing."""
    try:
        branches = _branches(pattern)
        trimmed = "|".join(_trim(pattern, items) for items in branches)
        empty_ok = re.compile(trimmed).search("") is not None
    except (re.error, ValueError, IndexError):
        return pattern
    return pattern if empty_ok else trimmed


@cache
def literal_starts(pattern: str) -> tuple[str, ...]:
    """The texts one of which every match of ``pattern`` starts with, one for each of its branches; none when a
    branch starts otherwise. (str.find looks for a text ~10 times faster than a regex does.)"""
    try:
        branches = _branches(pattern)
    except (ValueError, IndexError):
        return ()
    starts = tuple(_leading_text(pattern, items) for items in branches)
    return starts if all(starts) else ()


# A head shorter than this is found in too many blocks of a log without the lines it leads.
MIN_HEAD_CHARS = 6


def fixed_head(pattern: str) -> str:
    """The start of ``pattern`` up to its first repeat or optional part, which matches wherever ``pattern`` does;
    ``pattern`` itself when a branch's head would be shorter than MIN_HEAD_CHARS."""
    try:
        branches = _branches(pattern)
    except (ValueError, IndexError):
        return pattern
    heads = []
    for items in branches:
        head = []
        for item in items:
            if not _fixed(item):
                break
            head.append(pattern[item.start : item.end])
        heads.append("".join(head))
    if any(len(head) < MIN_HEAD_CHARS for head in heads):
        return pattern
    return "|".join(heads)


def _fixed(item: _Item) -> bool:
    return item.end == item.atom_end and all(_fixed(inner) for b in item.branches or () for inner in b)


def _leading_text(pattern: str, items: tuple[_Item, ...]) -> str:
    text = []
    for item in items:
        atom = pattern[item.start : item.atom_end]
        if item.end != item.atom_end:
            break
        if len(atom) == 2 and atom[0] == "\\" and not atom[1].isalnum():
            text.append(atom[1])
        elif len(atom) == 1 and atom not in "\\.^$[]()|":
            text.append(atom)
        else:
            break
    return "".join(text)


@dataclass(frozen=True, slots=True)
class _Item:
    """One atom of a pattern with its quantifier: ``pattern[start:atom_end]`` the atom, ``[atom_end:end]`` the
    quantifier; ``least`` repeats at least, ``more`` whether it may repeat more; a plain group's branches."""

    start: int
    atom_end: int
    end: int
    least: int
    more: bool
    branches: tuple[tuple[_Item, ...], ...] | None = None
    body: int = 0


_QUANTIFIER = re.compile(r"(?:[*+?]|\{(?=,?\d)(\d*)(,?)(\d*)\})[?+]?")
_PLAIN_GROUP = re.compile(r"\((?:\?:|\?P<\w+>|\?[aiLmsux-]+:|(?!\?))")
_ESCAPE = re.compile(r"\\(?:x[0-9a-fA-F]{2}|u[0-9a-fA-F]{4}|U[0-9a-fA-F]{8}|N\{[^}]*\}|0[0-7]{0,2}|[1-9]\d?|.)", re.S)


def _branches(pattern: str) -> list[tuple[_Item, ...]]:
    branches, end = _parse_branches(pattern, 0)
    if end != len(pattern):
        raise ValueError(pattern)
    return branches


def _parse_branches(p: str, i: int) -> tuple[list[tuple[_Item, ...]], int]:
    """The branches of ``p`` from ``i`` to the ``)`` that closes them (or the end), and where that is."""
    branches: list[tuple[_Item, ...]] = []
    items: list[_Item] = []
    while i < len(p) and p[i] != ")":
        if p[i] == "|":
            branches.append(tuple(items))
            items, i = [], i + 1
            continue
        start = i
        inner: tuple[tuple[_Item, ...], ...] | None = None
        body = 0
        if p[i] == "\\":
            m = _ESCAPE.match(p, i)
            if m is None:
                raise ValueError(p)
            i = m.end()
        elif p[i] == "[":
            i += 2 if p.startswith("[^", i) else 1
            i += 1 if p.startswith("]", i) else 0
            while p[i] != "]":
                i += 2 if p[i] == "\\" else 1
            i += 1
        elif p[i] == "(":
            plain = _PLAIN_GROUP.match(p, i)
            # A lookaround, a back-reference, a condition is kept whole; a plain group may lose its own tail.
            body = plain.end() if plain is not None else i + 1
            nested, close = _parse_branches(p, body)
            inner = tuple(nested) if plain is not None else None
            if close >= len(p):
                raise ValueError(p)
            i = close + 1
        else:
            i += 1
        atom_end = i
        least, more = 1, False
        q = _QUANTIFIER.match(p, i)
        if q is not None:
            low, comma, high = q.group(1, 2, 3)
            if q.group().startswith("{"):
                least = int(low or 0)
                more = bool(comma) and (not high or int(high) > least)
            else:
                least, more = (0 if q.group()[0] in "*?" else 1), True
            i = q.end()
        items.append(_Item(start, atom_end, i, least, more, inner, body))
    branches.append(tuple(items))
    return branches, i


def _trim(p: str, items: tuple[_Item, ...]) -> str:
    """One branch without its optional or repeatable tail."""
    rest = list(items)
    while rest and rest[-1].least == 0:
        rest.pop()
    if not rest:
        return ""
    last = rest[-1]
    head = "".join(p[item.start : item.end] for item in rest[:-1])
    if last.more or last.end == last.atom_end:
        atom = p[last.start : last.atom_end]
        if last.branches is not None:
            atom = p[last.start : last.body] + "|".join(_trim(p, b) for b in last.branches) + ")"
        if last.least > 1:
            atom = p[last.start : last.atom_end] * (last.least - 1) + atom
        return head + atom
    return head + p[last.start : last.end]


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


def _line_end(block: bytes, start: int) -> int:
    stop = block.find(b"\n", start)
    return stop if stop != -1 else len(block)


@dataclass(frozen=True, slots=True)
class _Found:
    """What the matcher found in one block, in plain containers (a child process sends it whole; the caller makes a
    :class:`Block` of it)."""

    size: int
    line_base: int
    next_line: int
    newlines: int
    hits: list[tuple[int, int, int, tuple[int, ...]]]
    """Each line a line-by-line pattern matched: its number, where it starts and ends, the patterns."""
    bulk: tuple[int, ...]
    located: dict[int, list[tuple[int, int, int]]]
    wide: list[tuple[int, int]]


class _Readable(Protocol):
    def read(self, size: int, /) -> bytes: ...


class _FileRange:
    """A file descriptor read from ``offset`` on by position (os.pread): it moves no file position another process
    shares."""

    def __init__(self, fd: int, offset: int) -> None:
        self._fd = fd
        self._offset = offset

    def read(self, size: int, /) -> bytes:
        data = os.pread(self._fd, size, self._offset)
        self._offset += len(data)
        return data


def _large_regular_file(stream: BinaryIO) -> int | None:
    """The descriptor of ``stream`` when it is a regular file with CHILD_MIN_BYTES or more left to read, on Linux
    (where a forked child is cheap and safe); else None."""
    if sys.platform != "linux" or not isinstance(stream, io.BufferedReader | io.FileIO):
        return None
    try:
        fd = stream.fileno()
        info = os.fstat(fd)
        left = info.st_size - stream.tell()
    except (OSError, ValueError):
        return None
    return fd if stat.S_ISREG(info.st_mode) and left >= CHILD_MIN_BYTES else None


class LineScanner:
    """Finds the lines of a stream that match any of ``patterns``.

    The patterns whose indices are in ``bulk`` (lines a log holds by the million: access and stats lines) are only
    said to occur in a block, or not; the caller reads their lines from the block in one pass of its own, instead
    of this scanner making an object of each. Of those, the lines of the ``located`` ones (fewer, but costly to look
    for again) are found: where each starts and ends.
    """

    def __init__(
        self,
        patterns: Sequence[str],
        *,
        use_hyperscan: bool | None = None,
        bulk: frozenset[int] = frozenset(),
        located: frozenset[int] = frozenset(),
    ) -> None:
        wanted = hyperscan is not None if use_hyperscan is None else use_hyperscan
        if wanted and hyperscan is None:
            raise RuntimeError("hyperscan is not installed")
        self._bulk = bulk
        self._located = located
        self._wide = len(patterns)
        once = bulk - located
        self._matcher: _BlockMatcher = _HyperscanMatcher(patterns, once) if wanted else _RegexMatcher(patterns, once)
        self.engine = "hyperscan" if wanted else "re"

    def scan(self, stream: BinaryIO, totals: ScanTotals) -> Iterator[LineMatch]:
        """Yield every line of ``stream`` that matched a pattern not in ``bulk``, in order; ``totals`` counts what
        was read."""
        for block in self.scan_blocks(stream, totals):
            yield from block.hits

    def scan_blocks(self, stream: BinaryIO, totals: ScanTotals) -> Iterator[Block]:
        """Yield ``stream`` a block of whole lines at a time, in order; ``totals`` counts what was read."""
        line_base = 1
        for data, found in self._found_blocks(stream):
            totals.bytes += len(data)
            yield Block(
                data,
                found.line_base,
                [
                    LineMatch(line_no, data[start:stop], frozenset(ids), start)
                    for line_no, start, stop, ids in found.hits
                ],
                frozenset(found.bulk),
                found.located,
                found.wide,
                found.newlines,
            )
            line_base = found.next_line
        totals.lines = line_base - 1

    def _found_blocks(self, stream: BinaryIO) -> Iterator[tuple[bytes, _Found]]:
        fd = _large_regular_file(stream)
        if fd is None:
            return self._match_blocks(stream, 1)
        return self._match_in_child(stream, fd)

    def _match_blocks(self, stream: _Readable, line_base: int) -> Iterator[tuple[bytes, _Found]]:
        """Each block of ``stream`` and what the matcher found in it, in this process."""
        carry = b""  # the start of a line the next read ends
        while True:
            data = stream.read(CHUNK_BYTES)
            cut = data.rfind(b"\n") + 1
            if cut:
                block, carry = b"".join((carry, memoryview(data)[:cut])), data[cut:]  # a copy of the chunk, not two
            elif data and len(carry) + len(data) < MAX_LINE_BYTES:
                carry += data
                continue
            else:
                block, carry = carry + data, b""
            if block:
                found = self._find(block, line_base)
                yield block, found
                line_base = found.next_line
            if not data:
                return

    def _match_in_child(self, stream: BinaryIO, fd: int) -> Iterator[tuple[bytes, _Found]]:
        """Each block of the regular file ``stream`` and what the matcher found in it, found by a child process while
        this one reads the blocks before: on two cores the match and the caller's reading of its results overlap.
        Both read the file by offset (os.pread), so neither moves the other's position. Should the child die, this
        process matches the rest itself."""
        start = offset = stream.tell()
        line_base = 1
        receiver, sender = multiprocessing.Pipe(duplex=False)
        child = multiprocessing.get_context("fork").Process(
            target=self._send_found, args=(receiver, sender, fd, start), name="llmtriage-scan", daemon=True
        )
        try:
            child.start()
        except OSError:  # no process to be had (a limit on processes, no memory for one): all of it here
            receiver.close()
            yield from self._match_blocks(stream, 1)
            return
        finally:
            sender.close()
        try:
            while True:
                try:
                    found = receiver.recv()
                except (EOFError, OSError):
                    break  # the child died or failed: the rest is matched here (an error it met is met again)
                if found is None:
                    return
                data = os.pread(fd, found.size, offset)
                if len(data) < found.size:
                    return  # the file was cut short while it was read: it ends here, as a read of it would
                yield data, found
                offset += found.size
                line_base = found.next_line
            yield from self._match_blocks(_FileRange(fd, offset), line_base)
        finally:
            receiver.close()
            if child.is_alive():
                child.terminate()
            child.join()

    def _send_found(self, receiver: Connection, sender: Connection, fd: int, start: int) -> None:
        """The child's side of :meth:`_match_in_child`."""
        try:
            signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C is the parent's to handle; it ends this process
            receiver.close()  # the parent's end: should the parent die, sending fails here instead of waiting forever
            for _, found in self._match_blocks(_FileRange(fd, start), 1):
                sender.send(found)
            sender.send(None)
        except Exception:
            pass  # the parent matches the rest itself (and meets again an error met here)

    def _find(self, block: bytes, line_base: int) -> _Found:
        ends = self._matcher.match_ends(block)
        bulk = {i for _, i in ends if i in self._bulk}
        wide = sorted((block.rfind(b"\n", 0, end) + 1, end) for end, i in ends if i == self._wide)
        skipped = {self._wide, *(bulk - self._located)}
        located_here = bulk & self._located
        # `end` is exclusive; a match never includes the newline that ends its line.
        by_start: dict[int, set[int]] = {}
        for end, pattern_id in ends:
            if pattern_id in skipped:
                continue
            start = block.rfind(b"\n", 0, max(end - 1, 0)) + 1 if end else 0
            ids = by_start.get(start)
            if ids is None:
                by_start[start] = ids = set()
            ids.add(pattern_id)
        hits: list[tuple[int, int, int, tuple[int, ...]]] = []
        located: dict[int, list[tuple[int, int, int]]] = {}
        line_no, counted_to = line_base, 0
        for start in sorted(by_start):
            line_no += block.count(b"\n", counted_to, start)
            counted_to = start
            stop = _line_end(block, start)
            ids = by_start[start]
            if located_here and not located_here.isdisjoint(ids):
                for pattern_id in ids & located_here:
                    located.setdefault(pattern_id, []).append((line_no, start, stop))
                ids -= located_here
            if ids:
                hits.append((line_no, start, stop, tuple(ids)))
        newlines = line_no - line_base + block.count(b"\n", counted_to)
        next_line = line_base + newlines + (0 if block.endswith(b"\n") else 1)
        return _Found(len(block), line_base, next_line, newlines, hits, tuple(bulk), located, wide)
