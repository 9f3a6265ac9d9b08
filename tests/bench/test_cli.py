"""``llmtriage bench`` and ``bench compare`` as a user runs them: a real process against a real server."""

from __future__ import annotations

import csv
import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from llmtriage.bench.model import BenchConfig
from llmtriage.bench.plan import RequestFactory, parse_mix
from llmtriage.cli import main
from llmtriage.evidence.bundle import read_evidence

from .servers import Behaviour, StreamServer, in_thread
from .test_run import closed_port

ENV = {**os.environ, "COLUMNS": "200"}


def llmtriage(*args: str | Path, timeout: float = 60) -> subprocess.CompletedProcess[str]:
    cmd = [sys.executable, "-m", "llmtriage", *map(str, args)]
    return subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, env=ENV)


def test_run_writes_result_and_csv_and_compare_shows_the_change(tmp_path: Path) -> None:
    runs = {}
    for name, ttft in (("fast", 0.0), ("slow", 0.08)):
        with in_thread(StreamServer(Behaviour(ttft_s=ttft))) as url:
            out = tmp_path / name
            args = ["--base-url", url + "/v1", "--concurrency", "2", "--requests", "6", "--warmup", "2"]
            args += ["--max-tokens", "8", "--label", name, "--out", str(out), "--slo", "ttft=50ms,tpot=100ms"]
            proc = llmtriage("bench", *args)
        assert proc.returncode == 0, proc.stderr
        assert "TTFT" in proc.stdout and "server mean" in proc.stdout
        data = json.loads((out / "result.json").read_text())
        assert data["schema_version"] == 1 and data["run"]["label"] == name and data["run"]["model"] == "tiny-llama"
        counts = data["summary"]["requests"]
        assert (counts["measured"], counts["completed"], counts["warmup"], counts["failed"]) == (6, 6, 2, 0)
        assert data["server"]["requests_finished"] == 8 and data["config"]["slo"] == {"ttft_ms": 50.0, "tpot_ms": 100.0}
        with (out / "requests.csv").open() as f:
            rows = list(csv.DictReader(f))
        assert len(rows) == 8 and {r["warmup"] for r in rows} == {"0", "1"}
        assert all(len(r["itl_ms"].split()) == 7 and float(r["ttft_ms"]) > 0 for r in rows)
        assert list((out / "scrapes").glob("scrape-*.prom"))
        runs[name] = data
    assert (
        runs["slow"]["summary"]["goodput"]["good_requests"] == 0 < runs["fast"]["summary"]["goodput"]["good_requests"]
    )

    proc = llmtriage("bench", "compare", tmp_path / "fast", tmp_path / "slow" / "result.json")
    assert proc.returncode == 0, proc.stderr
    line = next(ln for ln in proc.stdout.splitlines() if ln.strip().startswith("TTFT p50"))
    assert line.split()[-1] == "worse"
    proc = llmtriage("bench", "compare", tmp_path / "fast", tmp_path / "slow", "--format", "json")
    figures = {f["name"]: f for f in json.loads(proc.stdout)["figures"]}
    assert figures["TTFT mean"]["b"] > figures["TTFT mean"]["a"] + 50 and figures["TTFT mean"]["verdict"] == "worse"


@pytest.mark.skipif(not hasattr(os, "sched_setaffinity"), reason="CPU affinity is Linux's")
def test_workers_come_from_the_cores_the_process_may_use_and_are_said(tmp_path: Path) -> None:
    one_core = {min(os.sched_getaffinity(0))}
    with in_thread(StreamServer(Behaviour(tokens=2))) as url:
        args = ["bench", "--base-url", url, "--concurrency", "300", "--requests", "300", "--no-scrape"]
        cmd = [sys.executable, "-m", "llmtriage", *args, "--out", str(tmp_path / "auto")]
        pinned = subprocess.run(
            cmd,
            capture_output=True,
            text=True,
            timeout=60,
            env=ENV,
            preexec_fn=lambda: os.sched_setaffinity(0, one_core),
        )
        flagged = llmtriage(*args, "--workers", "2", "--out", tmp_path / "flag", "--format", "json")
    assert pinned.returncode == 0, pinned.stderr
    assert "client workers: 1 (1 usable core, server on this machine)" in pinned.stdout
    data = json.loads((tmp_path / "auto" / "result.json").read_text())
    assert data["config"]["workers"] == 1 == data["client"]["workers"]
    assert data["config"]["worker_choice"] == {
        "workers": 1,
        "usable_cpus": 1,
        "server_local": True,
        "chosen_by": "auto",
        "reason": "1 (1 usable core, server on this machine)",
    }
    assert flagged.returncode == 0, flagged.stderr
    choice = json.loads(flagged.stdout)["config"]["worker_choice"]
    assert (choice["workers"], choice["chosen_by"], choice["usable_cpus"]) == (
        2,
        "--workers",
        len(os.sched_getaffinity(0)),
    )


