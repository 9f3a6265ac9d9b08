"""``llmtriage bench`` (run a load test) and ``llmtriage bench compare A B``."""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import json
import os
import re
import signal
import stat
import sys
import time
from pathlib import Path
from typing import Annotated, NoReturn

import typer
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

from llmtriage import aio, catalog, strict_json
from llmtriage.bench import compare as compare_mod
from llmtriage.bench import plan, render, result, runner
from llmtriage.bench import sweep as sweep_mod
from llmtriage.bench import workers as workers_mod
from llmtriage.bench.model import Arrival, BenchConfig, Endpoint, PromptLine, RequestClass, RunOutcome
from llmtriage.catalog import Slo
from llmtriage.cli.app import OutputFormat, app, fail, print_json, stderr, stdout
from llmtriage.errors import ExitCode, UnavailableError, UsageError
from llmtriage.outfile import write_output
from llmtriage.report import sweep as sweep_page
from llmtriage.slo import parse_duration, parse_slo
from llmtriage.urls import check_url, public_url

bench_app = typer.Typer(
    name="bench",
    help=(
        "Load-test an OpenAI-compatible server (streaming): TTFT, TPOT, ITL, E2E, throughput, goodput, errors, "
        "the server's own figures beside the client's, and warnings when a number can't be trusted. "
        "`llmtriage bench --base-url URL ...` runs; `llmtriage bench sweep --base-url URL` finds the knee (the highest "
        "rate that meets the SLOs); `llmtriage bench compare A B` compares two results or two sweeps. "
        "Exit codes: 0 every measured request completed, 1 some failed, 2 usage error, 4 the server could not be "
        "reached, 130 interrupted by Ctrl-C, 143 by SIGTERM (partial results written either way)."
    ),
)
app.add_typer(bench_app, name="bench")

DEFAULT_PROMPT_CHARS = 1000
DEFAULT_MAX_TOKENS = 64
DEFAULT_REQUESTS = 100
DEFAULT_SWEEP_REQUESTS = 50
DEFAULT_SWEEP_CONCURRENCY = 128
MAX_PROMPTS_BYTES = 256 << 20
STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM)
"""Ctrl-C, and what CI runners and ``timeout`` send: both stop the run and keep what it has."""


def _warmup(text: str) -> tuple[int, float]:
    """``--warmup 16`` (requests) or ``--warmup 10s`` (a duration)."""
    if text.strip().isdigit():
        return int(text), 0.0
    return 0, parse_duration(text)


def _positive(name: str, value: float | None) -> None:
    if value is not None and value <= 0:
        raise UsageError(f"{name} must be > 0")


def _classes(mix: list[str], prompt_chars: int | None, max_tokens: int | None) -> tuple[RequestClass, ...]:
    if mix:
        if prompt_chars is not None:
            raise UsageError("--prompt-chars and --mix both set prompt lengths", "give prompt_chars= in each --mix")
        classes = tuple(plan.parse_mix(m) for m in mix)
        if len({c.name for c in classes}) != len(classes):
            raise UsageError("two --mix classes share a name")
        return classes
    chars = DEFAULT_PROMPT_CHARS if prompt_chars is None else prompt_chars
    tokens = DEFAULT_MAX_TOKENS if max_tokens is None else max_tokens
    chars = plan.whole("--prompt-chars", chars, plan.MAX_PROMPT_CHARS)
    return (RequestClass("default", chars, plan.whole("--max-tokens", tokens, plan.MAX_OUTPUT_TOKENS)),)


