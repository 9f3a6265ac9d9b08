"""Seen before: the runbook's incidents that match a diagnosis, by fingerprint and by cause.

A fingerprint match is the same error seen again, whatever cause was recorded for it; a cause match is
another incident with the diagnosis' first cause. Seed entries never count as seen.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass
from typing import Any

from llmtriage.diagnose.model import Diagnosis
from llmtriage.facts import Evidence
from llmtriage.redact import Redactor
from llmtriage.runbook.entry import Entry
from llmtriage.runbook.fingerprint import fingerprint
from llmtriage.runbook.store import Runbook

SUMMARY_FIX_CHARS = 160


@dataclass(frozen=True, slots=True)
class Match:
    """Incidents of the runbook that match a diagnosis one way (``fingerprint`` or ``cause``)."""

    match: str
    causes: tuple[str, ...]  # the causes recorded, most frequent first
    count: int
    last_seen: str  # the day of the newest: 2026-10-02
    fix: str | None  # the newest fix that worked, else the newest fix tried
    fix_worked: bool | None
    entry_ids: tuple[int, ...]  # newest first

    @property
    def summary(self) -> str:
        """One line: what matched, how often, when last, and the fix."""
        times = f"{self.count} time" + ("" if self.count == 1 else "s")
        if self.match == "fingerprint":
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
        }


def _match(kind: str, entries: list[Entry]) -> Match:
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
    )


def seen_before(diagnosis: Diagnosis, evidence: Evidence, runbook: Runbook) -> list[Match]:
    """The runbook's matches for ``diagnosis``: by fingerprint first, then by its first cause."""
    matches = []
    seen: set[int | None] = set()
    found = fingerprint(evidence, Redactor().redact_text)
    if found is not None and (same := runbook.with_fingerprint(found.digest)):
        matches.append(_match("fingerprint", same))
        seen.update(e.id for e in same)
    if diagnosis.causes:
        others = [e for e in runbook.with_cause(diagnosis.causes[0].id) if e.id not in seen]
        if others:
            matches.append(_match("cause", others))
    return matches
