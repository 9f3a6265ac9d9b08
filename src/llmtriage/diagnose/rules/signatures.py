"""The catalog's own word: a matched signature points at the causes its entry names; a fatal line that no
family explains is still named, as an unrecognized error."""

from __future__ import annotations

import re
from collections.abc import Iterator

from llmtriage import catalog
from llmtriage.diagnose.rules import Signal, rule, signal
from llmtriage.diagnose.scene import STARTUP_PHASES, Scene
from llmtriage.facts import LogEvent

# Families whose signatures are handled with their numbers by the hardware rules.
_HARDWARE_FAMILIES = frozenset({"hardware", "kernel"})
# Families that describe the workload rather than a crash: each occurrence is telling on its own.
_WORKLOAD_FAMILIES = frozenset({"request", "capacity", "offload", "overload"})

ROOT_WEIGHT = 0.85
# A signature naming several causes lists the likeliest first.
NEXT_CAUSE_DISCOUNT = 0.25
WORKLOAD_WEIGHT = 0.6
OTHER_WEIGHT = 0.35

ALL_CLASSES = tuple(c for c in catalog.tree().classes if c != "healthy")


@rule(*ALL_CLASSES)
def catalog_causes(scene: Scene) -> Iterator[Signal]:
    """The root error's causes weigh most; other errors add weaker, independent support."""
    root = scene.root
    if root is not None and root.family not in _HARDWARE_FAMILIES and root.family != "unrecognized":
        for rank, cause in enumerate(root.causes):
            yield signal(
                cause,
                ROOT_WEIGHT * (1 - NEXT_CAUSE_DISCOUNT * rank),
                root.cite(),
                f"root cause line ({root.signature})",
                secondary=rank > 0,
            )
    seen = {root.signature} if root is not None else set()
    for event in scene.events:
        if event.role != "error" or event.signature in seen or event.family in _HARDWARE_FAMILIES:
            continue
        if event.fallback and (event.family == "unrecognized" or scene.served_after(event)):
            continue
        seen.add(event.signature)
        weight = WORKLOAD_WEIGHT if event.family in _WORKLOAD_FAMILIES else OTHER_WEIGHT
        for rank, cause in enumerate(event.causes):
            yield signal(cause, weight, event.cite(), event.signature, secondary=rank > 0)


UNRECOGNIZED_WEIGHT = 0.6
CUT_TRACEBACK_WEIGHT = 0.3
# Families whose lines name no cause on purpose: the rules read the cause from the phase and the numbers.
_RULE_EXPLAINED_FAMILIES = frozenset({"oom"})
# What a search query drops of a message: paths, numbers and ids, which differ between reports.
_VOLATILE_WORD = re.compile(r"[/\\=]|^0x[0-9a-fA-F]+$|^[-+]?[\d.,:%x]+$")
_QUOTES = "'\"`()[]{}<>,;"
QUERY_WORDS = 10


@rule(*ALL_CLASSES)
def unrecognized(scene: Scene) -> Iterator[Signal]:
    """The fatal line no catalogued family explains (or one catalogued with no cause): cite it, place it, and say
    where to search for it."""
    root = scene.root
    if root is None or root.family in _RULE_EXPLAINED_FAMILIES or (root.causes and root.family != "unrecognized"):
        return
    phase = scene.effective_phase(root)
    where = "while starting" if phase in STARTUP_PHASES or not scene.serving_seen else "while serving"
    raised = root.value("frame_func")
    note = f"{_headline(root)}; {where}" + (f", raised in {raised} ({root.value('frame_file')})" if raised else "")
    engine = catalog.engines().get(scene.log.engine or "") or catalog.engines()["vllm"]
    # A traceback cut before its exception line says that something failed, not what: other evidence weighs more.
    weight = UNRECOGNIZED_WEIGHT if root.signature != "traceback_frame" else CUT_TRACEBACK_WEIGHT
    yield signal(
        "unrecognized_error",
        weight,
        root.cite(),
        f"{note}; search {engine.name}'s issues: {engine.issue_search_url(search_query(root))}",
    )


def _headline(event: LogEvent) -> str:
    exception = event.value("exception")
    message = event.value("message") or ""
    return f"{exception}: {message}".strip(": ") if exception else (message or event.signature)


def search_query(event: LogEvent) -> str:
    """The stable words of an error line, for an issue tracker's search box."""
    words = [w.strip(_QUOTES) for w in _headline(event).split()]
    return " ".join([w for w in words if w and not _VOLATILE_WORD.search(w)][:QUERY_WORDS])
