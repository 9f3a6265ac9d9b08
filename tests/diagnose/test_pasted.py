"""Logs pasted from GitHub issues, chats and narrow terminals read as the logs they quote; ``--log -`` reads one
from standard input, through a real pipe and on a terminal.

The pasted texts are real issue text (tests/fixtures/pasted, the thread on line one). The other forms a paste takes
are made here from those texts and from recorded vLLM logs the way GitHub and terminals make them: "Quote reply"
puts ``> `` before every line (again for a reply to a reply), a ``<details>`` fold wraps the block, a terminal
cuts lines at its width.
"""

from __future__ import annotations

import json
import os
import pty
import select
import subprocess
import sys
import time
from pathlib import Path

import pytest

from llmtriage.diagnose.engine import diagnose
from llmtriage.diagnose.model import Diagnosis
from llmtriage.evidence.bundle import LooseFiles, read_evidence
from llmtriage.parse.pasted import unpaste

from ..conftest import FIXTURES

PASTED = FIXTURES / "pasted"
LOGS = FIXTURES / "vllm-cpu" / "logs"
FENCED = PASTED / "vllm-27508-fenced-traceback.md"
KV_ZERO = LOGS / "fault-b3-kvcache-space-zero.log"


def plain_lines(paste: Path) -> list[str]:
    """The log of a fenced fixture as the server printed it: the lines after the source line and the fence."""
    return paste.read_text(encoding="utf-8").splitlines()[2:]


def diagnosed(text: str, name: str = "pasted.log") -> Diagnosis:
    loose = LooseFiles(log_texts=[(name, text.encode("utf-8"))])
    return diagnose(read_evidence(None, loose))


def verdict(d: Diagnosis) -> tuple[str, str | None, str | None]:
    """Class, first cause and the first cause's first quoted line."""
    first = d.causes[0] if d.causes else None
    quoted = first.evidence[0].citation.excerpt if first and first.evidence else None
    return d.symptom_class, first.id if first else None, quoted


def quote_reply(text: str) -> str:
    return "\n".join(f"> {line}" if line else ">" for line in text.split("\n"))


def folded(text: str, width: int) -> str:
    """``text`` as a terminal ``width`` columns wide shows it: long lines cut into pieces."""
    out = []
    for line in text.split("\n"):
        while len(line) > width:
            out.append(line[:width])
            line = line[width:]
        out.append(line)
    return "\n".join(out)


def forms(log: str) -> dict[str, str]:
    """The ways a log arrives in an issue or a chat."""
    fenced = f"Here is the log:\n\n```log\n{log}\n```\n\nAny idea?"
    return {
        "backticks with a tag": fenced,
        "tildes with a tag": f"### Log\n~~~shell\n{log}\n~~~\n",
        "an unclosed fence": f"```\n{log}",
        "in a details fold": f"<details>\n<summary>Full log</summary>\n\n```text\n{log}\n```\n\n</details>\n",
        "quote reply": quote_reply(fenced) + "\n\nSame here on 0.32.",
        "quote of a quote": quote_reply(quote_reply(fenced) + "\n\nSame here.") + "\n\n+1",
        "quoted without a fence": quote_reply(log) + "\n\nThis is what I get.",
        "a list item's fence": "1. The server said:\n   ```\n"
        + "\n".join(f"   {x}" for x in log.split("\n"))
        + "\n   ```",
        "cut at 80 columns": folded(log, 80),
        "cut at 120 columns, fenced": f"```\n{folded(log, 120)}\n```",
        "CRLF line ends": fenced.replace("\n", "\r\n"),
    }


@pytest.mark.parametrize(
    "log",
    [
        pytest.param("\n".join(plain_lines(FENCED)), id="vllm-27508"),
        pytest.param(KV_ZERO.read_text(encoding="utf-8"), id="vllm-cpu-kv-zero"),
    ],
)
def test_every_form_of_a_paste_diagnoses_as_the_log(log: str) -> None:
    expected = verdict(diagnosed(log))
    assert expected[0] == "startup_oom" and expected[2] is not None
    for form, text in forms(log).items():
        assert verdict(diagnosed(text)) == expected, form


def test_a_citation_names_the_line_of_the_paste() -> None:
    paste = FENCED.read_text(encoding="utf-8")
    cited = diagnosed(paste).causes[0].evidence[0].citation
    assert cited.line is not None
    assert paste.splitlines()[cited.line - 1].endswith(cited.excerpt.rstrip("…").lstrip("…")[-40:])


