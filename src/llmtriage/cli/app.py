"""The typer application and what every command shares: consoles, output formats, errors to exit codes."""

from __future__ import annotations

import sys
from enum import StrEnum
from typing import Any, NoReturn

import typer
from rich.console import Console
from rich.markup import escape

from llmtriage import strict_json
from llmtriage.diagnose.model import Diagnosis
from llmtriage.errors import ExitCode, LlmtriageError

app = typer.Typer(
    name="llmtriage",
    help=(
        "Triage for LLM inference servers (vLLM, SGLang, TGI, llama.cpp) that won't start, run out of memory, "
        "or answer slowly. Classify the symptom first, keep the scene, explain with evidence, then change config."
    ),
    no_args_is_help=True,
    add_completion=False,
    rich_markup_mode="rich",
    pretty_exceptions_enable=False,
)

stdout = Console()
stderr = Console(stderr=True)


class OutputFormat(StrEnum):
    """Output formats of reports."""

    text = "text"
    json = "json"


def fail(error: LlmtriageError) -> NoReturn:
    """Print one line and a hint, exit with the error's code."""
    stderr.print(f"[bold red]error:[/] {escape(error.message)}", highlight=False)
    if error.hint:
        stderr.print(f"[dim]hint: {escape(error.hint)}[/]", highlight=False)
    raise typer.Exit(int(error.exit_code))


def print_json(data: dict[str, Any]) -> None:
    """Write ``data`` as the only thing on stdout: strict JSON (a number that is not finite is null, never NaN)."""
    sys.stdout.write(strict_json.dumps(data))


def diagnosis_exit(diagnosis: Diagnosis) -> NoReturn:
    """Exit as a diagnosis says: 0 healthy, 5 inconclusive, 1 a problem."""
    if diagnosis.symptom_class == "healthy":
        raise typer.Exit(int(ExitCode.OK))
    if diagnosis.symptom_class == "inconclusive":
        raise typer.Exit(int(ExitCode.INCONCLUSIVE))
    raise typer.Exit(int(ExitCode.PROBLEM_FOUND))
