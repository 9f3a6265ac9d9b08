"""Records -> figures and warnings, on records built by hand so every number is known."""

from __future__ import annotations

import pytest

from llmtriage.bench.model import INTERRUPTED, BenchConfig, RequestRecord, RunOutcome, WorkerReport
from llmtriage.bench.summary import Stats, percentile, summarize


def record(
    index: int, *, ttft_ms: float = 100.0, e2e_ms: float = 1000.0, tokens: int = 10, **kw: object
) -> RequestRecord:
    sent = float(kw.pop("sent_s", index * 0.1))
    fields: dict[str, object] = {
        "index": index,
        "request_id": f"r{index}",
        "class_name": "default",
        "warmup": False,
        "prompt_chars": 100,
        "max_tokens": 10,
        "scheduled_s": sent,
        "sent_s": sent,
        "first_byte_s": sent + 0.001,
        "first_token_s": sent + ttft_ms / 1000,
        "end_s": sent + e2e_ms / 1000,
        "itl_ms": (100.0,) * (tokens - 1),
        "output_tokens_client": tokens,
        "output_tokens_server": tokens,
        "prompt_tokens_server": 25,
        "finish_reason": "length",
        "status": 200,
    }
    fields.update(kw)
    return RequestRecord(**fields)  # type: ignore[arg-type]


def outcome(records: list[RequestRecord], config: BenchConfig | None = None, **kw: object) -> RunOutcome:
    lag = kw.pop("lag_ms", (0.2,) * 50)
    busy = float(kw.pop("busy", 0.3))
    worker = WorkerReport(0, tuple(records), tuple(lag), cpu_s=busy * 10, wall_s=10.0)  # type: ignore[arg-type]
    return RunOutcome(
        config=config or BenchConfig(base_url="http://x", concurrency=4, requests=len(records)),
        records=tuple(records),
        workers=(worker,),
        scrapes=(),
        perf_origin_s=1000.0,
        started_at_s=0.0,
        finished_at_s=10.0,
        interrupted=bool(kw.pop("interrupted", False)),
    )


def test_percentiles_interpolate_like_numpy() -> None:
    assert percentile([1.0, 2.0, 3.0, 4.0], 50) == 2.5
    assert percentile([1.0, 2.0, 3.0, 4.0], 99) == pytest.approx(3.97)
    assert percentile([5.0], 99) == 5.0
    assert Stats.of([]) == Stats(0)


def test_figures_of_a_clean_run() -> None:
    records = [record(i, ttft_ms=100 + i, e2e_ms=1000 + i) for i in range(200)]
    s = summarize(outcome(records))
    assert (s.measured, s.completed, s.failed) == (200, 200, 0)
    assert s.duration_s == pytest.approx(19.9 + 1.199)  # first send -> last end
    assert s.request_throughput_per_s == pytest.approx(200 / s.duration_s)
    assert s.output_token_throughput_per_s == pytest.approx(2000 / s.duration_s)
    assert s.total_token_throughput_per_s == pytest.approx((2000 + 200 * 25) / s.duration_s)
    assert (s.ttft_ms.min, s.ttft_ms.p50, s.ttft_ms.max) == pytest.approx((100.0, 199.5, 299.0))
    assert s.tpot_ms.mean == pytest.approx(100.0)  # (E2E - TTFT) / (tokens - 1) = 900 / 9
    assert s.itl_ms.count == 200 * 9 and s.itl_ms.p99 == pytest.approx(100.0)
    assert s.achieved_rate_per_s == pytest.approx(10.0)
    assert s.warnings == ()


def test_tpot_uses_the_servers_token_count() -> None:
    s = summarize(outcome([record(0, tokens=10, output_tokens_server=19)]))
    assert s.tpot_ms.mean == pytest.approx(900 / 18)
    assert "token_count_mismatch" in {w.code for w in s.warnings}


def test_responses_held_and_written_at_once_are_flagged() -> None:
    held = record(1, ttft_ms=900, e2e_ms=900, itl_ms=(0.0,) * 9)
    two_tokens_together = record(2, tokens=2, itl_ms=(0.0,))
    assert held.arrived_in_one_piece and not two_tokens_together.arrived_in_one_piece
    s = summarize(outcome([record(0), held, two_tokens_together]))
    warning = next(w for w in s.warnings if w.code == "buffered_responses")
    assert warning.message.startswith("1 of 3 responses arrived in one piece")
    assert "buffered_responses" not in {w.code for w in summarize(outcome([record(0), two_tokens_together])).warnings}


