"""``llmtriage runbook ...`` and ``diagnose`` with a runbook, as a user runs them: real processes and files."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import time
from pathlib import Path

import jsonschema
import pytest

from ..conftest import DESIGN_CAUSE_IDS
from .conftest import EXAMPLES, REPO, SCHEMA, bundle

PORT_IN_USE = EXAMPLES / "port-in-use"


@pytest.fixture
def env(tmp_path: Path) -> dict[str, str]:
    """An environment whose user data directory is empty and whose runbook is not set."""
    base = {k: v for k, v in os.environ.items() if k != "LLMTRIAGE_RUNBOOK"}
    return {**base, "COLUMNS": "200", "XDG_DATA_HOME": str(tmp_path / "xdg")}


def command(*args: str | Path) -> list[str]:
    return [sys.executable, "-m", "llmtriage", *map(str, args)]


def run(env: dict[str, str], *args: str | Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(command(*args), capture_output=True, text=True, timeout=120, env=env, cwd=REPO)


def added_id(proc: subprocess.CompletedProcess[str]) -> str:
    assert proc.returncode == 0, proc.stderr
    m = re.match(r"added entry (\d+): ", proc.stdout)
    assert m is not None, proc.stdout
    return m.group(1)


def test_add_list_show_search_export_import(tmp_path: Path, env: dict[str, str]) -> None:
    db = tmp_path / "rb.sqlite3"
    incident = bundle("019", tmp_path)
    first = added_id(run(env, "runbook", "add", incident, "--db", db, "--fix", "freed 8000", "--outcome", "worked"))
    second = added_id(run(env, "runbook", "add", incident, "--db", db, "--cause", "other_process_holds_memory"))

    listed = run(env, "runbook", "list", "--db", db)
    assert listed.returncode == 0 and "freed 8000" in listed.stdout and "other_process_holds_memory" in listed.stdout
    assert "seed" not in listed.stdout and "seed" in run(env, "runbook", "list", "--seeds", "--db", db).stdout

    shown = run(env, "runbook", "show", first, "--db", db)
    assert shown.returncode == 0
    assert "**Cause:** `port_in_use`" in shown.stdout and "> freed 8000" in shown.stdout
    assert "[Errno 98]" in shown.stdout and "- signatures: server_port_in_use" in shown.stdout

    found = run(env, "runbook", "search", "address already in use", "--db", db)
    assert found.returncode == 0 and re.search(rf"^{first}\s", found.stdout, re.MULTILINE)
    assert run(env, "runbook", "search", "nothing-like-this", "--db", db).returncode == 1

    document = tmp_path / "runbook.md"
    assert run(env, "runbook", "export", "--markdown", "-o", document, "--db", db).returncode == 0
    assert run(env, "runbook", "export", "--markdown", "--db", db).stdout == document.read_text()
    other = tmp_path / "other.sqlite3"
    imported = run(env, "runbook", "import", document, "--db", other)
    assert imported.returncode == 0 and "imported 2 entries (0 already in the runbook)" in imported.stdout
    assert run(env, "runbook", "export", "--markdown", "--db", other).stdout == document.read_text()
    assert "imported 0 entries (2 already" in run(env, "runbook", "import", document, "--db", other).stdout
    assert second != first


def test_diagnose_says_seen_before(tmp_path: Path, env: dict[str, str]) -> None:
    db = tmp_path / "rb.sqlite3"
    for outcome in ("failed: restarted, same error", "worked: stopped the stale server"):
        added_id(
            run(env, "runbook", "add", PORT_IN_USE, "--db", db, "--fix", outcome.split(": ")[1], "--outcome", outcome)
        )

    proc = run(env, "diagnose", PORT_IN_USE, "--runbook", db, "--format", "json")
    assert proc.returncode == 1, proc.stderr
    data = json.loads(proc.stdout)
    jsonschema.validate(data, SCHEMA)
    (match,) = data["seen_before"]
    assert match["match"] == "fingerprint" and match["count"] == 2 and match["fix"] == "stopped the stale server"

    text = run({**env, "LLMTRIAGE_RUNBOOK": str(db)}, "diagnose", PORT_IN_USE)
    assert "Seen before (runbook)" in text.stdout
    assert "same error seen 2 times" in text.stdout and "the fix that worked: stopped the stale server" in text.stdout

    off = run({**env, "LLMTRIAGE_RUNBOOK": str(db)}, "diagnose", PORT_IN_USE, "--no-runbook", "--format", "json")
    assert json.loads(off.stdout)["seen_before"] == []


def test_diagnose_never_creates_a_runbook(tmp_path: Path, env: dict[str, str]) -> None:
    assert run(env, "diagnose", PORT_IN_USE).returncode == 1
    nowhere = tmp_path / "not-yet.sqlite3"
    assert run({**env, "LLMTRIAGE_RUNBOOK": str(nowhere)}, "diagnose", PORT_IN_USE).returncode == 1
    assert not nowhere.exists() and not (tmp_path / "xdg").exists()
    missing = run(env, "diagnose", PORT_IN_USE, "--runbook", nowhere)
    assert missing.returncode == 2 and "no such file" in missing.stderr and not nowhere.exists()


def test_the_default_runbook_is_in_the_user_data_directory(tmp_path: Path, env: dict[str, str]) -> None:
    assert f"no incidents recorded yet ({len(DESIGN_CAUSE_IDS)} seed entries" in run(env, "runbook", "list").stdout
    assert (tmp_path / "xdg" / "llmtriage" / "runbook.sqlite3").is_file()
    chosen = tmp_path / "team.sqlite3"
    assert run({**env, "LLMTRIAGE_RUNBOOK": str(chosen)}, "runbook", "list").returncode == 0
    assert chosen.is_file()


def test_broken_runbooks_are_clear_errors_and_left_alone(tmp_path: Path, env: dict[str, str]) -> None:
    garbage = tmp_path / "garbage.sqlite3"
    garbage.write_bytes(os.urandom(4096))
    foreign = tmp_path / "foreign.sqlite3"
    subprocess.run(
        [
            sys.executable,
            "-c",
            "import sqlite3,sys; sqlite3.connect(sys.argv[1]).execute('CREATE TABLE t (x)')",
            foreign,
        ],
        check=True,
    )
    before = {p: p.read_bytes() for p in (garbage, foreign)}
    for path, code, words in ((garbage, 4, "not a SQLite database"), (foreign, 2, "another application")):
        for args in (("list",), ("add", PORT_IN_USE), ("search", "port")):
            proc = run(env, "runbook", *args, "--db", path)
            assert proc.returncode == code and words in proc.stderr, proc.stderr
            assert "Traceback" not in proc.stderr and "hint:" in proc.stderr
        diagnosed = run(env, "diagnose", PORT_IN_USE, "--runbook", path, "--format", "json")
        assert diagnosed.returncode == 1  # the diagnosis stands; the runbook is one of its problems
        data = json.loads(diagnosed.stdout)
        jsonschema.validate(data, SCHEMA)
        assert data["seen_before"] == [] and any(words in p for p in data["problems"])
    assert {p: p.read_bytes() for p in (garbage, foreign)} == before


def test_bad_arguments_are_usage_errors(tmp_path: Path, env: dict[str, str]) -> None:
    db = tmp_path / "rb.sqlite3"
    cases = [
        (("add", PORT_IN_USE, "--cause", "gremlins"), "unknown cause 'gremlins'"),
        (("add", PORT_IN_USE, "--outcome", "maybe"), "an outcome starts with worked"),
        (("add", EXAMPLES / "healthy"), "nothing wrong was diagnosed"),
        (("add", tmp_path / "nope"), "not a directory"),
        (("import", tmp_path / "nope.md"), "cannot read"),
        (("export",), "say which format to export"),
    ]
    for args, words in cases:
        proc = run(env, "runbook", *args, "--db", db)
        assert proc.returncode == 2 and words in proc.stderr, (args, proc.stderr)
    assert not db.exists()  # nothing was wrong with the runbook, so none was made
    document = tmp_path / "bad.md"
    document.write_text("---\nschema_version: 1\ndocument: llmtriage runbook\n---\n## x\n\n**Cause:** `port_in_use`\n")
    proc = run(env, "runbook", "import", document, "--db", db)
    assert proc.returncode == 2 and f"{document}:5: the entry has no **Symptom:** line" in proc.stderr
    assert run(env, "runbook", "show", "9999", "--db", db).returncode == 2


def test_concurrent_adds_from_the_command_line(tmp_path: Path, env: dict[str, str]) -> None:
    """Four `runbook add` processes at once on a runbook none of them has seen: four entries, no error."""
    db = tmp_path / "rb.sqlite3"
    start = time.perf_counter()
    procs = [
        subprocess.Popen(
            command("runbook", "add", PORT_IN_USE, "--db", db, "--note", f"writer {n}"),
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env=env,
            cwd=REPO,
        )
        for n in range(4)
    ]
    outputs = [p.communicate(timeout=120) for p in procs]
    elapsed = time.perf_counter() - start
    assert [p.returncode for p in procs] == [0] * 4, [err for _, err in outputs]
    listed = run(env, "runbook", "list", "--db", db).stdout
    # The seeds take the first ids; the four incidents follow them.
    first = len(DESIGN_CAUSE_IDS) + 1
    assert sorted(re.findall(r"^(\d+)\s", listed, re.MULTILINE)) == [str(first + i) for i in range(4)]
    print(f"4 concurrent `runbook add` processes: {elapsed:.2f} s")
