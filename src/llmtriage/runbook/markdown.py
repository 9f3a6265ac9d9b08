"""The runbook as a Markdown document, and back: one entry per incident, symptom → evidence → cause → fix.

The document is for people, and :func:`parse` reads it back without loss: evidence lines sit in a
fenced block longer than any run of backticks they hold, free text (fix, outcome, notes) is quoted
line by line (``> ``), and everything else is one ``- key: value`` line. The layout is in
docs/runbook.md; the front matter carries ``schema_version``.
"""

from __future__ import annotations

import re
import uuid
from dataclasses import dataclass, field

import yaml

from llmtriage import catalog
from llmtriage.errors import UsageError
from llmtriage.runbook.entry import Entry, check_ids, check_outcome, now_utc

MARKDOWN_SCHEMA_VERSION = 1
DOCUMENT = "llmtriage runbook"
_HINT = "the layout is the one `llmtriage runbook export --markdown` writes (docs/runbook.md)"
_TEXT_SECTIONS = {"Fix": "fix", "Outcome": "outcome", "Notes": "notes"}
_DETAILS = {
    "recorded": "recorded_at",
    "fingerprint": "fingerprint",
    "signatures": "signatures",
    "engine": "engine",
    "engine version": "engine_version",
    "gpu": "gpu",
    "driver": "driver",
    "cuda runtime": "cuda_runtime",
    "torch": "torch",
    "origin": "origin",
}
_RECORDED = re.compile(r"^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}Z$")
_UID = re.compile(r"^<!-- runbook-entry (?P<uid>[\w-]+) -->$")
_ID_LINE = re.compile(r"^\*\*(?P<what>Symptom|Cause):\*\* `(?P<id>[a-z0-9_]+)`")
_SECTION = re.compile(r"^\*\*(?P<name>Evidence|Fix|Outcome|Notes|Details)\*\*$")
_DETAIL = re.compile(r"^- (?P<key>[a-z ]+):(?: (?P<value>.*))?$")
_CONFIG = re.compile(r"^  - (?P<key>[^:\s]+):(?: (?P<value>.*))?$")
_FENCE = re.compile(r"^(?P<fence>`{3,})text$")


# ---------------------------------------------------------------- writing


def _quote(text: str) -> list[str]:
    return [f"> {line}" if line else ">" for line in text.split("\n")]


def entry_markdown(entry: Entry) -> str:
    """One entry as Markdown: heading, symptom, evidence, cause, fix, outcome, notes, details."""
    tree = catalog.tree()
    title = f"{entry.recorded_on} · {entry.symptom_class} → {entry.cause}"
    lines = [f"## {title}" + (" (seed)" if entry.seed else ""), "", f"<!-- runbook-entry {entry.uid} -->", ""]
    lines += [f"**Symptom:** `{entry.symptom_class}` — {tree.classes.get(entry.symptom_class, '')}", ""]
    if entry.evidence:
        longest = max((len(run) for line in entry.evidence for run in re.findall(r"`+", line)), default=0)
        fence = "`" * max(3, longest + 1)
        lines += ["**Evidence**", "", f"{fence}text", *entry.evidence, fence, ""]
    cause = tree.causes.get(entry.cause)
    lines += [f"**Cause:** `{entry.cause}` — {cause.title if cause else ''}", ""]
    for heading, name in _TEXT_SECTIONS.items():
        text = getattr(entry, name)
        if text:
            lines += [f"**{heading}**", "", *_quote(text), ""]
    lines += ["**Details**", ""]
    for key, name in _DETAILS.items():
        value = getattr(entry, name)
        if name == "signatures":
            value = " ".join(value)
        if value:
            lines.append(f"- {key}: {value}")
    if entry.config:
        lines.append("- config:")
        lines += [f"  - {key}: {value}".rstrip() for key, value in sorted(entry.config.items())]
    return "\n".join(lines) + "\n"


def to_markdown(entries: list[Entry]) -> str:
    """The whole runbook as one document, with its front matter."""
    head = yaml.safe_dump(
        {"schema_version": MARKDOWN_SCHEMA_VERSION, "document": DOCUMENT, "entries": len(entries)}, sort_keys=False
    )
    intro = (
        "# Runbook\n\nOne entry per incident: symptom → evidence → cause → fix. Written by "
        "`llmtriage runbook export --markdown`; `llmtriage runbook import FILE` reads it back.\n"
    )
    return f"---\n{head}---\n\n{intro}" + "".join(f"\n{entry_markdown(e)}" for e in entries)


# ---------------------------------------------------------------- reading


@dataclass(slots=True)
class _Draft:
    line: int
    values: dict[str, str] = field(default_factory=dict)
    evidence: list[str] = field(default_factory=list)
    config: dict[str, str] = field(default_factory=dict)


class _Lines:
    """The document's lines with a cursor, for errors that name the line."""

    def __init__(self, name: str, text: str) -> None:
        self.name = name
        self.lines = text.replace("\r\n", "\n").split("\n")
        self.at = 0

    def error(self, message: str, line: int | None = None) -> UsageError:
        return UsageError(f"{self.name}:{line or self.at}: {message}", _HINT)

    def next(self) -> str | None:
        if self.at >= len(self.lines):
            return None
        self.at += 1
        return self.lines[self.at - 1]

    def peek(self) -> str | None:
        return self.lines[self.at] if self.at < len(self.lines) else None

    def skip_blank(self) -> None:
        while (line := self.peek()) is not None and not line.strip():
            self.at += 1


