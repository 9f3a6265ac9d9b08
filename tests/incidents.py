"""The real incidents of tests/fixtures/incidents: laid out as bundles, diagnosed, scored.

Scored as the held-aside measurement does it (tests/fixtures/incidents/README.md): `request_rejected` and
`request_failure` are one class; `also_ok_classes` lists other acceptable classes; a `healthy` case is right
only with no causes; an `other:<id>` cause is left out of the cause scores. The cases are split in two halves
by a hash of their file name, so rules can be written against one half and checked on the other.
"""

from __future__ import annotations

import hashlib
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from llmtriage.diagnose.engine import diagnose
from llmtriage.diagnose.model import Diagnosis
from llmtriage.evidence.bundle import read_evidence

INCIDENT_DIR = Path(__file__).parent / "fixtures" / "incidents"
INCIDENTS = sorted(INCIDENT_DIR.glob("*.yaml"))
# Two more sets collected from public threads while the error families were written; they were used for
# development after a first, untouched score (tests/fixtures/incidents-extra/README.md).
EXTRA_INCIDENTS = sorted((INCIDENT_DIR.parent / "incidents-extra").glob("*.yaml"))

_BUNDLE_PATHS = {
    "logs": "logs/server.log",
    "nvidia_smi": "gpu/nvidia-smi.txt",
    "dmesg": "kernel/dmesg.txt",
    "metrics": "metrics/scrape-0.prom",
}
_ONE_CLASS = {"request_rejected": "request_failure"}


def load_incident(path: Path) -> dict[str, Any]:
    data: dict[str, Any] = yaml.safe_load(path.read_text())
    return data


def incident_bundle(incident: dict[str, Any], root: Path) -> Path:
    """Lay an incident's evidence out as a bundle directory under ``root``."""
    evidence = incident.get("evidence") or {}
    for key, rel in _BUNDLE_PATHS.items():
        if evidence.get(key):
            target = root / rel
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_text(evidence[key])
    if incident.get("launch"):
        target = root / "config" / "launch.txt"
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(incident["launch"])
    return root


def half(path: Path) -> str:
    """'A' (rules were written against it) or 'B' (held out while writing them): a fixed hash of the name."""
    return "A" if hashlib.sha256(path.stem.encode()).digest()[0] % 2 == 0 else "B"


@dataclass(frozen=True, slots=True)
class Score:
    """How one incident's diagnosis compares with its known class and cause."""

    name: str
    half: str
    expected_class: str
    expected_cause: str
    also_ok_classes: frozenset[str]
    got_class: str
    got_causes: tuple[str, ...]

    @property
    def class_ok(self) -> bool:
        if self.expected_class == "healthy":
            return self.got_class == "healthy" and not self.got_causes
        return self.got_class == self.expected_class or self.got_class in self.also_ok_classes

    @property
    def cause_scored(self) -> bool:
        return not self.expected_cause.startswith("other:") and self.expected_class != "healthy"

    @property
    def first_ok(self) -> bool:
        return bool(self.got_causes) and self.got_causes[0] == self.expected_cause

    @property
    def top3_ok(self) -> bool:
        return self.expected_cause in self.got_causes[:3]


def _canonical(cls: str) -> str:
    return _ONE_CLASS.get(cls, cls)


def score_one(path: Path, result: Diagnosis) -> Score:
    incident = load_incident(path)
    return Score(
        name=path.stem,
        half=half(path),
        expected_class=_canonical(incident["symptom_class"]),
        expected_cause=str(incident["cause"]),
        also_ok_classes=frozenset(_canonical(c) for c in incident.get("also_ok_classes") or ()),
        got_class=_canonical(result.symptom_class),
        got_causes=tuple(c.id for c in result.causes),
    )


def diagnose_incident(path: Path, root: Path) -> Diagnosis:
    return diagnose(read_evidence(incident_bundle(load_incident(path), root)))


def score_all(paths: list[Path] | None = None) -> list[Score]:
    scores = []
    with tempfile.TemporaryDirectory() as tmp:
        for path in paths or INCIDENTS:
            scores.append(score_one(path, diagnose_incident(path, Path(tmp) / path.stem)))
    return scores


@dataclass(frozen=True, slots=True)
class Rates:
    cases: int
    class_rate: float
    first_rate: float
    top3_rate: float


def rates(scores: list[Score]) -> Rates:
    scored = [s for s in scores if s.cause_scored]
    n = max(len(scores), 1)
    m = max(len(scored), 1)
    return Rates(
        cases=len(scores),
        class_rate=sum(s.class_ok for s in scores) / n,
        first_rate=sum(s.first_ok for s in scored) / m,
        top3_rate=sum(s.top3_ok for s in scored) / m,
    )
