"""Server logs -> typed facts: matched signatures, memory numbers, stats series, HTTP statuses.

Pure: a byte stream in, :class:`~llmtriage.facts.LogFacts` out. Any bytes are accepted (non-UTF-8 is
replaced, ANSI colours are stripped); memory stays bounded whatever the size of the log.
"""

from __future__ import annotations

import bisect
import dataclasses
import operator
import re
from collections import Counter
from collections.abc import Callable
from dataclasses import fields
from functools import cache
from typing import Any, BinaryIO

from llmtriage import catalog
from llmtriage.catalog import Signature
from llmtriage.facts import (
    STACK_TEXT_FIELDS,
    STATS_FIELDS,
    BenchFigures,
    Citation,
    LogEvent,
    LogFacts,
    MemoryReport,
    MetaFacts,
    OffloadReport,
    StackFacts,
    StackGpu,
    StatsPoint,
)
from llmtriage.parse.scanner import (
    Block,
    LineMatch,
    LineScanner,
    ScanTotals,
    literal_starts,
    single_line,
    unnamed_line_pattern,
)
from llmtriage.parse.units import number, size_to_gib

LIFECYCLE_PHASES = frozenset({"weights_load", "profile_run", "kv_alloc", "cuda_graph_capture"})
ENGINES = frozenset(catalog.engines())
_ANSI = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]")
EXCERPT_CHARS = 360
# The first N events of a signature are kept, plus its last one; the rest are only counted.
EVENTS_PER_SIGNATURE = 200
STATS_CAP = 20_000
# A traceback frame this many lines above an error line is part of its traceback; a traceback keeps this many.
FRAME_REACH = 80
MAX_FRAMES = 200
# An error this many lines above a traceback's header is the one the traceback belongs to.
ERROR_BEFORE_TRACEBACK = 2
# Roles whose match on a line means a catalogued family explains it: the fallback signatures then stay silent.
_EXPLAINING_ROLES = frozenset({"error", "wrapper", "context"})


# Lines a serving log holds by the million. Their signatures are read a block at a time (one regex pass over the
# block, see _BulkLines) instead of line by line, and what is kept of them is redacted, not each line: the path of an
# access line (once per distinct path), the line cited for each status, the stats lines that stay in the series.
BULK_ROLES = frozenset({"access", "stats"})


@cache
def _scanner() -> tuple[LineScanner, tuple[Signature, ...]]:
    sigs = catalog.signatures()
    bulk = frozenset(i for i, s in enumerate(sigs) if s.role in BULK_ROLES and not s.fallback)
    located = frozenset(i for i in bulk if sigs[i].role == "stats")
    return LineScanner([s.pattern for s in sigs], bulk=bulk, located=located), sigs


@cache
def _block_regex(pattern: str) -> re.Pattern[str]:
    """``pattern`` run over a block of lines: it matches within one line, as it does run over that line alone."""
    return re.compile(single_line(pattern), re.MULTILINE)


@cache
def _any_of(patterns: tuple[str, ...]) -> re.Pattern[str]:
    """Whether one of ``patterns`` matches, in one search over a block."""
    return re.compile("|".join(f"(?:{unnamed_line_pattern(p)})" for p in patterns), re.MULTILINE)


# `.*\bkey`: re backtracks through `.*` a character at a time, trying `\b` at each (~50 µs on a 3 kB engine config
# line). Written `.*k(?<!\wk)ey`, the same match, it skips to each `k` instead.
_ANY_THEN_WORD = re.compile(r"\.\*(\??)\\b(\w)")


@cache
def _line_regex(pattern: str) -> re.Pattern[str]:
    """``pattern`` compiled to find the same matches as its signature's regex, faster."""
    return re.compile(_ANY_THEN_WORD.sub(lambda m: f".*{m[1]}{m[2]}(?<!\\w{m[2]})", pattern))


@cache
def _first_in_line(pattern: str) -> re.Pattern[str]:
    """``pattern`` over a block, matching once a line: its first match there, then the rest of the line."""
    return re.compile(single_line(pattern) + r"[^\n]*", re.MULTILINE)


# What makes a match depend on the text around it: read on its own, the text it matched might match otherwise.
_LOOKS_AROUND = re.compile(r"\^|\\[AbBZ]|\(\?<?[=!]")


