"""Records -> the figures of a run: latency distributions, throughput, rates, goodput, errors by kind, and
the warnings that say which numbers can't be trusted and why.

Only measured requests count (warmup requests don't; requests cut short by Ctrl-C or SIGTERM are counted apart).
Percentiles interpolate linearly between the closest ranks (numpy's default, as ``vllm bench serve``).
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, replace

from llmtriage.bench.model import INTERRUPTED, RequestRecord, RunOutcome

LOOP_LAG_WARN_MS = 5.0
"""Event-loop lag (p99) above which the client's own delay shows in TTFT and ITL."""
CPU_BUSY_WARN_RATIO = 0.85
"""A worker busy for more than this share of the run is (nearly) saturated."""
SEND_LATE_WARN_MS = 10.0
"""Open loop without a concurrency cap: requests sent later than this (p99) missed their schedule."""
RATE_SHORTFALL_RATIO = 0.95
"""An achieved send rate below this share of the scheduled one did not hold the requested load."""
FEW_SAMPLES = 100
"""Below this many completed requests a p99 is about the maximum."""
MIN_JUDGED_WALL_S = 1.0
"""A worker's CPU share is only judged over runs at least this long (startup dominates shorter ones)."""
SHORT_OUTPUT_WARN_SHARE = 0.05
"""Share of requests stopping before max_tokens that makes TPOT and token throughput describe shorter outputs."""


@dataclass(frozen=True, slots=True)
class Stats:
    """A distribution: count, mean and percentiles (None when there are no values)."""

    count: int
    mean: float | None = None
    p50: float | None = None
    p90: float | None = None
    p95: float | None = None
    p99: float | None = None
    min: float | None = None
    max: float | None = None

    @classmethod
    def of(cls, values: Iterable[float]) -> Stats:
        """The distribution of ``values``."""
        ordered = sorted(values)
        if not ordered:
            return cls(0)
        return cls(
            count=len(ordered),
            mean=math.fsum(ordered) / len(ordered),
            p50=percentile(ordered, 50),
            p90=percentile(ordered, 90),
            p95=percentile(ordered, 95),
            p99=percentile(ordered, 99),
            min=ordered[0],
            max=ordered[-1],
        )


def percentile(ordered: Sequence[float], q: float) -> float:
    """The ``q``-th percentile of sorted ``ordered``, linear between the closest ranks."""
    rank = (len(ordered) - 1) * q / 100.0
    low = math.floor(rank)
    high = min(low + 1, len(ordered) - 1)
    return ordered[low] + (ordered[high] - ordered[low]) * (rank - low)


@dataclass(frozen=True, slots=True)
class ErrorCount:
    """Failed requests of one kind, status and message."""

    kind: str
    status: int | None
    message: str
    count: int


@dataclass(frozen=True, slots=True)
class BenchWarning:
    """A number that can't be taken at face value, and why."""

    code: str
    message: str


@dataclass(frozen=True, slots=True)
class ClassSummary:
    """The figures of one request class of a mix."""

    name: str
    completed: int
    failed: int
    ttft_ms: Stats
    tpot_ms: Stats
    e2e_ms: Stats


@dataclass(frozen=True, slots=True)
class Goodput:
    """Requests that met both objectives (TTFT and TPOT, per request)."""

    ttft_slo_ms: float
    tpot_slo_ms: float
    good_requests: int
    good_share: float | None
    goodput_per_s: float | None


@dataclass(frozen=True, slots=True)
class ClientHealth:
    """How hard the client itself worked: its event loops' lag and each worker's CPU share."""

    workers: int
    loop_lag_ms: Stats
    cpu_busy_ratio: tuple[float, ...]
    cpu_s: tuple[float, ...]
    coordinator_cpu_s: float


@dataclass(frozen=True, slots=True)
class Summary:
    """What a run adds up to."""

    measured: int
    completed: int
    failed: int
    interrupted: int
    warmup: int
    warmup_failed: int
    duration_s: float | None
    request_throughput_per_s: float | None
    output_token_throughput_per_s: float | None
    total_token_throughput_per_s: float | None
    requested_rate_per_s: float | None
    scheduled_rate_per_s: float | None
    achieved_rate_per_s: float | None
    ttft_ms: Stats
    tpot_ms: Stats
    itl_ms: Stats
    e2e_ms: Stats
    queue_ms: Stats
    first_byte_ms: Stats
    output_tokens_total: int
    output_tokens_server_total: int | None
    output_tokens_client_total: int
    requests_with_usage: int
    prompt_tokens_total: int | None
    goodput: Goodput
    by_class: tuple[ClassSummary, ...]
    errors: tuple[ErrorCount, ...]
    client: ClientHealth
    warnings: tuple[BenchWarning, ...]


