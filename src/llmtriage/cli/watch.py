"""``llmtriage watch``, ``alerts``, ``dashboard``, and the fleet view behind ``diagnose --prometheus``."""

from __future__ import annotations

import asyncio
import dataclasses
import shlex
import signal
import sys
import time
from pathlib import Path
from typing import Annotated

import typer
from rich.console import Console
from rich.live import Live

from llmtriage import aio, catalog
from llmtriage.catalog import Thresholds
from llmtriage.cli.app import OutputFormat, app, fail, print_json, stderr, stdout
from llmtriage.errors import ExitCode, UnavailableError, UsageError
from llmtriage.slo import parse_duration, parse_slo
from llmtriage.urls import check_url
from llmtriage.watch import fleet, view
from llmtriage.watch import gpu as watch_gpu
from llmtriage.watch.dashboard import build_dashboard
from llmtriage.watch.rules import build_rules, render
from llmtriage.watch.signals import EngineSignals, engine_signals
from llmtriage.watch.watcher import Target, WatchConfig, Watcher, WatchState

DEFAULT_FLEET_WINDOW = "5m"
TABLE_WIDTH = 160  # columns of the final table when stderr is not a terminal

SloOption = Annotated[
    str | None, typer.Option("--slo", help="Objectives, e.g. ttft_p95=2s,tpot_p95=100ms,error_rate=1%,queue=20.")
]
EngineOption = Annotated[str, typer.Option("--engine", help="vllm or sglang.")]
VersionOption = Annotated[
    str | None,
    typer.Option("--vllm-version", help="vLLM release the metric names must match, e.g. 0.10 (default: newest)."),
]


def _thresholds(slo: str | None) -> Thresholds:
    thresholds = catalog.thresholds()
    if slo:
        thresholds = dataclasses.replace(thresholds, slo=parse_slo(slo, thresholds.slo))
    return thresholds


def _command(name: str, slo: str | None, engine: str, vllm_version: str | None) -> str:
    words = ["llmtriage", name]
    if slo:
        words += ["--slo", slo]
    words += ["--engine", engine]
    if vllm_version:
        words += ["--vllm-version", vllm_version]
    return shlex.join(words)


def _signals(engine: str, vllm_version: str | None) -> EngineSignals:
    if vllm_version and engine != "vllm":
        raise UsageError("--vllm-version goes with --engine vllm")
    return engine_signals(engine, vllm_version)


@app.command()
def alerts(slo: SloOption = None, engine: EngineOption = "vllm", vllm_version: VersionOption = None) -> None:
    """Print Prometheus alerting rules: multiwindow burn rates of the TTFT, TPOT and error-rate SLOs, queue
    growth, KV cache saturation, preemptions, a stalled engine, a target down; metric names of the engine version.

    Example: llmtriage alerts --slo ttft_p95=2s,tpot_p95=100ms,error_rate=1% > rules.yaml
    """
    thresholds = _thresholds(slo)
    signals = _signals(engine, vllm_version)
    rules = build_rules(signals, thresholds.slo, thresholds)
    sys.stdout.write(render(rules, signals, thresholds.slo, _command("alerts", slo, engine, vllm_version)))


@app.command()
def dashboard(slo: SloOption = None, engine: EngineOption = "vllm", vllm_version: VersionOption = None) -> None:
    """Print a Grafana dashboard (JSON model) of the signals `watch` shows, with the engine version's names.

    Example: llmtriage dashboard --engine vllm > grafana.json
    """
    thresholds = _thresholds(slo)
    print_json(build_dashboard(_signals(engine, vllm_version), thresholds.slo, thresholds))


def _targets(metrics_urls: list[str], gpus: list[str]) -> tuple[Target, ...]:
    for url in metrics_urls:
        check_url(url, "--metrics-url", "e.g. http://127.0.0.1:8000/metrics")
    sources: list[str | None] = [watch_gpu.check_source(g) for g in gpus]
    if not sources:
        paired: list[str | None] = [None] * len(metrics_urls)
    elif len(sources) == len(metrics_urls):
        paired = list(sources)
    elif len(sources) == 1 and (sources[0] == watch_gpu.NVML or len(metrics_urls) == 1):
        paired = sources * len(metrics_urls)
    else:
        raise UsageError(
            f"{len(sources)} --gpu for {len(metrics_urls)} --metrics-url",
            "give one --gpu per --metrics-url, in the same order (or one --gpu nvml for all)",
        )
    return tuple(Target(url, source) for url, source in zip(metrics_urls, paired, strict=True))


