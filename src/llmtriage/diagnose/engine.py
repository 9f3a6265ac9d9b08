"""Walk the tree over the evidence, rank the causes of the class reached, and say what was missing."""

from __future__ import annotations

from collections import defaultdict

from llmtriage import catalog
from llmtriage.catalog import Thresholds
from llmtriage.diagnose import fixes, questions, versions
from llmtriage.diagnose import stack as stack_checks
from llmtriage.diagnose.model import Diagnosis, Evidence, Missing, PathStep, RankedCause
from llmtriage.diagnose.rules import (
    Signal,
    capacity,
    hardware,
    latency,
    runtime,
    signals_for,
    signatures,
    stack,
    startup,
)
from llmtriage.diagnose.scene import Scene
from llmtriage.facts import Evidence as EvidenceFacts
from llmtriage.facts import Problem

# The rule modules register themselves on import; naming them here keeps the registry explicit.
RULE_MODULES = (signatures, hardware, startup, runtime, latency, capacity, stack)

# Classes that name no cause: a healthy server, and evidence that decides nothing.
CAUSELESS_CLASSES = frozenset({"healthy", "inconclusive"})
MIN_CONFIDENCE = 0.15
MAX_EVIDENCE_PER_CAUSE = 6
# A hardware cause at least this confident ranks above every configuration cause.
HARDWARE_PRECEDENCE = 0.5


def walk(scene: Scene) -> tuple[str, list[PathStep]]:
    """Follow the questions from the root to a symptom class."""
    tree = catalog.tree()
    path: list[PathStep] = []
    question_id: str | None = tree.root
    while question_id is not None:
        question = tree.questions[question_id]
        answer = questions.PREDICATES[question_id](scene)
        path.append(PathStep(question_id, question.text, answer.answer, answer.evidence))
        branch = question.branch(answer.answer)
        if branch.symptom_class is not None:
            return branch.symptom_class, path
        question_id = branch.next
    raise catalog.CatalogError("the tree ended without a class")


def rank(
    signals: list[Signal], symptom_class: str, engine: str | None = None, values: dict[str, str] | None = None
) -> list[RankedCause]:
    """Combine signals per cause: confidence = 1 - prod(1 - weight); hardware first when confident.
    Fixes are ``engine``'s own, filled with the ``values`` the evidence knows."""
    tree = catalog.tree()
    by_cause: dict[str, list[Signal]] = defaultdict(list)
    for s in signals:
        by_cause[s.cause].append(s)
    ranked = []
    # Hardware causes the evidence names as such (not only as a line's second guess) rank above the rest.
    first_hardware: set[str] = set()
    for cause_id, cause_signals in by_cause.items():
        info = tree.cause(cause_id)
        if symptom_class not in info.classes and not info.is_hardware:
            continue
        remaining = primary_remaining = 1.0
        evidence: list[Evidence] = []
        for s in sorted(cause_signals, key=lambda s: -s.weight):
            remaining *= 1.0 - s.weight
            if not s.secondary:
                primary_remaining *= 1.0 - s.weight
            if s.evidence not in evidence:
                evidence.append(s.evidence)
        confidence = min(0.99, 1.0 - remaining)
        if confidence < MIN_CONFIDENCE:
            continue
        if info.is_hardware and 1.0 - primary_remaining >= HARDWARE_PRECEDENCE:
            first_hardware.add(cause_id)
        ranked.append(
            RankedCause(
                id=cause_id,
                title=info.title,
                kind=info.kind,
                confidence=confidence,
                evidence=tuple(evidence[:MAX_EVIDENCE_PER_CAUSE]),
                fixes=tuple(fixes.fill(f, values or {}) for f in info.fixes_for(engine)),
            )
        )
    ranked.sort(key=lambda c: (c.id not in first_hardware, -c.confidence, c.id))
    return ranked


def missing_evidence(evidence: EvidenceFacts, symptom_class: str) -> list[Missing]:
    """The sources that were not there and matter for this class, with the command to collect each."""
    present = {
        "logs": evidence.logs is not None and bool(evidence.logs.sources),
        "launch": evidence.launch is not None and evidence.launch.source not in ("", "server log"),
        "nvidia_smi": evidence.gpu is not None
        and bool(evidence.gpu.snapshot or evidence.gpu.samples or evidence.gpu.errors),
        "gpu_performance": evidence.gpu is not None and bool(evidence.gpu.active_reasons),
        "dmesg": evidence.kernel is not None,
        "metrics": evidence.metrics is not None and bool(evidence.metrics.snapshots),
        "model_config": evidence.model is not None,
        "stack": evidence.stack is not None,
    }
    result = []
    for source in catalog.tree().evidence_sources:
        if present.get(source.id, False):
            continue
        if source.classes and symptom_class not in source.classes:
            continue
        result.append(Missing(source=source.what, why=f"no {source.what} in the evidence", collect=source.collect))
    return result


def diagnose(evidence: EvidenceFacts, thresholds: Thresholds | None = None) -> Diagnosis:
    """Classify the symptom, rank its causes with their evidence, and list what was missing."""
    scene = Scene(evidence, thresholds or catalog.thresholds())
    symptom_class, path = walk(scene)
    engine = _engine(evidence)
    causes = (
        []
        if symptom_class in CAUSELESS_CLASSES
        else rank(
            signals_for(scene, symptom_class),
            symptom_class,
            fixes.fix_engine(scene, engine),
            fixes.known_values(scene),
        )
    )
    problems = [f"{p.source}: {p.message}" for p in _all_problems(evidence)]
    engine_version = scene.log.meta.engine_version
    if engine_version is None and engine is not None and scene.stack.engine == engine:
        engine_version = scene.stack.engine_version
    return Diagnosis(
        symptom_class=symptom_class,
        symptom_title=catalog.tree().classes[symptom_class],
        path=path,
        causes=causes,
        missing=missing_evidence(evidence, symptom_class),
        origin=evidence.origin,
        engine=engine,
        engine_version=engine_version,
        inputs=list(evidence.read),
        problems=problems,
        stack=stack_checks.summary(scene.stack),
        version_notes=versions.version_notes(engine, engine_version, symptom_class),
    )


def _engine(evidence: EvidenceFacts) -> str | None:
    if evidence.launch is not None and evidence.launch.engine:
        return evidence.launch.engine
    if evidence.logs is not None and evidence.logs.engine:
        return evidence.logs.engine
    if evidence.metrics is not None and evidence.metrics.latest is not None:
        return evidence.metrics.latest.engine
    return None


def _all_problems(evidence: EvidenceFacts) -> list[Problem]:
    found = list(evidence.problems)
    for part in (evidence.logs, evidence.gpu, evidence.kernel, evidence.metrics):
        if part is not None:
            found.extend(part.problems)
    return found