def _prompt_lines(path: Path) -> tuple[PromptLine, ...]:
    """The prompts of a JSONL file (a regular file, or ``-`` for stdin), at most MAX_PROMPTS_BYTES of UTF-8."""
    hint = 'a JSONL file of UTF-8 text, one {"prompt": "..."} a line, or - for stdin'
    if str(path) == "-":
        raw = sys.stdin.buffer.read(MAX_PROMPTS_BYTES + 1)
    else:
        try:
            # Non-blocking, so that a FIFO is refused below instead of waiting here for a writer.
            fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK)
        except OSError as e:
            raise UsageError(f"--prompts {path}: {e.strerror or e}", hint) from e
        try:
            if not stat.S_ISREG(os.fstat(fd).st_mode):
                raise UsageError(f"--prompts {path}: not a regular file", hint)
            with os.fdopen(os.dup(fd), "rb") as f:
                raw = f.read(MAX_PROMPTS_BYTES + 1)
        except OSError as e:
            raise UsageError(f"--prompts {path}: {e.strerror or e}", hint) from e
        finally:
            os.close(fd)
    if len(raw) > MAX_PROMPTS_BYTES:
        raise UsageError(f"--prompts {path}: larger than {MAX_PROMPTS_BYTES >> 20} MiB", hint)
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as e:
        raise UsageError(f"--prompts {path}: not UTF-8 text (a binary file?) at byte {e.start}", hint) from e
    return plan.read_prompts(text, str(path))


def _label(label: str | None) -> str:
    chosen = label or time.strftime("bench-%Y%m%d-%H%M%S")
    safe = re.sub(r"[^A-Za-z0-9._-]+", "-", chosen).strip("-.")
    if not safe:
        raise UsageError(f"--label {label!r} has nothing usable as a directory name")
    return safe


# The options `bench` and `bench sweep` share.
EndpointOption = Annotated[Endpoint, typer.Option("--endpoint", help="chat or completions.")]
ModelOption = Annotated[str | None, typer.Option("--model", help="Model name (default: the server's first).")]
ApiKeyOption = Annotated[
    str | None, typer.Option("--api-key", envvar="OPENAI_API_KEY", help="Bearer token (never written to disk).")
]
SeedOption = Annotated[int, typer.Option("--seed", help="Seed of prompts, mix choices and arrivals.")]
PromptCharsOption = Annotated[
    int | None, typer.Option("--prompt-chars", help=f"Prompt length in characters (default {DEFAULT_PROMPT_CHARS}).")
]
MaxTokensOption = Annotated[
    int | None, typer.Option("--max-tokens", help=f"Output cap per request (default {DEFAULT_MAX_TOKENS}).")
]
MixOption = Annotated[
    list[str] | None,
    typer.Option("--mix", help="A request class, repeatable: NAME:prompt_chars=N,max_tokens=N,weight=W."),
]
IgnoreEosOption = Annotated[
    bool, typer.Option("--ignore-eos", help="Ask the server to generate max_tokens every time (vLLM, SGLang).")
]
TimeoutOption = Annotated[str, typer.Option("--timeout", help="Per-request limit.")]


