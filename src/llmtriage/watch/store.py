"""The watched time series in SQLite (WAL), for plots after the fact: one row per endpoint and tick, one per GPU
and tick, and the events (down, reset, breach, capture...). ``PRAGMA user_version`` is the schema version.

    SELECT e.url, s.t_s, s.ttft_p95_s, s.waiting FROM samples s JOIN endpoints e ON e.id = s.endpoint_id;
"""

from __future__ import annotations

import sqlite3
from collections.abc import Iterable
from pathlib import Path

from llmtriage.errors import UsageError
from llmtriage.watch.endpoint import Event, Frame

SCHEMA_VERSION = 1

_SAMPLE_COLUMNS = (
    "window_s",
    "ttft_p95_s",
    "tpot_p95_s",
    "itl_p95_s",
    "running",
    "waiting",
    "kv_usage_ratio",
    "preemptions_per_s",
    "prompt_tokens_per_s",
    "generation_tokens_per_s",
    "error_ratio",
    "tokens_still_s",
    "probe_first_token_s",
)
_GPU_COLUMNS = (
    "memory_used_mib",
    "memory_total_mib",
    "utilization_gpu_pct",
    "power_draw_w",
    "power_limit_w",
    "temperature_c",
    "sm_clock_mhz",
    "sm_clock_max_mhz",
    "clocks_event_reasons_mask",
)

_SCHEMA = f"""
CREATE TABLE endpoints (id INTEGER PRIMARY KEY, url TEXT NOT NULL UNIQUE);
CREATE TABLE samples (
    endpoint_id INTEGER NOT NULL REFERENCES endpoints (id),
    t_s REAL NOT NULL,
    up INTEGER NOT NULL,
    health_ok INTEGER,
    {", ".join(f"{c} REAL" for c in _SAMPLE_COLUMNS)},
    PRIMARY KEY (endpoint_id, t_s)
) WITHOUT ROWID;
CREATE TABLE gpu_samples (
    endpoint_id INTEGER NOT NULL REFERENCES endpoints (id),
    t_s REAL NOT NULL,
    gpu_index INTEGER NOT NULL,
    {", ".join(f"{c} REAL" for c in _GPU_COLUMNS)},
    PRIMARY KEY (endpoint_id, t_s, gpu_index)
) WITHOUT ROWID;
CREATE TABLE events (
    endpoint_id INTEGER NOT NULL REFERENCES endpoints (id),
    t_s REAL NOT NULL,
    kind TEXT NOT NULL,
    message TEXT NOT NULL
);
CREATE INDEX events_by_time ON events (t_s);
PRAGMA user_version = {SCHEMA_VERSION};
"""


class Store:
    """One watch database; writes each tick in one transaction."""

    def __init__(self, path: Path) -> None:
        self.path = path
        try:
            self._db = sqlite3.connect(path, isolation_level=None)
            self._db.execute("PRAGMA journal_mode = WAL")
            self._db.execute("PRAGMA synchronous = NORMAL")
            self._prepare()
        except sqlite3.DatabaseError as e:
            raise UsageError(f"--db {path}: {e}", "give a new file, or one an earlier `llmtriage watch` wrote") from e
        self._endpoint_ids: dict[str, int] = {}

    def _prepare(self) -> None:
        version = self._db.execute("PRAGMA user_version").fetchone()[0]
        if version == SCHEMA_VERSION:
            return
        if version != 0:
            raise UsageError(
                f"--db {self.path}: schema version {version}; this llmtriage writes version {SCHEMA_VERSION}",
                "give a new --db file",
            )
        tables = self._db.execute("SELECT count(*) FROM sqlite_master WHERE type = 'table'").fetchone()[0]
        if tables:
            raise UsageError(f"--db {self.path}: a SQLite database, but not one of `llmtriage watch`")
        self._db.executescript(f"BEGIN; {_SCHEMA} COMMIT;")

    def _endpoint(self, url: str) -> int:
        found = self._endpoint_ids.get(url)
        if found is None:
            self._db.execute("INSERT OR IGNORE INTO endpoints (url) VALUES (?)", (url,))
            found = int(self._db.execute("SELECT id FROM endpoints WHERE url = ?", (url,)).fetchone()[0])
            self._endpoint_ids[url] = found
        return found

    def record(self, frames: Iterable[Frame], events: Iterable[Event] = ()) -> None:
        """Write frames and events in one transaction."""
        samples = []
        gpus = []
        for f in frames:
            endpoint = self._endpoint(f.url)
            health = None if f.health_ok is None else int(f.health_ok)
            samples.append((endpoint, f.timestamp_s, int(f.up), health, *(getattr(f, c) for c in _SAMPLE_COLUMNS)))
            for position, row in enumerate(f.gpus):
                index = row.index if row.index is not None else position
                gpus.append((endpoint, f.timestamp_s, index, *(getattr(row, c) for c in _GPU_COLUMNS)))
        rows = [(self._endpoint(e.url), e.timestamp_s, e.kind, e.message) for e in events]
        sample_marks = ", ".join("?" * (4 + len(_SAMPLE_COLUMNS)))
        gpu_marks = ", ".join("?" * (3 + len(_GPU_COLUMNS)))
        with self._db:
            self._db.execute("BEGIN")
            self._db.executemany(f"INSERT OR REPLACE INTO samples VALUES ({sample_marks})", samples)
            self._db.executemany(f"INSERT OR REPLACE INTO gpu_samples VALUES ({gpu_marks})", gpus)
            self._db.executemany("INSERT INTO events VALUES (?, ?, ?, ?)", rows)

    def close(self) -> None:
        """Close the database."""
        self._db.close()
