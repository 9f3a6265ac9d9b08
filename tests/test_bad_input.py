"""Bad input gets a clear message and a partial result, never a traceback."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest

from llmtriage.diagnose.engine import diagnose
from llmtriage.evidence.bundle import read_evidence

from .conftest import FIXTURES

LOGS = FIXTURES / "vllm-cpu" / "logs"


def test_binary_junk_everywhere(tmp_path: Path) -> None:
    junk = os.urandom(300_000)
    for rel in (
        "logs/server.log",
        "gpu/nvidia-smi.txt",
        "gpu/samples.csv",
        "kernel/dmesg.txt",
        "metrics/a.prom",
        "config/launch.txt",
        "config/config.json",
        "manifest.json",
    ):
        path = tmp_path / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(junk)
    evidence = read_evidence(tmp_path)
    result = diagnose(evidence)
    # Junk shows no server serving: never a clean bill of health.
    assert result.symptom_class in {"inconclusive", "startup_failure", "hardware_fault"}
    assert "logs/server.log" not in evidence.read
    assert any(p.startswith("logs/server.log: binary data") for p in result.problems)


def test_truncated_log_still_finds_the_root(tmp_path: Path) -> None:
    data = (LOGS / "fault-b-kv-cache-too-small.log").read_bytes()
    cut = data.index(b"estimated maximum model length") + 10
    (tmp_path / "logs").mkdir()
    (tmp_path / "logs" / "server.log").write_bytes(data[:cut])
    result = diagnose(read_evidence(tmp_path))
    assert result.symptom_class == "startup_oom"
    assert result.causes[0].id == "kv_cache_too_small_for_max_model_len"


def test_malformed_metrics_keep_the_good_families(tmp_path: Path) -> None:
    good = (FIXTURES / "vllm-cpu" / "metrics" / "kv-pressure-at-peak-waiting.txt").read_text()
    broken = good.replace(
        'vllm:num_requests_running{engine="0",model_name="tiny-llama"} 3.0', "vllm:num_requests_running{ 3.0"
    )
    (tmp_path / "metrics").mkdir()
    (tmp_path / "metrics" / "scrape-1.prom").write_text(broken)
    evidence = read_evidence(tmp_path)
    assert evidence.metrics is not None
    snap = evidence.metrics.snapshots[0]
    assert "running" not in snap.gauges and snap.gauges["waiting"] == 29
    assert any("malformed" in p.message for p in evidence.metrics.problems)


@pytest.mark.skipif(os.geteuid() == 0, reason="root reads files whatever their mode")
def test_unreadable_file_is_a_problem_not_a_crash(tmp_path: Path) -> None:
    (tmp_path / "logs").mkdir()
    shutil.copy(LOGS / "fault-d-port-in-use.log", tmp_path / "logs" / "server.log")
    secret = tmp_path / "kernel" / "dmesg.txt"
    secret.parent.mkdir()
    secret.write_text("x")
    secret.chmod(0)
    result = diagnose(read_evidence(tmp_path))
    assert result.causes[0].id == "port_in_use"
    assert any("cannot read" in p for p in result.problems)


def test_a_directory_where_a_file_should_be(tmp_path: Path) -> None:
    (tmp_path / "config" / "launch.txt").mkdir(parents=True)
    (tmp_path / "logs").mkdir()
    shutil.copy(LOGS / "fault-d-port-in-use.log", tmp_path / "logs" / "server.log")
    result = diagnose(read_evidence(tmp_path))
    assert result.causes[0].id == "port_in_use"
