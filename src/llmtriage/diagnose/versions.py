"""Engine releases with a known regression (catalog/engine_regressions.yaml): the notes a diagnosis carries when its
engine version lies in a regression's range and its symptom class is the regression's area."""

from __future__ import annotations

import re
from dataclasses import dataclass
from functools import cache

from llmtriage import catalog
from llmtriage.catalog import CatalogError
from llmtriage.diagnose.model import VersionNote

# llama.cpp names its releases by build number: b4409, or "build: 4409 (f8feb4b0)" in its log.
_LLAMA_CPP_BUILD = re.compile(r"^b?(\d+)\b")


@dataclass(frozen=True, slots=True)
class Regression:
    """An engine regression: present from ``introduced`` up to, not including, ``fixed``."""

    engine: str
    introduced: str
    fixed: str
    area: str  # the symptom class it shows as
    note: str
    source: tuple[str, ...]

    def affects(self, engine: str, version: str) -> bool:
        """True when ``version`` of ``engine`` has this regression."""
        at = release_key(engine, version)
        return (
            engine == self.engine
            and bool(at)
            and release_key(engine, self.introduced) <= at < release_key(engine, self.fixed)
        )


def release_key(engine: str, version: str) -> tuple[int, ...]:
    """A version as comparable numbers: ``0.6.3.post1`` -> (0, 6, 3); llama.cpp's ``b4409`` -> (4409,)."""
    text = version.strip().removeprefix("v")
    if engine == "llama_cpp":
        m = _LLAMA_CPP_BUILD.match(text)
        return (int(m.group(1)),) if m else ()
    return catalog.version_tuple(text)[:3]


@cache
def regressions() -> tuple[Regression, ...]:
    """The catalog's regressions; CatalogError for an entry whose versions cannot be compared."""
    known = set(catalog.tree().classes)
    result = []
    for raw in catalog.load_yaml("engine_regressions.yaml")["regressions"]:
        entry = Regression(
            engine=raw["engine"],
            introduced=str(raw["introduced"]),
            fixed=str(raw["fixed"]),
            area=raw["area"],
            note=" ".join(raw["note"].split()),
            source=tuple(raw["source"]),
        )
        lower, upper = release_key(entry.engine, entry.introduced), release_key(entry.engine, entry.fixed)
        if not lower or not upper or lower >= upper or entry.area not in known:
            raise CatalogError(f"engine_regressions.yaml: {entry.engine} {entry.introduced}: bad range or area")
        result.append(entry)
    return tuple(result)


def version_notes(engine: str | None, version: str | None, symptom_class: str) -> list[VersionNote]:
    """The known regressions of ``engine`` ``version`` that show as ``symptom_class``."""
    if engine is None or version is None:
        return []
    return [
        VersionNote(engine, version, r.introduced, r.fixed, r.area, r.note, r.source)
        for r in regressions()
        if r.area == symptom_class and r.affects(engine, version)
    ]
