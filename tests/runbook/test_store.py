"""The SQLite store on real files: schema, seeds, WAL, redaction, crashes, concurrent writers, foreign files."""

from __future__ import annotations

import dataclasses
import hashlib
import itertools
import os
import signal
import sqlite3
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from llmtriage import catalog
from llmtriage.errors import UnavailableError, UsageError
from llmtriage.runbook.entry import Edit, Entry
from llmtriage.runbook.seeds import seeds
from llmtriage.runbook.store import APPLICATION_ID, MIGRATIONS, SCHEMA_VERSION, Runbook

from ..conftest import DESIGN_CAUSE_IDS
from .conftest import REPO, bundle, diagnosed_entry

SECRET = "hf_" + "Zq8" * 12


def entry(uid: str, **changes: object) -> Entry:
    base = Entry(uid=uid, recorded_at="2026-10-02T11:22:33Z", symptom_class="startup_failure", cause="port_in_use")
    return dataclasses.replace(base, **changes)  # type: ignore[arg-type]


def digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def sidecars(path: Path) -> list[Path]:
    return [p for p in (path.with_name(path.name + "-wal"), path.with_name(path.name + "-shm")) if p.exists()]


def child(code: str, *args: object) -> subprocess.Popen[str]:
    """A real Python process running ``code`` (with ``sys.argv[1:]`` = args)."""
    return subprocess.Popen(
        [sys.executable, "-c", textwrap.dedent(code), *map(str, args)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        cwd=REPO,
    )


# ---------------------------------------------------------------- a new runbook


def test_new_runbook_schema_wal_and_seeds(tmp_path: Path) -> None:
    path = tmp_path / "deep" / "dir" / "runbook.sqlite3"
    with Runbook.open(path, create=True) as runbook:
        assert runbook.entries() == []
        seeded = runbook.entries(seeds=True)
    raw = sqlite3.connect(path)
    assert raw.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
    assert raw.execute("PRAGMA user_version").fetchone()[0] == SCHEMA_VERSION
    assert raw.execute("PRAGMA application_id").fetchone()[0] == APPLICATION_ID
    raw.close()
    assert all(e.seed for e in seeded)
    assert sorted(e.cause for e in seeded) == sorted(DESIGN_CAUSE_IDS)
    tree = catalog.tree()
    for e in seeded:
        assert e.symptom_class in tree.cause(e.cause).classes
        assert e.evidence and e.fix and e.notes
    with Runbook.open(path, create=True) as again:
        assert len(again.entries(seeds=True)) == len(seeded)


def test_seeds_are_checked_against_the_tree() -> None:
    assert len({e.uid for e in seeds("2026-10-02T00:00:00Z")}) == len(DESIGN_CAUSE_IDS)


def test_an_empty_file_becomes_a_runbook(tmp_path: Path) -> None:
    path = tmp_path / "runbook.sqlite3"
    path.touch()
    with pytest.raises(UsageError, match="empty"):
        Runbook.open(path, create=False)
    assert path.stat().st_size == 0
    with Runbook.open(path, create=True) as runbook:
        assert runbook.count(seeds=True) == len(DESIGN_CAUSE_IDS)


def test_open_without_create_never_creates(tmp_path: Path) -> None:
    path = tmp_path / "none" / "runbook.sqlite3"
    with pytest.raises(UsageError, match="no runbook"):
        Runbook.open(path, create=False)
    assert not path.parent.exists()


# ---------------------------------------------------------------- entries


def test_add_get_list_search_and_matching(tmp_path: Path) -> None:
    recorded = diagnosed_entry(bundle("019", tmp_path), fix="freed port 8000", outcome="worked: up again")
    with Runbook.open(tmp_path / "rb.sqlite3", create=True) as runbook:
        stored = runbook.add(recorded)
        other = runbook.add(entry("x1", cause="nccl_or_distributed_init", notes="NCCL WARN on host gpu-node-17"))
        assert stored.id is not None and runbook.get(stored.id) == stored
        assert dataclasses.replace(stored, id=None) == recorded
        assert [e.uid for e in runbook.entries()] == [other.uid, stored.uid]  # oldest first
        assert runbook.with_fingerprint(recorded.fingerprint or "") == [stored]
        assert [e.uid for e in runbook.with_cause("port_in_use")] == [stored.uid]
        found = runbook.search("address already in use")
        assert found[0].uid == stored.uid and any(e.seed for e in found)
        assert [e.uid for e in runbook.search("gpu-node-17")] == [other.uid]
        assert runbook.search("no-such-words-anywhere") == []
        with pytest.raises(UsageError):
            runbook.search(" ?! ")
        with pytest.raises(UsageError, match="no runbook entry"):
            runbook.get(10_000)
        with pytest.raises(UsageError, match="already"):
            runbook.add(recorded)


def test_every_free_text_field_is_redacted_before_storage(tmp_path: Path) -> None:
    leaky = entry(
        "leak",
        evidence=(f"logs/server.log:3: export HF_TOKEN={SECRET}",),
        config={"model": "m", "env.HF_TOKEN": "short-but-secret", "env.OPENAI_API_KEY": "abc"},
        gpu=f"A100 {SECRET}",
        fix=f"rotated {SECRET}\nand restarted with --api-key sk-{'k' * 24}",
        outcome=f"worked: {SECRET}",
        notes=f"curl https://admin:hunter2pass@host/ with Authorization: Bearer {'t' * 20}",
        origin=f"/incidents/{SECRET}",
        engine_version=SECRET,
        torch=SECRET,
    )
    path = tmp_path / "rb.sqlite3"
    with Runbook.open(path, create=True) as runbook:
        stored = runbook.add(leaky)
    for secret in (SECRET, "short-but-secret", "hunter2pass", "k" * 24, "t" * 20):
        assert secret.encode() not in path.read_bytes()
        assert secret not in repr(stored)
    assert stored.config["model"] == "m" and stored.config["env.HF_TOKEN"].startswith("<redacted:")
    assert stored.fix is not None and stored.fix.startswith("rotated <redacted:hf_token:1>\n")
    assert stored.worked is True


def test_newer_schema_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "rb.sqlite3"
    Runbook.open(path, create=True).close()
    raw = sqlite3.connect(path)
    raw.execute(f"PRAGMA user_version = {SCHEMA_VERSION + 1}")
    raw.close()
    with pytest.raises(UsageError, match="newer"):
        Runbook.open(path, create=True)


# ---------------------------------------------------------------- files that are not runbooks


def test_random_bytes_are_refused_and_left_alone(tmp_path: Path) -> None:
    path = tmp_path / "rb.sqlite3"
    path.write_bytes(os.urandom(8192))
    before = digest(path)
    for create in (True, False):
        with pytest.raises(UnavailableError, match="not a SQLite database"):
            Runbook.open(path, create=create)
    assert digest(path) == before and sidecars(path) == []


def test_another_applications_database_is_refused_and_not_migrated(tmp_path: Path) -> None:
    path = tmp_path / "app.db"
    raw = sqlite3.connect(path)
    raw.execute("CREATE TABLE users (id INTEGER PRIMARY KEY, name TEXT)")
    raw.execute("INSERT INTO users (name) VALUES ('ada')")
    raw.commit()
    raw.close()
    before = digest(path)
    for create in (True, False):
        with pytest.raises(UsageError, match=r"another application \(tables: users\)"):
            Runbook.open(path, create=create)
    assert digest(path) == before
    raw = sqlite3.connect(path)
    assert raw.execute("PRAGMA journal_mode").fetchone()[0] == "delete"
    assert raw.execute("PRAGMA user_version").fetchone()[0] == 0
    raw.close()


def test_another_application_id_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "app.db"
    raw = sqlite3.connect(path)
    raw.execute("PRAGMA application_id = 1234")
    raw.close()
    with pytest.raises(UsageError, match="application_id 0x4d2"):
        Runbook.open(path, create=True)


def test_a_damaged_runbook_is_a_clear_error(tmp_path: Path) -> None:
    path = tmp_path / "rb.sqlite3"
    with Runbook.open(path, create=True) as runbook:
        for i in range(50):
            runbook.add(entry(f"e{i}", notes="x" * 2000))
    data = bytearray(path.read_bytes())
    data[4096:] = os.urandom(len(data) - 4096)  # the header survives, every other page is garbage
    path.write_bytes(bytes(data))
    before = digest(path)
    with pytest.raises(UnavailableError, match="is damaged or not a database"), Runbook.open(path, create=True) as rb:
        rb.entries()
    assert digest(path) == before


def test_a_directory_is_refused(tmp_path: Path) -> None:
    with pytest.raises(UsageError, match="directory"):
        Runbook.open(tmp_path, create=True)


# ---------------------------------------------------------------- crashes and concurrent writers

_ADD_IN_A_LOOP = """
    import sys
    import time
    from pathlib import Path
    from llmtriage.runbook.entry import Entry
    from llmtriage.runbook.store import Runbook
    path, name, count, pause_s = Path(sys.argv[1]), sys.argv[2], int(sys.argv[3]), float(sys.argv[4])
    go = path.with_name("go")
    print("ready", flush=True)
    while not go.exists():  # a start line, so that the writers really run at the same time
        time.sleep(0.005)
    with Runbook.open(path, create=True) as runbook:
        for i in range(count):
            stored = runbook.add(Entry(uid=f"{name}-{i}", recorded_at="2026-10-02T11:22:33Z",
                                       symptom_class="startup_failure", cause="port_in_use", notes=f"{name} {i}"))
            print(stored.uid, flush=True)
            time.sleep(pause_s)  # the time a person or a script takes between two incidents
"""


def started(procs: list[subprocess.Popen[str]], path: Path) -> list[subprocess.Popen[str]]:
    """Wait until every writer is ready, then let them all go at once."""
    for proc in procs:
        assert proc.stdout is not None and proc.stdout.readline().strip() == "ready"
    path.with_name("go").touch()
    return procs


def check_integrity(path: Path) -> None:
    raw = sqlite3.connect(path)
    assert raw.execute("PRAGMA integrity_check").fetchone()[0] == "ok"
    raw.execute("INSERT INTO incidents_fts (incidents_fts) VALUES ('integrity-check')")
    raw.close()


def test_a_writer_killed_mid_transaction_loses_nothing_committed(tmp_path: Path) -> None:
    path = tmp_path / "rb.sqlite3"
    proc = child(
        _ADD_IN_A_LOOP
        + """
    import sqlite3, time
    raw = sqlite3.connect(path, isolation_level=None)
    raw.execute("BEGIN IMMEDIATE")
    raw.execute("INSERT INTO incidents (uid, recorded_at, symptom_class, cause, notes) "
                "VALUES ('half-written', 'x', 'startup_failure', 'port_in_use', 'never committed')")
    print("in-transaction", flush=True)
    time.sleep(60)
    """,
        path,
        "committed",
        20,
        0,
    )
    started([proc], path)
    assert proc.stdout is not None
    lines = [proc.stdout.readline().strip() for _ in range(21)]
    assert lines[-1] == "in-transaction"
    proc.send_signal(signal.SIGKILL)
    proc.wait(timeout=30)
    with Runbook.open(path, create=True) as runbook:
        assert [e.uid for e in runbook.entries()] == lines[:-1]
        assert runbook.search("never committed") == []
        runbook.add(entry("after-the-crash"))  # the lock died with the process
    check_integrity(path)


def test_a_writer_killed_at_a_random_moment_loses_nothing_committed(tmp_path: Path) -> None:
    path = tmp_path / "rb.sqlite3"
    (proc,) = started([child(_ADD_IN_A_LOOP, path, "loop", 100_000, 0)], path)
    assert proc.stdout is not None
    committed = [proc.stdout.readline().strip() for _ in range(30)]
    proc.send_signal(signal.SIGKILL)
    rest, _ = proc.communicate(timeout=30)
    committed += rest.split()
    with Runbook.open(path, create=True) as runbook:
        stored = [e.uid for e in runbook.entries()]
    # Everything reported committed is there; at most the one in flight when it died made it too.
    assert stored[: len(committed)] == committed and len(stored) - len(committed) <= 1
    check_integrity(path)


def test_concurrent_writers_on_a_new_file_lose_nothing(tmp_path: Path) -> None:
    """Four processes create the same new runbook and add 50 entries each, all at once."""
    path = tmp_path / "rb.sqlite3"
    procs = [child(_ADD_IN_A_LOOP, path, f"writer{n}", 50, 0.001) for n in range(4)]
    start = time.perf_counter()
    results = [p.communicate(timeout=120) for p in started(procs, path)]
    elapsed = time.perf_counter() - start
    assert [p.returncode for p in procs] == [0, 0, 0, 0], [err for _, err in results]
    with Runbook.open(path, create=False) as runbook:
        uids = [e.uid for e in runbook.entries()]
        assert runbook.count(seeds=True) == len(DESIGN_CAUSE_IDS)
    assert sorted(uids) == sorted(f"writer{n}-{i}" for n in range(4) for i in range(50))
    check_integrity(path)
    writers = [uid.split("-")[0] for uid in uids]
    switches = sum(a != b for a, b in itertools.pairwise(writers))
    print(f"4 processes x 50 adds on a new runbook: {elapsed:.2f} s, the writer changed {switches} times")


# ---------------------------------------------------------------- search, edit, remove


def test_search_by_error_family_stem_and_symptom_class(tmp_path: Path) -> None:
    # A TGI config error of the oom family, recorded as a startup failure: no word of it says OOM.
    tgi = entry("tgi", cause="invalid_engine_argument", signatures=("tgi_max_total_tokens_over_kv",))
    bound = entry("bound", signatures=("server_port_in_use",), notes="two memories of the same port")
    with Runbook.open(tmp_path / "rb.sqlite3", create=True) as runbook:
        runbook.add_many([tgi, bound])
        oom = [e.uid for e in runbook.search("oom")]
        assert "tgi" in oom and "bound" not in oom
        assert [e.uid for e in runbook.search("out of memory")] == oom
        assert oom[-1] == "tgi"  # a match by family alone ranks after the matches by words
        assert [e.uid for e in runbook.search("bind memory") if not e.seed] == ["bound"]
        assert "bound" in [e.uid for e in runbook.search("memory")]  # stems: "memories"
        assert {e.symptom_class for e in runbook.search("startup_oom")} == {"startup_oom"}
        assert [e.uid for e in runbook.search("invalid_engine_argument") if not e.seed] == ["tgi"]


def test_a_schema_1_runbook_is_migrated_to_the_latest_and_its_index_rebuilt(tmp_path: Path) -> None:
    path = tmp_path / "rb.sqlite3"
    raw = sqlite3.connect(path, isolation_level=None)
    raw.execute(f"PRAGMA application_id = {APPLICATION_ID}")
    for statement in MIGRATIONS[0]:
        raw.execute(statement)
    raw.execute("PRAGMA user_version = 1")
    raw.execute(
        "INSERT INTO incidents (uid, recorded_at, symptom_class, cause, notes) "
        "VALUES ('old', '2026-01-02T03:04:05Z', 'startup_oom', 'weights_kv_exceed_memory', 'the memories of 2025')"
    )
    raw.close()
    with Runbook.open(path, create=False) as runbook:
        assert [e.uid for e in runbook.search("memory")] == ["old"]
        assert [e.uid for e in runbook.search("oom")] == ["old"]
        assert runbook.get(1).driver is None  # schema 3's stack columns, empty for an old entry
        runbook.add(entry("new", driver="550.54.15", cuda_runtime="12.4"))
        assert (runbook.get(2).driver, runbook.get(2).cuda_runtime) == ("550.54.15", "12.4")
    raw = sqlite3.connect(path)
    assert raw.execute("PRAGMA user_version").fetchone()[0] == SCHEMA_VERSION == 3
    raw.close()
    check_integrity(path)


def test_edit_and_remove_keep_the_index_in_step(tmp_path: Path) -> None:
    path = tmp_path / "rb.sqlite3"
    with Runbook.open(path, create=True) as runbook:
        stored = runbook.add(entry("e1", fix="rebooted the frobnicator", notes="night shift"))
        assert stored.id is not None
        edited = runbook.edit(stored.id, Edit(fix=f"unwedged the quux, token {SECRET}", outcome="worked"))
        assert edited == runbook.get(stored.id)
        assert edited.fix == "unwedged the quux, token <redacted:hf_token:1>" and edited.notes == "night shift"
        assert runbook.search("frobnicator") == [] and [e.uid for e in runbook.search("quux")] == ["e1"]
        assert runbook.edit(stored.id, Edit(notes="")).notes is None
        with pytest.raises(UsageError, match="no runbook entry 999"):
            runbook.edit(999, Edit(fix="x"))
        assert runbook.remove(stored.id).uid == "e1"
        assert runbook.entries() == [] and runbook.search("quux") == []
        with pytest.raises(UsageError, match="no runbook entry"):
            runbook.remove(stored.id)
    assert SECRET.encode() not in path.read_bytes()
    check_integrity(path)


def test_an_edit_is_checked_as_add_checks() -> None:
    with pytest.raises(UsageError, match="unknown cause 'gremlins'"):
        Edit(cause="gremlins")
    with pytest.raises(UsageError, match="an outcome starts with"):
        Edit(outcome="maybe")
    assert Edit(fix="x", notes="").changes == {"fix": "x", "notes": ""}
