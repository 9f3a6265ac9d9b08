"""Cause rules: pure functions of the scene that emit weighted signals for causes.

A rule is registered for the symptom classes it explains; ``signals_for`` runs the rules of one class.
A signal's weight is how strongly one piece of evidence points at a cause; ``rank`` combines them.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass

from llmtriage.diagnose.model import Evidence
from llmtriage.diagnose.scene import Scene
from llmtriage.facts import Citation


@dataclass(frozen=True, slots=True)
class Signal:
    """One piece of evidence pointing at a cause."""

    cause: str
    weight: float
    evidence: Evidence
    # A line's second or later cause: it adds weight, but does not make a hardware cause jump the queue.
    secondary: bool = False


def signal(cause: str, weight: float, citation: Citation | None, note: str = "", *, secondary: bool = False) -> Signal:
    """A signal citing ``citation`` (a placeholder when the source has no line to cite)."""
    return Signal(cause, weight, Evidence(citation or Citation(source="(derived)"), note), secondary)


Rule = Callable[[Scene], Iterable[Signal]]
RULES: list[tuple[frozenset[str], Rule]] = []


def rule(*classes: str) -> Callable[[Rule], Rule]:
    """Register a rule for the symptom classes it explains."""

    def register(fn: Rule) -> Rule:
        RULES.append((frozenset(classes), fn))
        return fn

    return register


def signals_for(scene: Scene, symptom_class: str) -> list[Signal]:
    """Every signal the registered rules of ``symptom_class`` find in ``scene``."""
    found: list[Signal] = []
    for classes, fn in RULES:
        if symptom_class in classes:
            found.extend(fn(scene))
    return found
