"""The CLI as a user runs it: a real process, exit codes, JSON-only stdout, clear errors on bad input."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from importlib import resources
from pathlib import Path

import jsonschema
import pytest

from .conftest import FIXTURES, INCIDENTS, incident_bundle, load_incident

LOGS = FIXTURES / "vllm-cpu" / "logs"
METRICS = FIXTURES / "vllm-cpu" / "metrics"
SCHEMA = json.loads(resources.files("llmtriage").joinpath("schemas/diagnosis.schema.json").read_text())


def run(*args: str | Path) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "COLUMNS": "200"}
    return subprocess.run(
        [sys.executable, "-m", "llmtriage", *map(str, args)], capture_output=True, text=True, timeout=120, env=env
    )


def healthy_bundle(root: Path) -> Path:
    (root / "logs").mkdir(parents=True)
    (root / "metrics").mkdir()
    shutil.copy(LOGS / "startup-ok.log", root / "logs" / "server.log")
    shutil.copy(METRICS / "before-load.txt", root / "metrics" / "scrape-1795961000000.prom")
    shutil.copy(METRICS / "after-load.txt", root / "metrics" / "scrape-1795961030000.prom")
    return root


def test_healthy_bundle_json_contract(tmp_path: Path) -> None:
    proc = run("diagnose", healthy_bundle(tmp_path / "b"), "--format", "json")
    assert proc.returncode == 0, proc.stderr
    data = json.loads(proc.stdout)
    jsonschema.validate(data, SCHEMA)
    assert data["symptom_class"] == "healthy" and data["causes"] == []
    assert data["engine"] == "vllm" and data["engine_version"] == "0.32.0"


@pytest.mark.parametrize("path", INCIDENTS[:6], ids=[p.stem for p in INCIDENTS[:6]])
def test_problem_bundle_json_is_valid_and_exit_1(path: Path, tmp_path: Path) -> None:
    bundle = incident_bundle(load_incident(path), tmp_path / "b")
    proc = run("diagnose", bundle, "--format", "json")
    assert proc.returncode == 1, proc.stderr
    data = json.loads(proc.stdout)
    jsonschema.validate(data, SCHEMA)
    assert data["causes"] and data["causes"][0]["evidence"]


def test_loose_files_text_report() -> None:
    proc = run(
        "diagnose", "--log", LOGS / "fault-b-kv-cache-too-small.log", "--launch", "vllm serve m --max-model-len 2048"
    )
    assert proc.returncode == 1
    assert "startup_oom" in proc.stdout
    assert "kv_cache_too_small_for_max_model_len" in proc.stdout
    assert "fault-b-kv-cache-too-small.log:76" in proc.stdout


def test_usage_errors_exit_2() -> None:
    assert run("diagnose", "/nonexistent/bundle").returncode == 2
    assert run("diagnose").returncode == 2
    assert run("diagnose", "--log", "/nonexistent.log").returncode == 2
    bad_slo = run("diagnose", "--log", LOGS / "startup-ok.log", "--slo", "ttft=fast")
    assert bad_slo.returncode == 2 and "Traceback" not in bad_slo.stderr
    # Fleet mode reads Prometheus alone: files of one server beside it are refused, not silently dropped.
    mixed = run("diagnose", "--prometheus", "http://127.0.0.1:9", "--log", LOGS / "startup-ok.log")
    assert mixed.returncode == 2 and "--log would be ignored" in mixed.stderr
    orphan = run("diagnose", "--log", LOGS / "startup-ok.log", "--selector", '{job="vllm"}')
    assert orphan.returncode == 2 and "--prometheus" in orphan.stderr


def test_empty_directory_is_nothing_readable(tmp_path: Path) -> None:
    proc = run("diagnose", tmp_path, "--format", "json")
    assert proc.returncode == 3
    assert json.loads(proc.stdout)["error"] == "nothing readable"
    assert "Traceback" not in proc.stderr


def test_unreachable_metrics_url_exit_4() -> None:
    proc = run("diagnose", "--metrics", "http://127.0.0.1:9/metrics")
    assert proc.returncode == 4
    assert "error:" in proc.stderr and "Traceback" not in proc.stderr


def test_tree_and_explain() -> None:
    tree = run("tree")
    assert tree.returncode == 0
    for text in ("Is the server up?", "startup_oom", "kv_cache_too_small_for_max_model_len", "engine_stalled"):
        assert text in tree.stdout
    explain = run("explain", "kv_cache_too_small_for_max_model_len")
    assert explain.returncode == 0 and "estimated maximum model length" in explain.stdout
    unknown = run("explain", "no_such_cause")
    assert unknown.returncode == 2 and "known:" in unknown.stderr
