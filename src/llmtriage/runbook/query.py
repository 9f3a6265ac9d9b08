"""What ``runbook search`` looks for: the words of a query, each widened by its synonyms (synonyms.yaml).

A query is a list of terms, and an entry must match every one. A term is a word of the query, or a phrase
of synonyms.yaml standing for its whole group. It matches an entry whose index (symptom class, cause id,
evidence, fix, outcome, notes; word stems) holds one of its phrases, or whose recorded error signatures
belong to an error family the term names (``oom``, ``bind``, ``model_path`` ...). Pure: text in, terms out.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from functools import cache
from pathlib import Path

from llmtriage import catalog

SYNONYMS_SCHEMA_VERSION = 1
_WORD = re.compile(r"\w+")

Phrase = tuple[str, ...]  # lower-case words


@dataclass(frozen=True, slots=True)
class Term:
    """One term of a query: the phrases that count as it (the query's own first, then its synonyms)."""

    phrases: tuple[Phrase, ...]

    @property
    def fts_query(self) -> str:
        """The FTS5 query that finds any of the phrases (each quoted: a phrase, never query syntax)."""
        return " OR ".join('"' + " ".join(phrase) + '"' for phrase in self.phrases)

    @property
    def signature_ids(self) -> frozenset[str]:
        """The ids of the error signatures of each family the term names."""
        families = {"_".join(phrase) for phrase in self.phrases} & catalog.FAMILIES
        return frozenset(s.id for s in catalog.signatures() if s.family in families)


def _words(text: str) -> Phrase:
    return tuple(word.lower() for word in _WORD.findall(text))


@cache
def synonyms() -> dict[Phrase, tuple[Phrase, ...]]:
    """Each phrase of synonyms.yaml → the phrases of its group."""
    data = catalog.load_packaged_yaml(Path(__file__).with_name("synonyms.yaml"))
    if data.get("schema_version") != SYNONYMS_SCHEMA_VERSION:
        raise ValueError(
            f"synonyms.yaml: schema_version {data.get('schema_version')!r}, expected {SYNONYMS_SCHEMA_VERSION}"
        )
    table: dict[Phrase, tuple[Phrase, ...]] = {}
    for group in data["groups"]:
        phrases = tuple(_words(text) for text in group)
        for text, phrase in zip(group, phrases, strict=True):
            if not phrase or phrase in table:
                raise ValueError(f"synonyms.yaml: {text!r} is empty or in two groups")
            table[phrase] = phrases
    return table


def parse(text: str) -> list[Term]:
    """The terms of ``text``: its words, the longest phrase of synonyms.yaml at each place taken as one term."""
    words = _words(text)
    table = synonyms()
    longest = max(len(phrase) for phrase in table)
    terms = []
    at = 0
    while at < len(words):
        for size in range(min(longest, len(words) - at), 0, -1):
            phrase = words[at : at + size]
            if phrase in table:
                terms.append(Term((phrase, *(p for p in table[phrase] if p != phrase))))
                at += size
                break
        else:
            terms.append(Term(((words[at],),)))
            at += 1
    return terms