def test_bundle_reads_bench_result(tmp_path: Path) -> None:
    with in_thread(StreamServer(Behaviour(ttft_s=0.02))) as url:
        out = tmp_path / "run"
        proc = llmtriage(
            "bench", "--base-url", url, "--requests", "4", "--max-tokens", "4", "--out", out, "--no-scrape"
        )
    assert proc.returncode == 0, proc.stderr
    bundle = tmp_path / "bundle"
    (bundle / "bench").mkdir(parents=True)
    shutil.copy(out / "result.json", bundle / "bench" / "result.json")
    evidence = read_evidence(bundle)
    figures = evidence.bench
    assert figures is not None and "bench/result.json" in evidence.read
    assert figures.completed == 4 and figures.ttft_p50_ms is not None and figures.ttft_p50_ms >= 20.0
    assert figures.requested_rate is None and figures.request_throughput is not None
    # Compared with a p95 objective, the p95 itself is used.
    measured = figures.quantiles("ttft")
    assert measured and measured[0][:2] == ("p95", figures.ttft_p95_ms)
    citation = measured[0][2]
    assert citation is not None and citation.source == "bench/result.json" and citation.metric == "summary.ttft_ms.p95"

    (bundle / "bench" / "result.json").write_text("{not json")
    broken = read_evidence(bundle)
    assert broken.bench is None and any(p.source == "bench/result.json" for p in broken.problems)


def fast_first_seed() -> int:
    mixes = (parse_mix("fast:prompt_chars=10,max_tokens=2"), parse_mix("slow:prompt_chars=10,max_tokens=3000"))
    for seed in range(100):
        factory = RequestFactory(BenchConfig(base_url="http://x", classes=mixes, seed=seed))
        if [factory.make(i, False).class_name for i in range(2)] == ["fast", "fast"]:
            return seed
    raise AssertionError("no seed starts with two fast requests")


@pytest.mark.parametrize(
    ("signum", "workers", "exit_code"),
    [(signal.SIGINT, 1, 130), (signal.SIGTERM, 1, 143), (signal.SIGTERM, 2, 143)],
    ids=["ctrl-c", "sigterm", "sigterm-to-the-group-of-2-workers"],
)
def test_a_stop_signal_prints_and_keeps_the_partial_results(
    tmp_path: Path, signum: signal.Signals, workers: int, exit_code: int
) -> None:
    """Ctrl-C, and SIGTERM as CI and `timeout` send it (to the whole process group), stop the run the same way."""
    server = StreamServer(Behaviour(step_s=0.01))
    with in_thread(server) as url:
        cmd = [sys.executable, "-m", "llmtriage", "bench", "--base-url", url, "--concurrency", "2"]
        cmd += ["--requests", "40", "--out", str(tmp_path), "--seed", str(fast_first_seed()), "--workers", str(workers)]
        cmd += ["--mix", "fast:prompt_chars=10,max_tokens=2", "--mix", "slow:prompt_chars=10,max_tokens=3000"]
        proc = subprocess.Popen(
            cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=ENV, start_new_session=True
        )
        deadline = time.monotonic() + 30
        while len(server.bodies) < 4 and time.monotonic() < deadline:
            time.sleep(0.05)
        time.sleep(0.2)
        signalled = time.monotonic()
        os.killpg(proc.pid, signum)
        stdout, stderr = proc.communicate(timeout=30)
        stopped_in_s = time.monotonic() - signalled
    assert proc.returncode == exit_code, stderr
    assert stopped_in_s < 10  # the slow requests stream for 30 s: they were cut short, not waited for
    assert "interrupted" in stderr and "interrupted: partial" in stdout
    data = json.loads((tmp_path / "result.json").read_text())
    counts = data["summary"]["requests"]
    assert data["run"]["interrupted"] is True and counts["completed"] >= 2 and counts["interrupted"] >= 1
    assert "interrupted" in {w["code"] for w in data["warnings"]}
    assert data["client"]["workers"] == workers
    assert not [note for note in data["run"]["notes"] if note.startswith("worker ")]  # none lost to the signal
    with (tmp_path / "requests.csv").open() as f:
        kinds = [row["error_kind"] for row in csv.DictReader(f)]
    assert kinds.count("") == counts["completed"] and kinds.count("interrupted") == counts["interrupted"]