@bench_app.callback(invoke_without_command=True)
def bench(
    ctx: typer.Context,
    base_url: Annotated[
        str | None, typer.Option("--base-url", help="The server, e.g. http://127.0.0.1:8000 (a trailing /v1 is fine).")
    ] = None,
    endpoint: EndpointOption = Endpoint.completions,
    model: ModelOption = None,
    api_key: ApiKeyOption = None,
    concurrency: Annotated[
        int | None,
        typer.Option("--concurrency", help="Closed loop: requests kept in flight (default 1). Open loop: a cap."),
    ] = None,
    request_rate: Annotated[
        float | None, typer.Option("--request-rate", help="Open loop: requests per second (instead of a closed loop).")
    ] = None,
    arrival: Annotated[Arrival, typer.Option("--arrival", help="Open loop arrivals.")] = Arrival.poisson,
    seed: SeedOption = 0,
    requests: Annotated[
        int | None,
        typer.Option("--requests", help=f"Measured requests (default {DEFAULT_REQUESTS} unless --duration)."),
    ] = None,
    duration: Annotated[
        str | None, typer.Option("--duration", help="Send for this long (e.g. 60s); with --requests, whichever first.")
    ] = None,
    warmup: Annotated[
        str, typer.Option("--warmup", help="Unmeasured warmup: a number of requests (16) or a duration (10s).")
    ] = "0",
    prompt_chars: PromptCharsOption = None,
    max_tokens: MaxTokensOption = None,
    mix: MixOption = None,
    prompts: Annotated[
        Path | None, typer.Option("--prompts", help='JSONL prompts, one {"prompt": "...", "max_tokens": N} a line.')
    ] = None,
    ignore_eos: IgnoreEosOption = False,
    slo: Annotated[
        str | None, typer.Option("--slo", help="Goodput objectives per request, e.g. ttft=2s,tpot=100ms.")
    ] = None,
    label: Annotated[str | None, typer.Option("--label", help="Name of the run (default: bench-DATE-TIME).")] = None,
    out: Annotated[Path | None, typer.Option("--out", help="Result directory (default benchmarks/<label>/).")] = None,
    metrics_url: Annotated[
        str | None, typer.Option("--metrics-url", help="The server's /metrics (default BASE_URL/metrics).")
    ] = None,
    scrape: Annotated[
        bool, typer.Option("--scrape/--no-scrape", help="Read the server's /metrics around the run.")
    ] = True,
    scrape_interval: Annotated[
        str | None, typer.Option("--scrape-interval", help="Also scrape /metrics this often during the run (e.g. 5s).")
    ] = None,
    timeout: TimeoutOption = "300s",
    workers: Annotated[
        int | None,
        typer.Option(
            "--workers",
            help="Client processes (default: one per 128 concurrent streams, at most one per usable core, "
            "or per two when the server is on this machine).",
        ),
    ] = None,
    explain_metrics: Annotated[
        bool, typer.Option("--explain-metrics", help="Print what every figure means (and other tools' names); exit.")
    ] = False,
    output: Annotated[OutputFormat, typer.Option("--format", help="text, or json (the result.json document).")] = (
        OutputFormat.text
    ),
) -> None:
    """Run a load test against an OpenAI-compatible streaming server and write result.json + requests.csv."""
    if ctx.invoked_subcommand is not None:
        return
    if explain_metrics:
        stdout.print(render.build_definitions())
        return
    if base_url is None:
        fail(UsageError("give --base-url", "e.g. llmtriage bench --base-url http://127.0.0.1:8000 --concurrency 8"))
    for name, value in (("--concurrency", concurrency), ("--request-rate", request_rate), ("--requests", requests)):
        _positive(name, value)
    root = plan.server_root(base_url)
    if metrics_url is not None:
        check_url(metrics_url, "--metrics-url")
    if api_key and public_url(root) != root:
        fail(UsageError("--base-url carries credentials and --api-key is set", "give one of them"))
    duration_s = parse_duration(duration) if duration else None
    _positive("--duration", duration_s)
    warmup_requests, warmup_s = _warmup(warmup)
    interval_s = parse_duration(scrape_interval) if scrape_interval else None
    _positive("--scrape-interval", interval_s)
    objectives = parse_slo(slo, catalog.thresholds().slo) if slo else catalog.thresholds().slo
    if prompts is not None and mix:
        fail(UsageError("--prompts and --mix both choose prompts", "give one"))
    if prompts is not None and prompt_chars is not None:
        fail(UsageError("--prompt-chars has no effect with --prompts"))
    prompt_lines = () if prompts is None else _prompt_lines(prompts)
    closed = request_rate is None
    _positive("--workers", workers)
    cpus, local = workers_mod.usable_cpus(), workers_mod.is_local(root)
    if workers is None:
        choice = workers_mod.choose(concurrency, closed, cpus, local)
    else:
        choice = workers_mod.given(workers, cpus, local)
    if choice.workers > (concurrency or (1 if closed else choice.workers)):
        fail(
            UsageError(
                f"--workers {choice.workers} exceeds --concurrency {concurrency or 1}", "each worker holds a share"
            )
        )
    name = _label(label)
    config = BenchConfig(
        base_url=root,
        endpoint=endpoint,
        model=model,
        api_key=api_key,
        concurrency=concurrency if concurrency is not None or not closed else 1,
        request_rate_per_s=request_rate,
        arrival=arrival,
        seed=seed,
        requests=requests if requests is not None or duration_s is not None else DEFAULT_REQUESTS,
        duration_s=duration_s,
        warmup_requests=warmup_requests,
        warmup_s=warmup_s,
        classes=_classes(mix or [], prompt_chars, max_tokens),
        prompts=prompt_lines,
        prompts_file=None if prompts is None else str(prompts),
        ignore_eos=ignore_eos,
        timeout_s=parse_duration(timeout),
        workers=choice.workers,
        worker_choice=choice,
        label=name,
        metrics_url=(metrics_url or root + "/metrics") if scrape else None,
        scrape_interval_s=interval_s,
        slo_ttft_ms=objectives.ttft_p95_s * 1000.0,
        slo_tpot_ms=objectives.itl_p95_s * 1000.0,
    )
    outcome, stopped_by = _run(config)
    done = result.build(outcome)
    directory = out or Path("benchmarks") / name
    try:
        result.write(directory, done)
    except UsageError as e:
        fail(e)
    code = _exit_code(done, stopped_by)
    if output is OutputFormat.json:
        print_json(result.to_dict(done))
    if code == ExitCode.UNAVAILABLE:  # a table of dashes would hide the one thing to say
        fail(_unreachable(done, directory))
    if output is OutputFormat.text:
        stdout.print(render.build(done), highlight=False)
    stderr.print(f"[dim]wrote {directory / result.RESULT_JSON} and {directory / result.REQUESTS_CSV}[/]")
    raise typer.Exit(code)


