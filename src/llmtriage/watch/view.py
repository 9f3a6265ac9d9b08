"""The watch display as rich renderables: one row per server, the open incidents with their diagnosis, recent
events. Pure: :func:`build` takes the state and returns what to draw; only the CLI draws it.
"""

from __future__ import annotations

import time
import urllib.parse

from rich.console import Group, RenderableType
from rich.text import Text

from llmtriage import catalog
from llmtriage.catalog import Thresholds
from llmtriage.watch.breach import STALL, Incident, duration_text
from llmtriage.watch.endpoint import Frame
from llmtriage.watch.watcher import WatchState

EVENTS_SHOWN = 8
CAUSES_SHOWN = 2
_MIB_PER_GIB = 1024.0


def _server(url: str) -> str:
    return urllib.parse.urlsplit(url).netloc or url


def _ms(value_s: float | None) -> str:
    return "–" if value_s is None else duration_text(value_s)


def _num(value: float | None, fmt: str = "{:.0f}") -> str:
    return "–" if value is None else fmt.format(value)


def _gpu(frame: Frame) -> tuple[str, str, str]:
    if not frame.gpus:
        return ("?" if frame.gpu_error else "–"), "", ""
    used = sum(r.memory_used_mib or 0.0 for r in frame.gpus) / _MIB_PER_GIB
    total = sum(r.memory_total_mib or 0.0 for r in frame.gpus) / _MIB_PER_GIB
    power = sum(r.power_draw_w or 0.0 for r in frame.gpus)
    clocks = [r.sm_clock_mhz for r in frame.gpus if r.sm_clock_mhz is not None]
    return f"{used:.0f}/{total:.0f} GiB", f"{power:.0f} W", f"{min(clocks):.0f} MHz" if clocks else "–"


def _note(frame: Frame) -> str:
    notes = []
    if frame.probe_waiting_s is not None:
        notes.append(f"probe waiting {frame.probe_waiting_s:.0f} s")
    elif frame.probe_error:
        notes.append(f"probe: {frame.probe_error}")
    elif frame.probe_first_token_s is not None:
        notes.append(f"probe TTFT {_ms(frame.probe_first_token_s)}")
    if frame.gpu_error:
        notes.append(f"GPU: {frame.gpu_error}")
    return "; ".join(notes)


Cell = tuple[str, str]  # text, style
COLUMNS = (
    ("server", "<"), ("state", "<"), ("TTFT p95", ">"), ("TPOT p95", ">"), ("ITL p95", ">"), ("run/wait", ">"),
    ("KV", ">"), ("preempt/s", ">"), ("prompt/s", ">"), ("gen tok/s", ">"), ("errors", ">"), ("GPU mem", ">"),
    ("power", ">"), ("SM clock", ">"), ("note", "<"),
)  # fmt: skip
# When the table is wider than the display, whole columns go, these first: the figures the SLOs do not judge. A
# value is never cut; only the note, last, ends in an ellipsis.
DROPPED_FIRST = ("SM clock", "power", "ITL p95", "prompt/s", "GPU mem", "preempt/s")
NOTE_MIN_CHARS = 12
GAP = "  "
NOTE_INDENT = "    ↳ "
BREACHED = "bold red"


def _flag(text: str, breached: bool) -> Cell:
    return text, BREACHED if breached else ""


def _cells(url: str, frame: Frame, kinds: frozenset[str], thresholds: Thresholds) -> list[Cell]:
    if not frame.up:
        return [(_server(url), "bold"), ("DOWN", BREACHED), *[("", "")] * 12, (frame.error or "", "red")]
    memory, power, clock = _gpu(frame)
    kv_high = frame.kv_usage_ratio is not None and frame.kv_usage_ratio >= thresholds.kv_usage_high
    return [
        (_server(url), "bold"),
        ("STALLED", "bold white on red") if STALL in kinds else ("up", "green"),
        _flag(_ms(frame.ttft_p95_s), "ttft_p95" in kinds),
        _flag(_ms(frame.tpot_p95_s) + (" (ITL)" if frame.tpot_from_itl else ""), "tpot_p95" in kinds),
        (_ms(frame.itl_p95_s), ""),
        _flag(f"{_num(frame.running)}/{_num(frame.waiting)}", "queue" in kinds),
        _flag(_num(frame.kv_usage_ratio, "{:.0%}"), kv_high),
        _flag(_num(frame.preemptions_per_s, "{:.2f}"), bool(frame.preemptions_per_s)),
        (_num(frame.prompt_tokens_per_s), ""),
        _flag(_num(frame.generation_tokens_per_s), STALL in kinds),
        _flag(_num(frame.error_ratio, "{:.1%}"), "error_rate" in kinds),
        (memory, ""),
        (power, ""),
        (clock, ""),
        (_note(frame), "dim"),
    ]


def _rank(frame: Frame, kinds: frozenset[str]) -> int:
    if STALL in kinds:
        return 0
    if not frame.up:
        return 1
    return 2 if kinds else 3


