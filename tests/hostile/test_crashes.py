"""Crashes a probe found in the side commands (runbook, fit, bench, lab, capture, report of a bench): each bad
input ends in one clear line and a documented exit code, never exit 70 (a bug) and never a hang."""

from __future__ import annotations

import errno
import json
import os
import shutil
import sqlite3
import struct
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from llmtriage.bench import plan
from llmtriage.bench import result as bench_result
from llmtriage.capacity import (
    FitRequest,
    LaunchSettings,
    decode_roofline,
    fit,
    resolve_gpu,
    resolve_model,
    suggest,
)
from llmtriage.capacity.version import default_version
from llmtriage.capture import CapturePlan, GpuMode, LogFile, capture
from llmtriage.capture import writer as capture_writer
from llmtriage.capture.runner import ReplayRunner
from llmtriage.cli import bench as bench_cli
from llmtriage.errors import UnavailableError, UsageError
from llmtriage.evidence.bundle import read_evidence
from llmtriage.lab import targets
from llmtriage.report.bench import read_bundle_bench as report_bench_run

from .conftest import REPO, llmtriage

EXAMPLES = REPO / "examples"
PORT_IN_USE = EXAMPLES / "port-in-use"


def cli(*args: str, timeout: float = 120, stdin: str | None = None) -> subprocess.CompletedProcess[str]:
    """The CLI as a subprocess, on a terminal wide enough that no message is wrapped."""
    return llmtriage(*args, env={"COLUMNS": "1000"}, timeout=timeout, stdin=stdin)


def _clear(proc: object) -> None:
    """No traceback and no internal error in what the command printed."""
    stderr = getattr(proc, "stderr", "")
    assert "Traceback" not in stderr and "internal error" not in stderr, stderr


# ---------------------------------------------------------------- 1, 2: runbook


def test_runbook_show_an_id_past_sqlite_integers_is_no_such_entry(tmp_path: Path) -> None:
    db = tmp_path / "rb.sqlite3"
    for entry_id in ("99999999999999999999", "9223372036854775808", "-99999999999999999999"):
        proc = cli("runbook", "show", "--db", str(db), "--", entry_id)
        _clear(proc)
        assert proc.returncode == 2, proc.stderr
        assert "no runbook entry" in proc.stderr


def test_a_runbook_row_whose_config_is_not_json_is_skipped_with_a_problem(tmp_path: Path) -> None:
    db = tmp_path / "rb.sqlite3"
    added = cli("runbook", "add", str(PORT_IN_USE), "--db", str(db), "--fix", "stopped the stale server")
    assert added.returncode == 0, added.stderr
    again = cli("runbook", "add", str(PORT_IN_USE), "--db", str(db), "--fix", "killed it")
    assert again.returncode == 0, again.stderr
    with sqlite3.connect(db) as conn:
        (bad_id,) = conn.execute("SELECT min(id) FROM incidents WHERE seed = 0").fetchone()
        conn.execute("UPDATE incidents SET config = ? WHERE id = ?", ("{not json", bad_id))
        # Any type fits any SQLite column: bytes where text belongs is damage too.
        conn.execute("UPDATE incidents SET evidence = X'00ff' WHERE seed = 1 AND id = (SELECT min(id) FROM incidents)")
    conn.close()

    proc = cli("diagnose", str(PORT_IN_USE), "--runbook", str(db), "--format", "json")
    _clear(proc)
    assert proc.returncode == 1, proc.stderr
    data = json.loads(proc.stdout)
    assert any(f"entry {bad_id} skipped" in p and "config is not JSON" in p for p in data["problems"])
    (match,) = data["seen_before"]
    assert match["count"] == 1 and match["fix"] == "killed it"

    listed = cli("runbook", "list", "--seeds", "--db", str(db))
    _clear(listed)
    assert listed.returncode == 0 and f"entry {bad_id} skipped" in listed.stderr
    assert "evidence is not text" in listed.stderr
    shown = cli("runbook", "show", str(bad_id), "--db", str(db))
    _clear(shown)
    assert shown.returncode == 4 and "damaged" in shown.stderr


# ---------------------------------------------------------------- 3: fit on a broken model directory

