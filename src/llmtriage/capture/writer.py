"""The only way a capture touches disk: redact, cap, write, fsync; at the end, rename into place.

Files go into a hidden temp directory next to the target (same filesystem), so the bundle appears whole
under its final name or not at all; an interrupted capture still finishes what it holds and renames.
A write that fails (the disk is full) keeps what it wrote, cut at a line end, and says so in
:attr:`BundleWriter.write_error`; a reserve held from the start makes room for the final manifest.
Every text passes through the capture's :class:`~llmtriage.redact.Redactor` before it is written, and
before the rename every file written earlier is scrubbed again for secrets learned after it was written.
"""

from __future__ import annotations

import contextlib
import os
import threading
from dataclasses import dataclass
from pathlib import Path, PurePosixPath

from llmtriage import strict_json
from llmtriage.capture.manifest import FileRow, Manifest
from llmtriage.redact import Redactor

_DIR_MODE = 0o700
_FILE_MODE = 0o600
# Disk space held from the start and freed for the final manifest, so a full disk still ends in a readable bundle.
RESERVE_BYTES = 1 << 20
_RESERVE_NAME = ".reserve"


class BundleWriteError(OSError):
    """A file of the bundle could not be written whole; ``kept`` is the row of what was kept (or None)."""

    def __init__(self, cause: OSError, kept: FileRow | None) -> None:
        super().__init__(cause.errno, cause.strerror or str(cause))
        self.kept = kept


@dataclass(slots=True)
class _Written:
    path: Path
    row: FileRow
    secrets_seen: int


