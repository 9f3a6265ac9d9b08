"""Terminal rendering (rich) of a bench result, a sweep, a comparison, and the metric definitions.

Builders are pure: they return renderables; only the CLI prints them.
"""

from __future__ import annotations

from collections.abc import Sequence

from rich.console import Group, RenderableType
from rich.table import Table
from rich.text import Text

from llmtriage.bench.compare import Comparison
from llmtriage.bench.explain import DEFINITIONS
from llmtriage.bench.result import BenchResult, number_at
from llmtriage.bench.server_metrics import PEAK_MIN_SCRAPES, ServerLatency
from llmtriage.bench.summary import Stats
from llmtriage.bench.sweep import RATE, Level, LevelPlan, Sweep, SweepComparison

_VERDICT_STYLE = {"better": "green", "worse": "bold red", "changed": "yellow"}


def _n(value: float | None, digits: int = 1) -> str:
    return "–" if value is None else f"{value:,.{digits}f}"


def _load(result: BenchResult) -> str:
    config = result.outcome.config
    if config.closed_loop:
        return f"closed loop, concurrency {config.concurrency or 1}"
    cap = f", concurrency cap {config.concurrency}" if config.concurrency else ""
    return f"open loop, {config.request_rate_per_s:g} req/s {config.arrival}{cap}"


def build(result: BenchResult) -> RenderableType:
    """The end-of-run report: what ran, counts, throughput, latency (client beside server), errors, warnings."""
    s, config = result.summary, result.outcome.config
    head = Text()
    head.append(f"llmtriage bench · {config.label}", style="bold")
    head.append(f"  {config.model or 'model unknown'} · {config.endpoint} · {_load(result)}", style="dim")
    if result.outcome.interrupted:
        head.append("  (interrupted: partial)", style="bold yellow")
    counts = Text(
        f"requests: {s.measured} measured, {s.completed} completed, {s.failed} failed"
        + (f", {s.interrupted} interrupted" if s.interrupted else "")
        + (f" (+{s.warmup} warmup)" if s.warmup else "")
        + f" · window {_n(s.duration_s, 2)} s"
    )
    rate = ""
    if s.requested_rate_per_s is not None:
        rate = (
            f" · rate requested {s.requested_rate_per_s:g}/s, scheduled {_n(s.scheduled_rate_per_s, 2)}/s, "
            f"achieved {_n(s.achieved_rate_per_s, 2)}/s"
        )
    g = s.goodput
    throughput = Text(
        f"throughput: {_n(s.request_throughput_per_s, 2)} req/s · {_n(s.output_token_throughput_per_s)} output tok/s"
        f"{rate}\ngoodput: {_n(g.goodput_per_s, 2)} req/s ({g.good_requests} requests with TTFT <= "
        f"{g.ttft_slo_ms:g} ms and TPOT <= {g.tpot_slo_ms:g} ms"
        + (f", {g.good_share:.0%} of measured" if g.good_share is not None else "")
        + ")"
    )
    parts: list[RenderableType] = [head, counts, throughput]
    if config.worker_choice is not None:
        parts.append(Text(f"client workers: {config.worker_choice.reason}", style="dim"))
    parts.append(_latency_table(result))
    if len(s.by_class) > 1:
        parts.append(_class_table(result))
    if result.server is not None:
        parts.append(_server_line(result))
    if s.errors:
        errors = Table("count", "kind", "status", "message", title="errors", title_justify="left", box=None)
        for e in s.errors:
            errors.add_row(str(e.count), e.kind, "" if e.status is None else str(e.status), e.message)
        parts.append(errors)
    for note in result.outcome.notes:
        parts.append(Text(f"note: {note}", style="dim"))
    for w in s.warnings:
        parts.append(Text.assemble(("warning ", "bold yellow"), (f"{w.code}: ", "yellow"), w.message))
    return Group(*parts)


def _latency_table(result: BenchResult) -> Table:
    s, server = result.summary, result.server
    table = Table("ms", "n", "mean", "p50", "p90", "p95", "p99", "max", box=None, title_justify="left")
    with_server = server is not None
    if with_server:
        table.add_column("server mean", style="cyan")
        table.add_column("server p50", style="cyan")
        table.add_column("server p99", style="cyan")

    def row(name: str, stats: Stats, theirs: ServerLatency | None, digits: int = 1) -> None:
        cells = [name, str(stats.count)] + [
            _n(v, digits) for v in (stats.mean, stats.p50, stats.p90, stats.p95, stats.p99, stats.max)
        ]
        if with_server:
            cells += [_n(v, digits) for v in _server_cells(theirs)]
        table.add_row(*cells)

    row("TTFT", s.ttft_ms, None if server is None else server.ttft_ms)
    row("TPOT", s.tpot_ms, None if server is None else server.tpot_ms, 2)
    row("ITL", s.itl_ms, None if server is None else server.itl_ms, 2)
    row("E2E", s.e2e_ms, None if server is None else server.e2e_ms)
    row("queue", s.queue_ms, None if server is None else server.queue_ms, 2)
    row("first byte", s.first_byte_ms, None)
    return table


