"""``llmtriage capture``: keep the scene in a redacted bundle, then diagnose it."""

from __future__ import annotations

import signal
import time
from collections.abc import Callable
from pathlib import Path
from types import FrameType
from typing import Annotated, Any

import typer
from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn

from llmtriage import capture as capture_lib
from llmtriage.capture.collector import Progress as CaptureProgress
from llmtriage.capture.manifest import Status
from llmtriage.cli.app import app, diagnosis_exit, fail, stderr, stdout
from llmtriage.cli.runbook import consult_runbook, runbook_to_consult
from llmtriage.diagnose.engine import diagnose as run_diagnosis
from llmtriage.errors import ExitCode, NothingReadableError, UnavailableError, UsageError
from llmtriage.evidence.bundle import read_evidence
from llmtriage.parse.units import size_to_gib
from llmtriage.report import text as text_report
from llmtriage.slo import parse_duration

_MARK = {Status.ok: "[green]✓[/]", Status.failed: "[red]✗[/]", Status.skipped: "[dim]–[/]"}


@app.command()
def capture(
    container: Annotated[
        str | None, typer.Option("--container", help="Docker container of the server (name or id).")
    ] = None,
    log_file: Annotated[Path | None, typer.Option("--log-file", help="Log file the server writes.")] = None,
    journal_unit: Annotated[
        str | None, typer.Option("--journal-unit", help="systemd unit whose journal holds the log.")
    ] = None,
    pid: Annotated[int | None, typer.Option("--pid", help="Server process id (/proc/PID).")] = None,
    python: Annotated[
        Path | None,
        typer.Option("--python", help="The server's Python, to read torch, CUDA and the engine (default: from --pid)."),
    ] = None,
    metrics_url: Annotated[
        str | None, typer.Option("--metrics-url", help="The server's /metrics URL, scraped every interval.")
    ] = None,
    gpu: Annotated[
        str, typer.Option("--gpu", help="auto (NVML, else nvidia-smi), nvml, nvidia-smi, or a telemetry URL.")
    ] = "auto",
    duration: Annotated[str, typer.Option("--duration", help="How long to sample metrics and GPU (0s: once).")] = "30s",
    interval: Annotated[str, typer.Option("--interval", help="Time between samples.")] = "1s",
    out: Annotated[Path, typer.Option("--out", help="Directory to create the bundle in.")] = Path("."),
    label: Annotated[str | None, typer.Option("--label", help="Name of the bundle (default: the target's).")] = None,
    max_size: Annotated[str, typer.Option("--max-size", help="Cap on the bundle's total size.")] = "256MiB",
    no_diagnose: Annotated[bool, typer.Option("--no-diagnose", help="Only capture; don't diagnose.")] = False,
    runbook: Annotated[
        Path | None,
        typer.Option("--runbook", help="Runbook to consult (default: $LLMTRIAGE_RUNBOOK or the user's, if it exists)."),
    ] = None,
    no_runbook: Annotated[bool, typer.Option("--no-runbook", help="Do not consult the runbook.")] = False,
) -> None:
    """Keep the scene: logs, launch args, env, /metrics, GPU, kernel, stack into one redacted bundle, then diagnose it.

    Prints the bundle's path, then its diagnosis with what the runbook has seen before, as diagnose does.
    Read-only on the server; Ctrl-C or SIGTERM leaves a partial bundle.

    Exit codes as diagnose: 0 serving and nothing wrong found, 1 problem diagnosed, 2 usage error, 3 nothing
    readable, 4 the bundle could not be written whole (a full disk: its partial bundle's path is printed),
    5 inconclusive (with --no-diagnose: 0 once the bundle is written).
    """
    if not (no_diagnose or no_runbook):
        runbook_to_consult(runbook)  # a --runbook that is not there fails now, not after the capture
    mode, gpu_url = capture_lib.parse_gpu(gpu)
    duration_s = parse_duration(duration)
    plan = capture_lib.CapturePlan(
        out_dir=out,
        target=_target(container, log_file, journal_unit, pid),
        metrics_url=metrics_url,
        gpu=mode,
        gpu_url=gpu_url,
        duration_s=duration_s,
        interval_s=parse_duration(interval),
        label=label,
        max_total_bytes=_size_bytes(max_size),
        python=_python(python),
    )
    stop = capture_lib.StopSignal()
    previous: dict[signal.Signals, Callable[[int, FrameType | None], Any] | int | None] = {}

    def on_signal(signum: int, frame: FrameType | None) -> None:
        stop.set(signal.Signals(signum).name)
        for sig, handler in previous.items():  # a second signal acts at once
            signal.signal(sig, handler)

    for sig in (signal.SIGINT, signal.SIGTERM):
        previous[sig] = signal.signal(sig, on_signal)
    try:
        result = _run_with_progress(plan, stop, duration_s)
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
    stdout.print(str(result.path), highlight=False, soft_wrap=True)
    if result.write_error is not None:
        fail(
            UnavailableError(
                f"the bundle could not be written whole ({result.write_error}): what was written is kept,"
                " and its manifest says partial",
                "free some space, or give --out another directory or a smaller --max-size",
            )
        )
    if result.manifest.partial:
        stderr.print(f"[yellow]capture stopped by {stop.reason}: the bundle is partial[/]", highlight=False)
    if no_diagnose:
        raise typer.Exit(int(ExitCode.OK))
    evidence = read_evidence(result.path)
    if not evidence.any_readable():
        fail(NothingReadableError(f"nothing readable was captured in {result.path}", "see its manifest.json"))
    diagnosis = run_diagnosis(evidence)
    if not no_runbook:
        consult_runbook(diagnosis, evidence, runbook)
    stdout.print(text_report.build(diagnosis), highlight=False)
    diagnosis_exit(diagnosis)


