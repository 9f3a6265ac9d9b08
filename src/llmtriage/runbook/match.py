"""Seen before: the runbook's incidents that match a diagnosis, by stack, by fingerprint and by cause.

A stack match is the same error seen again on the same NVIDIA driver (and no other CUDA runtime); a
fingerprint match is the same error on another or an unknown stack, whatever cause was recorded for it; a
cause match is another incident with the diagnosis' first cause. Seed entries never count as seen.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass
from typing import Any

from llmtriage.diagnose.model import Diagnosis, StackSummary
from llmtriage.facts import Evidence
from llmtriage.redact import Redactor
from llmtriage.runbook.entry import Entry
from llmtriage.runbook.fingerprint import fingerprint
from llmtriage.runbook.store import Runbook

SUMMARY_FIX_CHARS = 160


@dataclass(frozen=True, slots=True)
class Match:
    """Incidents of the runbook that match a diagnosis one way (``stack``, ``fingerprint`` or ``cause``)."""

    match: str
    causes: tuple[str, ...]  # the causes recorded, most frequent first
    count: int
    last_seen: str  # the day of the newest: 2026-10-02
    fix: str | None  # the newest fix that worked, else the newest fix tried
    fix_worked: bool | None
    entry_ids: tuple[int, ...]  # newest first
    stack: tuple[str, ...] = ()  # what a stack match shares: ("driver 470.82.01", "CUDA runtime 12.4")

    @property
    def summary(self) -> str:
        """One line: what matched, how often, when last, and the fix."""
        times = f"{self.count} time" + ("" if self.count == 1 else "s")
        if self.match == "stack":
            head = (
                f"same error on the same {', '.join(self.stack)} seen {times}, last on {self.last_seen} "
                f"(cause recorded: {', '.join(self.causes)})"
            )
        elif self.match == "fingerprint":
            head = f"same error seen {times}, last on {self.last_seen} (cause recorded: {', '.join(self.causes)})"
        else:
            head = f"{self.causes[0]} seen {times}, last on {self.last_seen}"
        if self.fix is None:
            return f"{head}; no fix recorded"
        fix = " ".join(self.fix.split())
        if len(fix) > SUMMARY_FIX_CHARS:
            fix = fix[: SUMMARY_FIX_CHARS - 1] + "…"
        if self.fix_worked:
            return f"{head}; the fix that worked: {fix}"
        tried = "failed" if self.fix_worked is False else "outcome not recorded"
        return f"{head}; the last fix tried ({tried}): {fix}"

    def to_dict(self) -> dict[str, Any]:
        """The ``seen_before`` item of the diagnosis JSON."""
        return {
            "summary": self.summary,
            "match": self.match,
            "count": self.count,
            "last_seen": self.last_seen,
            "fix": self.fix,
            "fix_worked": self.fix_worked,
            "causes": list(self.causes),
            "entry_ids": list(self.entry_ids),
            "stack": list(self.stack),
        }


def _shared_stack(entry: Entry, stack: StackSummary | None) -> tuple[str, ...]:
    """What of this incident's stack ``entry`` shares: empty unless the driver is the same and the CUDA runtime, where
    both are known, too."""
    if stack is None or stack.driver_version is None or entry.driver != stack.driver_version:
        return ()
    if None not in (stack.cuda_runtime, entry.cuda_runtime) and entry.cuda_runtime != stack.cuda_runtime:
        return ()
    parts = [f"driver {stack.driver_version}"]
    if stack.cuda_runtime is not None and entry.cuda_runtime == stack.cuda_runtime:
        parts.append(f"CUDA runtime {stack.cuda_runtime}")
    if stack.torch is not None and entry.torch == stack.torch:
        parts.append(f"torch {stack.torch}")
    return tuple(parts)


def _match(kind: str, entries: list[Entry], stack: tuple[str, ...] = ()) -> Match:
    """One match over ``entries`` (newest first)."""
    fixed = next((e for e in entries if e.fix and e.worked), None) or next((e for e in entries if e.fix), None)
    return Match(
        match=kind,
        causes=tuple(cause for cause, _ in Counter(e.cause for e in entries).most_common()),
        count=len(entries),
        last_seen=entries[0].recorded_on,
        fix=fixed.fix if fixed else None,
        fix_worked=fixed.worked if fixed else None,
        entry_ids=tuple(e.id for e in entries if e.id is not None),
        stack=stack,
    )


def seen_before(diagnosis: Diagnosis, evidence: Evidence, runbook: Runbook) -> list[Match]:
    """The runbook's matches for ``diagnosis``: the same error on the same stack, the same error elsewhere, then
    the diagnosis' first cause."""
    matches = []
    seen: set[int | None] = set()
    found = fingerprint(evidence, Redactor().redact_text)
    if found is not None and (same := runbook.with_fingerprint(found.digest)):
        shared = {e.id: _shared_stack(e, diagnosis.stack) for e in same}
        on_stack = [e for e in same if shared[e.id]]
        if on_stack:
            common = [part for part in shared[on_stack[0].id] if all(part in shared[e.id] for e in on_stack)]
            matches.append(_match("stack", on_stack, tuple(common)))
        if elsewhere := [e for e in same if not shared[e.id]]:
            matches.append(_match("fingerprint", elsewhere))
        seen.update(e.id for e in same)
    if diagnosis.causes:
        others = [e for e in runbook.with_cause(diagnosis.causes[0].id) if e.id not in seen]
        if others:
            matches.append(_match("cause", others))
    return matches
