"""Writing a file the user named (`report -o`, `diagnose --html`, `runbook export -o`) without harming what was there.

A regular file or a new path is written whole: a temporary file beside it, then renamed over it, so a reader never
sees half a page. A device or a pipe (`-o /dev/null`, `-o /dev/stdout`, a FIFO) is written through, never replaced.
A symbolic link is refused: renaming over it would replace the link, writing through it would write where the
link points; the user names that path instead.
"""

from __future__ import annotations

import os
import stat
import tempfile
from pathlib import Path

from llmtriage.errors import UsageError


def write_output(path: Path, data: bytes) -> None:
    """Write ``data`` to ``path`` as the module docstring says; a clear UsageError when it cannot."""
    try:
        mode = os.lstat(path).st_mode
    except FileNotFoundError:
        mode = None
    except OSError as e:
        raise UsageError(f"cannot write {path}: {e.strerror or e}", "choose another path") from e
    if mode is not None and stat.S_ISLNK(mode):
        raise UsageError(
            f"cannot write {path}: a symbolic link is not written through",
            f"give the path it points to: {path.resolve()}",
        )
    if mode is not None and stat.S_ISDIR(mode):
        raise UsageError(f"cannot write {path}: it is a directory", "give a file name")
    try:
        if mode is not None and not stat.S_ISREG(mode):
            with path.open("wb") as f:  # a device, a FIFO: write through, keep it what it is
                f.write(data)
            return
        _replace(path, data)
    except OSError as e:
        raise UsageError(f"cannot write {path}: {e.strerror or e}", "choose another path") from e


def _replace(path: Path, data: bytes) -> None:
    directory = path.parent if str(path.parent) else Path(".")
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=directory)
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
        os.chmod(tmp, 0o644)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
