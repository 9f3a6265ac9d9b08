"""What every source of a capture shares: the collector base class (sos style), the context it works in, and
the ways it ends (:class:`Failed`, :class:`Skipped`).

A collector says when it applies (``skip``), its limits, and how it collects; it runs commands and writes files
only through the context, which records a manifest row for each. Sampled collectors run on their own thread
for the capture's duration; the others run one after another.
"""

from __future__ import annotations

import threading
import time
from abc import ABC, abstractmethod
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath
from typing import ClassVar

from llmtriage.capture.fetch import Fetcher
from llmtriage.capture.manifest import CommandRow, FileRow, SourceRow, Status
from llmtriage.capture.nvml import Nvml
from llmtriage.capture.plan import CapturePlan
from llmtriage.capture.runner import CommandResult, CommandRunner, Limits, last_line
from llmtriage.capture.writer import BundleWriteError, BundleWriter

NO_JOURNAL_ENTRIES = "-- No entries --"
"""What journalctl prints on stdout when nothing matched (exit 0)."""


class Failed(Exception):
    """The source could not give its evidence; ``reason`` says why in one line."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


class Skipped(Exception):
    """The source found nothing to collect here (not an error); ``reason`` says why."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


@dataclass(frozen=True, slots=True)
class Skip:
    """Why a collector does not apply to a plan."""

    reason: str


@dataclass(frozen=True, slots=True)
class ModelLocator:
    """How the server's files are reached from here: its root and working directory as seen from this host
    (``/proc/PID/root`` and ``/proc/PID/cwd`` for a process), or a container's mounts."""

    root: Path | None = None
    cwd: Path | None = None
    mounts: tuple[tuple[PurePosixPath, Path], ...] = ()
    container_workdir: PurePosixPath | None = None

    def local(self, model: str) -> Path | None:
        """Where the model directory ``model`` (as the server named it) is on this host, if it can be reached."""
        path = PurePosixPath(model)
        if self.mounts or self.container_workdir is not None:
            inside = path if path.is_absolute() else (self.container_workdir or PurePosixPath("/")) / path
            for destination, source in sorted(self.mounts, key=lambda m: len(m[0].parts), reverse=True):
                if inside == destination or destination in inside.parents:
                    return source.joinpath(*inside.relative_to(destination).parts)
            return None
        if path.is_absolute():
            return (self.root or Path("/")).joinpath(*path.parts[1:])
        return self.cwd.joinpath(*path.parts) if self.cwd is not None else None


@dataclass(slots=True)
class Scene:
    """What earlier sources found that later ones use (kept in memory only, never written as is)."""

    launch_argv: list[str] | None = None
    log_text: str | None = None
    locator: ModelLocator | None = None
    container_image: str | None = None
    container_image_id: str | None = None


@dataclass(frozen=True, slots=True)
class Progress:
    """A source took a sample (``finished`` None) or finished (its final row)."""

    source: str
    samples: int = 0
    finished: SourceRow | None = None


@dataclass(slots=True)
class Context:
    """The seams and the shared state a collector works through."""

    plan: CapturePlan
    runner: CommandRunner
    fetcher: Fetcher
    nvml: Nvml
    writer: BundleWriter
    stop: threading.Event
    proc_root: Path
    report: Callable[[Progress], None]
    scene: Scene = field(default_factory=Scene)

    def run(
        self, row: SourceRow, argv: Sequence[str], limits: Limits, *, merge_stderr: bool = False, looping: bool = False
    ) -> CommandResult:
        """Run a command through the runner and add its row (argv redacted) to ``row``. A ``looping`` command
        (``nvidia-smi -lms``) runs until its time limit by design: reaching it is not a failure."""
        result = self.runner.run(argv, limits, self.stop, merge_stderr=merge_stderr)
        usable = result.usable or (looping and result.timed_out)
        row.commands.append(
            CommandRow(
                argv=self.writer.redactor.redact_argv(argv),
                status=Status.ok if usable else Status.failed,
                exit_code=result.exit_code,
                duration_s=round(result.duration_s, 3),
                stdout_bytes=len(result.stdout),
                truncated=result.truncated,
                reason=self.writer.redactor.redact_text(_stderr_note(result) if usable else result.why()) or None,
            )
        )
        return result

    def write(self, row: SourceRow, rel: str, text: str) -> FileRow | None:
        """Write a file of the bundle (redacted, within the size cap) and add its row to ``row``."""
        try:
            written = self.writer.write(rel, text)
        except OSError as e:
            kept = e.kept if isinstance(e, BundleWriteError) else None
            if kept is not None:
                row.files.append(kept)
                row.note(f"{rel} cut at {kept.bytes} bytes, where writing failed")
            self.stop.set()  # nothing more may fit: end the sampling, keep what was written
            raise Failed(f"cannot write {rel}: {e.strerror or e}") from e
        if written is None:
            row.note(f"{rel} not written: the bundle's size cap ({self.plan.max_total_bytes} bytes) was reached")
            return None
        if written.truncated:
            row.note(f"{rel} cut at the bundle's size cap")
        row.files.append(written)
        return written

    def report_sample(self, source: str, samples: int) -> None:
        """Tell whoever watches that ``source`` has taken ``samples`` samples so far."""
        self.report(Progress(source, samples))

    def ticks(self) -> Iterator[float]:
        """The wall-clock time of each sample: now, then every interval until the duration has passed.
        Ends early when the capture is stopped; a tick missed because a sample ran long is skipped."""
        start = time.monotonic()
        n = 0
        while True:
            due = start + n * self.plan.interval_s
            if due > start + self.plan.duration_s + 1e-6:
                return
            wait_s = due - time.monotonic()
            if (wait_s > 0 and self.stop.wait(wait_s)) or self.stop.is_set():
                return
            yield time.time()
            n = max(n + 1, int((time.monotonic() - start) / self.plan.interval_s) + 1)


class Collector(ABC):
    """A source of evidence: when it applies, its limits, how it collects (sos style).

    ``collect`` raises :class:`Failed` or :class:`Skipped` to end early; it notes what it wants to say on the row.
    """

    name: ClassVar[str]
    limits: ClassVar[Limits]
    sampled: ClassVar[bool] = False

    @abstractmethod
    def skip(self, plan: CapturePlan) -> Skip | None:
        """Why this source does not apply to ``plan``, or None when it does."""

    @abstractmethod
    def collect(self, ctx: Context, row: SourceRow) -> None:
        """Collect into the bundle through ``ctx``."""


def _stderr_note(result: CommandResult) -> str:
    """What a command that succeeded still said on stderr (journalctl's hints, warnings): its last line."""
    line = last_line(result.stderr)
    return f"stderr: {line}" if line else ""


def tail_lines(data: bytes, max_lines: int, cut_start: bool) -> bytes:
    """The last ``max_lines`` lines of ``data``; a first line cut by a seek (``cut_start``) is dropped."""
    if cut_start:
        newline = data.find(b"\n")
        data = data[newline + 1 :] if newline >= 0 else b""
    lines = data.splitlines(keepends=True)
    return b"".join(lines[-max_lines:])


def decode(data: bytes) -> str:
    """Bytes of a command or a file as text (bad UTF-8 replaced, not fatal)."""
    return data.decode("utf-8", "replace")