_CONFIG = {
    "architectures": ["LlamaForCausalLM"],
    "num_hidden_layers": 4,
    "hidden_size": 256,
    "num_attention_heads": 8,
    "num_key_value_heads": 4,
    "intermediate_size": 512,
    "vocab_size": 1000,
    "max_position_embeddings": 2048,
    "torch_dtype": "bfloat16",
}
_MOE = {**_CONFIG, "num_local_experts": 8, "num_experts_per_tok": 2}


def _safetensors(header: bytes, length: int | None = None) -> bytes:
    return struct.pack("<Q", len(header) if length is None else length) + header


def _fit_dir(directory: Path) -> str:
    """Fit the model directory as the CLI does: "ok", or the usage error's message."""
    request = FitRequest(resolve_model(str(directory)), resolve_gpu("L4"), LaunchSettings(), default_version())
    try:
        result = suggest(request, fit(request))
        decode_roofline(request, 1, 4096)
    except UsageError as e:
        return e.message
    json.dumps(result.to_dict(), allow_nan=False)
    return "ok"


@pytest.mark.parametrize(
    ("field", "raw"),
    [
        (field, raw)
        for field in ("num_hidden_layers", "hidden_size", "num_attention_heads", "num_key_value_heads", "head_dim")
        for raw in ("NaN", "Infinity", "-Infinity", "1e400", "-1", "0", '"32"', "0.5", "[1]")
    ]
    + [
        (field, raw)
        for field in ("intermediate_size", "vocab_size", "max_position_embeddings", "sliding_window")
        for raw in ("NaN", "Infinity", "-1", "0", '"x"', "1e30")
    ]
    + [("num_hidden_layers", "1e12"), ("missing", "")],
)
def test_fit_on_broken_config_numbers_is_a_usage_error(tmp_path: Path, field: str, raw: str) -> None:
    config = dict(_CONFIG)
    if field == "missing":
        del config["hidden_size"]
        text = json.dumps(config)
    else:
        config[field] = "@"
        text = json.dumps(config).replace('"@"', raw)
    (tmp_path / "config.json").write_text(text)
    try:
        outcome = _fit_dir(tmp_path)
    except UsageError as e:
        outcome = e.message
    assert outcome == "ok" or "config.json" in outcome, outcome


@pytest.mark.timeout(30)
def test_fit_on_a_moe_config_with_a_huge_layer_count_ends(tmp_path: Path) -> None:
    (tmp_path / "config.json").write_text(json.dumps({**_MOE, "num_hidden_layers": 100_000}))
    assert _fit_dir(tmp_path) == "ok"
    (tmp_path / "config.json").write_text(json.dumps({**_MOE, "num_hidden_layers": 10**15}))
    with pytest.raises(UsageError, match="num_hidden_layers"):
        _fit_dir(tmp_path)


@pytest.mark.parametrize(
    ("name", "blob"),
    [
        ("truncated", b"\x01\x02"),
        ("huge header length", struct.pack("<Q", 2**63)),
        ("header past the end", _safetensors(b"{}", 100)),
        ("not JSON", _safetensors(b"\xff\xfe{")),
        ("deeply nested", _safetensors(b"[" * 100_000)),
        ("a list", _safetensors(b"[1, 2]")),
        ("offsets text", _safetensors(b'{"a": {"dtype": "BF16", "data_offsets": ["0", "x"]}}')),
        ("offsets NaN", _safetensors(b'{"a": {"dtype": "BF16", "data_offsets": [0, NaN]}}')),
        ("offsets 1e400", _safetensors(b'{"a": {"dtype": "BF16", "data_offsets": [0, 1e400]}}')),
        ("offsets three", _safetensors(b'{"a": {"dtype": "BF16", "data_offsets": [0, 1, 2]}}')),
        ("offsets null", _safetensors(b'{"a": {"dtype": "BF16", "data_offsets": null}}')),
        ("offsets backwards", _safetensors(b'{"a": {"dtype": "BF16", "data_offsets": [10, 0]}}')),
    ],
)
def test_fit_on_a_malformed_safetensors_header_is_a_usage_error(tmp_path: Path, name: str, blob: bytes) -> None:
    (tmp_path / "config.json").write_text(json.dumps(_CONFIG))
    (tmp_path / "model.safetensors").write_bytes(blob)
    with pytest.raises(UsageError, match="not a safetensors file"):
        resolve_model(str(tmp_path))