def test_the_fixture_as_github_stores_it() -> None:
    """The real issue text: prose and fence lines go, every log line stays on its own line number."""
    paste = FENCED.read_text(encoding="utf-8")
    found = unpaste(paste)
    assert found.removed == ("code fences",)
    assert found.text.split("\n")[:2] == ["", ""]
    assert found.text.split("\n")[2:] == paste.split("\n")[2:]


def test_a_line_the_paste_cut_is_joined_again() -> None:
    paste = (PASTED / "vllm-16141-wrapped-line.md").read_text(encoding="utf-8")
    found = unpaste(paste)
    assert "cut lines" in found.removed
    (config,) = [line for line in found.text.split("\n") if line]
    assert "enable_prefix_caching=True, chunked_prefill_enabled=True, use_async_output_proc=True" in config
    assert config.startswith("INFO 04-06 18:44:06 [core.py:61] Initializing a V1 LLM engine (v0.8.3)")


@pytest.mark.parametrize("width", [80, 100, 120, 200])
def test_terminal_wrapping_is_undone_exactly(width: int) -> None:
    log = KV_ZERO.read_text(encoding="utf-8")
    found = unpaste(folded(log, width))
    assert found.removed == (f"lines wrapped at {width} columns",)
    assert [line for line in found.text.split("\n") if line] == [line for line in log.split("\n") if line]


# ollama/ollama#9181 as pasted: Ollama's one-line offload record (slog text) wrapped onto indented lines.
OLLAMA_OFFLOAD_WRAPPED = (
    "time=2025-02-18T02:29:51.627Z level=INFO source=server.go:130 msg=offload library=cuda layers.requested=-1 "
    "layers.model=81 \n"
    '  layers.offload=44 layers.split=11,11,11,11 memory.available="[22.0 GiB 22.0 GiB 22.0 GiB 22.0 GiB]" '
    'memory.gpu_overhead="0 B" \n'
    '  memory.required.full="127.4 GiB" memory.required.partial="87.1 GiB" memory.required.kv="19.5 GiB" \n'
    '  memory.graph.partial="8.2 GiB"\n'
)


def test_a_wrapped_logfmt_record_is_one_line_again() -> None:
    unpasted = unpaste(OLLAMA_OFFLOAD_WRAPPED)
    assert unpasted.removed == ("wrapped logfmt records",)
    first, *rest = unpasted.text.split("\n")
    assert "layers.model=81 layers.offload=44" in first and first.endswith('memory.graph.partial="8.2 GiB"')
    assert rest == ["", "", "", ""]  # the pieces' lines stay, empty: citations keep the paste's line numbers
    cls, cause, quoted = verdict(diagnosed(OLLAMA_OFFLOAD_WRAPPED))
    assert (cls, cause) == ("slow_generation", "partial_cpu_offload") and "layers.offload=44" in (quoted or "")


def test_indented_lines_after_a_logfmt_record_that_are_not_pairs_stay() -> None:
    text = (
        'time=2025-02-18T02:29:51.627Z level=ERROR source=sched.go:455 msg="error loading llama server"\n'
        '  File "/usr/lib/python3/x.py", line 1, in <module>\n'
    )
    assert unpaste(text).text == text


def test_an_issue_without_fences_or_quotes_is_read_as_it_is() -> None:
    text = (PASTED / "vllm-11617-issue-body.md").read_text(encoding="utf-8")
    assert unpaste(text).removed == ()
    assert verdict(diagnosed(text))[:2] == ("startup_failure", "port_in_use")


def test_real_logs_are_never_touched() -> None:
    """Every recorded log and text fixture is no paste: unpaste leaves it as it is."""
    paths = [p for p in FIXTURES.rglob("*") if p.suffix in (".log", ".txt", ".prom") and "pasted" not in p.parts]
    assert len(paths) > 30
    for path in paths:
        text = path.read_text(encoding="utf-8", errors="replace")
        found = unpaste(text)
        assert found.removed == () and found.text is text, path


def test_a_fence_inside_a_real_log_is_no_paste() -> None:
    """A server that echoes a prompt can print a fence of its own: the log around it stays whole."""
    lines = KV_ZERO.read_text(encoding="utf-8").split("\n")
    echoed = [*lines[:40], "```python", "print('hello')", "```", *lines[40:]]
    found = unpaste("\n".join(echoed))
    assert found.removed == ()
    assert verdict(diagnosed("\n".join(echoed))) == verdict(diagnosed("\n".join(lines)))


# ---------------------------------------------------------------- --log - through a process


def command(*args: str | Path) -> list[str]:
    return [sys.executable, "-m", "llmtriage", *map(str, args)]


ENV = {**os.environ, "COLUMNS": "200", "LLMTRIAGE_RUNBOOK": ""}