def _rate(times: list[float]) -> float | None:
    if len(times) < 2:
        return None
    span = max(times) - min(times)
    return (len(times) - 1) / span if span > 0 else None


def _class_summaries(measured: list[RequestRecord]) -> tuple[ClassSummary, ...]:
    names = sorted({r.class_name for r in measured})
    if len(names) < 2:
        return ()
    out = []
    for name in names:
        mine = [r for r in measured if r.class_name == name]
        done = [r for r in mine if r.ok]
        out.append(
            ClassSummary(
                name=name,
                completed=len(done),
                failed=sum(1 for r in mine if not r.ok),
                ttft_ms=Stats.of(v for r in done if (v := r.ttft_ms) is not None),
                tpot_ms=Stats.of(v for r in done if (v := r.tpot_ms) is not None),
                e2e_ms=Stats.of(v for r in done if (v := r.e2e_ms) is not None),
            )
        )
    return tuple(out)


def _errors(failed: list[RequestRecord]) -> tuple[ErrorCount, ...]:
    counter = Counter((r.error_kind or "", r.status, r.error or "") for r in failed)
    return tuple(
        ErrorCount(kind, status, message, count)
        for (kind, status, message), count in sorted(counter.items(), key=lambda kv: (-kv[1], kv[0][0], kv[0][2]))
    )


def summarize(outcome: RunOutcome) -> Summary:
    """The figures and warnings of ``outcome``."""
    config = outcome.config
    warmup = [r for r in outcome.records if r.warmup]
    measured = [r for r in outcome.records if not r.warmup and r.error_kind != INTERRUPTED]
    interrupted = sum(1 for r in outcome.records if not r.warmup and r.error_kind == INTERRUPTED)
    done = [r for r in measured if r.ok]
    failed = [r for r in measured if not r.ok]
    ends = [r.end_s for r in measured if r.end_s is not None]
    duration = (max(ends) - min(r.sent_s for r in measured)) if ends else None
    duration = duration if duration and duration > 0 else None
    output_total = sum(r.output_tokens for r in done)
    with_usage = [r for r in done if r.output_tokens_server is not None]
    prompt_known = [r.prompt_tokens_server for r in done if r.prompt_tokens_server is not None]
    prompt_total = sum(prompt_known) if done and len(prompt_known) == len(done) else None
    ttfts = [v for r in done if (v := r.ttft_ms) is not None]
    good = sum(
        1
        for r in done
        if (t := r.ttft_ms) is not None
        and t <= config.slo_ttft_ms
        and ((p := r.tpot_ms) is None or p <= config.slo_tpot_ms)
    )
    lags = [lag for w in outcome.workers for lag in w.loop_lag_ms]
    busy = tuple(w.cpu_s / w.wall_s for w in outcome.workers if w.wall_s >= MIN_JUDGED_WALL_S)

    def per_s(value: float) -> float | None:
        return value / duration if duration else None

    summary = Summary(
        measured=len(measured),
        completed=len(done),
        failed=len(failed),
        interrupted=interrupted,
        warmup=len(warmup),
        warmup_failed=sum(1 for r in warmup if not r.ok and r.error_kind != INTERRUPTED),
        duration_s=duration,
        request_throughput_per_s=per_s(len(done)),
        output_token_throughput_per_s=per_s(output_total),
        total_token_throughput_per_s=None if prompt_total is None else per_s(prompt_total + output_total),
        requested_rate_per_s=config.request_rate_per_s,
        scheduled_rate_per_s=None if config.closed_loop else _rate([r.scheduled_s for r in measured]),
        achieved_rate_per_s=_rate([r.sent_s for r in measured]),
        ttft_ms=Stats.of(ttfts),
        tpot_ms=Stats.of(v for r in done if (v := r.tpot_ms) is not None),
        itl_ms=Stats.of(gap for r in done for gap in r.itl_ms),
        e2e_ms=Stats.of(v for r in done if (v := r.e2e_ms) is not None),
        queue_ms=Stats.of(r.queue_ms for r in measured),
        first_byte_ms=Stats.of(v for r in done if (v := r.first_byte_ms) is not None),
        output_tokens_total=output_total,
        output_tokens_server_total=sum(r.output_tokens_server or 0 for r in with_usage) if with_usage else None,
        output_tokens_client_total=sum(r.output_tokens_client for r in done),
        requests_with_usage=len(with_usage),
        prompt_tokens_total=prompt_total,
        goodput=Goodput(
            ttft_slo_ms=config.slo_ttft_ms,
            tpot_slo_ms=config.slo_tpot_ms,
            good_requests=good,
            good_share=good / len(measured) if measured else None,
            goodput_per_s=per_s(good),
        ),
        by_class=_class_summaries(measured),
        errors=_errors(failed),
        client=ClientHealth(
            workers=len(outcome.workers),
            loop_lag_ms=Stats.of(lags),
            cpu_busy_ratio=busy,
            cpu_s=tuple(w.cpu_s for w in outcome.workers),
            coordinator_cpu_s=outcome.coordinator_cpu_s,
        ),
        warnings=(),
    )
    return replace(summary, warnings=tuple(_warnings(summary, outcome, done)))


