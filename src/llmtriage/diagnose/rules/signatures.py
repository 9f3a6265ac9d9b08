"""The catalog's own word: a matched signature points at the causes its entry names."""

from __future__ import annotations

from collections.abc import Iterator

from llmtriage import catalog
from llmtriage.diagnose.rules import Signal, rule, signal
from llmtriage.diagnose.scene import Scene

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
    if root is not None and root.family not in _HARDWARE_FAMILIES:
        for rank, cause in enumerate(root.causes):
            yield signal(
                cause,
                ROOT_WEIGHT * (1 - NEXT_CAUSE_DISCOUNT * rank),
                root.cite(),
                f"root cause line ({root.signature})",
            )
    seen = {root.signature} if root is not None else set()
    for event in scene.events:
        if event.role != "error" or event.signature in seen or event.family in _HARDWARE_FAMILIES:
            continue
        seen.add(event.signature)
        weight = WORKLOAD_WEIGHT if event.family in _WORKLOAD_FAMILIES else OTHER_WEIGHT
        for cause in event.causes:
            yield signal(cause, weight, event.cite(), event.signature)