def parse(text: str, name: str) -> list[Entry]:
    """The entries of a runbook document; UsageError naming the line for anything it cannot read."""
    lines = _Lines(name, text)
    _front_matter(lines)
    drafts: list[_Draft] = []
    while (line := lines.next()) is not None:
        if line.startswith("## "):
            drafts.append(_Draft(line=lines.at))
        elif drafts and line.strip():
            _entry_line(lines, line, drafts[-1])
    return [_finish(lines, d) for d in drafts]


def _front_matter(lines: _Lines) -> None:
    if lines.next() != "---":
        raise lines.error("no front matter: a runbook document starts with ---")
    head = []
    while (line := lines.next()) != "---":
        if line is None:
            raise lines.error("the front matter does not end (---)")
        head.append(line)
    try:
        meta = yaml.safe_load("\n".join(head))
    except yaml.YAMLError as e:
        raise lines.error(f"front matter is not YAML: {e}", 2) from e
    if not isinstance(meta, dict) or meta.get("document") != DOCUMENT:
        raise lines.error(f"not a runbook document (front matter has no 'document: {DOCUMENT}')", 1)
    if meta.get("schema_version") != MARKDOWN_SCHEMA_VERSION:
        raise lines.error(
            f"schema_version {meta.get('schema_version')!r}; this llmtriage reads {MARKDOWN_SCHEMA_VERSION}", 1
        )


def _entry_line(lines: _Lines, line: str, draft: _Draft) -> None:
    if (m := _UID.match(line)) is not None:
        draft.values["uid"] = m.group("uid")
    elif (m := _ID_LINE.match(line)) is not None:
        draft.values[m.group("what").lower()] = m.group("id")
    elif (m := _SECTION.match(line)) is not None:
        section = m.group("name")
        lines.skip_blank()
        if section == "Evidence":
            draft.evidence = _fenced(lines)
        elif section == "Details":
            _details(lines, draft)
        else:
            draft.values[_TEXT_SECTIONS[section]] = _quoted(lines)
    else:
        raise lines.error(f"unexpected line {line[:60]!r}")


def _fenced(lines: _Lines) -> list[str]:
    opening = lines.next() or ""
    m = _FENCE.match(opening)
    if m is None:
        raise lines.error("evidence is a fenced block: ```text ... ```")
    body = []
    while (line := lines.next()) != m.group("fence"):
        if line is None:
            raise lines.error("the evidence block does not end")
        body.append(line)
    return body


def _quoted(lines: _Lines) -> str:
    body = []
    while (line := lines.peek()) is not None and line.startswith(">"):
        lines.at += 1
        body.append(line[2:] if line.startswith("> ") else line[1:])
    if not body:
        raise lines.error("a fix, outcome or notes section is quoted text: lines that start with '> '")
    return "\n".join(body)


def _details(lines: _Lines, draft: _Draft) -> None:
    while (line := lines.peek()) is not None and line.startswith("- "):
        lines.at += 1
        m = _DETAIL.match(line)
        if m is None or (m.group("key") not in _DETAILS and m.group("key") != "config"):
            raise lines.error(f"unknown detail {line[:60]!r}; known: {', '.join(_DETAILS)}, config")
        if m.group("key") == "config":
            while (sub := lines.peek()) is not None and (c := _CONFIG.match(sub)) is not None:
                lines.at += 1
                draft.config[c.group("key")] = c.group("value") or ""
        else:
            draft.values[_DETAILS[m.group("key")]] = m.group("value") or ""


def _finish(lines: _Lines, draft: _Draft) -> Entry:
    values = draft.values
    for needed in ("symptom", "cause"):
        if needed not in values:
            raise lines.error(f"the entry has no **{needed.capitalize()}:** line", draft.line)
    try:
        check_ids(values["symptom"], values["cause"])
        check_outcome(values.get("outcome"))
    except UsageError as e:
        raise lines.error(e.message, draft.line) from e
    recorded = values.get("recorded_at") or now_utc()
    if not _RECORDED.match(recorded):
        raise lines.error(f"recorded {recorded!r} is not like 2026-10-02T11:22:33Z", draft.line)
    return Entry(
        uid=values.get("uid") or uuid.uuid4().hex,
        recorded_at=recorded,
        symptom_class=values["symptom"],
        cause=values["cause"],
        evidence=tuple(draft.evidence),
        fingerprint=values.get("fingerprint") or None,
        signatures=tuple(values.get("signatures", "").split()),
        config=draft.config,
        gpu=values.get("gpu") or None,
        engine=values.get("engine") or None,
        engine_version=values.get("engine_version") or None,
        driver=values.get("driver") or None,
        cuda_runtime=values.get("cuda_runtime") or None,
        torch=values.get("torch") or None,
        fix=values.get("fix"),
        outcome=values.get("outcome"),
        notes=values.get("notes"),
        origin=values.get("origin") or None,
    )
