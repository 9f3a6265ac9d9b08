"""``llmtriage report`` and ``diagnose --html`` as a user runs them: real processes, files and exit codes."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from .conftest import EXAMPLES, Rendered

KV_PRESSURE = next(p for p in EXAMPLES if p.name == "kv-pressure-slow-ttft")
HEALTHY = next(p for p in EXAMPLES if p.name == "healthy")


@pytest.fixture
def env(tmp_path: Path) -> dict[str, str]:
    """No runbook unless a test names one."""
    base = {k: v for k, v in os.environ.items() if k != "LLMTRIAGE_RUNBOOK"}
    return {**base, "COLUMNS": "200", "XDG_DATA_HOME": str(tmp_path / "xdg")}


def run(env: dict[str, str], *args: str | Path, cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "llmtriage", *map(str, args)],
        capture_output=True,
        text=True,
        timeout=120,
        env=env,
        cwd=cwd,
    )


def test_report_exits_0_once_the_page_is_written(tmp_path: Path, env: dict[str, str]) -> None:
    out = tmp_path / "kv.html"
    proc = run(env, "report", KV_PRESSURE, "-o", out)
    assert proc.returncode == 0, proc.stderr  # a problem was diagnosed, and the page written: the job is done
    assert proc.stdout == ""
    assert f"wrote {out}" in proc.stderr
    assert "slow_ttft" in proc.stderr  # the class, on one line
    page = out.read_text(encoding="utf-8")
    assert "Up, but the first token is slow" in page and 'id="plot-ttft"' in page
    assert oct(out.stat().st_mode & 0o777) == "0o644"
    assert not list(tmp_path.glob(".kv.html.*"))  # the temporary file was renamed
    healthy = run(env, "report", HEALTHY, "--output", tmp_path / "healthy.html")
    assert healthy.returncode == 0, healthy.stderr


def test_report_format_json_prints_the_diagnosis(tmp_path: Path, env: dict[str, str]) -> None:
    proc = run(env, "report", KV_PRESSURE, "-o", tmp_path / "kv.html", "--format", "json")
    assert proc.returncode == 0, proc.stderr
    printed = json.loads(proc.stdout)  # only JSON on stdout
    diagnosed = run(env, "diagnose", KV_PRESSURE, "--format", "json")
    assert diagnosed.returncode == 1  # diagnose still says what it found in its exit code
    expected = json.loads(diagnosed.stdout)
    assert printed["symptom_class"] == expected["symptom_class"] == "slow_ttft"
    assert [c["id"] for c in printed["causes"]] == [c["id"] for c in expected["causes"]]
    page = (tmp_path / "kv.html").read_text(encoding="utf-8")
    assert "<code>slow_ttft</code>" in page[: page.index('id="flowchart"')]


def test_the_default_output_is_report_html(tmp_path: Path, env: dict[str, str]) -> None:
    proc = run(env, "report", KV_PRESSURE, cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert (tmp_path / "report.html").is_file()


def test_diagnose_html_writes_the_same_page(tmp_path: Path, env: dict[str, str], surge: Rendered) -> None:
    proc = run(env, "diagnose", surge.bundle, "--html", tmp_path / "d.html", "--format", "json")
    assert proc.returncode == 1, proc.stderr
    assert proc.stdout.startswith("{")  # stdout stays the JSON document
    assert (tmp_path / "d.html").read_text(encoding="utf-8") == surge.page  # bench run and all
    loose = run(env, "diagnose", "--log", KV_PRESSURE / "logs" / "server.log", "--html", tmp_path / "loose.html")
    assert loose.returncode == 1, loose.stderr
    assert str(KV_PRESSURE / "logs" / "server.log") in (tmp_path / "loose.html").read_text(encoding="utf-8")


def test_seen_before_comes_from_the_runbook(tmp_path: Path, env: dict[str, str]) -> None:
    db = tmp_path / "runbook.sqlite3"
    added = run(
        env,
        "runbook",
        "add",
        KV_PRESSURE,
        "--db",
        db,
        "--fix",
        "<b>lowered</b> --max-num-seqs to 16",
        "--outcome",
        "worked: TTFT p95 back under 2 s",
    )
    assert added.returncode == 0, added.stderr
    proc = run(env, "report", KV_PRESSURE, "-o", tmp_path / "r.html", "--runbook", db)
    assert proc.returncode == 0, proc.stderr
    page = (tmp_path / "r.html").read_text(encoding="utf-8")
    runbook = page[page.index('id="runbook"') : page.index('id="details"')]
    assert "kv_pressure_preemption seen 1 time" in runbook
    assert "&lt;b&gt;lowered&lt;/b&gt; --max-num-seqs to 16" in runbook and "<b>lowered" not in runbook
    no_runbook = run(env, "report", KV_PRESSURE, "-o", tmp_path / "n.html", "--runbook", db, "--no-runbook")
    assert "No match in the runbook" in (tmp_path / "n.html").read_text(encoding="utf-8")
    assert no_runbook.returncode == 0


def test_usage_errors(tmp_path: Path, env: dict[str, str]) -> None:
    not_dir = run(env, "report", tmp_path / "nope", "-o", tmp_path / "r.html")
    assert not_dir.returncode == 2 and "not a directory" in not_dir.stderr
    (tmp_path / "empty").mkdir()
    empty = run(env, "report", tmp_path / "empty", "-o", tmp_path / "r.html")
    assert empty.returncode == 3 and "nothing readable" in empty.stderr
    unwritable = run(env, "report", KV_PRESSURE, "-o", tmp_path / "missing-dir" / "r.html")
    assert unwritable.returncode == 2
    assert "cannot write" in unwritable.stderr and "Traceback" not in unwritable.stderr
    assert not (tmp_path / "r.html").exists()
    html_dir = run(env, "diagnose", KV_PRESSURE, "--html", tmp_path)
    assert html_dir.returncode == 2 and "cannot write" in html_dir.stderr
    assert [p.name for p in tmp_path.iterdir() if p.name.endswith(".tmp")] == []
