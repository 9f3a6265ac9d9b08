"""The ``llmtriage`` command: a thin shell over the library. Only this package prints or exits."""

from __future__ import annotations

import os
import sys

import typer
from rich.markup import escape

from llmtriage.cli import bench as _bench
from llmtriage.cli import capture as _capture
from llmtriage.cli import diagnose as _diagnose
from llmtriage.cli import fit as _fit
from llmtriage.cli import lab as _lab
from llmtriage.cli import report as _report
from llmtriage.cli import runbook as _runbook
from llmtriage.cli import sim as _sim
from llmtriage.cli import watch as _watch
from llmtriage.cli.app import app, fail, stderr
from llmtriage.errors import ExitCode, LlmtriageError

# Each module above registers its commands on `app`; the list is explicit on purpose.
COMMAND_MODULES = (_diagnose, _sim, _runbook, _fit, _capture, _bench, _report, _watch, _lab)


def main() -> None:
    """Console entry point: map errors to exit codes; never show a traceback unless LLMTRIAGE_DEBUG is set."""
    try:
        app()
    except LlmtriageError as e:
        try:
            fail(e)
        except typer.Exit as done:
            sys.exit(done.exit_code)
    except KeyboardInterrupt:
        stderr.print("interrupted")
        sys.exit(130)
    except Exception as e:  # the boundary: a bug must still end in one clear line
        if os.environ.get("LLMTRIAGE_DEBUG"):
            raise
        stderr.print(f"[bold red]internal error:[/] {type(e).__name__}: {escape(str(e))}", highlight=False)
        stderr.print("[dim]hint: rerun with LLMTRIAGE_DEBUG=1 for the traceback, and please report it[/]")
        sys.exit(int(ExitCode.INTERNAL))