@pytest.mark.timeout(30)
def test_fit_never_reads_a_fifo_named_safetensors(tmp_path: Path) -> None:
    (tmp_path / "config.json").write_text(json.dumps(_CONFIG))
    os.mkfifo(tmp_path / "model.safetensors")
    with pytest.raises(UsageError, match="not a regular file"):
        resolve_model(str(tmp_path))


def test_fit_cli_on_broken_model_dirs_exits_2(tmp_path: Path) -> None:
    nan = tmp_path / "nan"
    nan.mkdir()
    (nan / "config.json").write_text(json.dumps({**_CONFIG, "hidden_size": "@"}).replace('"@"', "NaN"))
    header = tmp_path / "header"
    header.mkdir()
    (header / "config.json").write_text(json.dumps(_CONFIG))
    (header / "model.safetensors").write_bytes(_safetensors(b'{"a": {"data_offsets": [0, "x"]}}'))
    for directory in (nan, header):
        proc = cli("fit", "--model", str(directory), "--gpu", "L4")
        _clear(proc)
        assert proc.returncode == 2, proc.stderr


# ---------------------------------------------------------------- 4, 5, 6: bench arguments

UNREACHABLE = "http://127.0.0.1:9"


@pytest.mark.parametrize("value", ["inf", "nan", "-1", "0", "1e400", "-inf", "0.5"])
@pytest.mark.parametrize("key", ["weight", "prompt_chars", "max_tokens"])
def test_bench_mix_values_out_of_range_are_usage_errors(key: str, value: str) -> None:
    items = {"prompt_chars": "100", "max_tokens": "8", "weight": "1"}
    items[key] = value
    text = "a:" + ",".join(f"{k}={v}" for k, v in items.items())
    if key == "weight" and value == "0.5":
        assert plan.parse_mix(text).weight == 0.5
        return
    with pytest.raises(UsageError, match=f"--mix a: {key}"):
        plan.parse_mix(text)


def test_bench_mix_weight_inf_is_a_usage_error_before_any_request(tmp_path: Path) -> None:
    for weight in ("inf", "nan"):
        proc = cli(
            *("bench", "--base-url", UNREACHABLE, "--requests", "2", "--no-scrape", "--out", str(tmp_path / weight)),
            *("--mix", f"a:prompt_chars=10,max_tokens=4,weight={weight}", "--mix", "b:prompt_chars=10,max_tokens=4"),
        )
        _clear(proc)
        assert proc.returncode == 2 and "weight" in proc.stderr, proc.stderr
        assert not (tmp_path / weight).exists()


def test_bench_prompt_chars_beyond_memory_is_a_usage_error() -> None:
    proc = cli("bench", "--base-url", UNREACHABLE, "--prompt-chars", str(10**15), timeout=30)
    _clear(proc)
    assert proc.returncode == 2 and "--prompt-chars" in proc.stderr


@pytest.mark.timeout(60)
def test_bench_prompts_from_a_device_or_fifo_is_refused_unread(tmp_path: Path) -> None:
    fifo = tmp_path / "prompts.fifo"
    os.mkfifo(fifo)
    for source in ("/dev/zero", str(fifo), str(tmp_path)):
        proc = cli("bench", "--base-url", UNREACHABLE, "--prompts", source, timeout=30)
        _clear(proc)
        assert proc.returncode == 2 and "not a regular file" in proc.stderr, (source, proc.stderr)


