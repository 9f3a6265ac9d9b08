"""Accuracy on the real incidents: every case, laid out as a bundle, gets its class and its known cause first."""

from __future__ import annotations

from pathlib import Path

import pytest

from llmtriage.diagnose.engine import diagnose
from llmtriage.evidence.bundle import read_evidence

from ..conftest import INCIDENTS, incident_bundle, load_incident


@pytest.mark.parametrize("path", INCIDENTS, ids=[p.stem for p in INCIDENTS])
def test_incident_class_and_cause(path: Path, tmp_path: Path) -> None:
    incident = load_incident(path)
    result = diagnose(read_evidence(incident_bundle(incident, tmp_path)))
    assert result.symptom_class == incident["symptom_class"], [(s.question_id, s.answer) for s in result.path]
    cause = incident["cause"]
    if cause.startswith("other:"):
        return
    assert result.causes, "no cause ranked"
    assert result.causes[0].id == cause, [(c.id, round(c.confidence, 2)) for c in result.causes]
    assert result.causes[0].evidence, "the first cause cites no evidence"


def test_the_incident_set_is_all_there() -> None:
    assert len(INCIDENTS) == 21