def _run_with_progress(
    plan: capture_lib.CapturePlan, stop: capture_lib.StopSignal, duration_s: float
) -> capture_lib.CaptureResult:
    columns = (TextColumn("{task.description}"), BarColumn(), TimeElapsedColumn())
    with Progress(*columns, console=stderr, auto_refresh=False, transient=True) as progress:
        task = progress.add_task(f"capturing {duration_s:g} s", total=duration_s or 1.0)
        started = time.monotonic()

        def on_progress(event: CaptureProgress) -> None:
            row = event.finished
            if row is not None:
                detail = row.reason or ", ".join(f.path for f in row.files)
                progress.console.print(f"{_MARK[row.status]} {row.name}  [dim]{detail}[/]", highlight=False)
            else:
                progress.update(task, description=f"capturing {duration_s:g} s  {event.source}: {event.samples}")
            progress.update(task, completed=min(time.monotonic() - started, duration_s))
            progress.refresh()

        return capture_lib.capture(plan, stop=stop, on_progress=on_progress)


def _target(
    container: str | None, log_file: Path | None, journal_unit: str | None, pid: int | None
) -> capture_lib.Target | None:
    given = [t for t in (container, log_file, journal_unit, pid) if t is not None]
    if len(given) > 1:
        raise UsageError("give one server: --container, --log-file, --journal-unit or --pid")
    if container is not None:
        return capture_lib.Container(container)
    if log_file is not None:
        if not log_file.is_file():
            raise UsageError(f"--log-file {log_file}: no such file")
        return capture_lib.LogFile(log_file)
    if journal_unit is not None:
        return capture_lib.JournalUnit(journal_unit)
    if pid is not None:
        if not Path("/proc", str(pid)).is_dir():
            raise UsageError(f"--pid {pid}: no such process")
        return capture_lib.Process(pid)
    return None


def _python(path: Path | None) -> Path | None:
    if path is not None and not path.is_file():
        raise UsageError(
            f"--python {path}: no such file", "give the interpreter the server runs, e.g. /opt/venv/bin/python"
        )
    return path.absolute() if path is not None else None


def _size_bytes(text: str) -> int:
    gib = size_to_gib(text)
    if gib is None or gib <= 0:
        raise UsageError(f"--max-size {text}: not a size", "e.g. 256MiB or 1GiB")
    return int(gib * (1 << 30))
