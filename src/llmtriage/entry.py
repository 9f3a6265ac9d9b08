"""The console script's entry point: the command line, started with the collector kept off what start-up builds."""

from __future__ import annotations

import contextlib
import gc
import sys


def main() -> None:
    """Run ``llmtriage``.

    Start-up imports typer and the command's module, ~20k objects that live until exit. The collector's passes over
    them, while importing and once more at exit, cost a short command such as `fit` ~12 ms of its ~75. They are
    imported with the collector off and then frozen (never collected); the command itself runs with it on.
    """
    gc.disable()
    from llmtriage.cli import main as run
    from llmtriage.cli.app import COMMANDS, load_commands

    command = next((arg for arg in sys.argv[1:] if not arg.startswith("-")), "")
    if command in COMMANDS:
        # A module that fails to import fails again when the command asks for it, inside run()'s error handling.
        with contextlib.suppress(Exception):
            load_commands(COMMANDS[command])
    gc.freeze()
    gc.enable()
    run()