def _exit_code(done: result.BenchResult, stopped_by: signal.Signals | None) -> int:
    s = done.summary
    if stopped_by is not None:
        return 128 + stopped_by  # as the shell reports a process ended by that signal: 130 Ctrl-C, 143 SIGTERM
    if any(w.error for w in done.outcome.workers):  # a worker lost: its share was never measured
        return int(ExitCode.PROBLEM_FOUND)
    if s.completed == 0 and s.errors and all(e.kind == "connect" for e in s.errors):
        return int(ExitCode.UNAVAILABLE)
    return int(ExitCode.PROBLEM_FOUND if s.failed else ExitCode.OK)


def _unreachable(done: result.BenchResult, directory: Path) -> UnavailableError:
    """No measured request connected: the URL, the most frequent reason, and where the attempts were written."""
    s = done.summary
    url = public_url(done.outcome.config.api_url)
    return UnavailableError(
        f"could not connect to {url}: {s.errors[0].message} ({s.failed} of {s.measured} requests)",
        f"is the server up and listening there? (the attempts are in {directory / result.RESULT_JSON})",
    )


def _run(config: BenchConfig) -> tuple[RunOutcome, signal.Signals | None]:
    """Run with a live progress bar on stderr; the first Ctrl-C or SIGTERM stops the run and keeps what it has
    (returned with the signal that stopped it)."""
    total = None if config.requests is None else config.requests + config.warmup_requests
    progress = Progress(
        TextColumn(f"[bold]{config.label}[/]"),
        BarColumn(),
        MofNCompleteColumn(),
        TimeElapsedColumn(),
        TextColumn("{task.fields[status]}"),
        console=stderr,
        auto_refresh=False,
        transient=True,  # the report says it all at the end
        disable=not stderr.is_terminal,  # a live display only: a log or a pipe gets the report
    )
    task = progress.add_task("bench", total=total, status="")

    def on_progress(counts: runner.Counts) -> None:
        progress.update(
            task,
            completed=counts.done + counts.failed,
            status=f"ok {counts.done} · failed {counts.failed} · in flight "
            f"{counts.sent - counts.done - counts.failed} · {counts.output_tokens} tokens",
        )
        progress.refresh()

    async def main() -> tuple[RunOutcome, signal.Signals | None]:
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        received: list[signal.Signals] = []

        def interrupted(signum: signal.Signals) -> None:
            received.append(signum)
            stop.set()
            for each in STOP_SIGNALS:  # a second one ends the process
                loop.remove_signal_handler(each)
            stderr.print(
                f"[yellow]interrupted ({signum.name}): stopping, keeping the partial results (again to quit)[/]"
            )

        with contextlib.suppress(NotImplementedError):  # no signal handlers on Windows' loop
            for signum in STOP_SIGNALS:
                loop.add_signal_handler(signum, interrupted, signum)
        outcome = await runner.run(config, stop, on_progress)
        return outcome, received[0] if received else None

    with progress:
        return aio.run(main())


