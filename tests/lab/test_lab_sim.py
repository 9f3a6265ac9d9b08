"""The lab on the simulator: each classic fault is reproduced, recorded and diagnosed as expected."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from llmtriage.lab.run import make_target, run_scenario
from llmtriage.lab.scenarios import SCENARIOS, scenario


@pytest.mark.parametrize("name", [s.name for s in SCENARIOS])
def test_scenario_on_the_sim(name: str, tmp_path: Path) -> None:
    outcome = run_scenario(scenario(name), make_target("sim", tmp_path / "cache", 20.0, ""), tmp_path)
    assert outcome.status == "matched", outcome.to_dict()
    folder = tmp_path / name
    summary = json.loads((folder / "summary.json").read_text())
    assert summary["observed"]["cause"] in summary["expected"]["causes"]
    (bundle,) = folder.glob("bundle-*")
    manifest = json.loads((bundle / "manifest.json").read_text())
    assert manifest["partial"] is False
    assert (bundle / "logs").is_dir() and (bundle / "gpu" / "samples.csv").exists()
    diagnosis = json.loads((folder / "diagnosis.json").read_text())
    assert diagnosis["symptom_class"] == summary["expected"]["symptom_class"]
    html = (folder / "report.html").read_text()
    assert "<script" not in html and diagnosis["causes"][0]["id"] in html
    if scenario(name).plan_for("sim").load is not None:  # type: ignore[union-attr]
        assert json.loads((bundle / "bench" / "result.json").read_text())["summary"]["requests"]["measured"] > 0
        assert len(list((bundle / "metrics").glob("scrape-*.prom"))) >= 2


def test_scenarios_a_target_cannot_show_are_skipped_with_a_reason(tmp_path: Path) -> None:
    outcome = run_scenario(scenario("throttle"), make_target("vllm-cpu", tmp_path / "cache", 1.0, ""), tmp_path)
    assert outcome.status == "skipped" and "no GPU clocks" in outcome.reason
    assert not (tmp_path / "throttle").exists()


def test_demo_runs_the_three_faults_end_to_end(tmp_path: Path) -> None:
    proc = subprocess.run(
        [sys.executable, "-m", "llmtriage", "demo", "--out", str(tmp_path / "demo")],
        capture_output=True,
        text=True,
        timeout=120,
        env={"COLUMNS": "200", "PATH": "/usr/bin:/bin"},
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert proc.stdout.count("matched") == 3 and "3 of 3 diagnosed as expected" in proc.stdout
    for name in ("startup-oom", "runtime-oom", "prefill-jam"):
        assert (tmp_path / "demo" / name / "report.html").exists()


def test_serve_prints_the_docker_command_and_needs_an_engine_to_run_it() -> None:
    printed = subprocess.run(
        [
            sys.executable,
            "-m",
            "llmtriage",
            "serve",
            "--gpu-mem-util",
            "0.85",
            "--max-num-seqs",
            "64",
            "--max-model-len",
            "8192",
            "--port",
            "8001",
            "--name",
            "vllm-a",
        ],
        capture_output=True,
        text=True,
        timeout=60,
        env={"COLUMNS": "300", "PATH": "/usr/bin:/bin"},
    )
    assert printed.returncode == 0
    line = printed.stdout.strip()
    assert line.startswith("docker run -d --name vllm-a --gpus all")
    assert "-p 8001:8000 vllm/vllm-openai:latest" in line
    assert "--gpu-memory-utilization 0.85 --max-num-seqs 64 --max-model-len 8192" in line
    stop = subprocess.run(
        [sys.executable, "-m", "llmtriage", "serve", "--name", "vllm-a", "--stop"],
        capture_output=True,
        text=True,
        timeout=60,
        env={"PATH": "/usr/bin:/bin"},
    )
    # No Docker engine on this machine: the command is printed, running it is refused with a reason.
    assert "docker rm -f vllm-a" in stop.stdout
    assert stop.returncode == 2 and "cannot run it here" in stop.stderr
