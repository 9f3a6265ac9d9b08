"""``manifest.json``: what a capture tried, what each source gave, and what was redacted.

Every source has a row (ok / failed / skipped, and why), every command run a row (argv, exit code,
duration, truncated or not), every file written a row. ``evidence.bundle`` turns failed rows into
problems on the evidence; the rest is for the people reading the bundle.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from enum import StrEnum
from typing import Any

SCHEMA_VERSION = 1


class Status(StrEnum):
    """How a source or a command ended."""

    ok = "ok"
    failed = "failed"
    skipped = "skipped"


@dataclass(slots=True)
class CommandRow:
    """One external command (argv redacted)."""

    argv: list[str]
    status: Status
    exit_code: int | None
    duration_s: float
    stdout_bytes: int
    truncated: bool
    reason: str | None = None


@dataclass(slots=True)
class FileRow:
    """One file written into the bundle."""

    path: str
    bytes: int
    truncated: bool = False


@dataclass(slots=True)
class SourceRow:
    """One source: its status, why (for failed and skipped, or a note for ok), and what it ran and wrote."""

    name: str
    status: Status = Status.ok
    reason: str | None = None
    duration_s: float = 0.0
    samples: int | None = None
    commands: list[CommandRow] = field(default_factory=list)
    files: list[FileRow] = field(default_factory=list)

    def note(self, text: str) -> None:
        """Add a remark without changing the status."""
        self.reason = text if not self.reason else f"{self.reason}; {text}"


@dataclass(slots=True)
class Manifest:
    """The whole manifest (see docs/capture.md for the fields)."""

    tool_version: str
    host: str
    started_at: str
    label: str
    plan: dict[str, Any]
    ended_at: str | None = None
    duration_s: float | None = None
    partial: bool = True
    interrupted_by: str | None = None
    size_cap_bytes: int = 0
    size_cap_reached: bool = False
    total_bytes: int = 0
    sources: list[SourceRow] = field(default_factory=list)
    redactions: dict[str, int] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        """The JSON document, ``schema_version`` first."""
        return {"schema_version": SCHEMA_VERSION, "tool": "llmtriage", **asdict(self)}
