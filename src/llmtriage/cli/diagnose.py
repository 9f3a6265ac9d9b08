"""``llmtriage diagnose``, ``tree``, ``explain``, ``version``."""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Annotated

import typer

from llmtriage import __version__, catalog
from llmtriage.cli.app import OutputFormat, app, diagnosis_exit, fail, print_json, stdout
from llmtriage.cli.inputs import (
    BUNDLE_HINT,
    CollectEnvOption,
    ConfigOption,
    DmesgOption,
    Inputs,
    LaunchOption,
    LogOption,
    MetricsOption,
    NvidiaSmiOption,
    read_inputs,
)
from llmtriage.diagnose.engine import diagnose as run_diagnosis
from llmtriage.diagnose.model import SCHEMA_VERSION, Diagnosis
from llmtriage.errors import NothingReadableError, UsageError
from llmtriage.report import text as text_report
from llmtriage.slo import parse_duration, parse_slo


@app.command()
def diagnose(
    bundle: Annotated[
        Path | None,
        typer.Argument(help="Bundle directory (logs/, gpu/, kernel/, metrics/, config/), as `capture` writes it."),
    ] = None,
    log: LogOption = None,
    nvidia_smi: NvidiaSmiOption = None,
    dmesg: DmesgOption = None,
    metrics: MetricsOption = None,
    launch: LaunchOption = None,
    config: ConfigOption = None,
    collect_env: CollectEnvOption = None,
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
    inputs = Inputs(log, nvidia_smi, dmesg, metrics, launch, config, collect_env)
    if prometheus is not None:
        single_server = {"BUNDLE": bundle, **inputs.given(), "--html": html}
        mixed = [name for name, value in single_server.items() if value]
        if mixed:
            fail(
                UsageError(
                    f"--prometheus diagnoses the fleet from Prometheus alone; {', '.join(mixed)} would be ignored",
                    "run diagnose twice: once with --prometheus, once with the bundle or files of one server",
                )
            )
        # The fleet, the runbook and the HTML report are imported when asked for: all three would cost every
        # diagnose ~250 ms of start-up.
        from llmtriage.cli.watch import run_fleet

        run_fleet(prometheus, selector, window, slo, output)
    if selector is not None:
        fail(UsageError("--selector chooses instances in Prometheus", "give --prometheus URL with it"))
    thresholds = catalog.thresholds()
    if slo:
        thresholds = dataclasses.replace(thresholds, slo=parse_slo(slo, thresholds.slo))
    window_s = parse_duration(window) if window else None
    evidence = read_inputs(bundle, inputs, window_s)
    if not evidence.any_readable():
        problems = [f"{p.source}: {p.message}" for p in evidence.problems]
        if output is OutputFormat.json:
            print_json({"schema_version": SCHEMA_VERSION, "error": "nothing readable", "problems": problems})
        fail(
            NothingReadableError(
                f"nothing readable in {evidence.origin}" + (f" ({'; '.join(problems[:3])})" if problems else ""),
                BUNDLE_HINT,
            )
        )
    result = run_diagnosis(evidence, thresholds)
    if not no_runbook:
        from llmtriage.cli.runbook import consult_runbook

        consult_runbook(result, evidence, runbook)
    if html is not None:
        from llmtriage.cli.report import write_report

        write_report(html, result, evidence, bundle, thresholds)
    _show(result, output)
    diagnosis_exit(result)


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