def test_duration_is_a_hard_deadline_against_a_stalled_server(tmp_path: Path) -> None:
    """Requests the server never answers end as timeouts at the end of --duration, not after --timeout (300 s)."""
    server = StreamServer(Behaviour(stall=True))
    with in_thread(server) as url:
        started = time.monotonic()
        proc = llmtriage(
            "bench", "--base-url", url, "--duration", "3", "--concurrency", "2", "--out", tmp_path, timeout=30
        )
        took_s = time.monotonic() - started
    assert proc.returncode == 1, proc.stderr
    assert took_s < 8, f"took {took_s:.1f} s"
    assert len(server.timings) == 2  # both were sent, neither answered
    data = json.loads((tmp_path / "result.json").read_text())
    counts = data["summary"]["requests"]
    assert (counts["measured"], counts["completed"], counts["failed"]) == (2, 0, 2)
    assert data["run"]["interrupted"] is False
    assert [(e["kind"], e["count"]) for e in data["errors"]] == [("timeout", 2)]
    assert "--duration" in data["errors"][0]["message"]


def test_connection_refused_is_one_line_and_exit_4(tmp_path: Path) -> None:
    url = f"http://127.0.0.1:{closed_port()}"
    proc = llmtriage("bench", "--base-url", url, "--requests", "3", "--out", tmp_path)
    assert proc.returncode == 4, proc.stderr
    assert proc.stdout == ""  # no table of dashes
    errors = [line for line in proc.stderr.splitlines() if line.startswith("error:")]
    assert errors == [f"error: could not connect to {url}/v1/completions: Connection refused (3 of 3 requests)"]
    assert "Traceback" not in proc.stderr
    assert json.loads((tmp_path / "result.json").read_text())["errors"][0]["kind"] == "connect"


def test_exit_codes_for_failures_and_unreachable_servers(tmp_path: Path) -> None:
    with in_thread(StreamServer(Behaviour(status=500))) as url:
        proc = llmtriage("bench", "--base-url", url, "--requests", "3", "--out", tmp_path / "a", "--format", "json")
    assert proc.returncode == 1, proc.stderr
    errors = json.loads(proc.stdout)["errors"]
    assert [(e["kind"], e["status"], e["count"]) for e in errors] == [("http", 500, 3)]

    proc = llmtriage(
        "bench", "--base-url", f"http://127.0.0.1:{closed_port()}", "--requests", "2", "--out", tmp_path / "b"
    )
    assert proc.returncode == 4, proc.stderr
    data = json.loads((tmp_path / "b" / "result.json").read_text())
    assert data["errors"][0]["kind"] == "connect" and data["errors"][0]["count"] == 2
    assert data["server"]["scrapes"] == 0 and data["server"]["problems"]


def test_usage_error_is_one_line_and_exit_2() -> None:
    proc = llmtriage("bench", "--requests", "3")
    assert proc.returncode == 2 and "error: give --base-url" in proc.stderr and "Traceback" not in proc.stderr


@pytest.mark.parametrize(
    ("args", "says"),
    [
        (("--base-url", "http://127.0.0.1:9", "--mix", "long"), "bad --mix"),
        (("--base-url", "127.0.0.1:9"), "not an http(s) URL"),
        (("--base-url", "http://127.0.0.1:9", "--workers", "3"), "exceeds --concurrency"),
        (("--base-url", "http://127.0.0.1:9", "--duration", "soon"), "not a duration"),
        (("--base-url", "http://127.0.0.1:9", "--slo", "latency=1s"), "unknown SLO"),
        (("--base-url", "http://127.0.0.1:9", "--prompts", "/nonexistent.jsonl"), "--prompts"),
        (("--base-url", "http://u:p@127.0.0.1:9", "--api-key", "k"), "credentials"),
    ],
)
def test_bad_values_are_usage_errors(
    args: tuple[str, ...], says: str, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setattr(sys, "argv", ["llmtriage", "bench", *args])
    with pytest.raises(SystemExit) as exited:
        main()
    assert exited.value.code == 2 and says in capsys.readouterr().err


def test_explain_metrics_and_help() -> None:
    proc = llmtriage("bench", "--explain-metrics")
    assert proc.returncode == 0 and "genai-perf" in proc.stdout and "inter_token_latency_ms" in proc.stdout
    proc = llmtriage("bench", "--help")
    assert proc.returncode == 0 and "--request-rate" in proc.stdout and "compare" in proc.stdout
