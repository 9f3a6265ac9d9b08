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


def test_an_error_message_holding_markup_is_printed_as_text(tmp_path: Path) -> None:
    # A path, an HTTP reason or a server's excerpt can hold rich markup; it is shown, never interpreted.
    proc = llmtriage("diagnose", str(tmp_path / "no[/x]such[bold]dir"))
    assert proc.returncode == 2, proc.stderr
    assert "no[/x]such[bold]dir: not a directory" in proc.stderr.replace("\n", "")  # rich wraps long lines
    assert "Traceback" not in proc.stderr


def test_a_runbook_entry_cannot_drive_the_terminal(tmp_path: Path) -> None:
    # Notes and fixes come from people and imported files: escape sequences are shown, markup is text.
    env = {"LLMTRIAGE_RUNBOOK": str(tmp_path / "runbook.sqlite"), "COLUMNS": "400"}
    hostile = "\x1b]0;owned\x07\x1b[2J restart [/x] with [bold]care"
    bundle = str(Path(__file__).resolve().parents[2] / "examples" / "port-in-use")
    added = llmtriage("runbook", "add", bundle, "--fix", hostile, "--note", hostile, env=env)
    assert added.returncode == 0, added.stderr
    entry_id = added.stdout.split("added entry ", 1)[1].split(":", 1)[0]
    for args in (("runbook", "list"), ("runbook", "show", entry_id), ("runbook", "search", "restart")):
        proc = llmtriage(*args, env=env)
        assert proc.returncode == 0, (args, proc.stderr)
        assert "\x1b" not in proc.stdout and "\x07" not in proc.stdout, args
        assert "[/x]" in proc.stdout and "Traceback" not in proc.stderr, args
