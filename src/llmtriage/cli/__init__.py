"""The ``llmtriage`` command: a thin shell over the library. Only this package prints or exits."""

from __future__ import annotations

import os
import sys

import typer

from llmtriage.cli.app import app, fail
from llmtriage.errors import ExitCode, LlmtriageError


def main() -> None:
    """Console entry point: map errors to exit codes; never show a traceback unless LLMTRIAGE_DEBUG is set."""
    try:
        app(prog_name="llmtriage")
    except LlmtriageError as e:
        try:
            fail(e)
        except typer.Exit as done:
            sys.exit(done.exit_code)
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        sys.exit(130)
    except Exception as e:  # the boundary: a bug must still end in one clear line
        if os.environ.get("LLMTRIAGE_DEBUG"):
            raise
        from rich.markup import escape

        from llmtriage.cli.app import stderr

        stderr.print(f"[bold red]internal error:[/] {type(e).__name__}: {escape(str(e))}", highlight=False)
        stderr.print("[dim]hint: rerun with LLMTRIAGE_DEBUG=1 for the traceback, and please report it[/]")
        sys.exit(int(ExitCode.INTERNAL))