def _fitting(widths: list[int], width: int | None) -> list[int]:
    """The columns shown in ``width`` characters: all, or all but the first of DROPPED_FIRST that must go."""
    shown = list(range(len(COLUMNS)))
    names = [name for name, _ in COLUMNS]
    for name in DROPPED_FIRST:
        fixed = sum(widths[i] + len(GAP) for i in shown[:-1])
        if width is None or fixed + min(widths[-1], NOTE_MIN_CHARS) <= width:
            break
        shown.remove(names.index(name))
    return shown


def table(state: WatchState, thresholds: Thresholds, width: int | None = None) -> Text:
    """One row per server, the worst first (stalled, down, in breach, fine), in aligned columns that fit ``width``
    (None: all columns).

    Drawn as plain text lines: a rich Table of 50 rows costs ~50 ms a redraw, five times the whole watch loop."""
    rows: list[tuple[int, int, list[Cell]]] = []
    for order, (url, frame) in enumerate(state.frames.items()):
        kinds = state.breached.get(url, frozenset())
        rows.append((_rank(frame, kinds), order, _cells(url, frame, kinds, thresholds)))
    rows.sort(key=lambda r: (r[0], r[1]))
    grid = [[(name, "bold") for name, _ in COLUMNS], *(cells for _, _, cells in rows)]
    widths = [max(len(row[i][0]) for row in grid) for i in range(len(COLUMNS))]
    shown = _fitting(widths, width)
    out = Text(no_wrap=True, overflow="ellipsis")
    last = len(COLUMNS) - 1
    for row in grid:
        line = Text()
        for i in shown[:-1]:
            (cell, style), (_, align) = row[i], COLUMNS[i]
            line.append(cell.ljust(widths[i]) if align == "<" else cell.rjust(widths[i]), style)
            line.append(GAP)
        note, style = row[last]
        if width is None or len(line) + len(note) <= width:
            line.append(note, style)
        else:  # the note goes under its row, whole where it fits
            line.rstrip()
            line.append("\n" + NOTE_INDENT + note, style)
            line.truncate(len(line.plain.rsplit("\n", 1)[0]) + 1 + width, overflow="ellipsis")
        out.append_text(line)
        out.append("\n")
    out.rstrip()
    return out


def incident_lines(incident: Incident, now_s: float) -> list[Text]:
    """An incident: what breached, the diagnosis of that moment, the bundle."""
    lines = [
        Text.assemble(
            (f"{_server(incident.url)}", "bold"),
            f" breached {now_s - incident.started_s:.0f} s ago" if incident.ended_s is None else " (recovered)",
            ": ",
            ("; ".join(incident.messages[k] for k in incident.kinds), "red"),
        )
    ]
    diagnosis = incident.diagnosis
    if STALL in incident.kinds and (diagnosis is None or diagnosis.symptom_class != STALL):
        stall = catalog.tree().cause(STALL)
        lines.append(Text(f"  watch: {stall.title} [{STALL}]", style="bold red"))
        lines.append(Text(f"      fix: {stall.fixes[0]}", style="dim"))
    if diagnosis is not None:
        label = "diagnosis" if STALL not in incident.kinds or diagnosis.symptom_class == STALL else "the metrics say"
        lines.append(Text(f"  {label}: {diagnosis.symptom_title} [{diagnosis.symptom_class}]"))
        for cause in diagnosis.causes[:CAUSES_SHOWN]:
            note = cause.evidence[0].note if cause.evidence and cause.evidence[0].note else ""
            lines.append(Text(f"    {cause.id} ({cause.confidence:.0%})" + (f": {note}" if note else "")))
            if cause.fixes:
                lines.append(Text(f"      fix: {cause.fixes[0]}", style="dim"))
    if incident.bundle is not None:
        lines.append(
            Text(f"  bundle: {incident.bundle}" + (f" ({incident.capture_note})" if incident.capture_note else ""))
        )
    elif incident.capture_note:
        lines.append(Text(f"  bundle: {incident.capture_note}", style="dim"))
    return lines


def build(
    state: WatchState, thresholds: Thresholds, now_s: float | None = None, width: int | None = None
) -> RenderableType:
    """Everything the live display shows, the table fitted to ``width``."""
    now_s = time.time() if now_s is None else now_s
    slo = thresholds.slo
    parts: list[RenderableType] = [
        Text(
            f"SLO: TTFT p95 <= {_ms(slo.ttft_p95_s)}, TPOT p95 <= {_ms(slo.itl_p95_s)}, errors <= {slo.error_rate:.1%}"
            f", queue <= {slo.queue:g}; stall after {thresholds.stall_seconds:g} s without tokens",
            style="dim",
        ),
        table(state, thresholds, width),
    ]
    for incident in state.open_incidents.values():
        parts.extend(incident_lines(incident, now_s))
    for event in list(state.events)[-EVENTS_SHOWN:]:
        stamp = time.strftime("%H:%M:%S", time.localtime(event.timestamp_s))
        parts.append(Text(f"{stamp} {_server(event.url)} {event.kind}: {event.message}", style="dim"))
    if state.db_error:
        parts.append(Text(state.db_error, style="red"))
    return Group(*parts)
