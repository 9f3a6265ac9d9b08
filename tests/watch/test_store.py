"""The SQLite record of a watch: WAL, schema version in PRAGMA user_version, one row per endpoint and tick."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest

from llmtriage.capture.gpu import GpuRow
from llmtriage.errors import UsageError
from llmtriage.watch.endpoint import Event, Frame
from llmtriage.watch.store import SCHEMA_VERSION, Store

URL = "http://10.0.0.1:8000/metrics"
GPU = GpuRow(10.0, 0, "NVIDIA L4", 20000.0, 23034.0, 97.0, 71.0, 72.0, 63.0, 2040.0, 2040.0, "P0", 4)


def test_frames_and_events_are_recorded(tmp_path: Path) -> None:
    path = tmp_path / "watch.db"
    store = Store(path)
    store.record(
        [Frame(URL, 10.0, True, ttft_p95_s=0.4, waiting=3.0, health_ok=True, gpus=(GPU,)), Frame(URL, 11.0, False)],
        [Event(URL, 11.0, "down", "cannot connect")],
    )
    store.close()
    again = Store(path)  # reopening an existing database of this version is fine
    again.record([Frame(URL, 12.0, True)])
    again.close()
    db = sqlite3.connect(path)
    assert db.execute("PRAGMA user_version").fetchone() == (SCHEMA_VERSION,)
    assert db.execute("PRAGMA journal_mode").fetchone() == ("wal",)
    rows = db.execute(
        "SELECT e.url, s.t_s, s.up, s.health_ok, s.ttft_p95_s, s.waiting FROM samples s "
        "JOIN endpoints e ON e.id = s.endpoint_id ORDER BY s.t_s"
    ).fetchall()
    assert rows == [(URL, 10.0, 1, 1, 0.4, 3.0), (URL, 11.0, 0, None, None, None), (URL, 12.0, 1, None, None, None)]
    assert db.execute("SELECT gpu_index, power_draw_w, clocks_event_reasons_mask FROM gpu_samples").fetchall() == [
        (0, 71.0, 4.0)
    ]
    assert db.execute("SELECT t_s, kind, message FROM events").fetchall() == [(11.0, "down", "cannot connect")]


def test_a_database_of_another_schema_or_program_is_refused(tmp_path: Path) -> None:
    newer = tmp_path / "newer.db"
    sqlite3.connect(newer).execute(f"PRAGMA user_version = {SCHEMA_VERSION + 1}")
    with pytest.raises(UsageError, match="schema version 2; this llmtriage writes version 1"):
        Store(newer)
    foreign = tmp_path / "foreign.db"
    db = sqlite3.connect(foreign)
    db.execute("CREATE TABLE t (x)")
    db.commit()
    with pytest.raises(UsageError, match="not one of `llmtriage watch`"):
        Store(foreign)
    garbage = tmp_path / "garbage.db"
    garbage.write_bytes(b"not a database" * 100)
    with pytest.raises(UsageError):
        Store(garbage)
