"""Run one capture: every source of the registry, isolated from the others, into one redacted bundle.

The bundle is written in a temp directory next to its final place and renamed there at the end. When the
capture is stopped early (Ctrl-C, SIGTERM: the caller sets the :class:`StopSignal`), the sources finish what
they hold within a fraction of a second, the manifest says ``partial``, and the bundle is renamed all the same.
"""

from __future__ import annotations

import contextlib
import shutil
import socket
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from llmtriage import __version__
from llmtriage.capture.collector import Collector, Context, Failed, Progress, Skipped
from llmtriage.capture.fetch import DeadlineFetcher, Fetcher
from llmtriage.capture.manifest import Manifest, SourceRow, Status
from llmtriage.capture.nvml import Nvml
from llmtriage.capture.plan import CapturePlan, Container, JournalUnit, LogFile, Process, Target
from llmtriage.capture.runner import CommandRunner, SubprocessRunner
from llmtriage.capture.sources import COLLECTORS
from llmtriage.capture.writer import BundleWriter, bundle_path
from llmtriage.errors import UnavailableError, UsageError
from llmtriage.redact import Redactor

_JOIN_POLL_S = 0.2


class StopSignal:
    """Ends a capture early when set (from a signal handler, another thread, a test), and says why."""

    def __init__(self) -> None:
        self.event = threading.Event()
        self.reason: str | None = None
        self.finished = False

    def set(self, reason: str) -> None:
        """Stop the capture; the first reason given is kept."""
        if not self.event.is_set():
            self.reason = reason
            self.event.set()

    def finish(self) -> None:
        """End the sampling window now as planned (not an interruption): the bundle is complete."""
        if not self.event.is_set():
            self.finished = True
            self.event.set()

    def is_set(self) -> bool:
        """True once stopped."""
        return self.event.is_set()


@dataclass(frozen=True, slots=True)
class CaptureResult:
    """Where the bundle is, and its manifest; ``write_error`` when it could not be written whole (it is partial)."""

    path: Path
    manifest: Manifest
    write_error: str | None = None


def capture(
    plan: CapturePlan,
    *,
    runner: CommandRunner | None = None,
    fetcher: Fetcher | None = None,
    nvml: Nvml | None = None,
    proc_root: Path = Path("/proc"),
    stop: StopSignal | None = None,
    on_progress: Callable[[Progress], None] | None = None,
) -> CaptureResult:
    """Capture what ``plan`` asks into a new bundle under ``plan.out_dir``; returns where it is.

    One source failing never stops the others; its row in the manifest says why.
    """
    stop = stop or StopSignal()
    started_s = time.time()
    try:
        plan.out_dir.mkdir(parents=True, exist_ok=True)
        name = f"{plan.name()}-{datetime.fromtimestamp(started_s, UTC):%Y%m%dT%H%M%SZ}"
        writer = BundleWriter(bundle_path(plan.out_dir, name), Redactor(), plan.max_total_bytes)
    except OSError as e:
        raise UsageError(f"--out {plan.out_dir}: cannot write there: {e.strerror or e}") from e
    manifest = Manifest(
        tool_version=__version__,
        host=socket.gethostname(),
        started_at=_iso(started_s),
        label=plan.name(),
        plan=_describe(plan),
        size_cap_bytes=plan.max_total_bytes,
    )
    try:
        writer.write_manifest(manifest)
    except OSError as e:
        shutil.rmtree(writer.temp, ignore_errors=True)
        raise UnavailableError(
            f"--out {plan.out_dir}: cannot write the bundle there: {e.strerror or e}",
            "free some space there, or give --out another directory",
        ) from e
    writer.reserve()
    ctx = Context(
        plan=plan,
        runner=runner or SubprocessRunner(),
        fetcher=fetcher or DeadlineFetcher(),
        nvml=nvml or Nvml(),
        writer=writer,
        stop=stop.event,
        proc_root=proc_root,
        report=on_progress or (lambda _: None),
    )
    samplers: list[threading.Thread] = []
    after_window: list[tuple[Collector, SourceRow]] = []
    for collector_type in COLLECTORS:
        collector = collector_type()
        row = SourceRow(collector.name)
        manifest.sources.append(row)
        skip = collector.skip(plan)
        if skip is not None:
            row.status = Status.skipped
            row.reason = skip.reason
        elif collector.sampled:
            if stop.is_set():
                row.status = Status.skipped
                row.reason = "the capture was stopped before its sampling began"
                continue
            thread = threading.Thread(target=_run, args=(collector, ctx, row), name=collector.name, daemon=True)
            thread.start()
            samplers.append(thread)
        elif samplers:
            after_window.append((collector, row))
        else:
            _run(collector, ctx, row)
    for thread in samplers:
        while thread.is_alive():
            thread.join(_JOIN_POLL_S)
    # Logs, kernel messages and the rest are read once the window closes (or is cut short), so they hold
    # everything that happened while it was sampled; they are bounded, and run even after an interruption.
    for collector, row in after_window:
        _run(collector, ctx, row)
    writer.scrub_again()
    ended_s = time.time()
    manifest.ended_at = _iso(ended_s)
    manifest.duration_s = round(ended_s - started_s, 3)
    manifest.partial = (stop.is_set() and not stop.finished) or writer.write_error is not None
    manifest.interrupted_by = None if stop.finished else stop.reason
    if writer.write_error is not None:
        manifest.interrupted_by = f"the bundle could not be written whole ({writer.write_error})"
    manifest.redactions = dict(sorted(writer.redactor.counts.items()))
    writer.release()
    # The manifest written at the start (partial: true) stays when even this one cannot be written.
    with contextlib.suppress(OSError):
        writer.write_manifest(manifest)
    return CaptureResult(path=writer.finish(), manifest=manifest, write_error=writer.write_error)


def _run(collector: Collector, ctx: Context, row: SourceRow) -> None:
    started = time.monotonic()
    try:
        collector.collect(ctx, row)
    except Skipped as e:
        row.status = Status.skipped
        row.reason = _first(e.reason, row.reason)
    except Failed as e:
        row.status = Status.failed
        row.reason = _first(ctx.writer.redactor.redact_text(e.reason), row.reason)
    except Exception as e:  # the one boundary that isolates a collector: its failure is recorded, the rest go on
        row.status = Status.failed
        row.reason = _first(f"internal error: {type(e).__name__}: {e}", row.reason)
    finally:
        row.duration_s = round(time.monotonic() - started, 3)
        ctx.report(Progress(row.name, row.samples or 0, finished=row))


def _first(reason: str, notes: str | None) -> str:
    return f"{reason}; {notes}" if notes else reason


def _describe(plan: CapturePlan) -> dict[str, Any]:
    return {
        "target": _target(plan.target),
        "metrics_url": plan.metrics_url,
        "gpu": plan.gpu_url or str(plan.gpu),
        "duration_s": plan.duration_s,
        "interval_s": plan.interval_s,
        "max_total_bytes": plan.max_total_bytes,
        "log_tail_lines": plan.log_tail_lines,
        "python": str(plan.python) if plan.python is not None else None,
    }


def _target(target: Target | None) -> dict[str, str | int] | None:
    match target:
        case Container(name=name):
            return {"container": name}
        case LogFile(path=path):
            return {"log_file": str(path)}
        case JournalUnit(unit=unit):
            return {"journal_unit": unit}
        case Process(pid=pid):
            return {"pid": pid}
    return None


def _iso(epoch_s: float) -> str:
    return datetime.fromtimestamp(epoch_s, UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")
