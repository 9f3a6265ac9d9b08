"""`llmtriage fit` as a user runs it: a subprocess, its JSON, its text and its exit codes."""

from __future__ import annotations

import json
import subprocess
import sys

FIELDS = {
    "schema_version",
    "starts",
    "error",
    "weights_gib",
    "activation_gib",
    "cuda_graph_gib",
    "available_kv_gib",
    "kv_bytes_per_token",
    "kv_tokens",
    "max_concurrency",
    "max_model_len_that_fits",
}


def _run(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "llmtriage", "fit", *args], capture_output=True, text=True, timeout=120, check=False
    )


def test_json_reproduces_a_recorded_start() -> None:
    # vllm-project/vllm#10517: Llama-3.1-8B on an RTX 3090, vLLM 0.6.4 printed 3.81 GiB -> 1952 blocks, 1.56x.
    done = _run(
        "--model",
        "meta-llama/Llama-3.1-8B-Instruct",
        "--gpu",
        "NVIDIA GeForce RTX 3090",
        "--max-model-len",
        "20000",
        "--engine-version",
        "0.6.4",
        "--available-kv-gib",
        "3.81",
        "--format",
        "json",
    )
    assert done.returncode == 0, done.stderr
    data = json.loads(done.stdout)
    assert data.keys() >= FIELDS
    assert data["starts"] is True and data["error"] is None
    assert abs(data["kv_tokens"] - 1952 * 16) <= 3 * 16
    assert abs(data["max_concurrency"] - 1.56) <= 0.01


def test_text_says_what_to_change_and_exits_1() -> None:
    done = _run(
        "--model",
        "meta-llama/Llama-3.1-8B-Instruct",
        "--gpu",
        "RTX 3090",
        "--max-model-len",
        "29000",
        "--engine-version",
        "0.6.4",
        "--available-kv-gib",
        "2.89",
    )
    assert done.returncode == 1
    assert "does not start" in done.stdout and "kv_cache_too_small_for_max_model_len" in done.stdout
    assert "--max-model-len 23" in done.stdout and "--kv-cache-dtype fp8" in done.stdout


def test_reported_total_wins_over_the_catalog() -> None:
    done = _run("--model", "Qwen/Qwen3-8B", "--gpu", "H100 SXM", "--gpu-memory-gib", "40", "--format", "json")
    assert json.loads(done.stdout)["budget_gib"] == 36.0


def test_roofline_in_json() -> None:
    done = _run(
        "--model",
        "Qwen/Qwen3-8B",
        "--gpu",
        "H100 SXM",
        "--roofline",
        "--batch",
        "4",
        "--context",
        "2048",
        "--format",
        "json",
    )
    roofline = json.loads(done.stdout)["roofline"]
    assert roofline["batch"] == 4 and roofline["tpot_floor_ms"] > 0
    assert abs(roofline["tokens_per_s"] - 4 * roofline["tokens_per_s_per_sequence"]) <= 1


def test_usage_errors_exit_2_with_a_hint() -> None:
    done = _run("--model", "Qwen/Qwen3-8B", "--gpu", "H10O")
    assert done.returncode == 2 and "hint:" in done.stderr
    done = _run("--model", "Qwen/Qwen3-8B", "--gpu", "H100 SXM", "--gpu-memory-utilization", "1.5")
    assert done.returncode == 2 and "(0, 1]" in done.stderr
    assert _run("--model", "Qwen/Qwen3-8B").returncode == 2


def test_text_rows_are_the_json_figures_plain_into_a_pipe() -> None:
    args = ("--model", "Qwen/Qwen3-8B", "--gpu", "L4", "--max-model-len", "8192")
    text = _run(*args).stdout
    data = json.loads(_run(*args, "--format", "json").stdout)
    assert "\x1b[" not in text  # no styling into a pipe
    rows = {line.rsplit(maxsplit=1)[0].strip(): line.rsplit(maxsplit=1)[1] for line in text.splitlines()[2:9]}
    assert rows["total memory"] == f"{data['gpu_total_gib']:.2f}"
    assert rows["budget (total x utilization)"] == f"{data['budget_gib']:.2f}"
    assert rows[f"KV cache ({data['available_kv_source']})"] == f"{data['available_kv_gib']:.2f}"
    assert len({len(line) for line in text.splitlines()[1:9]}) == 1  # one column of figures, right-aligned
