"""llama.cpp's own state: ``GET /slots`` (each slot's context, task and progress) and ``GET /health``, read once
before the sampling starts, beside the /metrics URL. A server whose /slots is not llama.cpp's is skipped.

Kept raw as ``metrics/llamacpp-slots.json`` and ``metrics/llamacpp-health.json`` (the bundle reader reads only
``*.prom`` / ``*.txt`` there as scrapes).
"""

from __future__ import annotations

import json
import urllib.parse
from typing import ClassVar

from llmtriage.capture.collector import Collector, Context, Skip, Skipped, decode
from llmtriage.capture.manifest import SourceRow
from llmtriage.capture.plan import CapturePlan
from llmtriage.capture.runner import Limits


def server_root(metrics_url: str) -> str:
    """The server's base URL: the metrics URL without its ``/metrics`` path (else its scheme and host)."""
    if metrics_url.rstrip("/").endswith("/metrics"):
        return metrics_url.rstrip("/").removesuffix("/metrics")
    parts = urllib.parse.urlsplit(metrics_url)
    return urllib.parse.urlunsplit((parts.scheme, parts.netloc, "", "", ""))


def _are_llamacpp_slots(body: bytes) -> bool:
    try:
        data = json.loads(body)
    except (ValueError, RecursionError):
        return False
    return (
        isinstance(data, list)
        and bool(data)
        and all(isinstance(s, dict) and {"id", "n_ctx", "is_processing"} <= s.keys() for s in data)
    )


class LlamaCppState(Collector):
    """llama-server's /slots and /health, once."""

    name = "llamacpp.state"
    limits: ClassVar[Limits] = Limits(timeout_s=3.0, max_bytes=4 << 20)

    def skip(self, plan: CapturePlan) -> Skip | None:
        """Applies when a metrics URL was given (the server is asked whether it is llama.cpp)."""
        return None if plan.metrics_url else Skip("no --metrics-url given")

    def collect(self, ctx: Context, row: SourceRow) -> None:
        """GET /slots; when it is llama.cpp's, keep it and GET /health."""
        assert ctx.plan.metrics_url is not None
        root = server_root(ctx.plan.metrics_url)
        slots = ctx.fetcher.get(root + "/slots", self.limits.timeout_s, self.limits.max_bytes)
        if not slots.ok or slots.truncated or not _are_llamacpp_slots(slots.body):
            why = slots.error or ("cut at the size limit" if slots.truncated else "not llama.cpp's slot list")
            raise Skipped(f"not a llama.cpp server with /slots on (GET /slots: {why})")
        ctx.write(row, "metrics/llamacpp-slots.json", decode(slots.body))
        busy = sum(1 for s in json.loads(slots.body) if s.get("is_processing"))
        row.note(f"{busy} of {len(json.loads(slots.body))} slots processing")
        health = ctx.fetcher.get(root + "/health", self.limits.timeout_s, self.limits.max_bytes)
        if health.ok:
            ctx.write(row, "metrics/llamacpp-health.json", decode(health.body))
        else:
            row.note(f"GET /health: {health.error}")
