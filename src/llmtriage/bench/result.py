"""The on-disk form of a run (docs/bench-schema.md): ``result.json`` and the per-request ``requests.csv``,
and the readers of ``result.json`` for ``bench compare`` and for bundles (``bench/result.json``).

Builders are pure; the CLI writes the files. The API key is never part of a result, and credentials in a URL
are dropped.
"""

from __future__ import annotations

import contextlib
import csv
import dataclasses
import json
import math
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TextIO

from llmtriage import __version__, strict_json
from llmtriage.bench.model import RequestRecord, RunOutcome
from llmtriage.bench.server_metrics import ServerFigures, server_figures
from llmtriage.bench.summary import Summary, summarize
from llmtriage.errors import UsageError
from llmtriage.facts import BenchFigures, Citation, Problem
from llmtriage.urls import public_url

SCHEMA_VERSION = 1
RESULT_JSON = "result.json"
REQUESTS_CSV = "requests.csv"
CSV_COLUMNS = (
    "index",
    "request_id",
    "class",
    "warmup",
    "prompt_chars",
    "max_tokens",
    "scheduled_s",
    "sent_s",
    "queue_ms",
    "first_byte_ms",
    "ttft_ms",
    "e2e_ms",
    "tpot_ms",
    "output_tokens",
    "output_tokens_server",
    "output_tokens_client",
    "prompt_tokens_server",
    "finish_reason",
    "status",
    "error_kind",
    "error",
    "itl_ms",
)


@dataclass(frozen=True, slots=True)
class BenchResult:
    """A run with its figures: the client's summary and, when /metrics was read, the server's."""

    outcome: RunOutcome
    summary: Summary
    server: ServerFigures | None


def build(outcome: RunOutcome) -> BenchResult:
    """Summarise ``outcome`` (client and server side)."""
    url = outcome.config.metrics_url
    server = server_figures(url, outcome.scrapes) if url else None
    return BenchResult(outcome=outcome, summary=summarize(outcome), server=server)


def _clean(value: Any) -> Any:
    if isinstance(value, float):
        return round(value, 6)
    if isinstance(value, dict):
        return {k: _clean(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_clean(v) for v in value]
    return value


def _iso(epoch_s: float) -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(epoch_s))


