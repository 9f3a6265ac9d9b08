"""Bundles made by someone else, and loose files that are not what they seem: nothing leaks, nothing hangs, and what
could not be read is said."""

from __future__ import annotations

import gzip
import json
import os
import shutil
import stat
from pathlib import Path

import pytest

from llmtriage.diagnose.engine import diagnose
from llmtriage.evidence.bundle import LooseFiles, read_evidence

from ..conftest import FIXTURES
from .conftest import REPO, llmtriage

PORT_IN_USE = REPO / "examples" / "port-in-use" / "logs" / "server.log"
ROOT_ONLY = pytest.mark.skipif(os.geteuid() != 0, reason="mknod needs root (CI runs as root)")


def _bundle(root: Path) -> Path:
    (root / "logs").mkdir(parents=True)
    (root / "config").mkdir()
    shutil.copy(PORT_IN_USE, root / "logs" / "server.log")
    return root


def test_a_link_out_of_the_bundle_is_not_followed_and_says_so(tmp_path: Path) -> None:
    bundle = _bundle(tmp_path / "b")
    (bundle / "config" / "env.txt").symlink_to("/proc/self/environ")
    secrets = tmp_path / "home" / ".env"
    secrets.parent.mkdir()
    secrets.write_text("AWS_SECRET_ACCESS_KEY=wJalrXUtnFEMIK7MDENGbPxRfiCYEXAMPLEKEYzz\n")
    (bundle / "logs" / "extra.log").symlink_to(secrets)
    out = tmp_path / "r.html"
    proc = llmtriage("report", "--no-runbook", str(bundle), "-o", str(out), env={"MY_SECRET": "hunter2-planted"})
    assert out.exists(), proc.stderr
    page = out.read_text()
    assert "hunter2-planted" not in page and "wJalrXUtnFEMIK7MDENGbPxRfiCYEXAMPLEKEY" not in page
    assert page.count("a link out of the bundle: not followed") == 2


def test_a_secret_inside_the_bundle_is_redacted_when_shown(tmp_path: Path) -> None:
    bundle = _bundle(tmp_path / "b")
    (bundle / "config" / "launch.txt").write_text("vllm serve m --api-key sk-proj-abcdefghijklmnopqrstuvwx1234\n")
    with (bundle / "logs" / "server.log").open("a") as f:
        f.write("ERROR huggingface_hub.errors.GatedRepoError: 401 token hf_aBcDeFgHiJkLmNoPqRsTuVwXyZ01234567 denied\n")
    proc = llmtriage("diagnose", "--no-runbook", str(bundle), "--format", "json")
    assert "sk-proj-abcdefghijklmnop" not in proc.stdout and "hf_aBcDeFgHiJkLmNoPqRsTuVwXyZ" not in proc.stdout
    assert "<redacted:" in proc.stdout


@pytest.mark.parametrize("kind", ["fifo", "dev-zero"])
def test_a_loose_log_that_never_ends_is_refused_not_read(tmp_path: Path, kind: str) -> None:
    if kind == "fifo":
        path = tmp_path / "pipe.log"
        os.mkfifo(path)
    else:
        path = Path("/dev/zero")
    proc = llmtriage("diagnose", "--no-runbook", "--log", str(path), timeout=60)
    assert proc.returncode == 3, proc.stderr
    assert "not a regular file" in " ".join(proc.stderr.split())


def test_many_log_files_are_read_in_near_linear_time(tmp_path: Path) -> None:
    # Each file once re-sorted every event with list.index: 6,000 files ran past 300 s.
    logs = tmp_path / "b" / "logs"
    logs.mkdir(parents=True)
    for i in range(6000):
        (logs / f"s{i:04d}.log").write_text(f"ValueError: No available memory for the cache blocks ({i})\n")
    proc = llmtriage("diagnose", "--no-runbook", str(tmp_path / "b"), "--format", "json", timeout=90)
    assert json.loads(proc.stdout)["symptom_class"] == "startup_oom"