def _warnings(s: Summary, outcome: RunOutcome, done: list[RequestRecord]) -> Iterable[BenchWarning]:
    config = outcome.config
    if outcome.interrupted:
        yield BenchWarning(
            "interrupted",
            f"the run was stopped (Ctrl-C or SIGTERM): {s.interrupted} request(s) cut short; figures are partial",
        )
    lag_p99, busiest = s.client.loop_lag_ms.p99, max(s.client.cpu_busy_ratio, default=0.0)
    if busiest > CPU_BUSY_WARN_RATIO:
        yield BenchWarning(
            "client_saturated",
            f"a client worker was busy {busiest:.0%} of the run (> {CPU_BUSY_WARN_RATIO:.0%}): the client, not the "
            f"server, set the pace; TTFT, ITL and throughput include its delay. Raise --workers (now "
            f"{s.client.workers}) or lower the load",
        )
    elif lag_p99 is not None and lag_p99 > LOOP_LAG_WARN_MS:
        yield BenchWarning(
            "client_lagging",
            f"the client's event loop ran late (lag p99 {lag_p99:.1f} ms > {LOOP_LAG_WARN_MS:g} ms) while no worker "
            f"was saturated (busiest {busiest:.0%}): other processes compete for the CPUs; TTFT and ITL include "
            "up to that delay",
        )
    if not config.closed_loop:
        yield from _rate_warnings(s, config.concurrency)
    if not done:
        if s.measured:
            yield BenchWarning("no_completed", "no request completed: there are no latency or throughput figures")
        return
    if s.completed < FEW_SAMPLES:
        yield BenchWarning(
            "few_samples", f"only {s.completed} completed request(s): p99 (and p95) rest on the few slowest"
        )
    short = sum(1 for r in done if r.output_tokens < r.max_tokens)
    if short > SHORT_OUTPUT_WARN_SHARE * len(done):
        why = (
            "the server stopped early despite ignore_eos (max-model-len reached, or ignore_eos not supported)"
            if config.ignore_eos
            else "without --ignore-eos the model may stop at EOS"
        )
        yield BenchWarning(
            "short_outputs",
            f"{short} of {len(done)} requests returned fewer tokens than max_tokens ({why}): TPOT and token "
            "throughput describe shorter outputs than asked, and runs with different outputs don't compare",
        )
    whole = sum(1 for r in done if r.arrived_in_one_piece)
    if whole:
        yield BenchWarning(
            "buffered_responses",
            f"{whole} of {len(done)} responses arrived in one piece (every token in one read): something between "
            "the engine and the client held the stream (a buffering proxy, or a starved API server); their TTFT "
            "is their whole response time",
        )
    if s.requests_with_usage == 0:
        yield BenchWarning(
            "no_usage",
            "the server reported no usage: output tokens are the client's count of token events, which "
            "undercounts when one event carries several tokens",
        )
    else:
        mismatched = sum(
            1 for r in done if r.output_tokens_server is not None and r.output_tokens_server != r.output_tokens_client
        )
        if mismatched:
            yield BenchWarning(
                "token_count_mismatch",
                f"in {mismatched} request(s) the server's usage differs from the token events the client saw "
                "(several tokens per event, or events without text): TPOT uses the server's count, ITL is per event",
            )


def _rate_warnings(s: Summary, cap: int | None) -> Iterable[BenchWarning]:
    late = s.queue_ms.p99
    scheduled, achieved = s.scheduled_rate_per_s, s.achieved_rate_per_s
    short = scheduled is not None and achieved is not None and achieved < RATE_SHORTFALL_RATIO * scheduled
    if not short and (late is None or late <= SEND_LATE_WARN_MS):
        return
    rates = f"achieved {achieved:.2f}/s vs scheduled {scheduled:.2f}/s" if short and achieved and scheduled else ""
    if cap is not None:
        why = f"the --concurrency cap of {cap} held requests back (client queue p99 {late or 0:.0f} ms)"
    else:
        why = f"the client sent late (queue p99 {late or 0:.0f} ms > {SEND_LATE_WARN_MS:g} ms): it could not keep the schedule"
    yield BenchWarning("rate_not_achieved", f"the requested rate was not held: {why}{'; ' + rates if rates else ''}")
