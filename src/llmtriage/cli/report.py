"""``llmtriage report``: the incident report as one self-contained HTML page; also ``diagnose --html``. Given a
``bench sweep`` (its directory or ``sweep.json``), the sweep's page instead."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any

import typer

from llmtriage.bench import sweep as sweep_mod
from llmtriage.bench.result import number_at
from llmtriage.catalog import Thresholds
from llmtriage.cli.app import OutputFormat, app, fail, print_json, stderr
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
from llmtriage.cli.runbook import consult_runbook
from llmtriage.diagnose.engine import diagnose as run_diagnosis
from llmtriage.diagnose.model import Diagnosis
from llmtriage.errors import NothingReadableError, UsageError
from llmtriage.facts import Evidence
from llmtriage.outfile import write_output
from llmtriage.report import html as html_report
from llmtriage.report import sweep as sweep_page
from llmtriage.report.bench import read_bundle_bench


def write_report(
    path: Path, diagnosis: Diagnosis, evidence: Evidence, bundle: Path | None, thresholds: Thresholds | None = None
) -> None:
    """Build the page and write it to ``path`` (llmtriage.outfile: whole, and never over a device or a link)."""
    _write_page(path, html_report.build(diagnosis, evidence, read_bundle_bench(bundle), thresholds).encode("utf-8"))


def _write_page(path: Path, page: bytes) -> None:
    try:
        write_output(path, page)
    except UsageError as e:
        fail(e)
    stderr.print(f"[dim]wrote {path} ({len(page) / 1024:,.0f} KiB)[/]", highlight=False)


def _sweep_file(given: Path | None) -> Path | None:
    """The ``sweep.json`` that ``given`` is, or that the directory ``given`` holds; None for anything else."""
    if given is None:
        return None
    if given.is_dir():
        return given / sweep_mod.SWEEP_JSON if (given / sweep_mod.SWEEP_JSON).is_file() else None
    return given if given.is_file() and given.suffix == ".json" else None


def _read_sweep(path: Path) -> dict[str, Any]:
    """The sweep document; one line and exit 3 when it cannot be read or is not a sweep."""
    try:
        return sweep_mod.load(path.read_text(encoding="utf-8"), str(path))
    except OSError as e:
        fail(NothingReadableError(f"{path}: {e.strerror or e}", "give the sweep.json `llmtriage bench sweep` wrote"))
    except UnicodeDecodeError:
        fail(NothingReadableError(f"{path}: not UTF-8 text", "give the sweep.json `llmtriage bench sweep` wrote"))
    except UsageError as e:
        fail(NothingReadableError(e.message, e.hint))


def _sweep_report(path: Path, output: Path, inputs: Inputs, output_format: OutputFormat) -> None:
    if inputs.given():
        fail(UsageError("a sweep's page takes no evidence files", "give the sweep alone, or a bundle with the files"))
    doc = _read_sweep(path)
    _write_page(output, sweep_page.build(doc).encode("utf-8"))
    if output_format is OutputFormat.json:
        print_json(doc)
    else:
        rate = number_at(doc, "knee", "rate_per_s")
        line = "no level meets the SLOs" if rate is None else f"knee: {rate:,.2f} req/s"
        stderr.print(f"sweep — {line}", markup=False, highlight=False)


@app.command()
def report(
    bundle: Annotated[
        Path | None,
        typer.Argument(
            help="Bundle directory (logs/, gpu/, kernel/, metrics/, config/, bench/), or a bench sweep's directory "
            "or sweep.json."
        ),
    ] = None,
    output: Annotated[Path, typer.Option("--output", "-o", help="Where to write the page.")] = Path("report.html"),
    runbook: Annotated[
        Path | None,
        typer.Option("--runbook", help="Runbook to consult (default: $LLMTRIAGE_RUNBOOK or the user's, if it exists)."),
    ] = None,
    no_runbook: Annotated[bool, typer.Option("--no-runbook", help="Do not consult the runbook.")] = False,
    log: LogOption = None,
    nvidia_smi: NvidiaSmiOption = None,
    dmesg: DmesgOption = None,
    metrics: MetricsOption = None,
    launch: LaunchOption = None,
    config: ConfigOption = None,
    collect_env: CollectEnvOption = None,
    output_format: Annotated[
        OutputFormat,
        typer.Option(
            "--format", help="What to print once the page is written: text (one line) or json (the diagnosis)."
        ),
    ] = OutputFormat.text,
) -> None:
    """Write the incident report: one self-contained HTML page (verdict, flowchart path, causes, plots, fixes).

    No scripts and no network: it opens offline and can be attached to a ticket. The diagnosis' class is in the
    page and, with --format json, on stdout (as `diagnose --format json` prints it). Exit codes: 0 the page was
    written (whatever it diagnosed), 2 usage error (including a path it cannot write), 3 nothing readable.
    Given a `bench sweep` (its directory or sweep.json), the sweep's page instead: the knee, latency by rate,
    every level (as `bench sweep` writes it to sweep.html).
    """
    inputs = Inputs(log, nvidia_smi, dmesg, metrics, launch, config, collect_env)
    sweep = _sweep_file(bundle)
    if sweep is not None:
        _sweep_report(sweep, output, inputs, output_format)
        return
    evidence = read_inputs(bundle, inputs)
    if not evidence.any_readable():
        fail(NothingReadableError(f"nothing readable in {evidence.origin}", BUNDLE_HINT))
    result = run_diagnosis(evidence)
    if not no_runbook:
        consult_runbook(result, evidence, runbook)
    write_report(output, result, evidence, bundle)
    if output_format is OutputFormat.json:
        print_json(result.to_dict())
    else:
        top = f" — {result.causes[0].id}" if result.causes else ""
        stderr.print(f"{result.symptom_class}{top}", markup=False, highlight=False)