@cache
def _matched_texts(pattern: str) -> re.Pattern[str] | None:
    """``_first_in_line(pattern)`` without its groups (findall gives the text each match spans, not a tuple of its
    groups: a fraction of the objects), when what it spans is all its groups depend on; else None."""
    if _LOOKS_AROUND.search(pattern):
        return None
    return re.compile(unnamed_line_pattern(pattern) + r"[^\n]*", re.MULTILINE)


def excerpt(text: str, start: int) -> str:
    """A window of ``text`` around position ``start``, at most EXCERPT_CHARS long."""
    if len(text) <= EXCERPT_CHARS:
        return text
    lo = max(0, min(start - 60, len(text) - EXCERPT_CHARS))
    snippet = text[lo : lo + EXCERPT_CHARS]
    return ("…" if lo else "") + snippet + ("…" if lo + EXCERPT_CHARS < len(text) else "")


def _field_value(name: str, raw: str) -> tuple[str, Any]:
    """Map a named group to (record field, converted value) following the catalog's naming rules."""
    name = name.split("__", 1)[0]
    if name.endswith("_size"):
        return name[: -len("_size")] + "_gib", size_to_gib(raw)
    if name.endswith("_pct"):
        value = number(raw)
        return name[: -len("_pct")] + "_ratio", None if value is None else value / 100.0
    if name.endswith("_secs"):
        value = number(raw)
        return name[: -len("_secs")] + "_ms", None if value is None else value * 1000.0
    return name, raw


class _FileState:
    def __init__(self) -> None:
        self.stage = "unknown"
        self.overflow: dict[str, LogEvent] = {}
        # The traceback being read: where it starts, its frames (line, file, function), whether an error line took
        # them, and the error printed just before it (a logger's `exception(repr(e))` precedes its traceback).
        self.traceback_at: int | None = None
        self.frames: list[tuple[int, str, str]] = []
        self.frames_used = False
        self.last_error: int | None = None
        self.traceback_of: int | None = None


@dataclasses.dataclass(slots=True)
class _PendingStats:
    """A stats line kept in the series so far; parsed (and redacted) only if it is still there at the end."""

    line: int
    text: str
    signature: int


