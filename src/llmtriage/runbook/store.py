"""The runbook's SQLite store: one file, WAL, migrations by ``PRAGMA user_version``, FTS5 over the text.

Safety: every write is one ``BEGIN IMMEDIATE`` transaction (two processes adding at once wait for each
other, a crash loses nothing committed); every free-text field is redacted before it is written; a
file that is not a runbook (random bytes, another application's database) is refused before anything
is written to it, and never migrated.
"""

from __future__ import annotations

import dataclasses
import json
import os
import sqlite3
from collections.abc import Iterable, Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from types import TracebackType

import platformdirs

from llmtriage.errors import UnavailableError, UsageError
from llmtriage.redact import Redactor
from llmtriage.runbook import query
from llmtriage.runbook.entry import Edit, Entry, now_utc, redacted
from llmtriage.runbook.seeds import seeds

ENV_VAR = "LLMTRIAGE_RUNBOOK"
# PRAGMA application_id of a runbook: "LLTR". A SQLite file with another id, or none and other tables,
# belongs to someone else.
APPLICATION_ID = 0x4C4C5452
BUSY_TIMEOUT_S = 30.0
_SQLITE_MAGIC = b"SQLite format 3\x00"
_MAX_ROWID = 2**63 - 1
_DAMAGED_HINT = "move the file aside and start a new runbook (llmtriage leaves it as it is)"

# Migration N (1-based) takes the schema from user_version N-1 to N; statements run in one transaction.
MIGRATIONS: tuple[tuple[str, ...], ...] = (
    (
        """CREATE TABLE incidents (
            id INTEGER PRIMARY KEY,
            uid TEXT NOT NULL UNIQUE,
            recorded_at TEXT NOT NULL,
            seed INTEGER NOT NULL DEFAULT 0,
            symptom_class TEXT NOT NULL,
            cause TEXT NOT NULL,
            fingerprint TEXT,
            signatures TEXT NOT NULL DEFAULT '',
            evidence TEXT NOT NULL DEFAULT '',
            config TEXT NOT NULL DEFAULT '{}',
            gpu TEXT,
            engine TEXT,
            engine_version TEXT,
            fix TEXT,
            outcome TEXT,
            notes TEXT,
            origin TEXT
        )""",
        "CREATE INDEX incidents_fingerprint ON incidents (fingerprint)",
        "CREATE INDEX incidents_cause ON incidents (cause)",
        """CREATE VIRTUAL TABLE incidents_fts USING fts5(
            cause, evidence, fix, outcome, notes, content='incidents', content_rowid='id'
        )""",
        """CREATE TRIGGER incidents_fts_insert AFTER INSERT ON incidents BEGIN
            INSERT INTO incidents_fts (rowid, cause, evidence, fix, outcome, notes)
            VALUES (new.id, new.cause, new.evidence, new.fix, new.outcome, new.notes);
        END""",
        """CREATE TRIGGER incidents_fts_delete AFTER DELETE ON incidents BEGIN
            INSERT INTO incidents_fts (incidents_fts, rowid, cause, evidence, fix, outcome, notes)
            VALUES ('delete', old.id, old.cause, old.evidence, old.fix, old.outcome, old.notes);
        END""",
        """CREATE TRIGGER incidents_fts_update AFTER UPDATE ON incidents BEGIN
            INSERT INTO incidents_fts (incidents_fts, rowid, cause, evidence, fix, outcome, notes)
            VALUES ('delete', old.id, old.cause, old.evidence, old.fix, old.outcome, old.notes);
            INSERT INTO incidents_fts (rowid, cause, evidence, fix, outcome, notes)
            VALUES (new.id, new.cause, new.evidence, new.fix, new.outcome, new.notes);
        END""",
    ),
    # 2: the index stems words (porter: "memories" finds "memory") and holds the symptom class too.
    (
        "DROP TRIGGER incidents_fts_insert",
        "DROP TRIGGER incidents_fts_delete",
        "DROP TRIGGER incidents_fts_update",
        "DROP TABLE incidents_fts",
        """CREATE VIRTUAL TABLE incidents_fts USING fts5(
            symptom_class, cause, evidence, fix, outcome, notes, content='incidents', content_rowid='id',
            tokenize='porter unicode61'
        )""",
        """CREATE TRIGGER incidents_fts_insert AFTER INSERT ON incidents BEGIN
            INSERT INTO incidents_fts (rowid, symptom_class, cause, evidence, fix, outcome, notes)
            VALUES (new.id, new.symptom_class, new.cause, new.evidence, new.fix, new.outcome, new.notes);
        END""",
        """CREATE TRIGGER incidents_fts_delete AFTER DELETE ON incidents BEGIN
            INSERT INTO incidents_fts (incidents_fts, rowid, symptom_class, cause, evidence, fix, outcome, notes)
            VALUES ('delete', old.id, old.symptom_class, old.cause, old.evidence, old.fix, old.outcome, old.notes);
        END""",
        """CREATE TRIGGER incidents_fts_update AFTER UPDATE ON incidents BEGIN
            INSERT INTO incidents_fts (incidents_fts, rowid, symptom_class, cause, evidence, fix, outcome, notes)
            VALUES ('delete', old.id, old.symptom_class, old.cause, old.evidence, old.fix, old.outcome, old.notes);
            INSERT INTO incidents_fts (rowid, symptom_class, cause, evidence, fix, outcome, notes)
            VALUES (new.id, new.symptom_class, new.cause, new.evidence, new.fix, new.outcome, new.notes);
        END""",
        "INSERT INTO incidents_fts (incidents_fts) VALUES ('rebuild')",
    ),
    # 3: the software stack, so that "seen before" can tell the same error on the same driver.
    (
        "ALTER TABLE incidents ADD COLUMN driver TEXT",
        "ALTER TABLE incidents ADD COLUMN cuda_runtime TEXT",
        "ALTER TABLE incidents ADD COLUMN torch TEXT",
    ),
)
SCHEMA_VERSION = len(MIGRATIONS)

