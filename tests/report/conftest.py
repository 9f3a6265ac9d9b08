"""Bundles for the report tests: the examples, the incidents, and time series built from real recordings."""

from __future__ import annotations

import json
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest

from llmtriage.diagnose.engine import diagnose
from llmtriage.diagnose.model import Diagnosis
from llmtriage.evidence.bundle import read_evidence
from llmtriage.facts import Evidence
from llmtriage.report import html
from llmtriage.report.bench import read_bundle_bench

from ..bench.servers import Behaviour, StreamServer, in_thread
from . import series

REPO = Path(__file__).resolve().parents[2]
EXAMPLES = sorted(p for p in (REPO / "examples").iterdir() if p.is_dir())
SURGE_SECONDS = 180
CAPTURE_SECONDS = 1800  # a 30-minute capture sampled every second


@dataclass
class Rendered:
    """A bundle, what was read from it, its diagnosis and its page."""

    bundle: Path
    evidence: Evidence
    diagnosis: Diagnosis
    page: str


def render(bundle: Path) -> Rendered:
    """What ``llmtriage report BUNDLE --no-runbook`` builds, without a process."""
    evidence = read_evidence(bundle)
    diagnosis = diagnose(evidence)
    return Rendered(bundle, evidence, diagnosis, html.build(diagnosis, evidence, read_bundle_bench(bundle)))


def run_bench(bundle: Path, label: str = "c8") -> Path:
    """A real ``llmtriage bench`` against a real streaming server on 127.0.0.1, written to ``bundle/bench``."""
    with in_thread(StreamServer(Behaviour(ttft_s=0.03, step_s=0.004))) as url:
        argv = ["--base-url", url, "--requests", "60", "--warmup", "4", "--concurrency", "8", "--max-tokens", "32"]
        proc = subprocess.run(
            [sys.executable, "-m", "llmtriage", "bench", *argv, "--out", str(bundle / "bench"), "--label", label],
            capture_output=True,
            text=True,
            timeout=120,
        )
    assert proc.returncode == 0, proc.stderr
    return bundle / "bench"


@pytest.fixture(scope="session")
def surge(tmp_path_factory: pytest.TempPathFactory) -> Rendered:
    """Three minutes at 1 s through a load surge, with a real bench run in bench/."""
    bundle = series.write_bundle(tmp_path_factory.mktemp("surge"), SURGE_SECONDS)
    run_bench(bundle)
    return render(bundle)


@pytest.fixture(scope="session")
def planted(tmp_path_factory: pytest.TempPathFactory) -> Rendered:
    """The surge with HTML planted in the log, the launch line, a metric label, the GPU name and the bench label."""
    bundle = series.write_bundle(tmp_path_factory.mktemp("planted"), SURGE_SECONDS, planted=True)
    result = run_bench(bundle) / "result.json"
    data = json.loads(result.read_text())
    data["run"]["label"] = series.PLANTED  # the bench tidies labels it writes; a hand-edited file need not be tidy
    result.write_text(json.dumps(data))
    return render(bundle)


@pytest.fixture(scope="session")
def capture_30min(tmp_path_factory: pytest.TempPathFactory) -> Rendered:
    """1,800 scrapes and 1,800 GPU samples."""
    return render(series.write_bundle(tmp_path_factory.mktemp("capture"), CAPTURE_SECONDS))