def test_log_from_a_pipe(tmp_path: Path) -> None:
    """``pbpaste | llmtriage diagnose --log -``: a real pipe between two processes."""
    (tmp_path / "clipboard.md").write_text(forms(KV_ZERO.read_text(encoding="utf-8"))["quote reply"])
    paste = subprocess.Popen(["cat", str(tmp_path / "clipboard.md")], stdout=subprocess.PIPE)
    assert paste.stdout is not None
    piped = subprocess.run(
        command("diagnose", "--log", "-", "--no-runbook", "--format", "json"),
        stdin=paste.stdout,
        capture_output=True,
        text=True,
        timeout=120,
        env=ENV,
    )
    paste.stdout.close()
    paste.wait(timeout=10)
    from_file = subprocess.run(
        command("diagnose", "--log", KV_ZERO, "--no-runbook", "--format", "json"),
        capture_output=True,
        text=True,
        timeout=120,
        env=ENV,
        stdin=subprocess.DEVNULL,
    )
    assert piped.returncode == from_file.returncode == 1, piped.stderr
    a, b = json.loads(piped.stdout), json.loads(from_file.stdout)
    assert a["origin"] == "stdin" and b["origin"] == str(KV_ZERO)
    assert (a["symptom_class"], a["causes"][0]["id"]) == (b["symptom_class"], b["causes"][0]["id"])
    assert a["causes"][0]["evidence"][0]["excerpt"] == b["causes"][0]["evidence"][0]["excerpt"]
    assert a["causes"][0]["evidence"][0]["source"] == "stdin"
    assert "reading the log from standard input" not in piped.stderr  # a pipe needs no instructions


def test_log_from_a_terminal_says_how_to_end_the_paste() -> None:
    """On a terminal, ``--log -`` says what it waits for; the pasted text and Ctrl-D end it."""
    terminal, child_end = pty.openpty()
    try:
        proc = subprocess.Popen(
            command("diagnose", "--log", "-", "--no-runbook", "--format", "json"),
            stdin=child_end,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            env=ENV,
        )
        assert proc.stderr is not None
        said = b""
        deadline = time.monotonic() + 60
        while b"Ctrl-D" not in said and time.monotonic() < deadline:
            ready, _, _ = select.select([proc.stderr], [], [], 1.0)
            if ready:
                said += os.read(proc.stderr.fileno(), 4096)
        assert b"paste it, then press Ctrl-D" in said
        for line in plain_lines(FENCED):
            os.write(terminal, line.encode() + b"\n")
        os.write(terminal, b"\x04")
        out, _ = proc.communicate(timeout=60)
    finally:
        os.close(child_end)
        os.close(terminal)
    assert proc.returncode == 1
    typed = json.loads(out)
    expected = diagnosed("\n".join(plain_lines(FENCED)))
    assert (typed["origin"], typed["symptom_class"]) == ("stdin", expected.symptom_class)
    assert typed["causes"][0]["id"] == expected.causes[0].id


def test_log_dash_twice_is_a_usage_error() -> None:
    proc = subprocess.run(
        command("diagnose", "--log", "-", "--log", "-"),
        capture_output=True,
        text=True,
        timeout=60,
        env=ENV,
        input="",
    )
    assert proc.returncode == 2
    assert "--log - given twice" in proc.stderr


def test_report_and_runbook_add_take_loose_files(tmp_path: Path) -> None:
    """The header names the files given, not "command line"; runbook add records the incident from them."""
    page = tmp_path / "r.html"
    report = subprocess.run(
        command("report", "--log", KV_ZERO, "--launch", "vllm serve tiny", "-o", page, "--no-runbook"),
        capture_output=True,
        text=True,
        timeout=120,
        env=ENV,
        stdin=subprocess.DEVNULL,
    )
    assert report.returncode in (0, 1), report.stderr
    html = page.read_text(encoding="utf-8")
    assert f"{KV_ZERO}, --launch" in html and "command line" not in html
    db = tmp_path / "rb.sqlite3"
    added = subprocess.run(
        command("runbook", "add", "--log", "-", "--db", db, "--fix", "raised the KV cache space"),
        capture_output=True,
        text=True,
        timeout=120,
        env=ENV,
        input=FENCED.read_text(encoding="utf-8"),
    )
    assert added.returncode == 0, added.stderr
    assert "startup_oom → weights_kv_exceed_memory" in added.stdout
    nothing = subprocess.run(command("runbook", "add", "--db", db), capture_output=True, text=True, timeout=60, env=ENV)
    assert nothing.returncode == 2 and "nothing to diagnose" in nothing.stderr
