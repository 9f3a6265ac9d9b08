"""What ``diagnose``, ``report`` and ``runbook add`` read: a bundle directory and/or loose files, one set of options.

``--log -`` reads the log from standard input (``pbpaste | llmtriage diagnose --log -``); a log pasted from an issue
or a chat is read as the log it quotes (``llmtriage.parse.pasted``).
"""

from __future__ import annotations

import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated

import typer
from rich.markup import escape

from llmtriage.cli.app import fail, stderr
from llmtriage.errors import UsageError
from llmtriage.evidence.bundle import MAX_TEXT_BYTES, LooseFiles, read_evidence
from llmtriage.facts import Evidence, Problem
from llmtriage.urls import check_url

STDIN = "-"
STDIN_NAME = "stdin"

LogOption = Annotated[
    list[Path] | None,
    typer.Option("--log", help="Server log file (repeatable); - reads it from standard input (a paste is fine)."),
]
NvidiaSmiOption = Annotated[
    list[Path] | None,
    typer.Option("--nvidia-smi", help="nvidia-smi table, `-q -d PERFORMANCE` output or --query-gpu CSV."),
]
DmesgOption = Annotated[list[Path] | None, typer.Option("--dmesg", help="Kernel log (dmesg -T, journalctl -k).")]
MetricsOption = Annotated[
    list[str] | None,
    typer.Option("--metrics", help="Prometheus text file or a live /metrics URL (repeatable; files in time order)."),
]
LaunchOption = Annotated[str | None, typer.Option("--launch", help='The launch command line, e.g. "vllm serve M ...".')]
ConfigOption = Annotated[Path | None, typer.Option("--config", help="The model's config.json.")]
CollectEnvOption = Annotated[
    Path | None,
    typer.Option(
        "--collect-env",
        help="The stack: `python -m torch.utils.collect_env` or `vllm collect-env` output, or capture's "
        "environment.json.",
    ),
]

BUNDLE_HINT = (
    "a bundle holds logs/*.log, gpu/nvidia-smi.txt, gpu/*.csv, kernel/dmesg.txt, metrics/*.prom, "
    "config/launch.txt, config/config.json"
)


@dataclass(frozen=True, slots=True)
class Inputs:
    """The evidence options as given on the command line."""

    log: list[Path] | None = None
    nvidia_smi: list[Path] | None = None
    dmesg: list[Path] | None = None
    metrics: list[str] | None = None
    launch: str | None = None
    config: Path | None = None
    collect_env: Path | None = None

    def given(self) -> dict[str, object]:
        """The options that were set, by flag."""
        flags = {
            "--log": self.log,
            "--nvidia-smi": self.nvidia_smi,
            "--dmesg": self.dmesg,
            "--metrics": self.metrics,
            "--launch": self.launch,
            "--config": self.config,
            "--collect-env": self.collect_env,
        }
        return {flag: value for flag, value in flags.items() if value}


def read_inputs(bundle: Path | None, inputs: Inputs, window_s: float | None = None) -> Evidence:
    """Read the bundle and the loose files into one piece of evidence (redacted, problems noted).

    Usage errors (a missing file, nothing given, a bundle that is no directory) exit 2; a metrics URL that
    cannot be read exits 4. Whether anything was readable is the caller's to judge (``Evidence.any_readable``).
    """
    if bundle is not None and not bundle.is_dir():
        fail(UsageError(f"{bundle}: not a directory", "give a bundle directory, or loose files with --log etc."))
    if bundle is None and not inputs.given():
        fail(
            UsageError(
                "nothing to diagnose", "give a bundle directory or --log/--nvidia-smi/--dmesg/--metrics/--collect-env"
            )
        )
    logs = inputs.log or []
    if sum(str(p) == STDIN for p in logs) > 1:
        fail(UsageError("--log - given twice", "standard input holds one log"))
    loose = LooseFiles(
        logs=_existing([p for p in logs if str(p) != STDIN], "--log"),
        log_texts=[(STDIN_NAME, _read_stdin())] if any(str(p) == STDIN for p in logs) else [],
        nvidia_smi=_existing(inputs.nvidia_smi or [], "--nvidia-smi"),
        dmesg=_existing(inputs.dmesg or [], "--dmesg"),
        launch=inputs.launch,
        model_config=_existing([inputs.config], "--config")[0] if inputs.config else None,
        collect_env=_existing([inputs.collect_env], "--collect-env")[0] if inputs.collect_env else None,
    )
    scrape_problems: list[Problem] = []
    health = _metrics_sources(inputs.metrics or [], window_s, loose, scrape_problems)
    evidence = read_evidence(bundle, loose)
    evidence.problems.extend(scrape_problems)
    if health is not None:
        evidence.health_ok = health
    return evidence


def _read_stdin() -> bytes:
    """The log on standard input, up to MAX_TEXT_BYTES. A terminal is told how to end the paste, never left
    waiting in silence."""
    if sys.stdin is None:
        fail(UsageError("--log -: there is no standard input", "pipe the log in: pbpaste | llmtriage diagnose --log -"))
    if sys.stdin.isatty():
        stderr.print(
            "[bold]reading the log from standard input:[/] paste it, then press Ctrl-D on an empty line "
            "(Ctrl-Z Enter on Windows)",
            highlight=False,
        )
    data = sys.stdin.buffer.read(MAX_TEXT_BYTES)
    # Only a full read looks for more: a terminal's end of input is not sticky, a second read would wait again.
    if len(data) == MAX_TEXT_BYTES and sys.stdin.buffer.read(1):
        stderr.print(f"[yellow]--log -: only the first {MAX_TEXT_BYTES >> 20} MiB were read[/]", highlight=False)
    return data


def _existing(paths: list[Path], flag: str) -> list[Path]:
    for path in paths:
        if not path.exists():
            fail(UsageError(f"{flag} {path}: no such file"))
    return paths


def _metrics_sources(
    values: list[str], window_s: float | None, loose: LooseFiles, problems: list[Problem]
) -> bool | None:
    """Split --metrics into files and URLs; scrape URLs (twice with a window). Returns /health's answer; a scrape
    cut at the size cap is a problem. A URL that cannot be read, or answers no Prometheus sample, is an error."""
    urls = [
        check_url(v, "--metrics", "e.g. http://127.0.0.1:8000/metrics")
        for v in values
        if v.startswith(("http://", "https://"))
    ]
    health: bool | None = None
    for value in values:
        if value in urls:
            from llmtriage.evidence import live  # aiohttp: ~100 ms that reading files does not need

            scrapes = [live.scrape(value)]
            if window_s:
                stderr.print(
                    f"[dim]scraping {escape(value)} again in {window_s:g} s for a window...[/]", highlight=False
                )
                time.sleep(window_s)
                scrapes.append(live.scrape(value))
            for i, s in enumerate(scrapes):
                name = f"{s.url} (scrape {i + 1})"
                loose.metrics_texts.append((name, s.text, s.timestamp_s))
                if s.truncated:
                    problems.append(
                        Problem(name, f"larger than {live.MAX_SCRAPE_BYTES >> 20} MiB; only the start was read")
                    )
            health = live.healthy(live.server_url(value))
        else:
            path = Path(value)
            if not path.exists():
                raise UsageError(f"--metrics {value}: no such file", "give a file of Prometheus text or an http:// URL")
            loose.metrics.append(path)
    return health