def test_goodput_counts_requests_meeting_both_objectives() -> None:
    config = BenchConfig(base_url="http://x", slo_ttft_ms=150.0, slo_tpot_ms=95.0, requests=3)
    records = [
        record(0, ttft_ms=100, e2e_ms=955),  # TPOT 95: good
        record(1, ttft_ms=200, e2e_ms=955),  # TTFT too slow
        record(2, ttft_ms=100, e2e_ms=1200),  # TPOT too slow
    ]
    g = summarize(outcome(records, config)).goodput
    assert (g.good_requests, g.good_share) == (1, pytest.approx(1 / 3))


def test_warmup_interrupted_and_errors_are_kept_apart() -> None:
    records = [record(i) for i in range(4)]
    records.append(record(4, warmup=True))
    records.append(record(5, warmup=True, error_kind="http", status=500, error="boom"))
    records += [
        record(6, error_kind="http", status=429, error="slow down"),
        record(7, error_kind="http", status=429, error="slow down"),
    ]
    records.append(record(8, error_kind="connect", status=None, error="refused"))
    records.append(record(9, error_kind=INTERRUPTED, error="cut short"))
    s = summarize(outcome(records, interrupted=True))
    assert (s.measured, s.completed, s.failed, s.interrupted, s.warmup, s.warmup_failed) == (7, 4, 3, 1, 2, 1)
    assert [(e.kind, e.status, e.message, e.count) for e in s.errors] == [
        ("http", 429, "slow down", 2),
        ("connect", None, "refused", 1),
    ]
    assert {"interrupted", "few_samples"} <= {w.code for w in s.warnings}


def test_short_outputs_warn_unless_the_outputs_are_full() -> None:
    short = [record(i, tokens=4) for i in range(120)]
    codes = {w.code for w in summarize(outcome(short)).warnings}
    assert "short_outputs" in codes
    message = next(w.message for w in summarize(outcome(short)).warnings if w.code == "short_outputs")
    assert "--ignore-eos" in message
    ignoring = BenchConfig(base_url="http://x", ignore_eos=True, requests=120)
    message = next(w.message for w in summarize(outcome(short, ignoring)).warnings if w.code == "short_outputs")
    assert "despite ignore_eos" in message


def test_no_usage_warns_that_tokens_are_counted_by_the_client() -> None:
    records = [record(i, output_tokens_server=None, prompt_tokens_server=None) for i in range(120)]
    s = summarize(outcome(records))
    assert s.requests_with_usage == 0 and s.total_token_throughput_per_s is None
    assert "no_usage" in {w.code for w in s.warnings}


def test_client_saturated_or_lagging() -> None:
    records = [record(i) for i in range(120)]

    def codes(**kw: object) -> set[str]:
        return {w.code for w in summarize(outcome(records, **kw)).warnings}

    assert "client_saturated" in codes(busy=0.97, lag_ms=(40.0,) * 10)
    assert "client_lagging" in codes(busy=0.3, lag_ms=(1.0,) * 90 + (40.0,) * 10)
    assert not {"client_saturated", "client_lagging"} & codes(busy=0.5, lag_ms=(1.0,) * 100)


def test_open_loop_rate_not_achieved() -> None:
    config = BenchConfig(base_url="http://x", request_rate_per_s=10.0, requests=120)
    on_time = [record(i, sent_s=i * 0.1) for i in range(120)]
    assert "rate_not_achieved" not in {w.code for w in summarize(outcome(on_time, config)).warnings}
    late = [record(i, sent_s=i * 0.15, scheduled_s=i * 0.1) for i in range(120)]
    s = summarize(outcome(late, config))
    assert s.scheduled_rate_per_s == pytest.approx(10.0) and s.achieved_rate_per_s == pytest.approx(10 / 1.5)
    warning = next(w for w in s.warnings if w.code == "rate_not_achieved")
    assert "could not keep the schedule" in warning.message


def test_by_class_only_for_mixes() -> None:
    records = [
        record(i, class_name="long" if i % 3 == 0 else "short", ttft_ms=500 if i % 3 == 0 else 50) for i in range(30)
    ]
    by_class = {c.name: c for c in summarize(outcome(records)).by_class}
    assert by_class["long"].ttft_ms.p50 == pytest.approx(500) and by_class["short"].ttft_ms.p50 == pytest.approx(50)
    assert summarize(outcome([record(0)])).by_class == ()