_COLUMN_NAMES = (
    *("uid", "recorded_at", "seed", "symptom_class", "cause", "fingerprint", "signatures", "evidence", "config"),
    *("gpu", "engine", "engine_version", "driver", "cuda_runtime", "torch", "fix", "outcome", "notes", "origin"),
)
_OPTIONAL_TEXTS = (
    *("fingerprint", "gpu", "engine", "engine_version", "driver", "cuda_runtime", "torch"),
    *("fix", "outcome", "notes", "origin"),
)
_COLUMNS = ", ".join(_COLUMN_NAMES)
_ASSIGN_COLUMNS = ", ".join(f"{c} = ?" for c in _COLUMN_NAMES)
_SELECT = "SELECT " + ", ".join(f"incidents.{c}" for c in ["id", *_COLUMN_NAMES]) + " FROM incidents"


def default_path() -> Path:
    """``$LLMTRIAGE_RUNBOOK``, else ``runbook.sqlite3`` in the user's data directory."""
    override = os.environ.get(ENV_VAR)
    if override:
        return Path(override)
    return platformdirs.user_data_path("llmtriage", appauthor=False) / "runbook.sqlite3"


def _row(entry: Entry) -> tuple[object, ...]:
    return (
        entry.uid,
        entry.recorded_at,
        int(entry.seed),
        entry.symptom_class,
        entry.cause,
        entry.fingerprint,
        " ".join(entry.signatures),
        "\n".join(entry.evidence),
        json.dumps(entry.config, sort_keys=True, ensure_ascii=False),
        entry.gpu,
        entry.engine,
        entry.engine_version,
        entry.driver,
        entry.cuda_runtime,
        entry.torch,
        entry.fix,
        entry.outcome,
        entry.notes,
        entry.origin,
    )


