"""Hostile and broken input (issue: no leak, no crash, no hang, no overwritten device): each test reproduces one
defect a probe found, and fails without its fix."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]


def llmtriage(
    *args: str, env: dict[str, str] | None = None, timeout: float = 120, stdin: str | None = None
) -> subprocess.CompletedProcess[str]:
    """Run the CLI as a user would, with the environment given on top of this one."""
    return subprocess.run(
        [sys.executable, "-m", "llmtriage", *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        env={**os.environ, **(env or {})},
        input=stdin,
        cwd=REPO,
        check=False,
    )
