"""``llmtriage report``: the incident report as one self-contained HTML page; also ``diagnose --html``."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from llmtriage.bench.result import REQUESTS_CSV, RESULT_JSON
from llmtriage.catalog import Thresholds
from llmtriage.cli.app import app, diagnosis_exit, fail, stderr
from llmtriage.cli.runbook import consult_runbook
from llmtriage.diagnose.engine import diagnose as run_diagnosis
from llmtriage.diagnose.model import Diagnosis
from llmtriage.errors import NothingReadableError, UsageError
from llmtriage.evidence.bundle import read_capped, read_evidence
from llmtriage.facts import Evidence, Problem
from llmtriage.outfile import write_output
from llmtriage.report import html as html_report
from llmtriage.report.bench import BenchRun, read_bench

BENCH_DIR = "bench"


def bench_run(bundle: Path | None) -> BenchRun | None:
    """The load test the bundle holds (``bench/result.json``, ``bench/requests.csv``), if any."""
    if bundle is None:
        return None
    problems: list[Problem] = []
    names = (f"{BENCH_DIR}/{RESULT_JSON}", f"{BENCH_DIR}/{REQUESTS_CSV}")
    result_text, requests_text = (
        read_capped(bundle / name, name, problems) if (bundle / name).is_file() else None for name in names
    )
    run = read_bench(result_text, names[0], requests_text, names[1])
    if run is not None:
        run.problems[:0] = problems
    return run


def write_report(
    path: Path, diagnosis: Diagnosis, evidence: Evidence, bundle: Path | None, thresholds: Thresholds | None = None
) -> None:
    """Build the page and write it to ``path`` (llmtriage.outfile: whole, and never over a device or a link)."""
    page = html_report.build(diagnosis, evidence, bench_run(bundle), thresholds).encode("utf-8")
    try:
        write_output(path, page)
    except UsageError as e:
        fail(e)
    stderr.print(f"[dim]wrote {path} ({len(page) / 1024:,.0f} KiB)[/]", highlight=False)


@app.command()
def report(
    bundle: Annotated[Path, typer.Argument(help="Bundle directory (logs/, gpu/, kernel/, metrics/, config/, bench/).")],
    output: Annotated[Path, typer.Option("--output", "-o", help="Where to write the page.")] = Path("report.html"),
    runbook: Annotated[
        Path | None,
        typer.Option("--runbook", help="Runbook to consult (default: $LLMTRIAGE_RUNBOOK or the user's, if it exists)."),
    ] = None,
    no_runbook: Annotated[bool, typer.Option("--no-runbook", help="Do not consult the runbook.")] = False,
) -> None:
    """Write the incident report: one self-contained HTML page (verdict, flowchart path, causes, plots, fixes).

    No scripts and no network: it opens offline and can be attached to a ticket. Exit codes as diagnose:
    0 serving and nothing wrong found, 1 problem diagnosed, 2 usage error, 3 nothing readable, 5 inconclusive.
    """
    if not bundle.is_dir():
        fail(UsageError(f"{bundle}: not a directory", "give a bundle directory, as `llmtriage capture` writes it"))
    evidence = read_evidence(bundle)
    if not evidence.any_readable():
        fail(
            NothingReadableError(
                f"nothing readable in {bundle}",
                "a bundle holds logs/*.log, gpu/nvidia-smi.txt, gpu/*.csv, kernel/dmesg.txt, metrics/*.prom, "
                "config/launch.txt, config/config.json",
            )
        )
    result = run_diagnosis(evidence)
    if not no_runbook:
        consult_runbook(result, evidence, runbook)
    write_report(output, result, evidence, bundle)
    diagnosis_exit(result)
