"""Runbook test helpers: real incident bundles, entries diagnosed from them, real SQLite files."""

from __future__ import annotations

import json
from importlib import resources
from pathlib import Path
from typing import Any

from llmtriage.diagnose.engine import diagnose
from llmtriage.evidence.bundle import read_evidence
from llmtriage.runbook.entry import Entry, entry_from_diagnosis

from ..conftest import INCIDENTS, incident_bundle, load_incident

REPO = Path(__file__).resolve().parents[2]
EXAMPLES = REPO / "examples"
SCHEMA: dict[str, Any] = json.loads(
    resources.files("llmtriage").joinpath("schemas/diagnosis.schema.json").read_text(encoding="utf-8")
)


def bundle(prefix: str, root: Path) -> Path:
    """The real incident whose file name starts with ``prefix``, laid out as a bundle under ``root``."""
    path = next(p for p in INCIDENTS if p.name.startswith(prefix))
    return incident_bundle(load_incident(path), root / path.stem)


def edited(source: Path, root: Path, replacements: dict[str, str]) -> Path:
    """A copy of bundle ``source`` with each key of ``replacements`` replaced in every file."""
    for path in source.rglob("*"):
        if path.is_file():
            target = root / path.relative_to(source)
            target.parent.mkdir(parents=True, exist_ok=True)
            text = path.read_text()
            for old, new in replacements.items():
                text = text.replace(old, new)
            target.write_text(text)
    return root


def diagnosed_entry(bundle_dir: Path, **kwargs: str) -> Entry:
    """The entry ``runbook add`` would record for ``bundle_dir``."""
    evidence = read_evidence(bundle_dir)
    return entry_from_diagnosis(diagnose(evidence), evidence, **kwargs)