@dataclasses.dataclass(slots=True)
class _Bulk:
    """What a log's access and stats lines leave, read block by block."""

    source: str
    facts: LogFacts
    state: _FileState
    redact: Callable[[str], str] | None
    sigs: tuple[Signature, ...]
    stats: list[StatsPoint | _PendingStats]
    paths: dict[str, str] = dataclasses.field(default_factory=dict)

    def lines(self, block: Block) -> list[tuple[int, int, re.Match[str], str]]:
        """(line, signature, match, the text it matched in) of every bulk line of ``block``, in order; a signature
        counts once a line."""
        if not block.bulk:
            return []
        text = block.data.decode("utf-8", "replace")
        if "\x1b" in text:
            text = _ANSI.sub("", text)
        lines: list[tuple[int, int, re.Match[str], str]] = []
        for sig_id in sorted(block.bulk):
            line_no, counted_to, last = block.line_base, 0, -1
            for m in _block_regex(self.sigs[sig_id].pattern).finditer(text):
                start = m.start()
                line_no += text.count("\n", counted_to, start)
                counted_to = start
                if line_no != last:
                    last = line_no
                    lines.append((line_no, sig_id, m, text))
        if len(block.bulk) > 1:
            lines.sort(key=operator.itemgetter(0, 1))
        return lines

    def whole_block(self, block: Block) -> bool:
        """Take the bulk lines of ``block`` in a few passes of C, without a Python step per line: counted, their
        statuses cited, their stats kept, the stage set around every line read line by line. Not for a block with
        colours (stripping them would move every offset), nor for one with an access or stats line that is not ASCII
        (rare): False then."""
        data = block.data
        if not block.bulk or b"\x1b" in data:
            return False
        present = [(sig_id, _block_regex(self.sigs[sig_id].pattern)) for sig_id in sorted(block.bulk)]
        any_bulk = _any_of(tuple(self.sigs[sig_id].pattern for sig_id, _ in present))
        # The block is read as Latin-1: a character a byte (offsets are the scanner's), none of the cost of decoding
        # UTF-8 or of searching a text of wide characters. A line that is not ASCII reads otherwise as UTF-8; it is
        # taken here only if it holds no bulk line read either way (the lines read one by one are decoded anyway).
        wide = b"\n".join(data[start:end] for start, end in block.wide)
        if any_bulk.search(wide.decode("utf-8", "replace")) or any_bulk.search(wide.decode("latin-1")):
            return False
        text = data.decode("latin-1")
        state, facts = self.state, self.facts
        after = 0
        for hit in block.hits:
            start, end = hit.offset, hit.offset + len(hit.line)
            # (Not looked for when serving already: most often, and then the stage stays as it is either way.)
            if state.stage != "serving" and any_bulk.search(text, after, start):
                state.stage = "serving"
            same_line = []
            if any_bulk.search(text, start, end):
                same_line = [
                    (hit.line_no, sig_id, m, text) for sig_id, rx in present if (m := rx.search(text, start, end))
                ]
            _read_line(hit, same_line, self, counted=True)
            after = end
        if state.stage != "serving" and any_bulk.search(text, after):
            state.stage = "serving"
        last = -1
        stats: list[tuple[int, int, int]] = []
        for sig_id, _ in present:
            sig = self.sigs[sig_id]
            rx = _first_in_line(sig.pattern)
            if sig.role == "stats":
                before = len(stats)
                stats.extend(
                    (m.start(), sig_id, line_no)
                    for line_no, start, end in block.located[sig_id]
                    if (m := rx.search(text, start, end))
                )
                found = len(stats) - before
                last = max(last, stats[-1][0] if found else -1)
            else:
                found, end = self._requests(sig_id, rx, text, block.line_base)
                last = max(last, end)
            if sig.engine in ENGINES and found:
                facts.engine_votes[sig.engine] += found
        stats.sort()
        for start, sig_id, line_no in stats:
            self.stats.append(_PendingStats(line_no, _line_at(text, start).rstrip("\r"), sig_id))
            if len(self.stats) >= 2 * STATS_CAP:
                # Halve the resolution rather than grow without bound; the series keeps its shape.
                self.stats = self.stats[::2]
        if last >= 0:
            # Counted back from the end of the block, where the last access or stats line most often is.
            line_no = block.line_base + block.newlines - text.count("\n", last)
            facts.last_serving_line[self.source] = max(facts.last_serving_line.get(self.source, 0), line_no)
        return True

    def _requests(self, sig_id: int, rx: re.Pattern[str], text: str, line_base: int) -> tuple[int, int]:
        """Count the access lines of one signature in ``text``; (how many, where the last one starts or -1)."""
        facts, sig = self.facts, self.sigs[sig_id]
        plain = _matched_texts(sig.pattern)
        if plain is None:
            fields = operator.itemgetter(*(rx.groupindex[name] - 1 for name in ("method", "path", "status")))
            requests = Counter(map(fields, rx.findall(text)))
        else:
            requests = Counter()
            for matched, count in Counter(plain.findall(text)).items():
                found = rx.match(matched)
                assert found is not None  # the same pattern, on the text it matched
                requests[found.group("method", "path", "status")] += count
        for (method, path, status), count in requests.items():
            redacted = self.paths.get(path)
            if redacted is None:
                redacted = self.paths[path] = path if self.redact is None else self.redact(path)
            facts.http_status[(method, redacted, int(status))] += count
        uncited = {status for _, _, status in requests if int(status) not in facts.http_status_citations}
        for m in rx.finditer(text) if uncited else ():
            status = m.group("status")
            if status in uncited:
                uncited.discard(status)
                line, found = self._redacted(_line_at(text, m.start()).rstrip("\r"), sig)
                line_no = line_base + text.count("\n", 0, m.start())
                facts.http_status_citations[int(status)] = Citation(self.source, line_no, excerpt(line, found.start()))
                if not uncited:
                    break
        return sum(requests.values()), _last_start(rx, text) if requests else -1

    def apply(self, lines: list[tuple[int, int, re.Match[str], str]]) -> None:
        """Access and stats lines, in order, as _apply would take each (a run of them at once: they change the
        stage, the last serving line and the votes alike)."""
        if not lines:
            return
        facts, sigs, stats = self.facts, self.sigs, self.stats
        self.state.stage = "serving"
        facts.last_serving_line[self.source] = lines[-1][0]
        for sig_id, count in Counter(line[1] for line in lines).items():
            if sigs[sig_id].engine in ENGINES:
                facts.engine_votes[sigs[sig_id].engine] += count
        requests: list[tuple[str, str, str]] = []
        for line_no, sig_id, m, text in lines:
            if sigs[sig_id].role == "stats":
                stats.append(_PendingStats(line_no, _line_at(text, m.start()).rstrip("\r"), sig_id))
                if len(stats) >= 2 * STATS_CAP:
                    # Halve the resolution rather than grow without bound; the series keeps its shape.
                    stats = stats[::2]
                continue
            method, path, status = m.group("method", "path", "status")
            requests.append((method, path, status))
            if int(status) not in facts.http_status_citations:
                line, found = self._redacted(_line_at(text, m.start()).rstrip("\r"), sigs[sig_id])
                facts.http_status_citations[int(status)] = Citation(self.source, line_no, excerpt(line, found.start()))
        self.stats = stats
        for (method, path, status), count in Counter(requests).items():
            redacted = self.paths.get(path)
            if redacted is None:
                redacted = self.paths[path] = path if self.redact is None else self.redact(path)
            facts.http_status[(method, redacted, int(status))] += count

    def _redacted(self, line: str, sig: Signature) -> tuple[str, re.Match[str]]:
        """``line`` redacted, and the signature's match in it (in the line as it was, should redaction break it)."""
        text = line if self.redact is None else self.redact(line)
        rx = _line_regex(sig.pattern)
        m = rx.search(text) or rx.search(line)
        assert m is not None  # the line matched the signature when it was read
        return text, m

    def points(self) -> list[StatsPoint]:
        """The stats series: the lines still kept, parsed now."""
        points = []
        for kept in self.stats:
            if isinstance(kept, StatsPoint):
                points.append(kept)
                continue
            sig = self.sigs[kept.signature]
            text, m = self._redacted(kept.text, sig)
            groups = {k.split("__", 1)[0]: v for k, v in m.groupdict().items() if v is not None}
            cite = Citation(source=self.source, line=kept.line, excerpt=excerpt(text, m.start()))
            points.append(_stats_point(sig.id, groups, cite))
        return points


