"""``llmtriage runbook add|list|show|search|edit|rm|export|import``, and the runbook ``diagnose`` and ``capture``
consult."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Annotated

import typer
from rich.markup import escape
from rich.table import Table
from rich.text import Text

from llmtriage.cli.app import app, stderr, stdout
from llmtriage.cli.inputs import (
    BUNDLE_HINT,
    CollectEnvOption,
    ConfigOption,
    DmesgOption,
    Inputs,
    LaunchOption,
    LogOption,
    MetricsOption,
    NvidiaSmiOption,
    read_inputs,
)
from llmtriage.diagnose.engine import diagnose as run_diagnosis
from llmtriage.diagnose.model import Diagnosis
from llmtriage.errors import LlmtriageError, NothingReadableError, UsageError
from llmtriage.facts import Evidence
from llmtriage.outfile import write_output
from llmtriage.report.markup import visible
from llmtriage.runbook import markdown
from llmtriage.runbook.entry import Edit, Entry, entry_from_diagnosis
from llmtriage.runbook.match import seen_before
from llmtriage.runbook.store import ENV_VAR, Runbook, default_path

runbook_app = typer.Typer(
    name="runbook",
    help="The incident runbook: symptom → evidence → cause → fix, searchable; `diagnose` says what was seen before.",
    no_args_is_help=True,
)
app.add_typer(runbook_app, name="runbook")

DbOption = Annotated[
    Path | None,
    typer.Option(
        "--db", help=f"The runbook file (default: ${ENV_VAR}, else runbook.sqlite3 in the user data directory)."
    ),
]
OutcomeOption = Annotated[
    str | None,
    typer.Option(
        "--outcome", help='Whether it worked: starts with worked, failed, partial or untested ("worked: ...").'
    ),
]
FIX_CHARS = 60


def _open(db: Path | None) -> Runbook:
    return Runbook.open(db or default_path(), create=True)


def _warn(runbook: Runbook) -> None:
    """Name on stderr each damaged entry that was skipped."""
    for problem in runbook.problems:
        stderr.print(f"[yellow]problem:[/] {escape(visible(problem))}", highlight=False)


def _table(entries: list[Entry]) -> Table:
    table = Table("id", "recorded", "symptom", "cause", "fix", "outcome", box=None, pad_edge=False)
    for e in entries:
        fix = " ".join((e.fix or "").split())
        fix = fix if len(fix) <= FIX_CHARS else fix[: FIX_CHARS - 1] + "…"
        outcome = "seed" if e.seed else e.outcome_kind or ""
        # Text cells: what an entry holds (a note, a fix, an imported file) is shown, never read as markup.
        table.add_row(*(Text(visible(v)) for v in (str(e.id), e.recorded_on, e.symptom_class, e.cause, fix, outcome)))
    return table


@runbook_app.command()
def add(
    bundle: Annotated[
        Path | None, typer.Argument(help="The incident's bundle directory (as `capture` writes it).")
    ] = None,
    cause: Annotated[
        str | None, typer.Option("--cause", help="The cause it turned out to be (default: the diagnosis' first).")
    ] = None,
    fix: Annotated[str | None, typer.Option("--fix", help="What was done.")] = None,
    outcome: OutcomeOption = None,
    note: Annotated[str | None, typer.Option("--note", help="Anything else worth knowing next time.")] = None,
    db: DbOption = None,
    log: LogOption = None,
    nvidia_smi: NvidiaSmiOption = None,
    dmesg: DmesgOption = None,
    metrics: MetricsOption = None,
    launch: LaunchOption = None,
    config: ConfigOption = None,
    collect_env: CollectEnvOption = None,
) -> None:
    """Diagnose a bundle (or loose files, as `diagnose` takes them) and record it: class, cause, key evidence,
    fingerprint, config, GPU, engine, fix, outcome."""
    inputs = Inputs(log, nvidia_smi, dmesg, metrics, launch, config, collect_env)
    evidence = read_inputs(None if bundle is None else bundle.resolve(), inputs)
    if not evidence.any_readable():
        raise NothingReadableError(f"nothing readable in {evidence.origin}", BUNDLE_HINT)
    diagnosis = run_diagnosis(evidence)
    entry = entry_from_diagnosis(diagnosis, evidence, cause=cause, fix=fix, outcome=outcome, notes=note)
    with _open(db) as runbook:
        stored = runbook.add(entry)
    where = f", fingerprint {stored.fingerprint}" if stored.fingerprint else ""
    stdout.print(f"added entry {stored.id}: {stored.symptom_class} → {stored.cause}{where}", highlight=False)


@runbook_app.command("list")
def list_(
    seeds: Annotated[bool, typer.Option("--seeds", help="Also list the seed entries (the classic faults).")] = False,
    db: DbOption = None,
) -> None:
    """List the incidents, oldest first."""
    with _open(db) as runbook:
        entries = runbook.entries(seeds=seeds)
        seed_count = runbook.count(seeds=True)
        _warn(runbook)
    if not entries:
        stdout.print(f"no incidents recorded yet ({seed_count} seed entries: `llmtriage runbook list --seeds`)")
        return
    stdout.print(_table(entries))


@runbook_app.command()
def show(
    entry_id: Annotated[int, typer.Argument(help="The entry's id (see `runbook list`).")], db: DbOption = None
) -> None:
    """Print one entry: symptom → evidence → cause → fix, and its details."""
    with _open(db) as runbook:
        entry = runbook.get(entry_id)
    sys.stdout.write(visible(markdown.entry_markdown(entry)))


@runbook_app.command()
def search(
    text: Annotated[
        str,
        typer.Argument(help="Words to find, all of them: in evidence, fixes, notes, cause ids, symptom classes."),
    ],
    db: DbOption = None,
) -> None:
    """Search the runbook, seed entries included, best match first.

    Words match by stem and with their synonyms ("oom" finds "out of memory"); an error family (oom, bind ...)
    also finds the incidents whose errors belong to it. Exit code 1 when nothing matches.
    """
    with _open(db) as runbook:
        entries = runbook.search(text)
        _warn(runbook)
    if not entries:
        stdout.print(f"nothing in the runbook matches {escape(repr(text))}", highlight=False)
        raise typer.Exit(1)
    stdout.print(_table(entries))


@runbook_app.command()
def edit(
    entry_id: Annotated[int, typer.Argument(help="The entry's id (see `runbook list`).")],
    cause: Annotated[str | None, typer.Option("--cause", help="The cause it turned out to be (a cause id).")] = None,
    fix: Annotated[str | None, typer.Option("--fix", help='What was done ("" clears it).')] = None,
    outcome: OutcomeOption = None,
    notes: Annotated[
        str | None, typer.Option("--notes", "--note", help='Anything else worth knowing next time ("" clears it).')
    ] = None,
    db: DbOption = None,
) -> None:
    """Change an entry's cause, fix, outcome or notes; what is not given stays as it is. Redacted as `add` is."""
    change = Edit(cause=cause, fix=fix, outcome=outcome, notes=notes)
    if not change.changes:
        raise UsageError("nothing to change", "give --cause, --fix, --outcome or --notes")
    with _open(db) as runbook:
        stored = runbook.edit(entry_id, change)
    what = f"entry {entry_id} ({', '.join(change.changes)}): {stored.symptom_class} → {stored.cause}"
    stdout.print(f"edited {escape(visible(what))}", highlight=False)


