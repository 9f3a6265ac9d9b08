"""Terminal rendering of a diagnosis (rich): verdict, path through the tree, causes, fixes, what's missing.

``build`` is pure: it returns renderables; only the CLI prints them. Every string that came from the evidence goes
through :func:`~llmtriage.report.markup.visible`: a log line's escape sequences are shown, not obeyed.
"""

from __future__ import annotations

from rich.console import Group, RenderableType
from rich.panel import Panel
from rich.text import Text
from rich.tree import Tree as RichTree

from llmtriage import catalog
from llmtriage.diagnose.model import INCONCLUSIVE_NOTE, Diagnosis, Evidence
from llmtriage.report.markup import visible

_CLASS_STYLE = {"healthy": "green", "inconclusive": "bold yellow"}


def _evidence_line(evidence: Evidence) -> Text:
    text = Text("• ", style="dim")
    text.append(visible(evidence.citation.render()))
    if evidence.note:
        text.append(f"  — {visible(evidence.note)}", style="italic")
    return text


def build(diagnosis: Diagnosis) -> RenderableType:
    """The whole report as one renderable."""
    style = _CLASS_STYLE.get(diagnosis.symptom_class, "bold red")
    head = Text()
    head.append(diagnosis.symptom_class, style=style)
    head.append(f"  {diagnosis.symptom_title}")
    if diagnosis.engine:
        version = f" {diagnosis.engine_version}" if diagnosis.engine_version else ""
        head.append(visible(f"\nengine: {diagnosis.engine}{version}"), style="dim")
    head.append(visible(f"\nevidence: {diagnosis.origin}"), style="dim")
    if diagnosis.stack is not None:
        for number, stack_line in enumerate(diagnosis.stack.lines()):
            head.append(visible(f"\n{'stack: ' if number == 0 else '       '}{stack_line}"), style="dim")
    parts: list[RenderableType] = [Panel(head, title="llmtriage diagnosis", expand=False)]

    path = RichTree(Text("Path through the tree", style="bold"))
    for step in diagnosis.path:
        node = path.add(Text.assemble((step.question, ""), ("  → ", "dim"), (step.answer, "bold")))
        for evidence in step.evidence[:3]:
            node.add(_evidence_line(evidence))
    parts.append(path)

    if diagnosis.causes:
        parts.append(Text("\nCauses, most likely first", style="bold"))
        for rank, cause in enumerate(diagnosis.causes, start=1):
            title = Text(f"{rank}. ", style="bold")
            title.append(cause.title, style="bold")
            title.append(f"  [{cause.id}]  confidence {cause.confidence:.2f}", style="dim")
            block = RichTree(title)
            evidence_node = block.add(Text("evidence", style="cyan"))
            for evidence in cause.evidence:
                evidence_node.add(_evidence_line(evidence))
            fixes = block.add(Text("fix", style="green"))
            for fix in cause.fixes:
                fixes.add(Text(visible(fix)))
            parts.append(block)
    elif diagnosis.healthy:
        parts.append(Text("\nNothing wrong found.", style="green"))
    elif diagnosis.symptom_class == "inconclusive":
        parts.append(Text(f"\nInconclusive: {INCONCLUSIVE_NOTE}.", style="yellow"))

    if diagnosis.version_notes:
        parts.append(Text("\nKnown regression of this version", style="bold yellow"))
        for note in diagnosis.version_notes:
            parts.append(Text(visible(f"• {note.summary} ({', '.join(note.source)})")))

    if diagnosis.seen_before:
        parts.append(Text("\nSeen before (runbook)", style="bold"))
        for match in diagnosis.seen_before:
            parts.append(Text(visible(f"• {match.get('summary', '')}")))

    if diagnosis.missing:
        parts.append(Text("\nNot in the evidence (collect it next time)", style="bold yellow"))
        for missing in diagnosis.missing:
            line = Text(f"• {missing.source}: ", style="yellow")
            line.append(missing.collect, style="dim")
            parts.append(line)
    if diagnosis.problems:
        parts.append(Text("\nRead with problems", style="bold yellow"))
        for problem in diagnosis.problems:
            parts.append(Text(visible(f"• {problem}"), style="yellow"))
    return Group(*parts)


def build_tree() -> RenderableType:
    """The flowchart itself, for ``llmtriage tree``."""
    tree = catalog.tree()
    root = RichTree(Text("llmtriage diagnostic flowchart", style="bold"))

    def add(node: RichTree, question_id: str) -> None:
        question = tree.questions[question_id]
        qnode = node.add(Text(question.text, style="bold"))
        for branch in question.branches:
            if branch.symptom_class is not None:
                cls = branch.symptom_class
                label = Text.assemble((f"{branch.answer} → ", "dim"), (cls, "bold cyan"))
                leaf = qnode.add(label)
                for cause in tree.causes.values():
                    if (cls in cause.classes and cause.kind != "hardware") or (
                        cls == "hardware_fault" and cause.kind == "hardware"
                    ):
                        leaf.add(Text(f"{cause.id}: {cause.title}"))
            elif branch.next is not None:
                sub = qnode.add(Text(f"{branch.answer}", style="dim"))
                add(sub, branch.next)

    add(root, tree.root)
    root.add(Text("Hardware causes are checked on every path and rank above configuration causes.", style="italic"))
    return root


def build_explain(cause_id: str) -> RenderableType:
    """What signals a cause and how to fix it, for ``llmtriage explain``."""
    cause = catalog.tree().cause(cause_id)
    body = Text()
    body.append(f"{cause.title}\n", style="bold")
    body.append(f"kind: {cause.kind}; symptom classes: {', '.join(cause.classes)}\n\n", style="dim")
    body.append("What signals it\n", style="bold cyan")
    body.append(cause.signals + "\n\n")
    body.append("Fix\n", style="bold green")
    for fix in cause.fixes:
        body.append(f"• {fix}\n")
    sigs = [s for s in catalog.signatures() if cause_id in s.causes]
    if sigs:
        body.append("\nLog signatures that point to it\n", style="bold cyan")
        for sig in sigs:
            body.append(f"• {sig.id}", style="bold")
            body.append(f" ({sig.engine}, {sig.phase}): {sig.example or sig.pattern}\n")
    return Panel(body, title=cause_id, expand=False)
