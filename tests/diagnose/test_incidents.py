"""Accuracy on the real incidents of tests/fixtures/incidents, scored as the held-aside measurement scores them
(tests/incidents.py), and the promises that hold case by case: a log that holds a fatal error is never called
healthy, "Is the server up?" always cites what answered it, and a first cause always cites its evidence.

Half A is what the rules were written against, half B was held out while writing them; the two halves must stay
close, or the rules fit lines instead of mechanisms. `scripts/score_incidents.py` prints the same figures.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from llmtriage import catalog
from llmtriage.diagnose.engine import diagnose
from llmtriage.diagnose.scene import Scene
from llmtriage.evidence.bundle import read_evidence

from ..incidents import EXTRA_INCIDENTS, INCIDENTS, half, incident_bundle, load_incident, rates, score_all

CLASS_RATE = 0.90
FIRST_CAUSE_RATE = 0.85
TOP3_RATE = 0.90
HALVES_APART = 0.10
HELD_OUT_FLOOR = 0.85
# The extra set (development data now, with labels of its collector): a floor against regressions.
EXTRA_CLASS_FLOOR = 0.75
EXTRA_FIRST_CAUSE_FLOOR = 0.75


@pytest.fixture(scope="module")
def scores():  # type: ignore[no-untyped-def]
    return score_all()


def test_the_incident_set_is_all_there() -> None:
    assert len(INCIDENTS) == 45
    assert {half(p) for p in INCIDENTS} == {"A", "B"}


def test_class_and_cause_rates(scores) -> None:  # type: ignore[no-untyped-def]
    r = rates(scores)
    misses = [
        (s.name, s.got_class, s.got_causes[:2]) for s in scores if not s.class_ok or (s.cause_scored and not s.first_ok)
    ]
    assert r.class_rate >= CLASS_RATE, misses
    assert r.first_rate >= FIRST_CAUSE_RATE, misses
    assert r.top3_rate >= TOP3_RATE, misses


def test_the_held_out_half_scores_like_the_other(scores) -> None:  # type: ignore[no-untyped-def]
    """The held-out half keeps the floors on its own, and its class rate stays within 10 points of the other's.
    (Its first-cause rate is reported by scripts/score_incidents.py; with 18 scored cases one case is 5.6 points.)"""
    a = rates([s for s in scores if s.half == "A"])
    b = rates([s for s in scores if s.half == "B"])
    assert b.class_rate >= HELD_OUT_FLOOR and b.first_rate >= HELD_OUT_FLOOR, (a, b)
    assert abs(a.class_rate - b.class_rate) <= HALVES_APART, (a, b)


@pytest.mark.parametrize("path", INCIDENTS, ids=[p.stem for p in INCIDENTS])
def test_a_fatal_error_is_never_healthy_and_a_cause_cites_evidence(path: Path, tmp_path: Path) -> None:
    evidence = read_evidence(incident_bundle(load_incident(path), tmp_path))
    fatal = Scene(evidence, catalog.thresholds()).root
    result = diagnose(evidence)
    if fatal is not None:
        assert result.symptom_class != "healthy", fatal.text
    for cause in result.causes[:1]:
        assert cause.evidence, f"{cause.id} cites no evidence"
    up = next((s for s in result.path if s.question_id == "server_up"), None)
    assert up is None or up.evidence, f"'Is the server up? -> {up.answer}' without the line or probe that shows it"


def test_the_extra_incidents_keep_their_floor() -> None:
    r = rates(score_all(EXTRA_INCIDENTS))
    assert r.cases == 114
    assert r.class_rate >= EXTRA_CLASS_FLOOR and r.first_rate >= EXTRA_FIRST_CAUSE_FLOOR, r


@pytest.mark.parametrize("path", EXTRA_INCIDENTS, ids=[p.stem for p in EXTRA_INCIDENTS])
def test_an_extra_incident_with_a_fatal_error_is_never_healthy(path: Path, tmp_path: Path) -> None:
    evidence = read_evidence(incident_bundle(load_incident(path), tmp_path))
    fatal = Scene(evidence, catalog.thresholds()).root
    result = diagnose(evidence)
    if fatal is not None:
        assert result.symptom_class != "healthy", fatal.text