@app.command()
def watch(
    metrics_url: Annotated[
        list[str], typer.Option("--metrics-url", help="A server's /metrics URL (repeatable: watch several).")
    ],
    gpu: Annotated[
        list[str] | None,
        typer.Option("--gpu", help="nvml, or the GPU telemetry URL (docs/gpu-telemetry.md); one per --metrics-url."),
    ] = None,
    slo: SloOption = None,
    interval: Annotated[str, typer.Option("--interval", help="Time between scrapes.")] = "1s",
    window: Annotated[str, typer.Option("--window", help="Window of the p95s and rates.")] = "30s",
    capture_on_breach: Annotated[
        Path | None, typer.Option("--capture-on-breach", help="Capture a bundle here once per incident.")
    ] = None,
    capture_duration: Annotated[str, typer.Option("--capture-duration", help="How long each capture samples.")] = "10s",
    db: Annotated[Path | None, typer.Option("--db", help="Record the time series in this SQLite file.")] = None,
    probe: Annotated[
        bool, typer.Option("--probe", help="Send a one-token completion every 15 s: finds a stall without traffic.")
    ] = False,
    duration: Annotated[str | None, typer.Option("--duration", help="Stop after this long (default: Ctrl-C).")] = None,
) -> None:
    """Watch servers live: windowed TTFT/TPOT/ITL p95, queue, KV cache, preemptions, tokens/s, errors and GPU
    against the SLOs; a stall (/health answers, no tokens flow) is the most severe finding. A breach shows the
    diagnosis of that moment; --capture-on-breach keeps the scene once per incident.

    Exit codes: 0 no breach, 1 a breach was seen, 2 usage error, 4 no server could be read.
    """
    interval_s = parse_duration(interval)
    window_s = parse_duration(window)
    if interval_s <= 0:
        raise UsageError("--interval must be more than 0")
    if window_s < 2 * interval_s:
        raise UsageError("--window must hold at least two scrapes", f"e.g. --window {max(30.0, 2 * interval_s):g}s")
    config = WatchConfig(
        targets=_targets(metrics_url, gpu or []),
        thresholds=_thresholds(slo),
        interval_s=interval_s,
        window_s=window_s,
        probe=probe,
        capture_dir=capture_on_breach,
        capture_duration_s=parse_duration(capture_duration),
        db_path=db,
        duration_s=parse_duration(duration) if duration else None,
    )
    state = aio.run(_watch(config))
    for incident in state.incidents:
        kinds = ", ".join(incident.kinds)
        cause = ""
        if incident.diagnosis is not None and incident.diagnosis.causes:
            cause = f" -> {incident.diagnosis.causes[0].id}"
        where = f"  bundle: {incident.bundle}" if incident.bundle else ""
        stdout.print(f"{incident.url}: {kinds}{cause}{where}", highlight=False, soft_wrap=True)
    if not state.answered:
        errors = "; ".join(f"{u}: {f.error}" for u, f in state.frames.items())
        fail(UnavailableError(f"no server could be read ({errors})", "is the server running, and the URL right?"))
    raise typer.Exit(int(ExitCode.PROBLEM_FOUND if state.incidents else ExitCode.OK))


async def _watch(config: WatchConfig) -> WatchState:
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stop.set)
    thresholds = config.thresholds
    try:
        if stderr.is_terminal:
            with Live(console=stderr, auto_refresh=False, transient=False) as live:

                def redraw(state: WatchState) -> None:
                    live.update(view.build(state, thresholds, width=stderr.width), refresh=True)

                return await Watcher(config, on_update=redraw).run(stop)
        shown = 0

        def log(state: WatchState) -> None:
            nonlocal shown
            events = list(state.events)
            for event in events[shown:] if len(events) > shown else []:
                stderr.print(f"{event.url} {event.kind}: {event.message}", highlight=False, soft_wrap=True)
            shown = len(events)

        state = await Watcher(config, on_update=log).run(stop)
        Console(stderr=True, width=max(stderr.width, TABLE_WIDTH)).print(view.table(state, thresholds))
        for incident in state.incidents:
            for line in view.incident_lines(incident, time.time()):
                stderr.print(line)
        return state
    finally:
        for sig in (signal.SIGINT, signal.SIGTERM):
            loop.remove_signal_handler(sig)


def run_fleet(prometheus: str, selector: str | None, window: str | None, slo: str | None, output: OutputFormat) -> None:
    """``diagnose --prometheus``: every instance, one line each, worst first."""
    window_s = parse_duration(window or DEFAULT_FLEET_WINDOW)
    report = fleet.diagnose_fleet(fleet.PrometheusClient(prometheus), selector, window_s, _thresholds(slo))
    if output is OutputFormat.json:
        print_json(report.to_dict())
    elif not report.instances:
        stderr.print(f"no inference-server metrics in Prometheus at {prometheus} over the last {window_s:g} s")
    else:
        for instance in report.instances:
            stdout.print(fleet.render_line(instance, report.end_s), highlight=False, soft_wrap=True)
    if not report.instances:
        raise typer.Exit(int(ExitCode.NOTHING_READABLE))
    raise typer.Exit(int(ExitCode.OK if report.healthy else ExitCode.PROBLEM_FOUND))
