"""A per-user cache of derived data (parsed catalogs, the compiled Hyperscan database) that saves start-up time.

Entries are keyed by a hash of what they were derived from, or, for packaged files, by their sizes and modification
times (as Python's own bytecode cache is), so a stale entry is never read; they carry a CRC-32 of their own bytes, so
a damaged one is never used. The cache is only an optimization: an entry that is missing,
damaged or cannot be written means the caller derives the data again.
``LLMTRIAGE_CACHE_DIR`` moves it; an empty value turns it off.
"""

from __future__ import annotations

import os
import zlib
from collections.abc import Iterable
from pathlib import Path


def cache_dir() -> Path | None:
    """``$LLMTRIAGE_CACHE_DIR``, else ``$XDG_CACHE_HOME/llmtriage``, else ``~/.cache/llmtriage``; None when off."""
    configured = os.environ.get("LLMTRIAGE_CACHE_DIR")
    if configured is not None:
        return Path(configured) if configured else None
    xdg = os.environ.get("XDG_CACHE_HOME")
    return Path(xdg) / "llmtriage" if xdg else Path.home() / ".cache" / "llmtriage"


def key(kind: str, *parts: bytes) -> str:
    """A file name for an entry of ``kind`` derived from ``parts``."""
    import hashlib  # OpenSSL's start costs ~2 ms, which the start-up paths keyed by file_key do not pay

    digest = hashlib.sha256()
    for part in parts:
        digest.update(len(part).to_bytes(8, "little"))
        digest.update(part)
    return f"{kind}-{digest.hexdigest()[:32]}"


def file_key(kind: str, files: Iterable[Path], *parts: str) -> str:
    """A file name for an entry of ``kind`` derived from ``files`` and ``parts``, without reading the files: by their
    count, the newest modification time and the total size (an edit, a reinstall or a checkout moves the time)."""
    stats = [path.stat() for path in files]
    newest = max((s.st_mtime_ns for s in stats), default=0)
    stamp = "-".join((str(len(stats)), str(newest), str(sum(s.st_size for s in stats)), *parts))
    return f"{kind}-{stamp}".replace("/", "_").replace(" ", "_")


_CHECKSUM_BYTES = 4


def read(name: str) -> bytes | None:
    """The entry ``name``, or None when there is none, it cannot be read or its bytes are not those written."""
    root = cache_dir()
    if root is None:
        return None
    try:
        stored = (root / name).read_bytes()
    except OSError:
        return None
    data = stored[_CHECKSUM_BYTES:]
    if zlib.crc32(data).to_bytes(_CHECKSUM_BYTES, "little") != stored[:_CHECKSUM_BYTES]:
        return None
    return data


def write(name: str, data: bytes) -> None:
    """Store ``data`` as ``name`` atomically (a reader never sees half an entry); failing to is not an error."""
    root = cache_dir()
    if root is None:
        return
    import tempfile  # only a first run writes; the import costs every start-up ~3 ms

    try:
        root.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=root, prefix=f".{name}.")
        try:
            with os.fdopen(fd, "wb") as f:
                f.write(zlib.crc32(data).to_bytes(_CHECKSUM_BYTES, "little"))
                f.write(data)
            os.replace(tmp, root / name)
        except BaseException:
            Path(tmp).unlink(missing_ok=True)
            raise
    except OSError:
        pass
