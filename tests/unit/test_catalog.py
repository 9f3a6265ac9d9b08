"""The catalogs are consistent: every id referenced exists, every group has a home, every question an answer."""

from __future__ import annotations

from dataclasses import fields

from llmtriage import catalog
from llmtriage.diagnose import questions
from llmtriage.facts import STATS_FIELDS, BenchFigures, MemoryReport, MetaFacts, OffloadReport
from llmtriage.parse.logs import _field_value

from ..conftest import DESIGN_CAUSE_IDS

TARGETS = {"memory": MemoryReport, "offload": OffloadReport, "bench": BenchFigures, "meta": MetaFacts}


def test_signature_causes_exist_in_the_tree() -> None:
    tree = catalog.tree()
    for sig in catalog.signatures():
        for cause in sig.causes:
            assert cause in tree.causes, f"{sig.id} names unknown cause {cause}"


def test_every_named_group_lands_in_a_field() -> None:
    for sig in catalog.signatures():
        names = list(sig.regex.groupindex)
        if sig.role == "stats":
            assert all(_field_value(n, "1")[0] in STATS_FIELDS for n in names), sig.id
        elif sig.role == "access":
            assert set(names) == {"method", "path", "status"}, sig.id
        elif sig.target in TARGETS:
            known = {f.name for f in fields(TARGETS[sig.target])}
            missing = [n for n in names if _field_value(n, "1")[0] not in known]
            assert not missing, f"{sig.id}: groups {missing} have no field in {sig.target}"


def test_every_question_has_a_predicate_and_every_class_is_reachable() -> None:
    tree = catalog.tree()
    assert set(tree.questions) == set(questions.PREDICATES)
    reached = {b.symptom_class for q in tree.questions.values() for b in q.branches if b.symptom_class}
    assert reached == set(tree.classes)


def test_design_cause_ids_are_all_present() -> None:
    assert set(DESIGN_CAUSE_IDS) <= set(catalog.tree().causes)


def test_xid_catalog_severity() -> None:
    table = catalog.xids()
    assert table[79].hardware_severe and table[48].hardware_severe and table[94].hardware_severe
    assert table[13].application_fault and not table[13].hardware_severe
    assert 71 in table and 127 in table  # ranges like "70-72,75-77,85,126-135" are expanded