def to_dict(result: BenchResult) -> dict[str, Any]:
    """``result.json``: the stable, documented JSON form."""
    outcome, s, config = result.outcome, result.summary, result.outcome.config
    choice = config.worker_choice
    data: dict[str, Any] = {
        "schema_version": SCHEMA_VERSION,
        "tool": {"name": "llmtriage bench", "version": __version__},
        "run": {
            "label": config.label,
            "run_id": config.run_id,
            "started_at": _iso(outcome.started_at_s),
            "finished_at": _iso(outcome.finished_at_s),
            "interrupted": outcome.interrupted,
            "model": config.model,
            "notes": list(outcome.notes),
            "clock": {"source": "time.perf_counter", "perf_counter_origin_s": outcome.perf_origin_s},
        },
        "config": {
            "base_url": public_url(config.base_url),
            "endpoint": str(config.endpoint),
            "load": "closed" if config.closed_loop else "open",
            "concurrency": config.concurrency,
            "request_rate_per_s": config.request_rate_per_s,
            "arrival": None if config.closed_loop else str(config.arrival),
            "seed": config.seed,
            "requests": config.requests,
            "duration_s": config.duration_s,
            "warmup_requests": config.warmup_requests,
            "warmup_s": config.warmup_s,
            "classes": [dataclasses.asdict(c) for c in config.classes] if not config.prompts else [],
            "prompts_file": config.prompts_file,
            "prompts": len(config.prompts),
            "ignore_eos": config.ignore_eos,
            "timeout_s": config.timeout_s,
            "workers": config.workers,
            "worker_choice": None if choice is None else {**dataclasses.asdict(choice), "reason": choice.reason},
            "metrics_url": None if config.metrics_url is None else public_url(config.metrics_url),
            "scrape_interval_s": config.scrape_interval_s,
            "slo": {"ttft_ms": config.slo_ttft_ms, "tpot_ms": config.slo_tpot_ms},
        },
        "summary": {
            "requests": {
                "measured": s.measured,
                "completed": s.completed,
                "failed": s.failed,
                "interrupted": s.interrupted,
                "warmup": s.warmup,
                "warmup_failed": s.warmup_failed,
            },
            "duration_s": s.duration_s,
            "request_throughput_per_s": s.request_throughput_per_s,
            "output_token_throughput_per_s": s.output_token_throughput_per_s,
            "total_token_throughput_per_s": s.total_token_throughput_per_s,
            "requested_rate_per_s": s.requested_rate_per_s,
            "scheduled_rate_per_s": s.scheduled_rate_per_s,
            "achieved_rate_per_s": s.achieved_rate_per_s,
            "ttft_ms": dataclasses.asdict(s.ttft_ms),
            "tpot_ms": dataclasses.asdict(s.tpot_ms),
            "itl_ms": dataclasses.asdict(s.itl_ms),
            "e2e_ms": dataclasses.asdict(s.e2e_ms),
            "queue_ms": dataclasses.asdict(s.queue_ms),
            "first_byte_ms": dataclasses.asdict(s.first_byte_ms),
            "output_tokens": {
                "total": s.output_tokens_total,
                "server_reported_total": s.output_tokens_server_total,
                "client_counted_total": s.output_tokens_client_total,
                "requests_with_usage": s.requests_with_usage,
            },
            "prompt_tokens_total": s.prompt_tokens_total,
            "goodput": dataclasses.asdict(s.goodput),
            "by_class": [dataclasses.asdict(c) for c in s.by_class],
        },
        "errors": [dataclasses.asdict(e) for e in s.errors],
        "warnings": [dataclasses.asdict(w) for w in s.warnings],
        "client": {
            "workers": s.client.workers,
            "loop_lag_ms": dataclasses.asdict(s.client.loop_lag_ms),
            "cpu_busy_ratio": list(s.client.cpu_busy_ratio),
            "cpu_s": list(s.client.cpu_s),
            "coordinator_cpu_s": s.client.coordinator_cpu_s,
        },
        "server": None if result.server is None else dataclasses.asdict(result.server),
        "files": {"requests_csv": REQUESTS_CSV},
    }
    cleaned: dict[str, Any] = _clean(data)  # floats to 6 decimals: µs for seconds
    return cleaned


def _ms(value: float | None) -> str:
    return "" if value is None else f"{value:.3f}"


def csv_rows(records: tuple[RequestRecord, ...]) -> Iterator[list[str]]:
    """``requests.csv``: the header, then one row per request (``itl_ms``: the gaps, space-separated)."""
    yield list(CSV_COLUMNS)
    for r in records:
        yield [
            str(r.index),
            r.request_id,
            r.class_name,
            "1" if r.warmup else "0",
            str(r.prompt_chars),
            str(r.max_tokens),
            f"{r.scheduled_s:.6f}",
            f"{r.sent_s:.6f}",
            _ms(r.queue_ms),
            _ms(r.first_byte_ms),
            _ms(r.ttft_ms),
            _ms(r.e2e_ms),
            _ms(r.tpot_ms),
            str(r.output_tokens),
            "" if r.output_tokens_server is None else str(r.output_tokens_server),
            str(r.output_tokens_client),
            "" if r.prompt_tokens_server is None else str(r.prompt_tokens_server),
            r.finish_reason or "",
            "" if r.status is None else str(r.status),
            r.error_kind or "",
            r.error or "",
            " ".join(f"{gap:.3f}" for gap in r.itl_ms),
        ]


def load(text: str, source: str) -> dict[str, Any]:
    """A ``result.json`` read back for ``bench compare``; UsageError when it isn't one this version reads."""
    try:
        data = json.loads(text)
    except json.JSONDecodeError as e:
        raise UsageError(f"{source}: not JSON ({e.msg})", "give the result.json `llmtriage bench` wrote") from e
    except (ValueError, RecursionError) as e:  # a number of too many digits, nesting too deep
        raise UsageError(f"{source}: not a bench result", "give the result.json `llmtriage bench` wrote") from e
    if not isinstance(data, dict) or not isinstance(data.get("summary"), dict):
        raise UsageError(f"{source}: not a bench result", "give the result.json `llmtriage bench` wrote")
    version = data.get("schema_version")
    if version != SCHEMA_VERSION:
        raise UsageError(f"{source}: schema_version {version!r}, this llmtriage reads {SCHEMA_VERSION}")
    return data


