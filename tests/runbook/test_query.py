"""The search query: words, the phrases of synonyms.yaml, error families."""

from __future__ import annotations

from llmtriage import catalog
from llmtriage.runbook import query


def test_a_phrase_of_synonyms_yaml_is_one_term_with_its_group() -> None:
    (oom,) = query.parse("Out-of-memory")
    assert oom.phrases[0] == ("out", "of", "memory") and ("oom",) in oom.phrases
    assert query.parse("OOM")[0].phrases[0] == ("oom",)
    assert {p for t in query.parse("oom") for p in t.phrases} == set(oom.phrases)
    assert oom.fts_query.startswith('"out of memory" OR "oom"')


def test_other_words_are_terms_of_their_own() -> None:
    terms = query.parse("startup oom, port 8000!")
    assert [t.phrases[0] for t in terms] == [("startup",), ("oom",), ("port",), ("8000",)]
    assert query.parse(" ?! ") == []
    (port,) = query.parse("port in use")
    assert port.phrases[1] == ("address", "already", "in", "use")


def test_a_term_that_names_a_family_brings_its_signatures() -> None:
    oom_family = {s.id for s in catalog.signatures() if s.family == "oom"}
    assert oom_family and query.parse("out of memory")[0].signature_ids == oom_family
    model_path = {s.id for s in catalog.signatures() if s.family == "model_path"}
    assert model_path and query.parse("model_path")[0].signature_ids == model_path
    assert query.parse("memory")[0].signature_ids == set()


def test_synonyms_yaml_is_well_formed() -> None:
    table = query.synonyms()
    assert all(phrase in group and all(w == w.lower() for w in phrase) for phrase, group in table.items())