@bench_app.command("sweep")
def sweep(
    base_url: Annotated[str, typer.Option("--base-url", help="The server, e.g. http://127.0.0.1:8000.")],
    endpoint: EndpointOption = Endpoint.completions,
    model: ModelOption = None,
    api_key: ApiKeyOption = None,
    levels: Annotated[
        int,
        typer.Option(
            "--levels", help="Levels in all: synchronous, throughput, and the rest as rates between (GuideLLM's 10)."
        ),
    ] = sweep_mod.DEFAULT_LEVELS,
    rates: Annotated[
        str | None, typer.Option("--rates", help="Run these request rates instead, e.g. 1,2,4,8 (open loop).")
    ] = None,
    concurrencies: Annotated[
        str | None, typer.Option("--concurrencies", help="Run these concurrencies instead, e.g. 1,4,16 (closed loop).")
    ] = None,
    max_concurrency: Annotated[
        int,
        typer.Option("--max-concurrency", help="In flight at the throughput level, and the cap of each rate level."),
    ] = DEFAULT_SWEEP_CONCURRENCY,
    arrival: Annotated[Arrival, typer.Option("--arrival", help="Arrivals of the rate levels.")] = Arrival.constant,
    requests: Annotated[
        int | None,
        typer.Option(
            "--requests", help=f"Measured requests per level (default {DEFAULT_SWEEP_REQUESTS} unless --duration)."
        ),
    ] = None,
    duration: Annotated[
        str | None, typer.Option("--duration", help="Per level: send for this long (e.g. 30s); a hard deadline.")
    ] = None,
    warmup: Annotated[str, typer.Option("--warmup", help="Per level: unmeasured requests (16) or a duration.")] = "0",
    prompt_chars: PromptCharsOption = None,
    max_tokens: MaxTokensOption = None,
    mix: MixOption = None,
    ignore_eos: IgnoreEosOption = False,
    seed: SeedOption = 0,
    slo: Annotated[
        str | None,
        typer.Option("--slo", help="Objectives a level must meet, e.g. ttft=500ms,tpot=50ms,error_rate=1%."),
    ] = None,
    label: Annotated[str | None, typer.Option("--label", help="Name of the sweep (default: sweep-DATE-TIME).")] = None,
    out: Annotated[Path | None, typer.Option("--out", help="Result directory (default benchmarks/<label>/).")] = None,
    scrape: Annotated[
        bool, typer.Option("--scrape/--no-scrape", help="Read the server's /metrics around each level.")
    ] = True,
    timeout: TimeoutOption = "300s",
    output: Annotated[OutputFormat, typer.Option("--format", help="text, or json (the sweep.json document).")] = (
        OutputFormat.text
    ),
) -> None:
    """Find the knee: load levels up to saturation, one line per level, the highest rate that meets the SLOs.

    As GuideLLM's sweep: a synchronous level, a throughput level (--max-concurrency in flight), then rates
    spread evenly between the two measured rates. Writes sweep.json, its page sweep.html (the knee, latency by
    rate, every level) and one result directory per level.
    Exit codes: 0 some level meets the SLOs, 1 none does, 2 usage error, 4 the server could not be reached,
    130/143 interrupted (the levels done so far are written).
    """
    root = plan.server_root(base_url)
    if api_key and public_url(root) != root:
        fail(UsageError("--base-url carries credentials and --api-key is set", "give one of them"))
    if rates and concurrencies:
        fail(UsageError("--rates and --concurrencies both choose the levels", "give one"))
    if levels < sweep_mod.MIN_LEVELS:
        fail(UsageError(f"--levels must be at least {sweep_mod.MIN_LEVELS}", "synchronous, throughput and a rate"))
    for name, value in (("--requests", requests), ("--max-concurrency", max_concurrency)):
        _positive(name, value)
    duration_s = parse_duration(duration) if duration else None
    _positive("--duration", duration_s)
    warmup_requests, warmup_s = _warmup(warmup)
    objectives = parse_slo(slo, catalog.thresholds().slo) if slo else catalog.thresholds().slo
    name = _label(label or time.strftime("sweep-%Y%m%d-%H%M%S"))
    base = BenchConfig(
        base_url=root,
        endpoint=endpoint,
        model=model,
        api_key=api_key,
        concurrency=1,
        request_rate_per_s=None,
        arrival=arrival,
        seed=seed,
        requests=requests if requests is not None or duration_s is not None else DEFAULT_SWEEP_REQUESTS,
        duration_s=duration_s,
        warmup_requests=warmup_requests,
        warmup_s=warmup_s,
        classes=_classes(mix or [], prompt_chars, max_tokens),
        ignore_eos=ignore_eos,
        timeout_s=parse_duration(timeout),
        label=name,
        metrics_url=root + "/metrics" if scrape else None,
        slo_ttft_ms=objectives.ttft_p95_s * 1000.0,
        slo_tpot_ms=objectives.itl_p95_s * 1000.0,
    )
    directory = out or Path("benchmarks") / name
    chosen: list[sweep_mod.LevelPlan] = []
    if rates:
        chosen = [
            sweep_mod.LevelPlan(sweep_mod.RATE, rate_per_s=r) for r in sweep_mod.parse_numbers(rates, "--rates", False)
        ]
    elif concurrencies:
        chosen = [
            sweep_mod.LevelPlan(sweep_mod.CONCURRENCY, concurrency=int(c))
            for c in sweep_mod.parse_numbers(concurrencies, "--concurrencies", True)
        ]
    runner_ = _SweepRunner(base, directory, objectives, max_concurrency, arrival, len(chosen) or levels)
    if chosen:
        for level_plan in chosen:
            if not runner_.run(level_plan):
                break
    elif runner_.run_measured():
        sync, most = (lv.result.summary.request_throughput_per_s for lv in runner_.levels)
        spread = sweep_mod.spread_rates(sync or 0.0, most or 0.0, levels)
        if len(spread) == 1:
            runner_.notes.append("the throughput level served no more than the synchronous one: one rate level")
        runner_.planned = 2 + len(spread)
        for rate in spread:
            if not runner_.run(sweep_mod.LevelPlan(sweep_mod.RATE, rate_per_s=rate)):
                break
    runner_.finish(output)


