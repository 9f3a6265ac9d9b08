"""A runbook entry: one incident (or one seed) as symptom → evidence → cause → fix, and how it is made.

:func:`entry_from_diagnosis` turns a diagnosis of a bundle into an entry; :func:`redacted` passes every
free-text field through the redactor (the store calls it before anything is written).
"""

from __future__ import annotations

import dataclasses
import re
import uuid
from collections import Counter
from dataclasses import dataclass, field
from datetime import UTC, datetime

from llmtriage import catalog
from llmtriage.diagnose.model import Diagnosis
from llmtriage.errors import UsageError
from llmtriage.facts import Evidence, GpuFacts, LaunchConfig
from llmtriage.redact import Redactor
from llmtriage.runbook.fingerprint import fingerprint

# The first word of an outcome says whether the fix worked: True, False or not known.
OUTCOMES: dict[str, bool | None] = {"worked": True, "failed": False, "partial": None, "untested": None}
MAX_EVIDENCE_LINES = 8
_LAUNCH_SKIP = frozenset({"env", "unknown_args", "source", "citations"})
_FIRST_WORD = re.compile(r"[A-Za-z]+")


@dataclass(frozen=True, slots=True)
class Entry:
    """One runbook entry. Text fields are single lines except ``fix``, ``outcome`` and ``notes``."""

    uid: str
    recorded_at: str  # ISO 8601, UTC, seconds: 2026-10-02T11:22:33Z
    symptom_class: str
    cause: str
    evidence: tuple[str, ...] = ()
    fingerprint: str | None = None
    signatures: tuple[str, ...] = ()
    config: dict[str, str] = field(default_factory=dict)
    gpu: str | None = None
    engine: str | None = None
    engine_version: str | None = None
    driver: str | None = None  # the NVIDIA driver version: 550.54.15
    cuda_runtime: str | None = None  # the CUDA runtime the engine is built with: 12.4
    torch: str | None = None
    fix: str | None = None
    outcome: str | None = None
    notes: str | None = None
    origin: str | None = None
    seed: bool = False
    id: int | None = None  # the store's row id, once stored

    @property
    def outcome_kind(self) -> str | None:
        """The outcome's first word, lower case: one of OUTCOMES (None without an outcome)."""
        return _outcome_word(self.outcome) if self.outcome else None

    @property
    def worked(self) -> bool | None:
        """Whether the fix worked, as the outcome's first word says (None: not known)."""
        return OUTCOMES.get(self.outcome_kind or "")

    @property
    def recorded_on(self) -> str:
        """The day it was recorded: 2026-10-02."""
        return self.recorded_at[:10]


def _outcome_word(outcome: str) -> str:
    m = _FIRST_WORD.match(outcome.strip())
    return m.group(0).lower() if m else ""


def check_outcome(outcome: str | None) -> None:
    """Raise UsageError when an outcome does not start with one of OUTCOMES."""
    if outcome is not None and _outcome_word(outcome) not in OUTCOMES:
        raise UsageError(
            f"an outcome starts with {', '.join(OUTCOMES)}; got {outcome[:40]!r}",
            'e.g. --outcome "worked: serves 64 sequences at --gpu-memory-utilization 0.85"',
        )


def check_cause(cause: str) -> None:
    """Raise UsageError when the cause is not one of the tree's."""
    if cause not in catalog.tree().causes:
        raise UsageError(f"unknown cause {cause!r}", "`llmtriage tree` lists every cause id")


def check_ids(symptom_class: str, cause: str) -> None:
    """Raise UsageError when the class or the cause is not one of the tree's."""
    tree = catalog.tree()
    if symptom_class not in tree.classes:
        raise UsageError(f"unknown symptom class {symptom_class!r}", f"known: {', '.join(tree.classes)}")
    check_cause(cause)


@dataclass(frozen=True, slots=True)
class Edit:
    """What ``runbook edit`` changes in an entry: None leaves a field as it is, an empty text clears it.

    Checked when made, as ``add`` checks: a cause id of the tree, an outcome that starts with one of OUTCOMES.
    """

    cause: str | None = None
    fix: str | None = None
    outcome: str | None = None
    notes: str | None = None

    def __post_init__(self) -> None:
        if self.cause is not None:
            check_cause(self.cause)
        check_outcome(self.outcome or None)

    @property
    def changes(self) -> dict[str, str]:
        """The fields given, by name."""
        given = {"cause": self.cause, "fix": self.fix, "outcome": self.outcome, "notes": self.notes}
        return {name: value for name, value in given.items() if value is not None}

    def applied_to(self, entry: Entry) -> Entry:
        """``entry`` with the changes (not yet redacted)."""
        return dataclasses.replace(
            entry,
            cause=entry.cause if self.cause is None else self.cause,
            fix=entry.fix if self.fix is None else self.fix,
            outcome=entry.outcome if self.outcome is None else self.outcome,
            notes=entry.notes if self.notes is None else self.notes,
        )