@runbook_app.command()
def rm(
    entry_id: Annotated[int, typer.Argument(help="The entry's id (see `runbook list`).")],
    yes: Annotated[bool, typer.Option("--yes", "-y", help="Remove it without asking.")] = False,
    db: DbOption = None,
) -> None:
    """Remove one entry, after asking (--yes: without asking; needed where nobody can answer).

    Exit codes: 0 removed, 1 the answer was no, 2 no such entry, or no terminal to ask on and no --yes.
    """
    with _open(db) as runbook:
        entry = runbook.get(entry_id)
        what = visible(f"entry {entry_id}: {entry.recorded_on} {entry.symptom_class} → {entry.cause}")
        if not yes:
            if not sys.stdin.isatty():
                raise UsageError(f"not removing {what} without asking", "give --yes to remove it without a question")
            if not typer.confirm(f"remove {what}?", err=True):
                stderr.print("nothing removed", highlight=False)
                raise typer.Exit(1)
        runbook.remove(entry_id)
    stdout.print(f"removed {escape(what)}", highlight=False)


@runbook_app.command()
def export(
    # Kept, though Markdown is the default: scripts, and the hints of the document's reader, say --markdown.
    as_markdown: Annotated[
        bool, typer.Option("--markdown", help="Write Markdown: the default, and the only format so far.")
    ] = True,
    output: Annotated[Path | None, typer.Option("--output", "-o", help="Write to this file instead of stdout.")] = None,
    db: DbOption = None,
) -> None:
    """Write the runbook as a Markdown document, one entry per incident (seed entries are left out)."""
    with _open(db) as runbook:
        entries = runbook.entries()
        _warn(runbook)
    document = markdown.to_markdown(entries)
    if output is None:
        sys.stdout.write(document)
        return
    write_output(output, document.encode("utf-8"))
    stderr.print(f"wrote {len(entries)} entries to {output}", highlight=False)


@runbook_app.command("import")
def import_(
    file: Annotated[Path, typer.Argument(help="A runbook document, as `runbook export --markdown` writes it.")],
    db: DbOption = None,
) -> None:
    """Read a runbook document back; entries already in the runbook (same uid) are skipped."""
    try:
        text = file.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as e:
        raise UsageError(f"cannot read {file}: {e}", "give a runbook document (Markdown)") from e
    entries = markdown.parse(text, str(file))
    with _open(db) as runbook:
        added = runbook.add_many(entries)
    stdout.print(f"imported {len(added)} entries ({len(entries) - len(added)} already in the runbook)")


def runbook_to_consult(path: Path | None) -> Path | None:
    """The runbook ``diagnose`` and ``capture`` read: ``path`` (UsageError when it is not there), else the
    default one when it exists (None: there is none, and none is ever created here)."""
    target = path or default_path()
    if target.exists():
        return target
    if path is not None:
        raise UsageError(f"--runbook {path}: no such file", "`llmtriage runbook add BUNDLE --db PATH` creates one")
    return None


def consult_runbook(diagnosis: Diagnosis, evidence: Evidence, path: Path | None) -> None:
    """Fill ``diagnosis.seen_before`` from the runbook (:func:`runbook_to_consult`), when there is one.

    A runbook that cannot be read becomes one of the diagnosis' problems, and so does each damaged entry it
    skipped: the diagnosis still stands.
    """
    target = runbook_to_consult(path)
    if target is None or diagnosis.healthy:
        return
    try:
        with Runbook.open(target, create=False) as runbook:
            diagnosis.seen_before = [m.to_dict() for m in seen_before(diagnosis, evidence, runbook)]
            diagnosis.problems.extend(runbook.problems)
    except LlmtriageError as e:
        diagnosis.problems.append(e.message)