class _SweepRunner:
    """Runs a sweep's levels one after the other, writes each, says one line per level; stops on a signal."""

    def __init__(
        self,
        base: BenchConfig,
        directory: Path,
        objectives: Slo,
        max_concurrency: int,
        arrival: Arrival,
        planned: int,
    ) -> None:
        self.base, self.directory, self.objectives = base, directory, objectives
        self.max_concurrency, self.arrival, self.planned = max_concurrency, arrival, planned
        self.levels: list[sweep_mod.Level] = []
        self.notes: list[str] = []
        self.stopped_by: signal.Signals | None = None

    def run_measured(self) -> bool:
        """The synchronous and the throughput levels; False when the sweep cannot go on."""
        return all(self.run(p) for p in sweep_mod.measured_levels(self.max_concurrency))

    def run(self, level_plan: sweep_mod.LevelPlan) -> bool:
        """Run one level; False when the sweep stops (a signal, or nothing reached the server)."""
        index = len(self.levels) + 1
        dir_name = level_plan.name(index)
        closed = level_plan.kind != sweep_mod.RATE
        concurrency = level_plan.concurrency if closed else self.max_concurrency
        choice = workers_mod.choose(
            concurrency, closed, workers_mod.usable_cpus(), workers_mod.is_local(self.base.base_url)
        )
        config = sweep_mod.level_config(
            self.base, level_plan, f"{self.base.label}/{dir_name}", self.max_concurrency, self.arrival, choice
        )
        if self.levels and self.base.model is None:  # the first level found the model: ask once
            config = dataclasses.replace(config, model=self.levels[0].result.outcome.config.model)
        outcome, self.stopped_by = _run(config)
        done = result.build(outcome)
        try:
            result.write(self.directory / dir_name, done)
        except UsageError as e:
            fail(e)
        meets, missed = sweep_mod.judge(done, self.objectives)
        level = sweep_mod.Level(level_plan, dir_name, done, meets, missed)
        self.levels.append(level)
        stderr.print(render.build_level_line(level, index, self.planned), highlight=False)
        if _exit_code(done, None) == ExitCode.UNAVAILABLE:
            self.write()
            fail(_unreachable(done, self.directory / dir_name))
        return self.stopped_by is None

    def document(self) -> sweep_mod.Sweep:
        return sweep_mod.Sweep(
            label=self.base.label,
            levels=tuple(self.levels),
            slo=self.objectives,
            max_concurrency=self.max_concurrency,
            arrival=self.arrival,
            interrupted=self.stopped_by is not None,
            notes=tuple(self.notes),
        )

    def write(self) -> sweep_mod.Sweep:
        """``sweep.json`` and its page, ``sweep.html`` (what the page shows is what the JSON says: read back)."""
        done = self.document()
        text = strict_json.dumps(sweep_mod.to_dict(done))
        try:
            write_output(self.directory / sweep_mod.SWEEP_JSON, text.encode())
            write_output(self.directory / sweep_mod.SWEEP_HTML, sweep_page.build(json.loads(text)).encode())
        except UsageError as e:
            fail(e)
        return done

    def finish(self, output: OutputFormat) -> NoReturn:
        done = self.write()
        if output is OutputFormat.json:
            print_json(sweep_mod.to_dict(done))
        else:
            stdout.print(render.build_sweep(done), highlight=False)
        stderr.print(f"[dim]wrote {self.directory / sweep_mod.SWEEP_JSON} and {len(done.levels)} level directories[/]")
        stderr.print(
            f"the page: {self.directory / sweep_mod.SWEEP_HTML}", markup=False, highlight=False, soft_wrap=True
        )
        if self.stopped_by is not None:
            raise typer.Exit(128 + self.stopped_by)
        raise typer.Exit(int(ExitCode.OK if done.knee is not None else ExitCode.PROBLEM_FOUND))


