"""``llmtriage diagnose``, ``tree``, ``explain``, ``version``."""

from __future__ import annotations

import dataclasses
import time
from pathlib import Path
from typing import Annotated

import typer
from rich.markup import escape

from llmtriage import __version__, catalog
from llmtriage.cli.app import OutputFormat, app, diagnosis_exit, fail, print_json, stderr, stdout
from llmtriage.cli.report import write_report
from llmtriage.cli.runbook import consult_runbook
from llmtriage.cli.watch import run_fleet
from llmtriage.diagnose.engine import diagnose as run_diagnosis
from llmtriage.diagnose.model import SCHEMA_VERSION, Diagnosis
from llmtriage.errors import NothingReadableError, UsageError
from llmtriage.evidence import live
from llmtriage.evidence.bundle import LooseFiles, read_evidence
from llmtriage.facts import Problem
from llmtriage.report import text as text_report
from llmtriage.slo import parse_duration, parse_slo
from llmtriage.urls import check_url


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


@app.command()
def diagnose(
    bundle: Annotated[
        Path | None,
        typer.Argument(help="Bundle directory (logs/, gpu/, kernel/, metrics/, config/), as `capture` writes it."),
    ] = None,
    log: Annotated[list[Path] | None, typer.Option("--log", help="Server log file (repeatable).")] = None,
    nvidia_smi: Annotated[
        list[Path] | None,
        typer.Option("--nvidia-smi", help="nvidia-smi table, `-q -d PERFORMANCE` output or --query-gpu CSV."),
    ] = None,
    dmesg: Annotated[list[Path] | None, typer.Option("--dmesg", help="Kernel log (dmesg -T, journalctl -k).")] = None,
    metrics: Annotated[
        list[str] | None,
        typer.Option(
            "--metrics", help="Prometheus text file or a live /metrics URL (repeatable; files in time order)."
        ),
    ] = None,
    launch: Annotated[
        str | None, typer.Option("--launch", help='The launch command line, e.g. "vllm serve M ...".')
    ] = None,
    config: Annotated[Path | None, typer.Option("--config", help="The model's config.json.")] = None,
    collect_env: Annotated[
        Path | None,
        typer.Option(
            "--collect-env",
            help="The stack: `python -m torch.utils.collect_env` or `vllm collect-env` output, or capture's "
            "environment.json.",
        ),
    ] = None,
    window: Annotated[
        str | None, typer.Option("--window", help="With a metrics URL: scrape twice this far apart (e.g. 10s).")
    ] = None,
    slo: Annotated[
        str | None, typer.Option("--slo", help="Latency objectives, e.g. ttft_p95=2s,tpot_p95=100ms,queue=20.")
    ] = None,
    output: Annotated[OutputFormat, typer.Option("--format", help="text (for people) or json (stable schema).")] = (
        OutputFormat.text
    ),
    runbook: Annotated[
        Path | None,
        typer.Option("--runbook", help="Runbook to consult (default: $LLMTRIAGE_RUNBOOK or the user's, if it exists)."),
    ] = None,
    no_runbook: Annotated[bool, typer.Option("--no-runbook", help="Do not consult the runbook.")] = False,
    html: Annotated[
        Path | None, typer.Option("--html", help="Also write the incident report, one self-contained HTML page.")
    ] = None,
    prometheus: Annotated[
        str | None,
        typer.Option("--prometheus", help="Diagnose every instance Prometheus scrapes, over the last --window (5m)."),
    ] = None,
    selector: Annotated[
        str | None, typer.Option("--selector", help="With --prometheus: the instances, e.g. '{job=\"vllm\"}'.")
    ] = None,
) -> None:
    """Diagnose a server from a bundle or loose files: symptom class, path, ranked causes with evidence, fixes.

    Exit codes: 0 serving and nothing wrong found, 1 problem diagnosed, 2 usage error, 3 nothing readable
    (empty or binary), 4 a live server could not be read, 5 inconclusive (nothing shows it serving or failing).
    """
    if prometheus is not None:
        single_server = {
            "BUNDLE": bundle,
            "--log": log,
            "--nvidia-smi": nvidia_smi,
            "--dmesg": dmesg,
            "--metrics": metrics,
            "--launch": launch,
            "--config": config,
            "--collect-env": collect_env,
            "--html": html,
        }
        mixed = [name for name, value in single_server.items() if value]
        if mixed:
            fail(
                UsageError(
                    f"--prometheus diagnoses the fleet from Prometheus alone; {', '.join(mixed)} would be ignored",
                    "run diagnose twice: once with --prometheus, once with the bundle or files of one server",
                )
            )
        run_fleet(prometheus, selector, window, slo, output)
    if selector is not None:
        fail(UsageError("--selector chooses instances in Prometheus", "give --prometheus URL with it"))
    if bundle is not None and not bundle.is_dir():
        fail(UsageError(f"{bundle}: not a directory", "give a bundle directory, or loose files with --log etc."))
    loose = LooseFiles(
        logs=_existing(log or [], "--log"),
        nvidia_smi=_existing(nvidia_smi or [], "--nvidia-smi"),
        dmesg=_existing(dmesg or [], "--dmesg"),
        launch=launch,
        model_config=_existing([config], "--config")[0] if config else None,
        collect_env=_existing([collect_env], "--collect-env")[0] if collect_env else None,
    )
    thresholds = catalog.thresholds()
    if slo:
        thresholds = dataclasses.replace(thresholds, slo=parse_slo(slo, thresholds.slo))
    window_s = parse_duration(window) if window else None
    scrape_problems: list[Problem] = []
    health = _metrics_sources(metrics or [], window_s, loose, scrape_problems)
    given = (loose.logs, loose.nvidia_smi, loose.dmesg, loose.metrics, loose.metrics_texts, launch, config, collect_env)
    if bundle is None and not any(given):
        fail(
            UsageError(
                "nothing to diagnose", "give a bundle directory or --log/--nvidia-smi/--dmesg/--metrics/--collect-env"
            )
        )
    evidence = read_evidence(bundle, loose)
    evidence.problems.extend(scrape_problems)
    if health is not None:
        evidence.health_ok = health
    if not evidence.any_readable():
        problems = [f"{p.source}: {p.message}" for p in evidence.problems]
        if output is OutputFormat.json:
            print_json({"schema_version": SCHEMA_VERSION, "error": "nothing readable", "problems": problems})
        fail(
            NothingReadableError(
                f"nothing readable in {evidence.origin}" + (f" ({'; '.join(problems[:3])})" if problems else ""),
                "a bundle holds logs/*.log, gpu/nvidia-smi.txt, gpu/*.csv, kernel/dmesg.txt, metrics/*.prom, "
                "config/launch.txt, config/config.json",
            )
        )
    result = run_diagnosis(evidence, thresholds)
    if not no_runbook:
        consult_runbook(result, evidence, runbook)
    if html is not None:
        write_report(html, result, evidence, bundle, thresholds)
    _show(result, output)
    diagnosis_exit(result)


def _existing(paths: list[Path], flag: str) -> list[Path]:
    for path in paths:
        if not path.exists():
            fail(UsageError(f"{flag} {path}: no such file"))
    return paths


def _show(result: Diagnosis, output: OutputFormat) -> None:
    if output is OutputFormat.json:
        print_json(result.to_dict())
    else:
        stdout.print(text_report.build(result), highlight=False)


@app.command()
def tree() -> None:
    """Print the diagnostic flowchart: questions, symptom classes and their causes."""
    stdout.print(text_report.build_tree(), highlight=False)


@app.command()
def explain(
    cause_id: Annotated[str, typer.Argument(help="A cause id, e.g. kv_cache_too_small_for_max_model_len.")],
) -> None:
    """Print what signals a cause and how to fix it."""
    try:
        stdout.print(text_report.build_explain(cause_id), highlight=False)
    except KeyError as e:
        fail(UsageError(str(e.args[0]), "`llmtriage tree` lists every cause"))


@app.command()
def version() -> None:
    """Print the version."""
    stdout.print(f"llmtriage {__version__}")
