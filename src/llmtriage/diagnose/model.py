"""The diagnosis: symptom class, the path through the tree, ranked causes, what was missing.

Its JSON form (``to_dict``) is the stable, documented schema of ``llmtriage diagnose --format json``
(docs/diagnosis-schema.md, src/llmtriage/schemas/diagnosis.schema.json).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from llmtriage.facts import Citation

SCHEMA_VERSION = 1
INCONCLUSIVE_NOTE = (
    "no line or probe shows the server serving, and none shows it failing: collect the evidence listed below "
    "(the whole server log from its start is the first)"
)


@dataclass(frozen=True, slots=True)
class Evidence:
    """One piece of evidence for a cause or an answer: a citation and why it matters."""

    citation: Citation
    note: str = ""

    def to_dict(self) -> dict[str, Any]:
        """JSON form: only the fields that are known."""
        c = self.citation
        out: dict[str, Any] = {"source": c.source}
        if c.line is not None:
            out["line"] = c.line
        if c.excerpt:
            out["excerpt"] = c.excerpt
        if c.metric is not None:
            out["metric"] = c.metric
            out["value"] = c.value
        if c.threshold:
            out["threshold"] = c.threshold
        if self.note:
            out["note"] = self.note
        return out


@dataclass(frozen=True, slots=True)
class PathStep:
    """One question of the tree and the answer given, with what supports it."""

    question_id: str
    question: str
    answer: str
    evidence: tuple[Evidence, ...] = ()

    def to_dict(self) -> dict[str, Any]:
        """JSON form."""
        return {
            "question_id": self.question_id,
            "question": self.question,
            "answer": self.answer,
            "evidence": [e.to_dict() for e in self.evidence],
        }


@dataclass(frozen=True, slots=True)
class RankedCause:
    """A cause with its confidence, evidence and fixes."""

    id: str
    title: str
    kind: str
    confidence: float
    evidence: tuple[Evidence, ...]
    fixes: tuple[str, ...]

    def to_dict(self) -> dict[str, Any]:
        """JSON form."""
        return {
            "id": self.id,
            "title": self.title,
            "kind": self.kind,
            "confidence": round(self.confidence, 3),
            "evidence": [e.to_dict() for e in self.evidence],
            "fixes": list(self.fixes),
        }


@dataclass(frozen=True, slots=True)
class Missing:
    """Evidence the diagnosis could not see, and the command that collects it."""

    source: str
    why: str
    collect: str

    def to_dict(self) -> dict[str, Any]:
        """JSON form."""
        return {"source": self.source, "why": self.why, "collect": self.collect}


@dataclass(frozen=True, slots=True)
class StackSummary:
    """The software stack in one short block, each part None when no source said it: the driver (with the newest
    CUDA it supports), the CUDA runtime the engine is built with, torch, the engine, and each GPU with its compute
    capability and the features it lacks."""

    driver_version: str | None
    driver_cuda: str | None  # the newest CUDA the driver supports
    cuda_runtime: str | None
    torch: str | None
    engine: str | None
    gpus: tuple[str, ...]

    @property
    def driver(self) -> str | None:
        """The driver as shown: ``550.54.15 (CUDA 12.4)``."""
        if self.driver_cuda is None:
            return self.driver_version
        return f"{self.driver_version or 'unknown'} (CUDA {self.driver_cuda})"

    def lines(self) -> list[str]:
        """The block as text: one line of versions, one line per GPU model."""
        parts = [
            f"driver {self.driver}" if self.driver else "",
            f"CUDA runtime {self.cuda_runtime}" if self.cuda_runtime else "",
            f"torch {self.torch}" if self.torch else "",
            self.engine or "",
        ]
        head = " · ".join(p for p in parts if p)
        return ([head] if head else []) + list(self.gpus)

    def to_dict(self) -> dict[str, Any]:
        """JSON form."""
        return {
            "driver": self.driver,
            "cuda_runtime": self.cuda_runtime,
            "torch": self.torch,
            "engine": self.engine,
            "gpus": list(self.gpus),
        }


@dataclass(frozen=True, slots=True)
class VersionNote:
    """A known regression of the diagnosed engine version in the diagnosed class (catalog/engine_regressions.yaml):
    present from ``introduced`` up to, not including, ``fixed``."""

    engine: str
    version: str
    introduced: str
    fixed: str
    area: str
    note: str
    source: tuple[str, ...]

    @property
    def summary(self) -> str:
        """One line: the version, the range it lies in, what happened and what to do."""
        return f"{self.engine} {self.version} has a known regression ({self.introduced} to {self.fixed}): {self.note}"

    def to_dict(self) -> dict[str, Any]:
        """The ``version_notes`` item of the diagnosis JSON."""
        return {
            "engine": self.engine,
            "version": self.version,
            "introduced": self.introduced,
            "fixed": self.fixed,
            "area": self.area,
            "note": self.note,
            "source": list(self.source),
        }


@dataclass(slots=True)
class Diagnosis:
    """The result of walking the tree over the evidence."""

    symptom_class: str
    symptom_title: str
    path: list[PathStep]
    causes: list[RankedCause]
    missing: list[Missing]
    origin: str
    engine: str | None = None
    engine_version: str | None = None
    inputs: list[str] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)
    seen_before: list[dict[str, Any]] = field(default_factory=list)
    stack: StackSummary | None = None
    version_notes: list[VersionNote] = field(default_factory=list)

    @property
    def healthy(self) -> bool:
        """True when nothing wrong was found."""
        return self.symptom_class == "healthy"

    def to_dict(self) -> dict[str, Any]:
        """The documented JSON schema."""
        return {
            "schema_version": SCHEMA_VERSION,
            "symptom_class": self.symptom_class,
            "symptom_title": self.symptom_title,
            "path": [p.to_dict() for p in self.path],
            "causes": [c.to_dict() for c in self.causes],
            "missing": [m.to_dict() for m in self.missing],
            "engine": self.engine,
            "engine_version": self.engine_version,
            "origin": self.origin,
            "inputs": list(self.inputs),
            "problems": list(self.problems),
            "seen_before": list(self.seen_before),
            "stack": self.stack.to_dict() if self.stack is not None else None,
            "version_notes": [n.to_dict() for n in self.version_notes],
        }