@pytest.mark.parametrize("form", ["empty", "binary", "utf16", "gzip"])
def test_logs_that_are_not_plain_text(tmp_path: Path, form: str) -> None:
    text = PORT_IN_USE.read_bytes()
    path = tmp_path / "server.log"
    if form == "empty":
        path.write_bytes(b"")
    elif form == "binary":
        path.write_bytes(os.urandom(8192))
    elif form == "utf16":
        path.write_bytes(text.decode("utf-8").encode("utf-16"))
    else:
        path = tmp_path / "server.log.gz"
        path.write_bytes(gzip.compress(text))
    evidence = read_evidence(loose=LooseFiles(logs=[path]))
    if form in ("empty", "binary"):
        assert not evidence.read and evidence.problems, "nothing readable, and said why"
        assert llmtriage("diagnose", "--no-runbook", "--log", str(path)).returncode == 3
    else:
        result = diagnose(evidence)
        assert (result.symptom_class, result.causes[0].id) == ("startup_failure", "port_in_use")


def test_a_partial_bundle_is_called_partial(tmp_path: Path) -> None:
    bundle = _bundle(tmp_path / "b")
    (bundle / "manifest.json").write_text(
        json.dumps({"schema_version": 1, "partial": True, "interrupted_by": "SIGTERM"})
    )
    result = diagnose(read_evidence(bundle))
    assert any("a partial bundle: SIGTERM" in p for p in result.problems)


@pytest.mark.parametrize(
    ("config", "problem"),
    [
        ('{"num_hidden_layers": NaN, "hidden_size": Infinity, "num_attention_heads": 32}', "lacks num_hidden_layers"),
        ('{"num_hidden_layers": -32, "hidden_size": 1e400, "num_attention_heads": 32}', "lacks num_hidden_layers"),
        ("[" * 100_000, "nested too deep"),
        ('{"num_hidden_layers": 1' + "1" * 5000 + "}", "a number too long"),
    ],
    ids=["non-finite", "negative-and-overflow", "deep", "long-integer"],
)
def test_a_broken_model_config_is_a_problem_not_a_crash(tmp_path: Path, config: str, problem: str) -> None:
    bundle = _bundle(tmp_path / "b")
    (bundle / "config" / "config.json").write_text(config)
    proc = llmtriage("diagnose", "--no-runbook", str(bundle), "--format", "json")
    assert proc.returncode == 1, proc.stderr  # a problem found, not an internal error (70)
    result = json.loads(proc.stdout)
    assert (result["symptom_class"], result["causes"][0]["id"]) == ("startup_failure", "port_in_use")
    assert any(problem in p for p in result["problems"]), result["problems"]


@ROOT_ONLY
def test_writing_a_report_over_a_device_keeps_the_device(tmp_path: Path) -> None:
    device = tmp_path / "null"
    os.mknod(device, 0o666 | stat.S_IFCHR, os.makedev(1, 3))
    proc = llmtriage("report", "--no-runbook", str(REPO / "examples" / "port-in-use"), "-o", str(device))
    assert "wrote" in proc.stderr, proc.stderr
    assert stat.S_ISCHR(os.stat(device).st_mode)


def test_writing_through_a_symlink_is_refused(tmp_path: Path) -> None:
    target = tmp_path / "elsewhere.html"
    target.write_text("keep me")
    link = tmp_path / "report.html"
    link.symlink_to(target)
    for args in (["report", str(REPO / "examples" / "port-in-use"), "-o", str(link)],
                 ["diagnose", str(REPO / "examples" / "port-in-use"), "--html", str(link)]):  # fmt: skip
        proc = llmtriage(*args, "--no-runbook")
        assert proc.returncode == 2 and "symbolic link" in proc.stderr, proc.stderr
    assert target.read_text() == "keep me" and link.is_symlink()


def test_a_fixture_log_still_reads_the_same(fixtures: Path) -> None:
    # Redacting on read leaves a real recording's diagnosis as it was.
    evidence = read_evidence(loose=LooseFiles(logs=[FIXTURES / "vllm-cpu" / "logs" / "fault-d-port-in-use.log"]))
    assert diagnose(evidence).causes[0].id == "port_in_use"