def _result_file(path: Path) -> Path:
    if path.is_dir() and (path / sweep_mod.SWEEP_JSON).is_file() and not (path / result.RESULT_JSON).is_file():
        return path / sweep_mod.SWEEP_JSON
    return path / result.RESULT_JSON if path.is_dir() else path


@bench_app.command("compare")
def compare(
    a: Annotated[Path, typer.Argument(help="The earlier result.json or sweep.json (or its directory).")],
    b: Annotated[Path, typer.Argument(help="The later result.json or sweep.json (or its directory).")],
    output: Annotated[OutputFormat, typer.Option("--format", help="text or json.")] = OutputFormat.text,
) -> None:
    """Show what changed between two bench results: settings, then every figure with its change. Two sweeps
    compare their knees, peaks and levels."""
    texts = []
    for path in (_result_file(a), _result_file(b)):
        try:
            texts.append((path.read_text(encoding="utf-8"), str(path)))
        except OSError as e:
            fail(UsageError(f"{path}: {e.strerror or e}", "give two result.json files written by `llmtriage bench`"))
    sweeps = [_looks_like_sweep(text) for text, _ in texts]
    if any(sweeps):
        if not all(sweeps):
            fail(UsageError("one is a sweep and the other a single run", "compare two sweeps, or two result.json"))
        across = sweep_mod.compare(*(sweep_mod.load(text, source) for text, source in texts))
        if output is OutputFormat.json:
            print_json(sweep_mod.comparison_dict(across))
        else:
            stdout.print(render.build_sweep_comparison(across), highlight=False)
        return
    docs = [result.load(text, source) for text, source in texts]
    comparison = compare_mod.compare(docs[0], docs[1])
    if output is OutputFormat.json:
        print_json(compare_mod.to_dict(comparison))
    else:
        stdout.print(render.build_comparison(comparison), highlight=False)


def _looks_like_sweep(text: str) -> bool:
    try:
        data = json.loads(text)
    except (ValueError, RecursionError):
        return False
    return isinstance(data, dict) and sweep_mod.is_sweep(data)