def _search(pattern: str, text: str) -> re.Match[str] | None:
    """The signature regex ``pattern``'s first match in ``text``."""
    rx, starts = _searcher(pattern)
    if not starts:
        return rx.search(text)
    found = [at for start in starts if (at := text.find(start)) != -1]
    return rx.search(text, min(found)) if found else None


@cache
def _searcher(pattern: str) -> tuple[re.Pattern[str], tuple[str, ...]]:
    """``pattern``'s line regex, and the texts one of which its every match starts with (str.find looks for them
    first, ~10 times faster than a regex)."""
    return _line_regex(pattern), literal_starts(pattern)


def _last_start(rx: re.Pattern[str], text: str) -> int:
    """Where the last match of ``rx`` in ``text`` starts (it has one), looking back from the end."""
    window = 1 << 16
    while True:
        start = max(0, len(text) - window)
        last = -1
        for m in rx.finditer(text, start):
            last = m.start()
        if last >= 0 or start == 0:
            return last
        window <<= 4


def _line_at(text: str, position: int) -> str:
    """The line of ``text`` that holds ``position``."""
    end = text.find("\n", position)
    return text[text.rfind("\n", 0, position) + 1 : end if end != -1 else len(text)]


def read_log(stream: BinaryIO, source: str, facts: LogFacts, redact: Callable[[str], str] | None = None) -> None:
    """Scan one log ``stream`` (named ``source`` in citations) and add what it says to ``facts``; ``redact``
    scrubs each line that matched before anything of it is kept."""
    scanner, sigs = _scanner()
    totals = ScanTotals()
    state = _FileState()
    facts.sources.append(source)
    bulk = _Bulk(source, facts, state, redact, sigs, list(facts.stats))
    for block in scanner.scan_blocks(stream, totals):
        if bulk.whole_block(block):
            continue
        pending = bulk.lines(block)
        line_numbers = [line[0] for line in pending]
        at = 0
        for hit in block.hits:
            before = bisect.bisect_left(line_numbers, hit.line_no, at)
            bulk.apply(pending[at:before])
            at = bisect.bisect_right(line_numbers, hit.line_no, before)
            _read_line(hit, pending[before:at], bulk)
        bulk.apply(pending[at:])
    _close_traceback(facts, state, source)
    facts.stats = bulk.points()
    facts.events.extend(state.overflow.values())
    order = {name: i for i, name in enumerate(facts.sources)}
    facts.events.sort(key=lambda e: (order[e.source], e.line))
    facts.lines_scanned += totals.lines
    facts.bytes_scanned += totals.bytes
    facts.line_counts[source] = totals.lines


