"""The typer application and what every command shares: consoles, output formats, errors to exit codes."""

from __future__ import annotations

import importlib
import json
import os
import shutil
import sys
from enum import StrEnum
from functools import cache
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, NoReturn

import typer
import typer.main
from typer._click import Command, Context, HelpFormatter  # typer vendors click; its groups take these
from typer.core import TyperCommand, TyperGroup

from llmtriage import __version__, strict_json, usercache
from llmtriage.errors import ExitCode, LlmtriageError

if TYPE_CHECKING:
    from rich.console import Console

    from llmtriage.diagnose.model import Diagnosis

UNWRAPPED_COLUMNS = 10_000

# Every command and the module under llmtriage.cli that registers it, in the order `--help` lists them. A module is
# imported only when one of its commands runs, so `llmtriage fit` does not pay for bench's aiohttp.
COMMANDS: dict[str, str] = {
    "capture": "capture",
    "report": "report",
    "alerts": "watch",
    "dashboard": "watch",
    "watch": "watch",
    "diagnose": "diagnose",
    "tree": "diagnose",
    "explain": "diagnose",
    "version": "diagnose",
    "fit": "fit",
    "lab": "lab",
    "demo": "lab",
    "serve": "lab",
    "sim": "sim",
    "bench": "bench",
    "runbook": "runbook",
}


def load_commands(module: str) -> None:
    """Import ``llmtriage.cli.<module>``, which registers its commands on ``app``."""
    importlib.import_module(f"llmtriage.cli.{module}")


def command_summaries() -> dict[str, str]:
    """Each command's help as the listing of `--help` shows it: taken from the modules (all imported) the first
    time, then from the cache until a module of llmtriage.cli changes."""
    entry = usercache.file_key("cli-summaries", Path(__file__).parent.glob("*.py"), __version__)
    cached = usercache.read(entry)
    if cached is not None:
        try:
            summaries = json.loads(cached)
        except ValueError:
            summaries = None
        if isinstance(summaries, dict) and list(summaries) == list(COMMANDS):
            return summaries
    for module in dict.fromkeys(COMMANDS.values()):
        load_commands(module)
    registered = typer.main.get_group(app).commands
    summaries = {name: registered[name].short_help or registered[name].help or "" for name in COMMANDS}
    usercache.write(entry, json.dumps(summaries).encode())
    return summaries


class LazyGroup(TyperGroup):
    """The root group: lists every command of ``COMMANDS`` and imports a command's module when it is asked for."""

    _listing: dict[str, str] | None = None  # the summaries, while the help lists the commands

    def list_commands(self, ctx: Context) -> list[str]:
        return [*COMMANDS, *(name for name in self.commands if name not in COMMANDS)]

    def get_command(self, ctx: Context, cmd_name: str) -> Command | None:
        command = self.commands.get(cmd_name)
        if command is not None or cmd_name not in COMMANDS:
            return command
        if self._listing is not None:
            return TyperCommand(name=cmd_name, help=self._listing[cmd_name], rich_markup_mode=self.rich_markup_mode)
        load_commands(COMMANDS[cmd_name])
        self.commands.update(typer.main.get_group(app).commands)
        return self.commands.get(cmd_name)

    def format_help(self, ctx: Context, formatter: HelpFormatter) -> None:
        # The listing shows summaries only; importing every module for them would cost what laziness saves.
        self._listing = command_summaries()
        try:
            super().format_help(ctx, formatter)
        finally:
            self._listing = None


def help_width() -> int:
    """How wide help text is set: the terminal's width; piped, a width no line reaches, so nothing is wrapped."""
    if sys.stdout.isatty():
        return shutil.get_terminal_size().columns
    return UNWRAPPED_COLUMNS


HELP_WIDTH = help_width()

# Help is click's plain layout: wrapped to the terminal (not at 80 columns), flags without a value type, and no
# import of rich's markdown and syntax highlighting on every `--help`.
app = typer.Typer(
    cls=LazyGroup,
    name="llmtriage",
    help=(
        "Triage for LLM inference servers (vLLM, SGLang, TGI, llama.cpp) that won't start, run out of memory, "
        "or answer slowly. Classify the symptom first, keep the scene, explain with evidence, then change config."
    ),
    no_args_is_help=True,
    rich_markup_mode=None,
    pretty_exceptions_enable=False,
    context_settings={"max_content_width": HELP_WIDTH, "terminal_width": HELP_WIDTH},
)


def _print_version(value: bool) -> None:
    if value:
        print(f"llmtriage {__version__}")
        raise typer.Exit(int(ExitCode.OK))


@app.callback()
def _root(
    version: Annotated[
        bool,
        typer.Option("--version", callback=_print_version, is_eager=True, help="Print the version and exit."),
    ] = False,
) -> None:
    # A group with a callback stays a group while no command module is imported yet.
    pass


@cache
def _console(to_stderr: bool) -> Console:
    from rich.console import Console

    # To a terminal, output wraps to its width; to a pipe or a file (rich would take 80 columns), long lines stay
    # whole unless COLUMNS says otherwise.
    stream = sys.stderr if to_stderr else sys.stdout
    piped = not stream.isatty() and "COLUMNS" not in os.environ
    return Console(stderr=to_stderr, width=UNWRAPPED_COLUMNS if piped else None)


def __getattr__(name: str) -> Console:
    """``stdout`` and ``stderr``, the consoles every command prints with, made on first use: importing rich costs
    more than all of `--help`."""
    if name in ("stdout", "stderr"):
        return _console(name == "stderr")
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


class OutputFormat(StrEnum):
    """Output formats of reports."""

    text = "text"
    json = "json"


def fail(error: LlmtriageError) -> NoReturn:
    """Print one line and a hint, exit with the error's code."""
    from rich.markup import escape

    stderr = _console(True)
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