class BundleWriter:
    """Writes one bundle: ``final`` is where it will be; nothing is there until :meth:`finish`."""

    def __init__(self, final: Path, redactor: Redactor, max_total_bytes: int) -> None:
        self.final = final
        self.redactor = redactor
        self.max_total_bytes = max_total_bytes
        self.total_bytes = 0
        self.cap_reached = False
        self.temp = final.parent / f".{final.name}.partial-{os.getpid()}"
        self.temp.mkdir(mode=_DIR_MODE, parents=False)
        self._written: list[_Written] = []
        self._lock = threading.Lock()
        self.write_error: str | None = None
        """The first write that failed ("writing logs/x.log: No space left on device"): the bundle is partial."""

    def reserve(self, size: int = RESERVE_BYTES) -> int:
        """Hold up to ``size`` bytes of disk for the final manifest (see :meth:`release`), less when the disk has
        less room (halving down to 16 KiB); the bytes held (0: none)."""
        path = self.temp / _RESERVE_NAME
        while size >= 16 << 10:
            try:
                fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW, _FILE_MODE)
                try:
                    os.posix_fallocate(fd, 0, size)
                finally:
                    os.close(fd)
                return size
            except OSError:
                with contextlib.suppress(OSError):
                    path.unlink()
                size //= 2
        return 0

    def release(self) -> None:
        """Free the reserve (before the final manifest, and always before the rename)."""
        with contextlib.suppress(OSError):
            (self.temp / _RESERVE_NAME).unlink()

    def write(self, rel: str, text: str) -> FileRow | None:
        """Redact ``text`` and write it at ``rel``; cut at a line end when the size cap is near.

        Returns the file's row, or None when the cap left no room for it.
        """
        secrets_seen = self.redactor.secrets_seen
        clean = self.redactor.redact_text(text)
        with self._lock:
            data = clean.encode("utf-8")
            room = self.max_total_bytes - self.total_bytes
            truncated = len(data) > room
            if truncated:
                self.cap_reached = True
                cut = data.rfind(b"\n", 0, room)
                data = data[: cut + 1] if cut >= 0 else b""
                if not data:
                    return None
            path = self._path(rel)
            try:
                _write_synced(path, data)
            except OSError as e:
                kept = _keep_whole_lines(path, data)
                self.write_error = self.write_error or f"writing {rel}: {e.strerror or e}"
                row = None
                if kept:
                    row = FileRow(path=rel, bytes=kept, truncated=True)
                    self.total_bytes += kept
                    self._written.append(_Written(path, row, secrets_seen))
                raise BundleWriteError(e, row) from e
            row = FileRow(path=rel, bytes=len(data), truncated=truncated)
            self.total_bytes += len(data)
            self._written.append(_Written(path, row, secrets_seen))
            return row

    def write_manifest(self, manifest: Manifest) -> None:
        """Write ``manifest.json`` (outside the size cap), replacing an earlier one atomically."""
        manifest.total_bytes = self.total_bytes
        manifest.size_cap_reached = self.cap_reached
        text = self.redactor.redact_text(strict_json.dumps(manifest.to_dict()))
        path = self.temp / "manifest.json"
        staging = self.temp / ".manifest.json.new"
        try:
            _write_synced(staging, text.encode("utf-8"))
            os.replace(staging, path)
        except OSError as e:  # the manifest written before stays whole
            with contextlib.suppress(OSError):
                staging.unlink()
            self.write_error = self.write_error or f"writing manifest.json: {e.strerror or e}"
            raise

    def scrub_again(self) -> int:
        """Replace, in files written earlier, the secrets learned since; returns how many files changed."""
        changed = 0
        with self._lock:
            for written in self._written:
                if written.secrets_seen == self.redactor.secrets_seen:
                    continue
                text = written.path.read_text(encoding="utf-8")
                clean = self.redactor.redact_known(text)
                written.secrets_seen = self.redactor.secrets_seen
                if clean != text:
                    data = clean.encode("utf-8")
                    try:
                        _write_synced(written.path, data)
                    except OSError as e:  # what is left of it is the clean text, cut at a line end
                        self.write_error = self.write_error or f"rewriting {written.row.path}: {e.strerror or e}"
                        kept = _keep_whole_lines(written.path, data)
                        self.total_bytes += kept - written.row.bytes
                        written.row.bytes, written.row.truncated = kept, True
                        continue
                    self.total_bytes += len(data) - written.row.bytes
                    written.row.bytes = len(data)
                    changed += 1
        return changed

    def finish(self) -> Path:
        """Sync the directories and rename the temp directory to the bundle's name; returns that path."""
        self.release()
        for directory in sorted({w.path.parent for w in self._written} | {self.temp}, reverse=True):
            _sync_dir(directory)
        os.rename(self.temp, self.final)
        _sync_dir(self.final.parent)
        return self.final

    def _path(self, rel: str) -> Path:
        pure = PurePosixPath(rel)
        if pure.is_absolute() or ".." in pure.parts or not pure.parts:
            raise ValueError(f"not a bundle path: {rel!r}")
        path = self.temp.joinpath(*pure.parts)
        path.parent.mkdir(mode=_DIR_MODE, parents=True, exist_ok=True)
        return path


def _write_synced(path: Path, data: bytes) -> None:
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW, _FILE_MODE)
    try:
        view = memoryview(data)
        while view:
            view = view[os.write(fd, view) :]
        os.fsync(fd)
    finally:
        os.close(fd)


def _keep_whole_lines(path: Path, data: bytes) -> int:
    """After a failed write of ``data`` to ``path``: cut what reached the file at its last line end; the bytes
    kept (0: the file is removed)."""
    try:
        written = min(os.lstat(path).st_size, len(data))
        cut = data.rfind(b"\n", 0, written) + 1
        if cut <= 0:
            path.unlink()
            return 0
        os.truncate(path, cut)  # shrinking needs no room
        return cut
    except OSError:
        with contextlib.suppress(OSError):
            path.unlink()
        return 0


def _sync_dir(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def bundle_path(out_dir: Path, name: str) -> Path:
    """``out_dir/name``, or ``name-2``, ``name-3``... when taken."""
    candidate = out_dir / name
    n = 2
    while candidate.exists() or any(out_dir.glob(f".{candidate.name}.partial-*")):
        candidate = out_dir / f"{name}-{n}"
        n += 1
    return candidate
