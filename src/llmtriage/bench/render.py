"""Terminal rendering (rich) of a bench result, a comparison, and the metric definitions.

Builders are pure: they return renderables; only the CLI prints them.
"""

from __future__ import annotations

from rich.console import Group, RenderableType
from rich.table import Table
from rich.text import Text

from llmtriage.bench.compare import Comparison
from llmtriage.bench.explain import DEFINITIONS
from llmtriage.bench.result import BenchResult
from llmtriage.bench.server_metrics import PEAK_MIN_SCRAPES, ServerLatency
from llmtriage.bench.summary import Stats

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
    parts: list[RenderableType] = [head, counts, throughput, _latency_table(result)]
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


def build_comparison(comparison: Comparison) -> RenderableType:
    """``bench compare``: settings that differ, then every figure with its change and verdict."""
    parts: list[RenderableType] = [Text(f"A: {comparison.label_a}   B: {comparison.label_b}", style="bold")]
    if comparison.settings:
        settings = Table("setting", "A", "B", box=None, title="settings that differ", title_justify="left")
        for name, a, b in comparison.settings:
            settings.add_row(name, a, b)
        parts.append(settings)
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
