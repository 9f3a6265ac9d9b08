"""Server logs: ``docker logs``, a file's tail, ``journalctl -u``, or the file a process writes its stdout to."""

from __future__ import annotations

import os
import stat
from pathlib import Path
from typing import ClassVar

from llmtriage.capture.collector import (
    NO_JOURNAL_ENTRIES,
    Collector,
    Context,
    Failed,
    Skip,
    Skipped,
    decode,
    tail_lines,
)
from llmtriage.capture.manifest import SourceRow
from llmtriage.capture.plan import CapturePlan, Container, JournalUnit, LogFile, Process, safe_name
from llmtriage.capture.runner import Limits

_LOG_LIMITS = Limits(timeout_s=30.0, max_bytes=64 << 20)


def _keep(ctx: Context, row: SourceRow, rel: str, data: bytes) -> None:
    text = decode(data)
    ctx.scene.log_text = text
    ctx.write(row, rel, text)
    if not text.strip():
        row.note("the log is empty")


class DockerLogs(Collector):
    """``docker logs --tail N --timestamps NAME``, stdout and stderr interleaved as the container wrote them."""

    name = "logs.docker"
    limits: ClassVar[Limits] = _LOG_LIMITS

    def skip(self, plan: CapturePlan) -> Skip | None:
        """Applies to --container."""
        return None if isinstance(plan.target, Container) else Skip("no --container given")

    def collect(self, ctx: Context, row: SourceRow) -> None:
        """Run docker logs; the daemon's error (no such container, no daemon) is the reason on failure."""
        assert isinstance(ctx.plan.target, Container)
        name = ctx.plan.target.name
        argv = ["docker", "logs", "--tail", str(ctx.plan.log_tail_lines), "--timestamps", name]
        result = ctx.run(row, argv, self.limits, merge_stderr=True)
        if not result.usable:
            raise Failed(result.why())
        _keep(ctx, row, f"logs/docker-{safe_name(name)}.log", result.stdout)


class LogFileTail(Collector):
    """The last lines of a log file (read directly, no command)."""

    name = "logs.file"
    limits: ClassVar[Limits] = _LOG_LIMITS

    def skip(self, plan: CapturePlan) -> Skip | None:
        """Applies to --log-file."""
        return None if isinstance(plan.target, LogFile) else Skip("no --log-file given")

    def collect(self, ctx: Context, row: SourceRow) -> None:
        """Read the tail of the file."""
        assert isinstance(ctx.plan.target, LogFile)
        path = ctx.plan.target.path
        data, cut = _read_tail(path, self.limits.max_bytes)
        if cut:
            row.note(f"only the last {self.limits.max_bytes} bytes were read")
        _keep(ctx, row, f"logs/{safe_name(path.name)}", tail_lines(data, ctx.plan.log_tail_lines, cut))


class JournalLogs(Collector):
    """``journalctl -u UNIT``, the last N lines."""

    name = "logs.journal"
    limits: ClassVar[Limits] = _LOG_LIMITS

    def skip(self, plan: CapturePlan) -> Skip | None:
        """Applies to --journal-unit."""
        return None if isinstance(plan.target, JournalUnit) else Skip("no --journal-unit given")

    def collect(self, ctx: Context, row: SourceRow) -> None:
        """Run journalctl; "-- No entries --" is a failure with journalctl's own explanation."""
        assert isinstance(ctx.plan.target, JournalUnit)
        unit = ctx.plan.target.unit
        argv = ["journalctl", "-u", unit, "--no-pager", "-o", "short-iso", "-n", str(ctx.plan.log_tail_lines)]
        result = ctx.run(row, argv, self.limits)
        if not result.usable:
            raise Failed(result.why())
        if decode(result.stdout).strip() == NO_JOURNAL_ENTRIES:
            detail = decode(result.stderr).strip()
            raise Failed(f"no journal entries for {unit}" + (f" ({detail})" if detail else ""))
        _keep(ctx, row, f"logs/journal-{safe_name(unit)}.log", result.stdout)


class ProcessOutputLog(Collector):
    """The file a process's stdout or stderr goes to (``vllm serve ... > server.log 2>&1``), via /proc."""

    name = "logs.process"
    limits: ClassVar[Limits] = _LOG_LIMITS

    def skip(self, plan: CapturePlan) -> Skip | None:
        """Applies to --pid."""
        return None if isinstance(plan.target, Process) else Skip("no --pid given")

    def collect(self, ctx: Context, row: SourceRow) -> None:
        """Tail the regular files behind fd 1 and 2; pipes and terminals cannot be read back."""
        assert isinstance(ctx.plan.target, Process)
        pid = ctx.plan.target.pid
        seen: set[tuple[int, int]] = set()
        elsewhere: list[str] = []
        for fd in (1, 2):
            link = ctx.proc_root / str(pid) / "fd" / str(fd)
            try:
                target = os.readlink(link)
                info = os.stat(link)
            except OSError as e:
                raise Failed(f"cannot read {link}: {e.strerror or e}") from e
            if not stat.S_ISREG(info.st_mode):
                elsewhere.append(f"fd {fd} -> {target}")
                continue
            if (info.st_dev, info.st_ino) in seen:
                continue
            seen.add((info.st_dev, info.st_ino))
            data, cut = _read_tail(link, self.limits.max_bytes)
            rel = f"logs/pid{pid}-{safe_name(Path(target.removesuffix(' (deleted)')).name)}"
            _keep(ctx, row, rel, tail_lines(data, ctx.plan.log_tail_lines, cut))
        if not seen:
            raise Skipped(
                f"the output of pid {pid} is not a file ({', '.join(elsewhere)}): "
                "give --log-file, --journal-unit or --container"
            )


def _read_tail(path: Path, max_bytes: int) -> tuple[bytes, bool]:
    """The last ``max_bytes`` of a file, and whether the start was cut."""
    try:
        with path.open("rb") as f:
            size = os.fstat(f.fileno()).st_size
            cut = size > max_bytes
            if cut:
                f.seek(size - max_bytes)
            return f.read(max_bytes), cut
    except OSError as e:
        raise Failed(f"cannot read {path}: {e.strerror or e}") from e
