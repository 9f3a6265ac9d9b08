"""`llmtriage capture` as a user runs it: a real process, the bundle path then the diagnosis, signals."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from llmtriage.evidence.bundle import read_evidence

from .conftest import VLLM_LOGS, LoopbackServer

FAULT_B = VLLM_LOGS / "fault-b-kv-cache-too-small.log"


def command(*args: str | Path) -> list[str]:
    return [sys.executable, "-m", "llmtriage", "capture", *map(str, args)]


def run(*args: str | Path) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "COLUMNS": "200"}
    return subprocess.run(command(*args), capture_output=True, text=True, timeout=120, env=env)


def test_prints_the_bundle_then_its_diagnosis(tmp_path: Path, loopback: LoopbackServer) -> None:
    gpu_url = loopback.base_url + "/llmtriage/gpu"
    proc = run("--log-file", FAULT_B, "--gpu", gpu_url, "--duration", "1s", "--interval", "500ms", "--out", tmp_path)
    assert proc.returncode == 1, proc.stderr
    bundle = Path(proc.stdout.splitlines()[0])
    assert bundle.parent == tmp_path and bundle.name.startswith("fault-b-kv-cache-too-small-")
    assert "startup_oom" in proc.stdout and "kv_cache_too_small_for_max_model_len" in proc.stdout
    assert "✓ logs.file" in proc.stderr and "✓ gpu.samples" in proc.stderr
    manifest = json.loads((bundle / "manifest.json").read_text())
    assert manifest["partial"] is False and manifest["plan"]["gpu"] == gpu_url


def test_no_diagnose_prints_only_the_path(tmp_path: Path) -> None:
    proc = run("--log-file", FAULT_B, "--gpu", "nvidia-smi", "--duration", "0s", "--out", tmp_path, "--no-diagnose")
    assert proc.returncode == 0, proc.stderr
    assert len(proc.stdout.splitlines()) == 1 and Path(proc.stdout.strip()).is_dir()


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT], ids=["SIGTERM", "SIGINT"])
def test_a_signal_leaves_a_partial_readable_bundle(
    tmp_path: Path, loopback: LoopbackServer, sig: signal.Signals
) -> None:
    args: list[str | Path] = [
        "--log-file",
        FAULT_B,
        "--metrics-url",
        loopback.base_url + "/metrics",
        "--gpu",
        "nvidia-smi",
    ]
    args += ["--duration", "60s", "--interval", "200ms", "--out", str(tmp_path), "--no-diagnose"]
    proc = subprocess.Popen(command(*args), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + 30
        while not list(tmp_path.glob(".*.partial-*/metrics/scrape-*.prom")):
            assert time.monotonic() < deadline and proc.poll() is None, "no scrape was written"
            time.sleep(0.1)
        proc.send_signal(sig)
        out, err = proc.communicate(timeout=20)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 0, err
    assert f"capture stopped by {sig.name}" in err
    bundle = Path(out.strip())
    assert [p.name for p in tmp_path.iterdir()] == [bundle.name]
    manifest = json.loads((bundle / "manifest.json").read_text())
    assert manifest["partial"] is True and manifest["interrupted_by"] == sig.name
    assert manifest["duration_s"] < 30
    evidence = read_evidence(bundle)
    assert evidence.logs is not None and evidence.metrics is not None and evidence.metrics.snapshots


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--container", "a", "--pid", "1"], "give one server"),
        (["--gpu", "cuda"], "--gpu cuda: unknown"),
        (["--log-file", "/nonexistent/vllm.log"], "no such file"),
        (["--interval", "0s"], "--interval must be more than 0"),
        (["--max-size", "lots"], "not a size"),
    ],
)
def test_usage_errors(tmp_path: Path, args: list[str], message: str) -> None:
    proc = run(*args, "--out", tmp_path)
    assert proc.returncode == 2 and message in proc.stderr
    assert list(tmp_path.iterdir()) == []
