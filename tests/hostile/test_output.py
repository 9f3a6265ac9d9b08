"""Output hygiene: strict JSON whatever the numbers, a terminal that log lines cannot drive, and the simulator
answering malformed requests as vLLM does (400, not 500)."""

from __future__ import annotations

import json
import math
import urllib.error
import urllib.request
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from ..conftest import FIXTURES
from ..sim.conftest import RunningSim
from ..sim.conftest import start_sim as start_sim
from .conftest import llmtriage


def _strict(text: str) -> Any:
    def refuse(constant: str) -> None:
        raise AssertionError(f"{constant} is not JSON")

    return json.loads(text, parse_constant=refuse)


def test_json_output_never_holds_nan_or_infinity(tmp_path: Path) -> None:
    # A bench result with non-finite figures (a crashed run, a hand-edited file): compare still prints JSON.
    good = FIXTURES / "bench" / "sim-result.json"
    data = json.loads(good.read_text())
    data["summary"]["ttft_ms"].update({"p50": math.nan, "mean": math.inf})
    bad = tmp_path / "nan.json"
    bad.write_text(json.dumps(data))
    proc = llmtriage("bench", "compare", str(good), str(bad), "--format", "json")
    assert proc.stdout, proc.stderr
    _strict(proc.stdout)


def test_escape_sequences_in_a_log_do_not_reach_the_terminal(tmp_path: Path) -> None:
    log = tmp_path / "server.log"
    # OSC (retitle the terminal), DCS and a C1 CSI around a real error line.
    log.write_text(
        "INFO start\n\x1b]0;PWNED\x07 ValueError: No available memory for the cache blocks \x1bP1;2|x\x1b\\ \x9b2J\n"
    )
    proc = llmtriage("diagnose", "--no-runbook", "--log", str(log))
    assert "No available memory" in proc.stdout
    assert "\x1b" not in proc.stdout and "\x9b" not in proc.stdout and "\x07" not in proc.stdout
    assert "␛]0;PWNED" in proc.stdout


def _post(sim: RunningSim, body: bytes) -> int:
    request = urllib.request.Request(
        sim.url + "/v1/completions", data=body, headers={"Content-Type": "application/json"}, method="POST"
    )
    try:
        with urllib.request.urlopen(request, timeout=10) as r:
            return int(r.status)
    except urllib.error.HTTPError as e:
        return int(e.code)


@pytest.mark.parametrize(
    "body",
    [
        b'{"prompt": "hi", "max_tokens": 2, "stream": true, "stream_options": "x"}',
        b'{"prompt": "hi", "max_tokens": 2, "stream": true, "stream_options": [1]}',
        b"[" * 100_000 + b"]" * 100_000,
    ],
    ids=["stream-options-string", "stream-options-list", "deeply-nested"],
)
def test_the_sim_answers_a_malformed_request_400(start_sim: Callable[..., RunningSim], body: bytes) -> None:
    sim = start_sim("--model", "meta-llama/Llama-3.2-1B-Instruct", "--gpu", "L4", "--speed", "50")
    assert sim.wait_ready()
    assert _post(sim, body) == 400
