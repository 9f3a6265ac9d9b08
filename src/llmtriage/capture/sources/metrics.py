"""The server's ``/metrics``, scraped every interval for the duration; each raw answer is kept as
``metrics/scrape-<epoch_ms>.prom`` (the bundle reader orders scrapes by that time)."""

from __future__ import annotations

from typing import ClassVar

from llmtriage.capture.collector import Collector, Context, Failed, Skip, decode
from llmtriage.capture.manifest import SourceRow
from llmtriage.capture.plan import CapturePlan
from llmtriage.capture.runner import Limits


class MetricsScrapes(Collector):
    """Prometheus scrapes of the server, raw."""

    name = "metrics"
    limits: ClassVar[Limits] = Limits(timeout_s=5.0, max_bytes=16 << 20)
    sampled = True

    def skip(self, plan: CapturePlan) -> Skip | None:
        """Applies when a metrics URL was given."""
        return None if plan.metrics_url else Skip("no --metrics-url given")

    def collect(self, ctx: Context, row: SourceRow) -> None:
        """Scrape at every tick; a failed scrape is counted, not fatal, unless none succeeded."""
        assert ctx.plan.metrics_url is not None
        kept = 0
        failures: list[str] = []
        for now_s in ctx.ticks():
            answer = ctx.fetcher.get(ctx.plan.metrics_url, self.limits.timeout_s, self.limits.max_bytes)
            if not answer.ok:
                failures.append(answer.error or f"HTTP {answer.status}")
                continue
            written = ctx.write(row, f"metrics/scrape-{int(now_s * 1000)}.prom", decode(answer.body))
            if written is None:
                break
            if answer.truncated:
                row.note(f"{written.path}: cut at {self.limits.max_bytes} bytes")
            kept += 1
            ctx.report_sample(self.name, kept)
        row.samples = kept
        if failures:
            row.note(f"{len(failures)} of {kept + len(failures)} scrapes failed, first: {failures[0]}")
        if kept == 0:
            raise Failed(failures[0] if failures else "no scrape before the capture ended")