def _read_line(
    hit: LineMatch, bulk_here: list[tuple[int, int, re.Match[str], str]], bulk: _Bulk, *, counted: bool = False
) -> None:
    """One line that matched a signature read line by line, and ``bulk_here``: the bulk signatures it matched, in
    their place (``counted``: only as the stage goes, their lines being counted elsewhere)."""
    facts, state, source, sigs, redact = bulk.facts, bulk.state, bulk.source, bulk.sigs, bulk.redact
    text = hit.line.decode("utf-8", "replace")
    if "\x1b" in text:
        text = _ANSI.sub("", text)
    text = text.rstrip("\r")
    if redact is not None:
        text = redact(text)
    explained = False
    fallbacks: list[tuple[Signature, re.Match[str]]] = []
    in_bulk = {line[1]: line for line in bulk_here}
    for pattern_id in sorted(hit.pattern_ids | in_bulk.keys() if in_bulk else hit.pattern_ids):
        if pattern_id in in_bulk:
            if counted:
                state.stage = "serving"
            else:
                bulk.apply([in_bulk[pattern_id]])
            continue
        sig = sigs[pattern_id]
        m = _search(sig.pattern, text)
        if m is None:
            continue
        if sig.fallback:
            fallbacks.append((sig, m))
            continue
        explained = explained or sig.role in _EXPLAINING_ROLES
        _apply(sig, m, text, source, hit.line_no, facts, state)
    if not explained:
        for sig, m in fallbacks[:1]:
            _apply(sig, m, text, source, hit.line_no, facts, state)
    if state.frames_used:
        state.traceback_at, state.frames, state.frames_used, state.traceback_of = None, [], False, None


def _apply(
    sig: Signature, m: re.Match[str], text: str, source: str, line_no: int, facts: LogFacts, state: _FileState
) -> None:
    if sig.role == "frame":
        if m.group("file") is None:
            _close_traceback(facts, state, source)
            state.traceback_at, state.frames = line_no, []
            if state.last_error is not None and line_no - facts.events[state.last_error].line <= ERROR_BEFORE_TRACEBACK:
                state.traceback_of = state.last_error
        elif len(state.frames) < MAX_FRAMES:
            state.frames.append((line_no, m.group("file"), m.group("func")))
        return
    cite = Citation(source=source, line=line_no, excerpt=excerpt(text, m.start()))
    if sig.engine in ENGINES:
        facts.engine_votes[sig.engine] += 1
    groups = {k.split("__", 1)[0]: v for k, v in m.groupdict().items() if v is not None}
    if sig.target is not None and groups:
        _set_facts(facts, sig.target, groups, cite)
    if sig.role == "fact":
        if sig.phase in LIFECYCLE_PHASES and state.stage not in ("serving", "shutdown"):
            state.stage = sig.phase
        return
    if sig.role == "marker":
        if sig.marks == "ready":
            state.stage = "serving"
            facts.last_serving_line[source] = line_no
        elif sig.marks == "shutdown":
            state.stage = "shutdown"
        else:
            state.stage = sig.phase
    if sig.role == "error" and sig.family in catalog.SERVING_FAMILIES:
        facts.last_serving_line[source] = line_no
    if sig.role in ("error", "wrapper") and state.frames and line_no - state.frames[-1][0] <= FRAME_REACH:
        groups = {**groups, **_frame_values(state.frames)}
        state.frames_used = True
    event = LogEvent(
        signature=sig.id,
        engine=sig.engine,
        phase=sig.phase,
        role=sig.role,
        family=sig.family,
        causes=sig.causes,
        source=source,
        line=line_no,
        text=cite.excerpt,
        stage=state.stage,
        values=tuple(sorted(groups.items())),
        marks=sig.marks,
        fallback=sig.fallback,
    )
    facts.event_counts[sig.id] += 1
    if facts.event_counts[sig.id] <= EVENTS_PER_SIGNATURE:
        facts.events.append(event)
        if sig.role in ("error", "wrapper") and not state.frames_used:
            state.last_error = len(facts.events) - 1
    else:
        state.overflow[sig.id] = event