def test_bench_prompts_binary_or_nested_or_oversized_is_a_clear_error(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    binary = tmp_path / "binary.jsonl"
    binary.write_bytes(bytes(range(256)) * 16)
    proc = cli("bench", "--base-url", UNREACHABLE, "--prompts", str(binary), timeout=30)
    _clear(proc)
    assert proc.returncode == 2 and "not UTF-8" in proc.stderr

    for text in (
        "[" * 100_000,
        '{"prompt": "x", "max_tokens": ' + "9" * 5000 + "}",
        '{"prompt": "x", "max_tokens": true}',
    ):
        (tmp_path / "odd.jsonl").write_text(text + "\n")
        with pytest.raises(UsageError, match=r"odd\.jsonl:1"):
            bench_cli._prompt_lines(tmp_path / "odd.jsonl")

    big = tmp_path / "big.jsonl"
    big.write_text('{"prompt": "hello"}\n' * 100)
    monkeypatch.setattr(bench_cli, "MAX_PROMPTS_BYTES", 1000)
    with pytest.raises(UsageError, match="larger than"):
        bench_cli._prompt_lines(big)


def test_bench_prompts_from_stdin(tmp_path: Path) -> None:
    out = tmp_path / "run"
    proc = cli(
        *("bench", "--base-url", UNREACHABLE, "--prompts", "-", "--requests", "1", "--no-scrape", "--out", str(out)),
        stdin='{"prompt": "hello"}\n',
    )
    _clear(proc)
    assert proc.returncode == 4, proc.stderr  # read, sent, and the server could not be reached
    assert json.loads((out / "result.json").read_text())["config"]["prompts_file"] == "-"


@pytest.mark.parametrize(
    "url",
    ["http://[::1", "http://user:secret@[::1", "http://127.0.0.1:99999", "http://127.0.0.1:port", "ftp://x", "http://"],
)
def test_bench_malformed_base_url_is_a_usage_error(url: str) -> None:
    proc = cli("bench", "--base-url", url, "--requests", "1", "--no-scrape", timeout=30)
    _clear(proc)
    assert proc.returncode == 2 and "--base-url" in proc.stderr, proc.stderr
    assert "secret" not in proc.stderr


def test_bench_malformed_metrics_url_is_a_usage_error() -> None:
    proc = cli("bench", "--base-url", UNREACHABLE, "--metrics-url", "http://[::1/metrics", timeout=30)
    _clear(proc)
    assert proc.returncode == 2 and "--metrics-url" in proc.stderr


# ---------------------------------------------------------------- 7: lab


@pytest.mark.timeout(60)
def test_lab_out_an_existing_file_is_a_usage_error(tmp_path: Path) -> None:
    file = tmp_path / "taken"
    file.write_text("mine\n")
    for out in (file, file / "below"):
        proc = cli("lab", "startup-oom", "--out", str(out), timeout=50)
        _clear(proc)
        assert proc.returncode == 2 and "--out" in proc.stderr, proc.stderr
    assert file.read_text() == "mine\n"


@pytest.mark.timeout(60)
def test_lab_against_an_unreachable_url_fails_fast_and_says_so(tmp_path: Path) -> None:
    started = time.monotonic()
    proc = cli("lab", "runtime-oom", "--target", UNREACHABLE, "--out", str(tmp_path / "lab"), timeout=50)
    took = time.monotonic() - started
    _clear(proc)
    assert proc.returncode == 4 and "no connection to 127.0.0.1:9" in proc.stderr, proc.stderr
    assert "waiting for 127.0.0.1:9" in proc.stderr  # progress while it waited
    assert took < targets.CONNECT_DEADLINE_S + 20
    assert not (tmp_path / "lab" / "runtime-oom").exists()


@pytest.mark.parametrize("target", ["simm", "http://[::1", "ftp://host"])
def test_lab_target_that_is_neither_known_nor_a_url_is_a_usage_error(tmp_path: Path, target: str) -> None:
    proc = cli("lab", "startup-oom", "--target", target, "--out", str(tmp_path), timeout=50)
    _clear(proc)
    assert proc.returncode == 2 and "--target" in proc.stderr, proc.stderr


def test_an_existing_server_that_never_accepts_is_not_waited_on_for_ten_minutes() -> None:
    said: list[str] = []
    started = time.monotonic()
    with pytest.raises(UnavailableError, match="no connection"):
        targets.check_reachable(UNREACHABLE, deadline_s=1.5, progress=said.append)
    assert time.monotonic() - started < 5 and said


# ---------------------------------------------------------------- 8: capture on a full disk


def _server_log(path: Path, lines: int = 30_000) -> Path:
    path.write_text(
        "".join(f"INFO 11-29 16:11:42 [engine.py:{i}] step {i} of the server's log\n" for i in range(lines))
    )
    return path


def _check_partial_bundle(bundle: Path, log_name: str, why: str) -> None:
    assert bundle.is_dir() and not list(bundle.parent.glob(".*.partial-*")), list(bundle.parent.iterdir())
    assert not (bundle / ".reserve").exists()
    manifest = json.loads((bundle / "manifest.json").read_text())
    assert manifest["partial"] is True and why in manifest["interrupted_by"], manifest["interrupted_by"]
    rows = [f for s in manifest["sources"] for f in s["files"] if f["path"] == f"logs/{log_name}"]
    kept = bundle / "logs" / log_name
    if rows:  # what was written is kept, whole lines only
        assert rows[0]["truncated"] is True and kept.stat().st_size == rows[0]["bytes"]
        assert kept.read_bytes().endswith(b"\n")
    evidence = read_evidence(bundle)
    assert any("partial bundle" in p.message and why in p.message for p in evidence.problems)


def test_capture_on_a_full_disk_finishes_a_partial_bundle(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    log = _server_log(tmp_path / "server.log")
    out = tmp_path / "out"
    capacity = capture_writer.RESERVE_BYTES + 200_000
    real = capture_writer._write_synced

    def on_a_small_disk(path: Path, data: bytes) -> None:
        used = sum(p.stat().st_size for p in out.rglob("*") if p.is_file() and p != path)
        room = max(0, capacity - used)
        if len(data) > room:
            real(path, data[:room])
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
        real(path, data)

    monkeypatch.setattr(capture_writer, "_write_synced", on_a_small_disk)
    plan = CapturePlan(out_dir=out, target=LogFile(log), gpu=GpuMode.nvidia_smi, duration_s=0.0, interval_s=0.2)
    result = capture(plan, runner=ReplayRunner({}))
    assert result.write_error is not None and "No space left on device" in result.write_error
    _check_partial_bundle(result.path, "server.log", "No space left on device")
    assert 0 < (result.path / "logs" / "server.log").stat().st_size < log.stat().st_size


def test_capture_with_no_room_even_for_its_manifest_is_a_clear_error(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    def no_room(path: Path, data: bytes) -> None:
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    monkeypatch.setattr(capture_writer, "_write_synced", no_room)
    plan = CapturePlan(out_dir=tmp_path, gpu=GpuMode.nvidia_smi, duration_s=0.0, interval_s=0.2)
    with pytest.raises(UnavailableError, match="No space left on device"):
        capture(plan, runner=ReplayRunner({}))
    assert list(tmp_path.iterdir()) == []  # no .partial-PID directory left behind


def test_capture_cli_when_a_write_fails_prints_the_partial_bundle_and_exits_4(tmp_path: Path) -> None:
    # A file size limit makes every write past 200 kB fail (EFBIG; Python ignores SIGXFSZ), as a full disk would.
    log = _server_log(tmp_path / "server.log")
    out = tmp_path / "out"
    limit = (
        "import resource, runpy, sys; resource.setrlimit(resource.RLIMIT_FSIZE, (200_000, 200_000));"
        " sys.argv = ['llmtriage', *sys.argv[1:]]; runpy.run_module('llmtriage', run_name='__main__')"
    )
    proc = subprocess.run(
        [
            *(sys.executable, "-c", limit, "capture", "--log-file", str(log), "--gpu", "nvidia-smi"),
            *("--duration", "0s", "--out", str(out), "--no-diagnose"),
        ],
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, "COLUMNS": "1000"},
        cwd=REPO,
        check=False,
    )
    _clear(proc)
    assert proc.returncode == 4, proc.stderr
    assert "could not be written whole" in proc.stderr and "File too large" in proc.stderr
    bundle = Path(proc.stdout.strip())
    assert bundle.parent == out
    _check_partial_bundle(bundle, "server.log", "File too large")


@pytest.fixture
def small_tmpfs(tmp_path: Path) -> Iterator[Path]:
    """A 2 MiB tmpfs, where this test may mount one (root); skipped elsewhere."""
    mount = shutil.which("mount")
    if os.geteuid() != 0 or mount is None:
        pytest.skip("needs root to mount a small tmpfs")
    where = tmp_path / "small"
    where.mkdir()
    done = subprocess.run(
        [mount, "-t", "tmpfs", "-o", "size=2m", "tmpfs", str(where)], capture_output=True, check=False
    )
    if done.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {done.stderr.decode(errors='replace').strip()}")
    try:
        yield where
    finally:
        subprocess.run(["umount", str(where)], capture_output=True, check=False)


def test_capture_cli_on_a_really_full_disk(tmp_path: Path, small_tmpfs: Path) -> None:
    log = _server_log(tmp_path / "server.log", lines=60_000)
    proc = cli(
        *("capture", "--log-file", str(log), "--gpu", "nvidia-smi", "--duration", "0s"),
        *("--out", str(small_tmpfs), "--no-diagnose"),
    )
    _clear(proc)
    assert proc.returncode == 4, proc.stderr
    _check_partial_bundle(Path(proc.stdout.strip()), "server.log", "No space left on device")


# ---------------------------------------------------------------- 9: report on non-finite bench numbers

BENCH_FIXTURE = REPO / "tests" / "fixtures" / "bench" / "sim-result.json"


def _bench_bundle(tmp_path: Path, result_text: str, latencies: list[str]) -> Path:
    bundle = tmp_path / "bundle"
    shutil.copytree(EXAMPLES / "kv-pressure-slow-ttft", bundle)
    (bundle / "bench").mkdir()
    (bundle / "bench" / "result.json").write_text(result_text)
    header = list(bench_result.CSV_COLUMNS)
    lines = [",".join(header)]
    for index, value in enumerate(latencies):
        row = dict.fromkeys(header, "") | {"index": str(index), "warmup": "0"}
        row |= {"ttft_ms": value, "tpot_ms": value, "e2e_ms": value, "itl_ms": f"1.5 {value} 2.5"}
        lines.append(",".join(row[c] for c in header))
    (bundle / "bench" / "requests.csv").write_text("\n".join(lines) + "\n")
    return bundle


@pytest.mark.parametrize("bad", ["NaN", "Infinity", "-Infinity", "1e400", "1" + "0" * 400])
def test_report_reads_non_finite_bench_numbers_as_missing_with_a_problem(tmp_path: Path, bad: str) -> None:
    data = json.loads(BENCH_FIXTURE.read_text())
    for path in (("summary", "requests"), ("summary",), ("config",), ("summary", "ttft_ms")):
        holder = data
        for key in path:
            holder = holder[key]
        key = {"requests": "completed", "summary": "output_token_throughput_per_s", "config": "concurrency"}
        holder[key.get(path[-1], "p95")] = "@"
    text = json.dumps(data).replace('"@"', bad)
    bundle = _bench_bundle(tmp_path, text, ["12.5", "nan", "inf", "-inf", "1e400", "1e300", "13.5"])

    run = report_bench_run(bundle)
    assert run is not None and run.requests_completed is None and run.output_token_throughput_per_s is None
    messages = [p.message for p in run.problems]
    assert any("summary.requests.completed is not a finite number" in m for m in messages), messages
    assert any("latency values that are not finite" in m for m in messages), messages
    ttft = next(d for d in run.distributions if d.name == "TTFT")
    assert ttft.values_ms == (12.5, 13.5)

    page = tmp_path / "report.html"
    proc = cli("report", str(bundle), "-o", str(page), "--no-runbook")
    _clear(proc)
    assert proc.returncode in (0, 1, 5), proc.stderr
    assert "not a finite number" in page.read_text()
    diagnosed = cli("diagnose", str(bundle), "--no-runbook", "--format", "json")
    _clear(diagnosed)
    assert diagnosed.returncode in (0, 1, 5), diagnosed.stderr


def test_bench_compare_of_a_result_with_a_huge_number_is_a_usage_error(tmp_path: Path) -> None:
    huge = tmp_path / "huge.json"
    huge.write_text('{"schema_version": 1, "summary": {"duration_s": ' + "9" * 5000 + "}}")
    proc = cli("bench", "compare", str(BENCH_FIXTURE), str(huge))
    _clear(proc)
    assert proc.returncode == 2, proc.stderr