def _entry(row: sqlite3.Row) -> Entry:
    """The entry a row holds; ValueError naming the field when a column holds what no write of this store puts
    there (SQLite keeps any type in any column, and another tool may have edited the file)."""
    try:
        config = json.loads(row["config"])
    except (TypeError, ValueError) as e:
        raise ValueError("its config is not JSON") from e
    if not isinstance(config, dict) or not all(isinstance(k, str) and isinstance(v, str) for k, v in config.items()):
        raise ValueError("its config is not a JSON object of strings")
    texts = {name: row[name] for name in ("uid", "recorded_at", "symptom_class", "cause", "signatures", "evidence")}
    optional = {name: row[name] for name in _OPTIONAL_TEXTS}
    for name, value in texts.items():
        if not isinstance(value, str):
            raise ValueError(f"its {name} is not text")
    for name, value in optional.items():
        if value is not None and not isinstance(value, str):
            raise ValueError(f"its {name} is not text")
    return Entry(
        id=row["id"],
        uid=texts["uid"],
        recorded_at=texts["recorded_at"],
        seed=bool(row["seed"]),
        symptom_class=texts["symptom_class"],
        cause=texts["cause"],
        fingerprint=optional["fingerprint"],
        signatures=tuple(texts["signatures"].split()),
        evidence=tuple(texts["evidence"].splitlines()),
        config=config,
        gpu=optional["gpu"],
        engine=optional["engine"],
        engine_version=optional["engine_version"],
        driver=optional["driver"],
        cuda_runtime=optional["cuda_runtime"],
        torch=optional["torch"],
        fix=optional["fix"],
        outcome=optional["outcome"],
        notes=optional["notes"],
        origin=optional["origin"],
    )