def _close_traceback(facts: LogFacts, state: _FileState, source: str) -> None:
    """A traceback no error line took: its frames go to the error printed just before it, if any; and when the
    excerpt stops before its exception line, the traceback itself is the fatal line (a fallback, unexplained)."""
    if state.traceback_at is None or state.frames_used or not state.frames or state.stage == "shutdown":
        return
    values = _frame_values(state.frames)
    if state.traceback_of is not None:
        before = facts.events[state.traceback_of]
        facts.events[state.traceback_of] = dataclasses.replace(
            before, values=tuple(sorted({**dict(before.values), **values}.items()))
        )
        return
    line = state.traceback_at
    facts.events.append(
        LogEvent(
            signature="traceback_frame",
            engine="python",
            phase="unplaced",
            role="error",
            family="unrecognized",
            causes=("unrecognized_error",),
            source=source,
            line=line,
            text=f"Traceback (most recent call last): ... {values['frame_func']} ({values['frame_file']})",
            stage=state.stage,
            values=tuple(sorted({**values, "exception": "a traceback cut before its exception line"}.items())),
            fallback=True,
        )
    )


def _frame_values(frames: list[tuple[int, str, str]]) -> dict[str, str]:
    """Where a traceback was raised: its last frame, and the phase its deepest recognisable frame names."""
    _, file, func = frames[-1]
    values = {"frame_file": file, "frame_func": func}
    for _, _, name in reversed(frames):
        phase = next((fp.phase for fp in catalog.frame_phases() if fp.pattern.search(name)), None)
        if phase is not None:
            values["frame_phase"] = phase
            break
    return values


_RECORD_TYPES: dict[str, type] = {
    "memory": MemoryReport,
    "offload": OffloadReport,
    "bench": BenchFigures,
    "meta": MetaFacts,
}
_RECORD_FIELDS = {target: {f.name for f in fields(t)} - {"citations"} for target, t in _RECORD_TYPES.items()}
_TEXT_FIELDS = frozenset({"device", "engine_version"})


def _set_facts(facts: LogFacts, target: str, groups: dict[str, str], cite: Citation) -> None:
    if target == "stack":
        _set_stack(facts.stack, groups, cite)
        return
    if target == "launch":
        for name, raw in groups.items():
            key = name.split("__", 1)[0]
            facts.launch_hints[key] = raw
            facts.launch_hint_citations[key] = cite
        return
    records: dict[str, MemoryReport | OffloadReport | BenchFigures | MetaFacts] = {
        "memory": facts.memory,
        "offload": facts.offload,
        "bench": facts.bench,
        "meta": facts.meta,
    }
    record = records[target]
    known = _RECORD_FIELDS[target]
    for name, raw in groups.items():
        field_name, value = _field_value(name, raw)
        if field_name not in known:
            continue
        if isinstance(value, str) and field_name not in _TEXT_FIELDS:
            value = number(value)
        if value is None:
            continue
        setattr(record, field_name, value)
        record.citations[field_name] = cite


def _set_stack(stack: StackFacts, groups: dict[str, str], cite: Citation) -> None:
    """A version line of the stack: the first value of each field is kept; a GPU line adds its GPU once."""
    for name, raw in groups.items():
        if name in STACK_TEXT_FIELDS and getattr(stack, name) is None:
            setattr(stack, name, raw)
            stack.citations[name] = cite
    if "gpu_name" in groups or "compute_capability" in groups:
        index = groups.get("gpu_index")
        gpu_name = groups.get("gpu_name")
        gpu = StackGpu(
            index=int(index) if index is not None and index.isdigit() else None,
            name=gpu_name.strip() if gpu_name else None,
            compute_capability=groups.get("compute_capability"),
            citation=cite,
        )
        if all((g.index, g.name) != (gpu.index, gpu.name) for g in stack.gpus):
            stack.gpus.append(gpu)
    if cite.source not in stack.sources:
        stack.sources.append(cite.source)


def _stats_point(signature: str, groups: dict[str, str], cite: Citation) -> StatsPoint:
    values: dict[str, float] = {}
    for name, raw in groups.items():
        field_name, value = _field_value(name, raw)
        if isinstance(value, str):
            value = number(value)
        if field_name in STATS_FIELDS and value is not None:
            values[field_name] = value
    return StatsPoint(source=cite.source, line=cite.line or 0, text=cite.excerpt, signature=signature, **values)