def _server_cells(latency: ServerLatency | None) -> tuple[float | None, float | None, float | None]:
    if latency is None:
        return None, None, None
    return latency.mean, latency.p50, latency.p99


def _class_table(result: BenchResult) -> Table:
    table = Table("class", "completed", "failed", "TTFT p50", "TTFT p99", "TPOT p50", "TPOT p99", "E2E p99", box=None)
    for c in result.summary.by_class:
        table.add_row(
            c.name,
            str(c.completed),
            str(c.failed),
            _n(c.ttft_ms.p50),
            _n(c.ttft_ms.p99),
            _n(c.tpot_ms.p50, 2),
            _n(c.tpot_ms.p99, 2),
            _n(c.e2e_ms.p99),
        )
    return table


def _server_line(result: BenchResult) -> Text:
    server = result.server
    assert server is not None
    text = Text(f"server ({server.metrics_url}, {server.scrapes} scrapes): ", style="cyan")
    text.append(
        f"finished {_n(server.requests_finished, 0)} requests, {_n(server.generation_tokens, 0)} output tokens, "
        f"preemptions {_n(server.preemptions, 0)}, "
    )
    if 0 < server.peak_scrapes < PEAK_MIN_SCRAPES:
        scrapes = f"{server.peak_scrapes} scrape" + ("s" if server.peak_scrapes > 1 else "")
        text.append(f"KV usage, waiting and running peaks n/a ({scrapes})")  # why: in the problems below
    else:
        text.append(
            "KV usage peak "
            + ("–" if server.kv_usage_peak_ratio is None else f"{server.kv_usage_peak_ratio:.0%}")
            + f", waiting peak {_n(server.waiting_peak, 0)}, running peak {_n(server.running_peak, 0)}"
        )
    for problem in server.problems:
        text.append(f"\n  {problem}", style="dim")
    return text


def _comparison_head(label_a: str, label_b: str, settings: Sequence[tuple[str, str, str]]) -> list[RenderableType]:
    """The two labels, then the settings that differ (when any)."""
    parts: list[RenderableType] = [Text(f"A: {label_a}   B: {label_b}", style="bold")]
    if settings:
        table = Table("setting", "A", "B", box=None, title="settings that differ", title_justify="left")
        for name, a, b in settings:
            table.add_row(name, a, b)
        parts.append(table)
    return parts


def build_comparison(comparison: Comparison) -> RenderableType:
    """``bench compare``: settings that differ, then every figure with its change and verdict."""
    parts = _comparison_head(comparison.label_a, comparison.label_b, comparison.settings)
    table = Table("figure", "unit", "A", "B", "change", "", box=None)
    for c in comparison.changes:
        if c.a is None and c.b is None:
            continue
        change = "–" if c.delta is None else f"{c.delta:+,.2f}" + ("" if c.ratio is None else f" ({c.ratio:+.0%})")
        table.add_row(
            c.figure.label,
            c.figure.unit,
            _n(c.a, 2),
            _n(c.b, 2),
            change,
            Text(c.verdict, style=_VERDICT_STYLE.get(c.verdict, "dim")),
        )
    parts.append(table)
    for side, codes in (("A", comparison.warnings_a), ("B", comparison.warnings_b)):
        if codes:
            parts.append(Text(f"warnings in {side}: {', '.join(codes)}", style="yellow"))
    return Group(*parts)


def build_definitions() -> Table:
    """``--explain-metrics``: each figure's definition and its names in other tools."""
    table = Table("figure", "definition", "vllm bench serve", "GuideLLM", "genai-perf", show_lines=True)
    for d in DEFINITIONS:
        table.add_row(d.name, d.definition, d.vllm_bench_serve, d.guidellm, d.genai_perf)
    return table


def _load_of(plan: LevelPlan) -> str:
    if plan.kind == RATE:
        return f"{plan.rate_per_s:.3g} req/s"
    return f"concurrency {plan.concurrency}"