def now_utc() -> str:
    """The current time as the runbook writes it."""
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def entry_from_diagnosis(
    diagnosis: Diagnosis,
    evidence: Evidence,
    *,
    cause: str | None = None,
    fix: str | None = None,
    outcome: str | None = None,
    notes: str | None = None,
) -> Entry:
    """The entry for a diagnosed incident; ``cause`` overrides the diagnosis' first cause."""
    cause_id = cause or (diagnosis.causes[0].id if diagnosis.causes else None)
    if cause_id is None:
        raise UsageError(f"nothing wrong was diagnosed in {diagnosis.origin}", "give --cause ID to record it anyway")
    check_cause(cause_id)
    tree = catalog.tree()
    symptom_class = diagnosis.symptom_class
    if diagnosis.healthy:
        symptom_class = tree.causes[cause_id].classes[0]
    check_outcome(outcome)
    redactor = Redactor()
    found = fingerprint(evidence, redactor.redact_text)
    return Entry(
        uid=uuid.uuid4().hex,
        recorded_at=now_utc(),
        symptom_class=symptom_class,
        cause=cause_id,
        evidence=_key_evidence(diagnosis, cause_id),
        fingerprint=found.digest if found else None,
        signatures=found.signatures if found else (),
        config=_launch_fields(evidence.launch),
        gpu=_gpu(evidence.gpu),
        engine=diagnosis.engine,
        engine_version=diagnosis.engine_version,
        driver=diagnosis.stack.driver_version if diagnosis.stack else None,
        cuda_runtime=diagnosis.stack.cuda_runtime if diagnosis.stack else None,
        torch=diagnosis.stack.torch if diagnosis.stack else None,
        fix=fix,
        outcome=outcome,
        notes=notes,
        origin=diagnosis.origin,
    )


def _key_evidence(diagnosis: Diagnosis, cause_id: str) -> tuple[str, ...]:
    """The evidence of the recorded cause, else of the first cause, else of the path through the tree."""
    chosen = next((c for c in diagnosis.causes if c.id == cause_id), None)
    if chosen is None and diagnosis.causes:
        chosen = diagnosis.causes[0]
    items = list(chosen.evidence) if chosen else [e for step in diagnosis.path for e in step.evidence]
    lines = []
    for item in items:
        line = item.citation.render() + (f"  — {item.note}" if item.note else "")
        if line not in lines:
            lines.append(line)
    return tuple(lines[:MAX_EVIDENCE_LINES])


def _launch_fields(launch: LaunchConfig | None) -> dict[str, str]:
    """The launch arguments that were set, as text; environment variables as ``env.NAME``."""
    if launch is None:
        return {}
    config = {
        f.name: str(getattr(launch, f.name))
        for f in dataclasses.fields(launch)
        if f.name not in _LAUNCH_SKIP and getattr(launch, f.name) is not None
    }
    config.update({f"env.{name}": value for name, value in sorted(launch.env.items())})
    return config


def _gpu(gpu: GpuFacts | None) -> str | None:
    """``2 x NVIDIA A100-SXM4-80GB (driver 550.54.15, CUDA 12.4)`` from what nvidia-smi said."""
    if gpu is None:
        return None
    by_gpu = {s.index if s.index is not None else i: s.name for i, s in enumerate(gpu.snapshot or gpu.samples)}
    names = Counter(name for name in by_gpu.values() if name)
    text = ", ".join(f"{n} x {name}" if n > 1 else name for name, n in names.items())
    versions = []
    if gpu.driver_version:
        versions.append(f"driver {gpu.driver_version}")
    if gpu.cuda_version:
        versions.append(f"CUDA {gpu.cuda_version}")
    if versions:
        text = f"{text} ({', '.join(versions)})" if text else ", ".join(versions)
    return text or None


def redacted(entry: Entry, redactor: Redactor) -> Entry:
    """``entry`` with every free-text field redacted, one-line fields kept on one line, blanks as None."""

    def line(text: str | None) -> str | None:
        if text is None:
            return None
        return " ".join(redactor.redact_text(text).splitlines()).strip() or None

    def block(text: str | None) -> str | None:
        if text is None:
            return None
        lines = [part.rstrip() for part in redactor.redact_text(text).splitlines()]
        return "\n".join(lines).strip("\n") or None

    return dataclasses.replace(
        entry,
        evidence=tuple(e for e in (line(e) for e in entry.evidence) if e),
        config={key: line(value) or "" for key, value in redactor.redact_env(entry.config).items()},
        gpu=line(entry.gpu),
        engine=line(entry.engine),
        engine_version=line(entry.engine_version),
        driver=line(entry.driver),
        cuda_runtime=line(entry.cuda_runtime),
        torch=line(entry.torch),
        fix=block(entry.fix),
        outcome=block(entry.outcome),
        notes=block(entry.notes),
        origin=line(entry.origin),
    )
