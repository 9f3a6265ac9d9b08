"""`llmtriage serve`'s usage errors: the CPU target takes no Docker options, an unknown target is named."""

from __future__ import annotations

import subprocess
import sys


def test_serve_refuses_docker_options_for_the_cpu_target() -> None:
    done = subprocess.run(
        [sys.executable, "-m", "llmtriage", "serve", "--target", "vllm-cpu", "--model", "Qwen/Qwen3-8B"],
        capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert done.returncode == 2 and "serves the tiny generated model" in done.stderr
    done = subprocess.run(
        [sys.executable, "-m", "llmtriage", "serve", "--target", "sglang"], capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 2 and "unknown --target 'sglang'" in done.stderr
