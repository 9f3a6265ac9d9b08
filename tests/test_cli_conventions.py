"""The CLI behaves as a native one: `--version`, shell completion, flags without a value type in help, help and
output wrapped to the terminal and not wrapped at all into a pipe."""

from __future__ import annotations

import os
import pty
import subprocess
import sys
from pathlib import Path

from llmtriage import __version__

COMMAND = [sys.executable, "-m", "llmtriage"]


def piped(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    clean = {k: v for k, v in os.environ.items() if k != "COLUMNS"}
    return subprocess.run([*COMMAND, *args], capture_output=True, text=True, timeout=120, env={**clean, **(env or {})})


def on_a_terminal(*args: str, columns: int) -> str:
    """What the command prints to a terminal ``columns`` wide (a pty: the process sees a TTY)."""
    main, side = pty.openpty()
    env = {**os.environ, "COLUMNS": str(columns), "LINES": "50", "TERM": "xterm"}
    proc = subprocess.Popen([*COMMAND, *args], stdin=side, stdout=side, stderr=side, env=env, close_fds=True)
    os.close(side)
    chunks = []
    while True:
        try:
            chunk = os.read(main, 65536)
        except OSError:  # the child closed the terminal
            break
        if not chunk:
            break
        chunks.append(chunk)
    proc.wait(timeout=60)
    os.close(main)
    return b"".join(chunks).decode("utf-8", "replace").replace("\r\n", "\n")


def test_version() -> None:
    done = piped("--version")
    assert (done.returncode, done.stdout) == (0, f"llmtriage {__version__}\n")


def test_help_into_a_pipe_is_not_wrapped_and_shows_flags_without_a_type() -> None:
    done = piped("serve", "--help")
    assert done.returncode == 0
    lines = done.stdout.splitlines()
    run = next(line for line in lines if line.lstrip().startswith("--run"))
    assert run.split()[:2] == ["--run", "Run"] and "<bool>" not in done.stdout  # a flag takes no value
    target = next(line for line in lines if line.lstrip().startswith("--target"))
    assert len(target) > 120 and target.rstrip().endswith("[default: docker]")  # one line, however long


def test_help_on_a_terminal_wraps_to_its_width() -> None:
    for columns in (60, 140):
        text = on_a_terminal("serve", "--help", columns=columns)
        assert "--target" in text and "<bool>" not in text
        assert max(len(line) for line in text.splitlines()) <= columns
        assert max(len(line) for line in text.splitlines()) > min(columns, 100) - 20  # it uses the width it has


def test_output_into_a_pipe_keeps_long_lines_whole() -> None:
    done = piped("explain", "nccl_or_distributed_init")
    assert done.returncode == 0
    assert any(len(line) > 100 for line in done.stdout.splitlines())


def test_bash_completion_lists_the_commands() -> None:
    env = {"_LLMTRIAGE_COMPLETE": "complete_bash", "COMP_WORDS": "llmtriage dia", "COMP_CWORD": "1"}
    script = str(Path(sys.executable).with_name("llmtriage"))  # the installed command: completion keys on its name
    done = subprocess.run([script], capture_output=True, text=True, timeout=120, env={**os.environ, **env})
    assert done.returncode == 0 and done.stdout.split() == ["diagnose"]
    shown = piped("--show-completion", "bash")  # python -m llmtriage is llmtriage too
    assert shown.returncode == 0 and "_llmtriage_completion" in shown.stdout
