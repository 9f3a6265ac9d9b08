"""``llmtriage runbook ...`` and ``diagnose`` with a runbook, as a user runs them: real processes and files."""

from __future__ import annotations

import dataclasses
import itertools
import json
import os
import pty
import re
import subprocess
import sys
import time
from pathlib import Path

import jsonschema
import pytest

from llmtriage.runbook.store import Runbook

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
    """Run llmtriage with nobody to answer a question (stdin is not a terminal)."""
    return subprocess.run(
        command(*args), capture_output=True, text=True, timeout=120, env=env, cwd=REPO, stdin=subprocess.DEVNULL
    )


def answered(env: dict[str, str], answer: str, *args: str | Path) -> subprocess.CompletedProcess[str]:
    """Run llmtriage on a terminal (a pty) that answers ``answer`` to its question."""
    terminal, child_end = pty.openpty()
    try:
        proc = subprocess.Popen(
            command(*args),
            stdin=child_end,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env=env,
            cwd=REPO,
        )
        os.write(terminal, f"{answer}\n".encode())
        out, err = proc.communicate(timeout=120)
    finally:
        os.close(child_end)
        os.close(terminal)
    return subprocess.CompletedProcess(proc.args, proc.returncode, out, err)


def listed_ids(proc: subprocess.CompletedProcess[str]) -> set[int]:
    """The entry ids of a `runbook list` or `runbook search` table."""
    return {int(n) for n in re.findall(r"^(\d+)\s", proc.stdout, re.MULTILINE)}


def seen_before_lines(text: str) -> list[str]:
    """The items under "Seen before (runbook)" in a text report."""
    lines = text.splitlines()
    start = lines.index("Seen before (runbook)") + 1
    return list(itertools.takewhile(str.strip, lines[start:]))


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
        (("edit", "1"), "nothing to change"),
        (("edit", "1", "--cause", "gremlins"), "unknown cause 'gremlins'"),
        (("edit", "1", "--outcome", "maybe"), "an outcome starts with worked"),
    ]
    for args, words in cases:
        proc = run(env, "runbook", *args, "--db", db)
        assert proc.returncode == 2 and words in proc.stderr, (args, proc.stderr)
    assert not db.exists()  # nothing was wrong with the runbook, so none was made
    document = tmp_path / "bad.md"
    document.write_text("---\nschema_version: 1\ndocument: llmtriage runbook\n---\n## x\n\n**Cause:** `port_in_use`\n")
    proc = run(env, "runbook", "import", document, "--db", db)
    assert proc.returncode == 2 and f"{document}:5: the entry has no **Symptom:** line" in proc.stderr
    for args in (("show", "9999"), ("edit", "9999", "--fix", "x"), ("rm", "9999", "--yes"), ("rm", "9999")):
        proc = run(env, "runbook", *args, "--db", db)
        assert proc.returncode == 2 and "no runbook entry 9999" in proc.stderr, (args, proc.stderr)


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


def test_capture_says_seen_before_as_diagnose_does(tmp_path: Path, env: dict[str, str]) -> None:
    db = tmp_path / "rb.sqlite3"
    recorded = added_id(
        run(env, "runbook", "add", PORT_IN_USE, "--db", db, "--fix", "stopped the stale server", "--outcome", "worked")
    )
    log = PORT_IN_USE / "logs" / "server.log"
    captured = run(
        {**env, "LLMTRIAGE_RUNBOOK": str(db)}, "capture", "--log-file", log, "--gpu", "nvidia-smi", "--duration", "0s",
        "--out", tmp_path,
    )  # fmt: skip
    assert captured.returncode == 1, captured.stderr
    bundle_dir = Path(captured.stdout.splitlines()[0])
    said = seen_before_lines(captured.stdout)
    assert said and "the fix that worked: stopped the stale server" in said[0]

    diagnosed = run(env, "diagnose", bundle_dir, "--runbook", db)
    assert diagnosed.returncode == 1 and seen_before_lines(diagnosed.stdout) == said
    data = json.loads(run(env, "diagnose", bundle_dir, "--runbook", db, "--format", "json").stdout)
    assert [m["entry_ids"] for m in data["seen_before"]] == [[int(recorded)]]

    again = run(env, "capture", "--log-file", log, "--gpu", "nvidia-smi", "--duration", "0s", "--out", tmp_path / "b",
                "--runbook", db)  # fmt: skip
    assert seen_before_lines(again.stdout) == said
    off = run({**env, "LLMTRIAGE_RUNBOOK": str(db)}, "capture", "--log-file", log, "--gpu", "nvidia-smi",
              "--duration", "0s", "--out", tmp_path / "c", "--no-runbook")  # fmt: skip
    assert off.returncode == 1 and "Seen before" not in off.stdout
    missing = run(env, "capture", "--log-file", log, "--out", tmp_path / "d", "--runbook", tmp_path / "none.sqlite3")
    assert missing.returncode == 2 and "no such file" in missing.stderr and not (tmp_path / "d").exists()


