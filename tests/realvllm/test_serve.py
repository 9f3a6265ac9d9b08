"""`llmtriage serve --target vllm-cpu`: one command starts a real vLLM on the CPU with the tool's own install, says
where it serves and where its venv and log are, and stops it (workers included) on SIGTERM."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
import urllib.request

from llmtriage.evidence.live import health_status
from llmtriage.lab.process import free_port

from .conftest import ROOT, VllmEnv


def test_serve_starts_a_real_vllm_and_stops_it_on_sigterm(vllm_env: VllmEnv) -> None:
    port = free_port()
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "llmtriage",
            "serve",
            "--target",
            "vllm-cpu",
            "--port",
            str(port),
            "--max-model-len",
            "512",
        ],
        cwd=ROOT,  # the lab's cache, .cache/, is where the tests' venv and model already are
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env={**os.environ, "COLUMNS": "200"},
    )
    try:
        assert proc.stdout is not None
        first = proc.stdout.readline()  # printed once /health answers
        assert f"serving tiny-llama at http://127.0.0.1:{port}" in first, (
            first + proc.stderr.read() if proc.stderr else ""
        )
        assert health_status(f"http://127.0.0.1:{port}") == 200
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/v1/models", timeout=10) as response:
            assert b"tiny-llama" in response.read()
        proc.send_signal(signal.SIGTERM)
        _, err = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 0, err
    assert f"vllm-cpu from the venv {ROOT / '.cache' / 'vllm-cpu-venv'}" in " ".join(err.split())
    assert "stopping vLLM" in err
    time.sleep(1)
    assert health_status(f"http://127.0.0.1:{port}") is None  # nothing left listening
