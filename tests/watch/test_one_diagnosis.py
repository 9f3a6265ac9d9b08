"""One diagnosis everywhere: on the same evidence, `watch`, `diagnose`, `report` and `capture` name the same class
and the same first cause, with the same thresholds (the catalog's, as a user runs them).

A simulator on 127.0.0.1 is overloaded until a queue stands: watch catches the breach, diagnoses it and captures a
bundle; diagnose and report read that bundle; capture, run by hand on the same server while the queue stands,
prints its own diagnosis, which diagnose then repeats on capture's bundle.
"""

from __future__ import annotations

import html
import json
import re
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

from llmtriage import catalog
from llmtriage.watch.watcher import Target, WatchConfig

from ..sim.conftest import RunningSim
from .conftest import Load
from .test_watch import SMALL, watch

# Two sequences at a time against forty clients: a queue far over the SLO's 20 within a second.
OVERLOAD = (*SMALL, "--max-num-seqs", "2")


def _cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "llmtriage", *args], capture_output=True, text=True, timeout=180, check=False
    )


def _diagnose(bundle: Path) -> tuple[str, str | None]:
    proc = _cli("diagnose", str(bundle), "--format", "json", "--no-runbook")
    assert proc.returncode in (0, 1, 5), proc.stderr
    data = json.loads(proc.stdout)
    return data["symptom_class"], (data["causes"][0]["id"] if data["causes"] else None)


def _report(bundle: Path, out: Path) -> tuple[str, str | None]:
    proc = _cli("report", str(bundle), "-o", str(out), "--no-runbook")
    assert out.exists(), proc.stderr
    page = out.read_text()
    verdict = page[page.index('id="verdict"') :]
    cls = re.search(r"symptom class <code>([^<]+)</code>", verdict)
    top = re.search(r"Most likely: <strong>[^<]*</strong> <code>([^<]+)</code>", verdict)
    assert cls is not None
    return html.unescape(cls.group(1)), html.unescape(top.group(1)) if top else None


def _capture(sim: RunningSim, out: Path) -> tuple[Path, str, str | None]:
    proc = _cli(
        "capture", "--log-file", str(sim.log_path), "--metrics-url", sim.url + "/metrics",
        "--gpu", sim.url + "/llmtriage/gpu", "--duration", "3s", "--interval", "0.5s", "--out", str(out),
        "--label", "by-hand",
    )  # fmt: skip
    assert proc.returncode in (0, 1, 5), proc.stderr
    bundle = Path(proc.stdout.splitlines()[0])
    printed = proc.stdout
    classes = [c for c in catalog.tree().classes if re.search(rf"^│ {c}\b", printed, re.MULTILINE)]
    causes = re.findall(r"^\s*1\. .*?\[([a-z_]+)\]", printed, re.MULTILINE)
    assert classes, printed
    return bundle, classes[0], causes[0] if causes else None


def test_a_standing_queue_gets_one_verdict_from_every_command(
    start_sim: Callable[..., RunningSim], tmp_path: Path
) -> None:
    sim = start_sim(*OVERLOAD)
    assert sim.wait_ready()
    config = WatchConfig(
        targets=(Target(sim.url + "/metrics", sim.url + "/llmtriage/gpu"),),
        thresholds=catalog.thresholds(),
        interval_s=0.5,
        window_s=4.0,
        capture_dir=tmp_path / "watch",
        capture_duration_s=2.0,
        duration_s=40.0,
    )
    with Load(sim.url, 40, 100, 400):
        state = watch(config, lambda s: any(i.bundle for i in s.incidents))
        by_hand = _capture(sim, tmp_path / "capture")
    incident = next(i for i in state.incidents if i.bundle)
    assert incident.diagnosis is not None and incident.bundle is not None
    watched = (incident.diagnosis.symptom_class, incident.diagnosis.causes[0].id)
    assert watched == ("slow_ttft", "queueing_over_capacity"), incident.diagnosis.causes

    assert _diagnose(incident.bundle) == watched
    assert _report(incident.bundle, tmp_path / "report.html") == watched
    bundle, printed_class, printed_cause = by_hand
    assert (printed_class, printed_cause) == watched
    assert _diagnose(bundle) == watched