def _at(data: Any, path: tuple[str, ...]) -> Any:
    for key in path:
        if not isinstance(data, dict):
            return None
        data = data.get(key)
    return data


def _finite(value: Any) -> float | None:
    """``value`` as a finite float; None for anything else (booleans, NaN, Infinity, an int past float's range)."""
    if not isinstance(value, int | float) or isinstance(value, bool):
        return None
    try:
        number = float(value)
    except OverflowError:
        return None
    return number if math.isfinite(number) else None


def number_at(data: Any, *path: str) -> float | None:
    """The number at ``path`` in parsed JSON (booleans are not numbers); None when it is missing or not one, and
    when it is not finite (NaN, Infinity, 1e400: see :func:`non_finite_at`)."""
    return _finite(_at(data, path))


def non_finite_at(data: Any, *path: str) -> bool:
    """True when the value at ``path`` is a number that is not finite: :func:`number_at` reads it as missing."""
    value = _at(data, path)
    return isinstance(value, int | float) and not isinstance(value, bool) and _finite(value) is None


_FIGURES = {
    "ttft_mean_ms": ("ttft_ms", "mean"),
    "ttft_p50_ms": ("ttft_ms", "p50"),
    "ttft_p95_ms": ("ttft_ms", "p95"),
    "ttft_p99_ms": ("ttft_ms", "p99"),
    "tpot_mean_ms": ("tpot_ms", "mean"),
    "tpot_p50_ms": ("tpot_ms", "p50"),
    "tpot_p95_ms": ("tpot_ms", "p95"),
    "tpot_p99_ms": ("tpot_ms", "p99"),
    "request_throughput": ("request_throughput_per_s",),
    "requested_rate": ("requested_rate_per_s",),
    "completed": ("requests", "completed"),
}


def bench_figures(text: str, source: str) -> tuple[BenchFigures | None, list[Problem]]:
    """The figures a diagnosis reads from a bench ``result.json``, each cited; never raises."""
    try:
        data = json.loads(text)
    except json.JSONDecodeError as e:
        return None, [Problem(source, f"not JSON: {e.msg}")]
    except (ValueError, RecursionError) as e:  # a number of too many digits, nesting too deep
        return None, [Problem(source, f"not a bench result: {e}"[:200])]
    summary = data.get("summary") if isinstance(data, dict) else None
    if not isinstance(summary, dict):
        return None, [Problem(source, "not a bench result (no summary)")]
    problems = []
    if data.get("schema_version") != SCHEMA_VERSION:
        problems.append(Problem(source, f"schema_version {data.get('schema_version')!r}; read as {SCHEMA_VERSION}"))
    figures = BenchFigures()
    for name, path in _FIGURES.items():
        value = number_at(summary, *path)
        if non_finite_at(summary, *path):
            problems.append(Problem(source, f"summary.{'.'.join(path)} is not a finite number: read as missing"))
        if value is not None:
            setattr(figures, name, value)
            figures.citations[name] = Citation(source=source, metric="summary." + ".".join(path), value=value)
    if not figures.citations:
        problems.append(Problem(source, "no figures in the summary"))
        return None, problems
    return figures, problems


def write(directory: Path, done: BenchResult) -> None:
    """requests.csv, scrapes/*.prom, then result.json, each written whole (temp file, then rename)."""
    try:
        directory.mkdir(parents=True, exist_ok=True)
        with _replacing(directory / REQUESTS_CSV) as f:
            csv.writer(f).writerows(csv_rows(done.outcome.records))
        scraped = [s for s in done.outcome.scrapes if s.text is not None]
        if scraped:
            (directory / "scrapes").mkdir(exist_ok=True)
        for s in scraped:
            with _replacing(directory / "scrapes" / f"scrape-{round(s.timestamp_s * 1000)}.prom") as f:
                f.write(s.text or "")
        with _replacing(directory / RESULT_JSON) as f:
            f.write(strict_json.dumps(to_dict(done)))
    except OSError as e:
        raise UsageError(f"cannot write results to {directory}: {e.strerror or e}", "choose another --out") from e


@contextlib.contextmanager
def _replacing(path: Path) -> Iterator[TextIO]:
    tmp = path.with_name(path.name + ".tmp")
    with tmp.open("w", encoding="utf-8", newline="") as f:
        yield f
    tmp.replace(path)