class Runbook:
    """An open runbook. Use :meth:`open`; close it (or use ``with``) when done."""

    def __init__(self, path: Path, conn: sqlite3.Connection) -> None:
        self.path = path
        self._conn = conn
        # Damaged rows skipped while reading, one line each (the reader shows them as problems).
        self.problems: list[str] = []

    # ------------------------------------------------------------ opening

    @classmethod
    def open(cls, path: Path, *, create: bool) -> Runbook:
        """Open the runbook at ``path``; with ``create``, make it (with its seeds) when it is not there.

        Raises UsageError for a missing runbook (without ``create``), a directory, another application's
        SQLite file or a newer schema; UnavailableError for a file that is not SQLite or cannot be read.
        """
        if path.is_dir():
            raise UsageError(f"runbook {path} is a directory", "give --db the path of a runbook file")
        if not path.exists():
            if not create:
                raise UsageError(f"no runbook at {path}", "`llmtriage runbook add BUNDLE --db PATH` creates one")
            try:
                path.parent.mkdir(parents=True, exist_ok=True)
            except OSError as e:
                raise UnavailableError(f"cannot create {path.parent}: {e.strerror or e}") from e
        else:
            _check_magic(path)
        mode = "rwc" if create else "rw"
        try:
            conn = sqlite3.connect(
                f"{path.resolve().as_uri()}?mode={mode}", uri=True, timeout=BUSY_TIMEOUT_S, isolation_level=None
            )
        except sqlite3.Error as e:
            raise UnavailableError(f"cannot open runbook {path}: {e}", "check the path and its permissions") from e
        conn.row_factory = sqlite3.Row
        runbook = cls(path, conn)
        try:
            runbook._prepare(create)
        except BaseException:
            conn.close()
            raise
        return runbook

    def _prepare(self, create: bool) -> None:
        """Check whose file this is, create or migrate the schema, then switch to WAL."""
        with self._guard():
            version = self._identify()
            if version == 0 and not create:
                raise UsageError(f"{self.path} is empty, not a runbook yet", "`llmtriage runbook add` fills it")
            if version < SCHEMA_VERSION:
                with self._write():
                    # Another process may have created or migrated it while this one waited for the lock.
                    version = self._identify()
                    if version == 0:
                        self._conn.execute(f"PRAGMA application_id = {APPLICATION_ID}")
                    for number in range(version + 1, SCHEMA_VERSION + 1):
                        for statement in MIGRATIONS[number - 1]:
                            self._conn.execute(statement)
                        self._conn.execute(f"PRAGMA user_version = {number}")
                    if version == 0:
                        self._insert(seeds(now_utc()), redact=False)
            if self._conn.execute("PRAGMA journal_mode").fetchone()[0] != "wal":
                self._conn.execute("PRAGMA journal_mode = WAL")
            self._conn.execute("PRAGMA synchronous = FULL")

    def _identify(self) -> int:
        """The schema version of this runbook (0: a new, empty file); raises for anyone else's file."""
        application_id = self._conn.execute("PRAGMA application_id").fetchone()[0]
        version: int = self._conn.execute("PRAGMA user_version").fetchone()[0]
        if application_id == 0:
            tables = [r[0] for r in self._conn.execute("SELECT name FROM sqlite_master WHERE type = 'table'")]
            if tables:
                raise UsageError(
                    f"{self.path} is a SQLite database of another application (tables: {', '.join(tables[:5])})",
                    "give --db the path of an llmtriage runbook; this file is left untouched",
                )
            return 0
        if application_id != APPLICATION_ID:
            raise UsageError(
                f"{self.path} is a SQLite database of another application (application_id {application_id:#x})",
                "give --db the path of an llmtriage runbook; this file is left untouched",
            )
        if version > SCHEMA_VERSION:
            raise UsageError(
                f"runbook {self.path} has schema {version}, newer than this llmtriage knows ({SCHEMA_VERSION})",
                "upgrade llmtriage",
            )
        return version

    # ------------------------------------------------------------ plumbing

    def close(self) -> None:
        """Close the connection."""
        self._conn.close()

    def __enter__(self) -> Runbook:
        return self

    def __exit__(self, kind: type[BaseException] | None, value: BaseException | None, tb: TracebackType | None) -> None:
        self.close()

    @contextmanager
    def _guard(self) -> Iterator[None]:
        """SQLite errors become one clear line: busy, or a damaged file."""
        try:
            yield
        except sqlite3.OperationalError as e:
            if "locked" in str(e) or "busy" in str(e):
                raise UnavailableError(
                    f"runbook {self.path} stayed locked for {BUSY_TIMEOUT_S:g} s", "another process is writing it"
                ) from e
            raise UnavailableError(f"cannot use runbook {self.path}: {e}", _DAMAGED_HINT) from e
        except sqlite3.DatabaseError as e:
            raise UnavailableError(f"runbook {self.path} is damaged or not a database: {e}", _DAMAGED_HINT) from e

    @contextmanager
    def _write(self) -> Iterator[None]:
        """One write transaction: all of it is committed, or none of it."""
        self._conn.execute("BEGIN IMMEDIATE")
        try:
            yield
        except BaseException:
            self._conn.execute("ROLLBACK")
            raise
        self._conn.execute("COMMIT")

    def _insert(self, entries: Sequence[Entry], *, redact: bool = True) -> list[Entry]:
        """Insert the entries whose uid is new; returns them with their ids (inside a transaction)."""
        added = []
        for entry in entries:
            stored = redacted(entry, Redactor()) if redact else entry
            cursor = self._conn.execute(
                f"INSERT INTO incidents ({_COLUMNS}) VALUES ({', '.join('?' * len(_COLUMN_NAMES))}) ON CONFLICT (uid) DO NOTHING",
                _row(stored),
            )
            if cursor.rowcount:
                added.append(dataclasses.replace(stored, id=cursor.lastrowid))
        return added

    # ------------------------------------------------------------ the API

    def add(self, entry: Entry) -> Entry:
        """Store ``entry`` (redacted first) in one transaction; returns it as stored, with its id."""
        with self._guard(), self._write():
            added = self._insert([entry])
        if not added:
            raise UsageError(f"an entry with uid {entry.uid} is already in the runbook")
        return added[0]

    def add_many(self, entries: Sequence[Entry]) -> list[Entry]:
        """Store the entries whose uid is new, all in one transaction; returns those added."""
        with self._guard(), self._write():
            return self._insert(entries)

    def get(self, entry_id: int) -> Entry:
        """The entry with id ``entry_id``; UsageError when there is none, UnavailableError when it is damaged."""
        row = None
        if 0 <= entry_id <= _MAX_ROWID:  # SQLite's integers are 64-bit: a larger id cannot exist
            with self._guard():
                row = self._conn.execute(f"{_SELECT} WHERE id = ?", (entry_id,)).fetchone()
        if row is None:
            raise UsageError(f"no runbook entry {entry_id}", "`llmtriage runbook list` shows the ids")
        try:
            return _entry(row)
        except ValueError as e:
            raise UnavailableError(f"runbook entry {entry_id} in {self.path} is damaged: {e}", _DAMAGED_HINT) from e

    def _entries(self, rows: Iterable[sqlite3.Row]) -> list[Entry]:
        """The entries of ``rows``; a damaged row is skipped and named in :attr:`problems`."""
        entries = []
        for row in rows:
            try:
                entries.append(_entry(row))
            except ValueError as e:
                self.problems.append(f"runbook {self.path}: entry {row['id']} skipped, {e}")
        return entries

    def entries(self, *, seeds: bool = False) -> list[Entry]:
        """All incidents, oldest first; the seed entries too with ``seeds``."""
        where = "" if seeds else " WHERE seed = 0"
        with self._guard():
            return self._entries(self._conn.execute(f"{_SELECT}{where} ORDER BY recorded_at, id"))

    def count(self, *, seeds: bool) -> int:
        """How many incidents (or seed entries, with ``seeds``) there are."""
        with self._guard():
            row = self._conn.execute("SELECT count(*) FROM incidents WHERE seed = ?", (int(seeds),)).fetchone()
        return int(row[0])

    def search(self, text: str) -> list[Entry]:
        """Entries that match every term of ``text`` (:mod:`llmtriage.runbook.query`), seeds included, best first.

        Best: the lowest sum of the terms' FTS5 ranks; a term matched only by an error family adds nothing.
        """
        terms = query.parse(text)
        if not terms:
            raise UsageError(f"nothing to search for in {text!r}", "give one or more words")
        with self._guard():
            score = self._hits(terms[0])  # id → the sum of its ranks over the terms so far
            for term in terms[1:]:
                hits = self._hits(term)
                score = {rowid: total + hits[rowid] for rowid, total in score.items() if rowid in hits}
            sql = (
                f"{_SELECT} JOIN json_each(?) AS hit ON incidents.id = CAST(hit.key AS INTEGER) "
                "ORDER BY hit.value, incidents.id"
            )
            return self._entries(self._conn.execute(sql, (json.dumps(score),)))

    def _hits(self, term: query.Term) -> dict[int, float]:
        """The ids of the entries that match ``term``, with their FTS5 rank (0 for a match by error family)."""
        sql = "SELECT rowid, rank FROM incidents_fts WHERE incidents_fts MATCH ?"
        hits: dict[int, float] = dict(self._conn.execute(sql, (term.fts_query,)).fetchall())
        if wanted := term.signature_ids:
            rows = self._conn.execute("SELECT id, signatures FROM incidents WHERE signatures != ''")
            for rowid, signatures in rows:
                if rowid not in hits and wanted & set(signatures.split()):
                    hits[rowid] = 0.0
        return hits

    def edit(self, entry_id: int, change: Edit) -> Entry:
        """Apply ``change`` to entry ``entry_id`` and store it (redacted first) in one transaction; returns it."""
        with self._guard(), self._write():
            edited = redacted(change.applied_to(self.get(entry_id)), Redactor())
            self._conn.execute(f"UPDATE incidents SET {_ASSIGN_COLUMNS} WHERE id = ?", (*_row(edited), entry_id))
        return edited

    def remove(self, entry_id: int) -> Entry:
        """Delete entry ``entry_id`` in one transaction; returns what was deleted (UsageError when there is none)."""
        with self._guard(), self._write():
            removed = self.get(entry_id)
            self._conn.execute("DELETE FROM incidents WHERE id = ?", (entry_id,))
        return removed

    def with_fingerprint(self, fingerprint: str) -> list[Entry]:
        """Incidents (never seeds) with this fingerprint, newest first."""
        return self._incidents_where("fingerprint", fingerprint)

    def with_cause(self, cause: str) -> list[Entry]:
        """Incidents (never seeds) recorded with this cause, newest first."""
        return self._incidents_where("cause", cause)

    def _incidents_where(self, column: str, value: str) -> list[Entry]:
        sql = f"{_SELECT} WHERE seed = 0 AND {column} = ? ORDER BY recorded_at DESC, id DESC"
        with self._guard():
            return self._entries(self._conn.execute(sql, (value,)))


def _check_magic(path: Path) -> None:
    """Refuse a file that is not SQLite before SQLite touches it (an empty file is a new database)."""
    try:
        with path.open("rb") as f:
            head = f.read(len(_SQLITE_MAGIC))
    except OSError as e:
        raise UnavailableError(f"cannot read runbook {path}: {e.strerror or e}") from e
    if head and head != _SQLITE_MAGIC:
        raise UnavailableError(
            f"{path} is not a SQLite database (corrupt, or another kind of file)",
            "give --db the path of an llmtriage runbook; this file is left untouched",
        )