def build_level_line(level: Level, index: int, planned: int | None) -> Text:
    """One line per level as a sweep goes: its load, what it served, its latency, goodput and verdict."""
    s = level.result.summary
    of = f"/{planned}" if planned else ""
    line = Text(f"level {index}{of} {level.plan.kind:<11} {_load_of(level.plan):<17}", style="bold")
    line.append(
        f" served {_n(s.request_throughput_per_s, 2)} req/s · ok {s.completed}/{s.measured} · "
        f"TTFT p50 {_n(s.ttft_ms.p50, 0)} p95 {_n(s.ttft_ms.p95, 0)} ms · TPOT p95 {_n(s.tpot_ms.p95, 1)} ms · "
        f"{_n(s.output_token_throughput_per_s, 0)} tok/s · goodput {_n(s.goodput.goodput_per_s, 2)} req/s "
    )
    if level.meets_slo:
        line.append("meets SLOs", style="green")
    else:
        line.append("misses: " + "; ".join(level.missed), style="yellow")
    return line


def build_sweep(sweep: Sweep) -> RenderableType:
    """The end of a sweep: every level from the lowest rate up, then the knee and the peak goodput."""
    head = Text(f"llmtriage bench sweep · {sweep.label}", style="bold")
    slo = sweep.slo
    head.append(
        f"  SLOs: TTFT p95 <= {slo.ttft_p95_s * 1000:g} ms, TPOT p95 <= {slo.itl_p95_s * 1000:g} ms, "
        f"errors <= {slo.error_rate:.0%}",
        style="dim",
    )
    if sweep.interrupted:
        head.append("  (interrupted: partial)", style="bold yellow")
    table = Table(
        "level", "load", "req/s", "ok", "failed", "TTFT p50", "TTFT p95", "TPOT p95", "tok/s", "goodput", "SLOs",
        box=None,
    )  # fmt: skip
    knee = sweep.knee
    for level in sweep.by_rate():
        s = level.result.summary
        verdict = Text("meets", style="green") if level.meets_slo else Text("misses", style="yellow")
        table.add_row(
            Text(level.directory, style="bold" if level is knee else ""),
            _load_of(level.plan),
            _n(s.request_throughput_per_s, 2),
            str(s.completed),
            str(s.failed),
            _n(s.ttft_ms.p50, 0),
            _n(s.ttft_ms.p95, 0),
            _n(s.tpot_ms.p95, 1),
            _n(s.output_token_throughput_per_s, 0),
            _n(s.goodput.goodput_per_s, 2),
            verdict,
        )
    parts: list[RenderableType] = [head, table]
    if knee is not None:
        parts.append(
            Text(f"knee: {_n(knee.rate_per_s, 2)} req/s ({knee.directory}) is the highest rate that meets the SLOs")
        )
    else:
        parts.append(Text("knee: no level meets the SLOs; the lowest level's misses say why", style="bold yellow"))
    best = sweep.best_goodput
    if best is not None:
        parts.append(Text(f"peak goodput: {_n(best.result.summary.goodput.goodput_per_s, 2)} req/s ({best.directory})"))
    for note in sweep.notes:
        parts.append(Text(f"note: {note}", style="dim"))
    return Group(*parts)


def build_sweep_comparison(comparison: SweepComparison) -> RenderableType:
    """``bench compare`` of two sweeps: the headline figures, then each sweep's levels side by side."""
    parts = _comparison_head(comparison.label_a, comparison.label_b, comparison.settings)
    table = Table("figure", "unit", "A", "B", "", box=None)
    for f in comparison.figures:
        table.add_row(
            f.label, f.unit, _n(f.a, 2), _n(f.b, 2), Text(f.verdict, style=_VERDICT_STYLE.get(f.verdict, "dim"))
        )
    parts.append(table)
    for side, levels in (("A", comparison.levels_a), ("B", comparison.levels_b)):
        rows = Table(
            "level",
            "req/s",
            "TTFT p95",
            "TPOT p95",
            "goodput",
            "SLOs",
            box=None,
            title=f"levels of {side}",
            title_justify="left",
        )
        for lv in levels:
            rows.add_row(
                str(lv.get("name")),
                _n(number_at(lv, "rate_per_s"), 2),
                _n(number_at(lv, "ttft_ms", "p95"), 0),
                _n(number_at(lv, "tpot_ms", "p95"), 1),
                _n(number_at(lv, "goodput_per_s"), 2),
                "meets" if lv.get("meets_slo") is True else "misses",
            )
        parts.append(rows)
    return Group(*parts)
