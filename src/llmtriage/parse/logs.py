"""Server logs -> typed facts: matched signatures, memory numbers, stats series, HTTP statuses.

Pure: a byte stream in, :class:`~llmtriage.facts.LogFacts` out. Any bytes are accepted (non-UTF-8 is
replaced, ANSI colours are stripped); memory stays bounded whatever the size of the log.
"""

from __future__ import annotations

import dataclasses
import re
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
from llmtriage.parse.scanner import LineScanner, ScanTotals
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


@cache
def _scanner() -> tuple[LineScanner, tuple[Signature, ...]]:
    sigs = catalog.signatures()
    return LineScanner([s.pattern for s in sigs]), sigs


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


def read_log(stream: BinaryIO, source: str, facts: LogFacts, redact: Callable[[str], str] | None = None) -> None:
    """Scan one log ``stream`` (named ``source`` in citations) and add what it says to ``facts``; ``redact``
    scrubs each line that matched before anything of it is kept."""
    scanner, sigs = _scanner()
    totals = ScanTotals()
    state = _FileState()
    facts.sources.append(source)
    for hit in scanner.scan(stream, totals):
        text = _ANSI.sub("", hit.line.decode("utf-8", "replace")).rstrip("\r")
        if redact is not None:
            text = redact(text)
        explained = False
        fallbacks: list[tuple[Signature, re.Match[str]]] = []
        for pattern_id in sorted(hit.pattern_ids):
            sig = sigs[pattern_id]
            m = sig.regex.search(text)
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
    _close_traceback(facts, state, source)
    facts.events.extend(state.overflow.values())
    order = {name: i for i, name in enumerate(facts.sources)}
    facts.events.sort(key=lambda e: (order[e.source], e.line))
    facts.lines_scanned += totals.lines
    facts.bytes_scanned += totals.bytes
    facts.line_counts[source] = totals.lines


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
    if sig.role == "stats":
        state.stage = "serving"
        facts.last_serving_line[source] = line_no
        _add_stats(facts, sig.id, groups, cite)
        return
    if sig.role == "access":
        state.stage = "serving"
        facts.last_serving_line[source] = line_no
        status = int(groups["status"])
        facts.http_status[(groups["method"], groups["path"], status)] += 1
        facts.http_status_citations.setdefault(status, cite)
        return
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


def _add_stats(facts: LogFacts, signature: str, groups: dict[str, str], cite: Citation) -> None:
    values: dict[str, float] = {}
    for name, raw in groups.items():
        field_name, value = _field_value(name, raw)
        if isinstance(value, str):
            value = number(value)
        if field_name in STATS_FIELDS and value is not None:
            values[field_name] = value
    facts.stats.append(
        StatsPoint(source=cite.source, line=cite.line or 0, text=cite.excerpt, signature=signature, **values)
    )
    if len(facts.stats) >= 2 * STATS_CAP:
        # Halve the resolution rather than grow without bound; the series keeps its shape.
        facts.stats = facts.stats[::2]
