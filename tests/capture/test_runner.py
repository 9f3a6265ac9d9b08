"""The command-runner seam: real commands within their limits, and replayed recordings."""

from __future__ import annotations

import shutil
import threading
import time
from pathlib import Path

import pytest

from llmtriage.capture.collector import Context
from llmtriage.capture.fetch import DeadlineFetcher
from llmtriage.capture.manifest import SourceRow, Status
from llmtriage.capture.nvml import Nvml
from llmtriage.capture.plan import CapturePlan
from llmtriage.capture.runner import Limits, Recording, ReplayRunner, SubprocessRunner
from llmtriage.capture.writer import BundleWriter
from llmtriage.redact import Redactor

from .conftest import recorded

LIMITS = Limits(timeout_s=10.0, max_bytes=1 << 20)


def test_exit_code_stdout_and_stderr() -> None:
    result = SubprocessRunner().run(["sh", "-c", "echo out; echo err >&2; exit 3"], LIMITS, threading.Event())
    assert (result.exit_code, result.stdout, result.stderr) == (3, b"out\n", b"err\n")
    assert not result.ok
    assert result.why() == "exit code 3: err"


def test_merged_stderr_keeps_the_order() -> None:
    argv = ["sh", "-c", "echo one; echo two >&2; echo three"]
    result = SubprocessRunner().run(argv, LIMITS, threading.Event(), merge_stderr=True)
    assert result.ok and result.stdout == b"one\ntwo\nthree\n" and result.stderr == b""


def test_timeout_kills_the_command() -> None:
    started = time.monotonic()
    result = SubprocessRunner().run(["sleep", "30"], Limits(timeout_s=0.3, max_bytes=1024), threading.Event())
    assert result.timed_out and result.exit_code is None
    assert time.monotonic() - started < 5
    assert result.why().startswith("timed out after")


def test_output_cap_truncates_and_stops_the_command() -> None:
    result = SubprocessRunner().run(["yes", "llmtriage"], Limits(timeout_s=10, max_bytes=1000), threading.Event())
    assert result.truncated and len(result.stdout) == 1000
    assert result.duration_s < 5


def test_stop_ends_a_running_command() -> None:
    stop = threading.Event()
    threading.Timer(0.3, stop.set).start()
    started = time.monotonic()
    result = SubprocessRunner().run(["sleep", "30"], LIMITS, stop)
    assert result.interrupted and time.monotonic() - started < 5
    assert result.why() == "stopped: the capture was interrupted"


@pytest.mark.skipif(shutil.which("nvidia-smi") is not None, reason="this host has nvidia-smi")
def test_missing_program_is_a_result_not_an_exception() -> None:
    result = SubprocessRunner().run(["nvidia-smi"], LIMITS, threading.Event())
    assert result.start_error == "nvidia-smi: command not found" and result.exit_code is None
    assert result.why() == "nvidia-smi: command not found"


def test_replay_matches_the_longest_prefix_and_records_calls() -> None:
    runner = ReplayRunner(
        {
            ("journalctl", "*"): recorded("journalctl-k-no-journal"),
            ("docker", "logs", "*"): recorded("docker-logs-no-daemon"),
        }
    )
    result = runner.run(["docker", "logs", "--tail", "10", "x"], LIMITS, threading.Event(), merge_stderr=True)
    assert result.exit_code == 1
    assert (
        result.why()
        == "exit code 1: Cannot connect to the Docker daemon at unix:///var/run/docker.sock. Is the docker daemon running?"
    )
    assert runner.run(["nvidia-smi"], LIMITS, threading.Event()).start_error == "nvidia-smi: command not found"
    assert runner.calls == [("docker", "logs", "--tail", "10", "x"), ("nvidia-smi",)]


def test_replay_applies_the_output_cap_and_the_stop() -> None:
    runner = ReplayRunner({("yes",): Recording(stdout=b"y\n" * 100)})
    capped = runner.run(["yes"], Limits(timeout_s=1, max_bytes=10), threading.Event())
    assert capped.truncated and capped.stdout == b"y\n" * 5
    stop = threading.Event()
    stop.set()
    assert runner.run(["yes"], LIMITS, stop).interrupted


def test_a_looping_command_that_reaches_its_limit_is_not_a_failure(tmp_path: Path) -> None:
    # How `nvidia-smi --query-gpu ... -lms MS` ends: killed at the end of the capture's duration, output kept.
    redactor = Redactor()
    ctx = Context(
        plan=CapturePlan(out_dir=tmp_path),
        runner=SubprocessRunner(),
        fetcher=DeadlineFetcher(),
        nvml=Nvml(),
        writer=BundleWriter(tmp_path / "b", redactor, 1 << 20),
        stop=threading.Event(),
        proc_root=Path("/proc"),
        report=lambda _: None,
    )
    row = SourceRow("gpu.samples")
    loop = ["sh", "-c", "while true; do echo sample; sleep 0.05; done"]
    result = ctx.run(row, loop, Limits(timeout_s=0.5, max_bytes=1 << 20), looping=True)
    assert result.timed_out and result.stdout.startswith(b"sample\nsample\n")
    assert (row.commands[0].status, row.commands[0].reason) == (Status.ok, None)
    ctx.run(row, loop, Limits(timeout_s=0.3, max_bytes=1 << 20))
    assert row.commands[1].status is Status.failed and (row.commands[1].reason or "").startswith("timed out")