def test_search_oom_finds_the_out_of_memory_incidents(tmp_path: Path, env: dict[str, str]) -> None:
    """The README's own example: `runbook search oom`, whatever the words of the entries."""
    db = tmp_path / "rb.sqlite3"
    kv_too_small = int(added_id(run(env, "runbook", "add", bundle("002", tmp_path), "--db", db)))
    kv_negative = int(added_id(run(env, "runbook", "add", bundle("013", tmp_path), "--db", db)))
    port = int(added_id(run(env, "runbook", "add", PORT_IN_USE, "--db", db)))
    with Runbook.open(db, create=False) as runbook:
        by_class = {e.id: e.symptom_class for e in runbook.entries(seeds=True)}
        by_cause = {e.id: e.cause for e in runbook.entries(seeds=True)}
    startup_ooms = {i for i, symptom_class in by_class.items() if symptom_class == "startup_oom"}
    assert {kv_too_small, kv_negative} <= startup_ooms

    found = run(env, "runbook", "search", "oom", "--db", db)
    assert found.returncode == 0, found.stderr
    oom = listed_ids(found)
    assert startup_ooms <= oom
    assert {i for i, symptom_class in by_class.items() if symptom_class == "runtime_oom"} <= oom
    unrelated = {"port_in_use", "driver_cuda_mismatch", "max_model_len_exceeds_model", "model_path_or_permission"}
    assert port not in oom and not {i for i in oom if by_cause[i] in unrelated}
    for same in ("out of memory", "OOM", "Out-Of-Memory"):
        assert listed_ids(run(env, "runbook", "search", same, "--db", db)) == oom, same
    assert startup_ooms <= listed_ids(run(env, "runbook", "search", "memory", "--db", db))
    by_cause_id = listed_ids(run(env, "runbook", "search", "kv_cache_too_small_for_max_model_len", "--db", db))
    assert kv_too_small in by_cause_id and port not in by_cause_id
    assert listed_ids(run(env, "runbook", "search", "startup_oom", "--db", db)) == startup_ooms


def test_edit_changes_only_the_given_fields_and_redacts(tmp_path: Path, env: dict[str, str]) -> None:
    db = tmp_path / "rb.sqlite3"
    first = added_id(run(env, "runbook", "add", PORT_IN_USE, "--db", db, "--fix", "restarted", "--note", "night"))
    with Runbook.open(db, create=False) as runbook:
        before = runbook.get(int(first))

    secret = "hf_" + "Zq8" * 12
    proc = run(env, "runbook", "edit", first, "--db", db, "--outcome", "worked: second try", "--fix",
               f"stopped the stale server, rotated {secret}")  # fmt: skip
    assert proc.returncode == 0 and f"edited entry {first} (fix, outcome)" in proc.stdout, proc.stderr
    assert secret.encode() not in db.read_bytes()
    with Runbook.open(db, create=False) as runbook:
        after = runbook.get(int(first))
        assert after.fix == "stopped the stale server, rotated <redacted:hf_token:1>"
        assert after.outcome == "worked: second try" and after.worked
        assert dataclasses.replace(after, fix=before.fix, outcome=None) == before
        assert int(first) in [e.id for e in runbook.search("stale server")]
        assert all(e.id != int(first) for e in runbook.search("restarted"))

    assert run(env, "runbook", "edit", first, "--db", db, "--cause", "other_process_holds_memory").returncode == 0
    assert run(env, "runbook", "edit", first, "--db", db, "--notes", "").returncode == 0
    with Runbook.open(db, create=False) as runbook:
        edited = runbook.get(int(first))
    assert edited.cause == "other_process_holds_memory" and edited.notes is None and edited.fix == after.fix
    refused = run(env, "runbook", "edit", first, "--db", db, "--cause", "gremlins")
    assert refused.returncode == 2 and "unknown cause 'gremlins'" in refused.stderr
    shown = run(env, "runbook", "show", first, "--db", db)
    assert "**Cause:** `other_process_holds_memory`" in shown.stdout and "**Notes**" not in shown.stdout


def test_rm_asks_first_unless_yes(tmp_path: Path, env: dict[str, str]) -> None:
    db = tmp_path / "rb.sqlite3"
    ids = [added_id(run(env, "runbook", "add", PORT_IN_USE, "--db", db, "--note", f"n{n}")) for n in range(3)]

    nobody = run(env, "runbook", "rm", ids[0], "--db", db)
    assert nobody.returncode == 2 and "give --yes" in nobody.stderr
    declined = answered(env, "n", "runbook", "rm", ids[0], "--db", db)
    assert declined.returncode == 1 and "nothing removed" in declined.stderr, declined.stderr
    assert listed_ids(run(env, "runbook", "list", "--db", db)) == set(map(int, ids))

    agreed = answered(env, "y", "runbook", "rm", ids[0], "--db", db)
    assert agreed.returncode == 0 and f"removed entry {ids[0]}: " in agreed.stdout, agreed.stderr
    assert f"remove entry {ids[0]}: " in agreed.stderr  # the question names what goes
    forced = run(env, "runbook", "rm", ids[1], "--yes", "--db", db)
    assert forced.returncode == 0 and f"removed entry {ids[1]}: " in forced.stdout
    assert listed_ids(run(env, "runbook", "list", "--db", db)) == {int(ids[2])}
    assert run(env, "runbook", "search", "n0", "--db", db).returncode == 1  # gone from the index too
    assert run(env, "runbook", "rm", ids[1], "--yes", "--db", db).returncode == 2


def test_export_writes_markdown_by_default(tmp_path: Path, env: dict[str, str]) -> None:
    db = tmp_path / "rb.sqlite3"
    added_id(run(env, "runbook", "add", PORT_IN_USE, "--db", db, "--fix", "stopped the stale server"))
    plain = run(env, "runbook", "export", "--db", db)
    assert plain.returncode == 0, plain.stderr
    assert plain.stdout.startswith("---\nschema_version: 1\ndocument: llmtriage runbook\n")
    assert "**Cause:** `port_in_use`" in plain.stdout and "> stopped the stale server" in plain.stdout
    assert run(env, "runbook", "export", "--markdown", "--db", db).stdout == plain.stdout
    document = tmp_path / "runbook.md"
    assert run(env, "runbook", "export", "-o", document, "--db", db).returncode == 0
    assert document.read_text() == plain.stdout
