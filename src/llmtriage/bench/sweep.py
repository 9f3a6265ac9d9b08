"""``bench sweep``: find the knee, as GuideLLM's sweep profile does.

A sweep first measures the two ends: the **synchronous** level (one request at a time: the rate the server
serves without any queue) and the **throughput** level (``max_concurrency`` requests kept in flight: the most
it serves). It then runs open-loop levels at request rates spread evenly between those two measured rates, the
last at the throughput rate (GuideLLM: ``linspace(synchronous, throughput, levels - 1)[1:]``). Given rates or
concurrencies run instead of the measured spread.

Each level is an ordinary run (its own result.json and requests.csv); the sweep judges each against the latency
objectives (TTFT p95, TPOT p95, error share, and for a rate level whether the client could hold the rate) and
names the **knee**: the highest request rate that meets them all. ``sweep.json`` (docs/bench-schema.md) holds
the levels' figures and the verdict; ``bench compare`` reads two of them, and ``sweep.html`` shows one.

Pure: plans, verdicts and documents; the CLI runs the levels and writes the files.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import Any

from llmtriage import __version__
from llmtriage.bench.compare import NOISE_RATIO
from llmtriage.bench.model import Arrival, BenchConfig
from llmtriage.bench.result import RESULT_JSON, BenchResult, number_at
from llmtriage.bench.summary import RATE_SHORTFALL_RATIO
from llmtriage.bench.workers import WorkerChoice
from llmtriage.catalog import Slo
from llmtriage.errors import UsageError

SCHEMA_VERSION = 1
SWEEP_JSON = "sweep.json"
SWEEP_HTML = "sweep.html"
"""The sweep as one page (llmtriage.report.sweep): the knee, latency by rate, the levels."""
DEFAULT_LEVELS = 10
"""GuideLLM's default number of benchmarks in a sweep (``--rate 10``): synchronous, throughput and 8 rates."""
MIN_LEVELS = 3
SYNCHRONOUS = "synchronous"
THROUGHPUT = "throughput"
RATE = "rate"
CONCURRENCY = "concurrency"


@dataclass(frozen=True, slots=True)
class LevelPlan:
    """One level to run: its kind and its load (a request rate, or a concurrency for a closed loop)."""

    kind: str
    rate_per_s: float | None = None
    concurrency: int | None = None

    def name(self, index: int) -> str:
        """The level's directory name: ``01-synchronous``, ``03-rate-4.2``, ``02-concurrency-8``."""
        if self.kind == RATE and self.rate_per_s is not None:
            return f"{index:02d}-{RATE}-{self.rate_per_s:.3g}"
        if self.kind == CONCURRENCY:
            return f"{index:02d}-{CONCURRENCY}-{self.concurrency}"
        return f"{index:02d}-{self.kind}"


def measured_levels(max_concurrency: int) -> tuple[LevelPlan, LevelPlan]:
    """The two levels that measure the ends of the sweep."""
    return LevelPlan(SYNCHRONOUS, concurrency=1), LevelPlan(THROUGHPUT, concurrency=max_concurrency)


def spread_rates(synchronous_per_s: float, throughput_per_s: float, levels: int) -> tuple[float, ...]:
    """The rates between the two measured ends, as GuideLLM spreads them: ``levels - 2`` rates evenly spaced
    above the synchronous rate, the last at the throughput rate. A server whose throughput is no higher than
    its synchronous rate has no range to spread over: one level at that rate."""
    if throughput_per_s <= synchronous_per_s:
        return (synchronous_per_s,)
    steps = levels - 2
    span = throughput_per_s - synchronous_per_s
    return tuple(synchronous_per_s + span * k / steps for k in range(1, steps + 1))


def level_config(
    base: BenchConfig, plan: LevelPlan, label: str, max_concurrency: int, arrival: Arrival, workers: WorkerChoice
) -> BenchConfig:
    """The run of one level: ``base``'s workload with the level's load; a rate level is capped at
    ``max_concurrency`` in flight (GuideLLM's async strategy with ``max_concurrency``)."""
    if plan.kind == RATE:
        return replace(
            base,
            request_rate_per_s=plan.rate_per_s,
            concurrency=max_concurrency,
            arrival=arrival,
            label=label,
            workers=workers.workers,
            worker_choice=workers,
            run_id="",
        )
    return replace(
        base,
        request_rate_per_s=None,
        concurrency=plan.concurrency,
        label=label,
        workers=workers.workers,
        worker_choice=workers,
        run_id="",
    )


@dataclass(frozen=True, slots=True)
class Level:
    """A level that ran: its plan, where its files are, its result and whether it met the objectives."""

    plan: LevelPlan
    directory: str
    result: BenchResult
    meets_slo: bool
    missed: tuple[str, ...]
    """Each objective the level missed, with its value: ``TTFT p95 812 ms > 500 ms``."""

    @property
    def rate_per_s(self) -> float | None:
        """The level's request rate: the rate asked for, or for a closed loop the rate it served."""
        if self.plan.kind == RATE:
            return self.plan.rate_per_s
        return self.result.summary.request_throughput_per_s


def judge(result: BenchResult, slo: Slo) -> tuple[bool, tuple[str, ...]]:
    """Whether a level meets the objectives: TTFT p95 and TPOT p95 within them, failures within the error-rate
    objective, and (open loop) the rate held: sent at >= RATE_SHORTFALL_RATIO of the scheduled rate."""
    s = result.summary
    missed: list[str] = []
    if s.completed == 0:
        return False, ("no request completed",)
    ttft_slo_ms, tpot_slo_ms = slo.ttft_p95_s * 1000.0, slo.itl_p95_s * 1000.0
    if s.ttft_ms.p95 is not None and s.ttft_ms.p95 > ttft_slo_ms:
        missed.append(f"TTFT p95 {s.ttft_ms.p95:,.0f} ms > {ttft_slo_ms:g} ms")
    if s.tpot_ms.p95 is not None and s.tpot_ms.p95 > tpot_slo_ms:
        missed.append(f"TPOT p95 {s.tpot_ms.p95:,.1f} ms > {tpot_slo_ms:g} ms")
    if s.measured and s.failed / s.measured > slo.error_rate:
        missed.append(f"{s.failed} of {s.measured} failed > {slo.error_rate:.0%}")
    scheduled, achieved = s.scheduled_rate_per_s, s.achieved_rate_per_s
    if scheduled is not None and achieved is not None and achieved < RATE_SHORTFALL_RATIO * scheduled:
        missed.append(f"sent {achieved:.2f}/s of {scheduled:.2f}/s scheduled (the cap or the client held it back)")
    return not missed, tuple(missed)


@dataclass(frozen=True, slots=True)
class Sweep:
    """The levels in the order they ran, the objectives, and the verdict."""

    label: str
    levels: tuple[Level, ...]
    slo: Slo
    max_concurrency: int
    arrival: Arrival
    interrupted: bool
    notes: tuple[str, ...] = ()

    def by_rate(self) -> list[Level]:
        """The levels from the lowest rate to the highest (a level without a rate last)."""
        return sorted(self.levels, key=lambda lv: (lv.rate_per_s is None, lv.rate_per_s or 0.0))

    @property
    def knee(self) -> Level | None:
        """The highest-rate level that meets every objective."""
        passing = [lv for lv in self.levels if lv.meets_slo and lv.rate_per_s is not None]
        return max(passing, key=lambda lv: lv.rate_per_s or 0.0, default=None)

    @property
    def best_goodput(self) -> Level | None:
        """The level with the most requests per second that met both per-request objectives."""
        known = [lv for lv in self.levels if lv.result.summary.goodput.goodput_per_s is not None]
        return max(known, key=lambda lv: lv.result.summary.goodput.goodput_per_s or 0.0, default=None)


def _level_dict(level: Level) -> dict[str, Any]:
    s = level.result.summary
    return {
        "name": level.directory,
        "kind": level.plan.kind,
        "requested_rate_per_s": level.plan.rate_per_s,
        "concurrency": level.result.outcome.config.concurrency,
        "rate_per_s": level.rate_per_s,
        "result": f"{level.directory}/{RESULT_JSON}",
        "interrupted": level.result.outcome.interrupted,
        "requests": {"measured": s.measured, "completed": s.completed, "failed": s.failed},
        "request_throughput_per_s": s.request_throughput_per_s,
        "achieved_rate_per_s": s.achieved_rate_per_s,
        "output_token_throughput_per_s": s.output_token_throughput_per_s,
        "ttft_ms": {"p50": s.ttft_ms.p50, "p95": s.ttft_ms.p95, "p99": s.ttft_ms.p99},
        "tpot_ms": {"p50": s.tpot_ms.p50, "p95": s.tpot_ms.p95, "p99": s.tpot_ms.p99},
        "e2e_ms": {"p50": s.e2e_ms.p50, "p95": s.e2e_ms.p95},
        "goodput_per_s": s.goodput.goodput_per_s,
        "good_share": s.goodput.good_share,
        "meets_slo": level.meets_slo,
        "missed": list(level.missed),
    }


def to_dict(sweep: Sweep) -> dict[str, Any]:
    """``sweep.json``: the stable, documented form (docs/bench-schema.md)."""
    knee, best = sweep.knee, sweep.best_goodput
    config = sweep.levels[0].result.outcome.config if sweep.levels else None
    return {
        "schema_version": SCHEMA_VERSION,
        "kind": "sweep",
        "tool": {"name": "llmtriage bench sweep", "version": __version__},
        "label": sweep.label,
        "model": None if config is None else config.model,
        "interrupted": sweep.interrupted,
        "notes": list(sweep.notes),
        "config": {
            "max_concurrency": sweep.max_concurrency,
            "arrival": str(sweep.arrival),
            "requests_per_level": None if config is None else config.requests,
            "duration_per_level_s": None if config is None else config.duration_s,
        },
        "slo": {
            "ttft_p95_ms": sweep.slo.ttft_p95_s * 1000.0,
            "tpot_p95_ms": sweep.slo.itl_p95_s * 1000.0,
            "error_rate": sweep.slo.error_rate,
        },
        "knee": None
        if knee is None
        else {"level": knee.directory, "rate_per_s": knee.rate_per_s, "kind": knee.plan.kind},
        "best_goodput": None
        if best is None
        else {"level": best.directory, "goodput_per_s": best.result.summary.goodput.goodput_per_s},
        "levels": [_level_dict(lv) for lv in sweep.levels],
    }


def is_sweep(data: dict[str, Any]) -> bool:
    """A parsed document is a ``sweep.json``."""
    return data.get("kind") == "sweep"


def load(text: str, source: str) -> dict[str, Any]:
    """A ``sweep.json`` read back for ``bench compare``; UsageError when it isn't one this version reads."""
    hint = "give the sweep.json `llmtriage bench sweep` wrote (or its directory)"
    try:
        data = json.loads(text)
    except (ValueError, RecursionError) as e:
        raise UsageError(f"{source}: not JSON", hint) from e
    if not isinstance(data, dict) or not is_sweep(data) or not isinstance(data.get("levels"), list):
        raise UsageError(f"{source}: not a sweep", hint)
    if data.get("schema_version") != SCHEMA_VERSION:
        raise UsageError(f"{source}: schema_version {data.get('schema_version')!r}, this llmtriage reads 1")
    return data


# ---------------------------------------------------------------- comparing two sweeps


@dataclass(frozen=True, slots=True)
class SweepFigure:
    """A headline figure of two sweeps."""

    label: str
    unit: str
    a: float | None
    b: float | None
    lower_is_better: bool

    @property
    def verdict(self) -> str:
        """better, worse, same, or n/a."""
        a, b = self.a, self.b
        if a is None or b is None:
            return "n/a"
        if a == b or (a != 0 and abs(b - a) / abs(a) < NOISE_RATIO):
            return "same"
        return "better" if (b < a) == self.lower_is_better else "worse"


@dataclass(frozen=True, slots=True)
class SweepComparison:
    """Two sweeps: their headline figures, and each one's levels from the lowest rate up."""

    label_a: str
    label_b: str
    settings: tuple[tuple[str, str, str], ...]
    """Settings that differ (name, A, B): a knee judged against other objectives is another knee."""
    figures: tuple[SweepFigure, ...]
    levels_a: tuple[dict[str, Any], ...]
    levels_b: tuple[dict[str, Any], ...]


_SETTINGS = (
    ("model", ("model",)),
    ("SLOs", ("slo",)),
    ("max concurrency", ("config", "max_concurrency")),
    ("arrival", ("config", "arrival")),
    ("requests per level", ("config", "requests_per_level")),
    ("duration per level", ("config", "duration_per_level_s")),
)


def _get(data: Any, path: tuple[str, ...]) -> Any:
    for key in path:
        data = data.get(key) if isinstance(data, dict) else None
    return data


def _level(data: dict[str, Any], kind: str) -> dict[str, Any] | None:
    return next((lv for lv in data["levels"] if isinstance(lv, dict) and lv.get("kind") == kind), None)


def _ordered(data: dict[str, Any]) -> tuple[dict[str, Any], ...]:
    levels = [lv for lv in data["levels"] if isinstance(lv, dict)]
    return tuple(sorted(levels, key=lambda lv: number_at(lv, "rate_per_s") or 0.0))


def compare(a: dict[str, Any], b: dict[str, Any]) -> SweepComparison:
    """Compare sweep documents ``a`` (before) and ``b`` (after): the knee, the peak goodput and throughput, and
    the latency of the synchronous level (the server without a queue)."""

    def max_of(data: dict[str, Any], *path: str) -> float | None:
        values = [v for lv in data["levels"] if isinstance(lv, dict) and (v := number_at(lv, *path)) is not None]
        return max(values, default=None)

    def sync(data: dict[str, Any], *path: str) -> float | None:
        level = _level(data, SYNCHRONOUS)
        return None if level is None else number_at(level, *path)

    figures = (
        SweepFigure(
            "knee: highest rate meeting the SLOs",
            "req/s",
            number_at(a, "knee", "rate_per_s"),
            number_at(b, "knee", "rate_per_s"),
            False,
        ),
        SweepFigure("peak goodput", "req/s", max_of(a, "goodput_per_s"), max_of(b, "goodput_per_s"), False),
        SweepFigure(
            "peak request throughput",
            "req/s",
            max_of(a, "request_throughput_per_s"),
            max_of(b, "request_throughput_per_s"),
            False,
        ),
        SweepFigure(
            "peak output throughput",
            "tok/s",
            max_of(a, "output_token_throughput_per_s"),
            max_of(b, "output_token_throughput_per_s"),
            False,
        ),
        SweepFigure("synchronous TTFT p50", "ms", sync(a, "ttft_ms", "p50"), sync(b, "ttft_ms", "p50"), True),
        SweepFigure("synchronous TPOT p50", "ms", sync(a, "tpot_ms", "p50"), sync(b, "tpot_ms", "p50"), True),
    )
    settings = tuple(
        (name, str(va), str(vb)) for name, path in _SETTINGS if (va := _get(a, path)) != (vb := _get(b, path))
    )
    return SweepComparison(
        label_a=str(a.get("label")),
        label_b=str(b.get("label")),
        settings=settings,
        figures=figures,
        levels_a=_ordered(a),
        levels_b=_ordered(b),
    )


def comparison_dict(comparison: SweepComparison) -> dict[str, Any]:
    """JSON form of a sweep comparison."""
    return {
        "kind": "sweep",
        "a": comparison.label_a,
        "b": comparison.label_b,
        "settings": [{"name": n, "a": a, "b": b} for n, a, b in comparison.settings],
        "figures": [
            {"name": f.label, "unit": f.unit, "a": f.a, "b": f.b, "verdict": f.verdict} for f in comparison.figures
        ],
        "levels": {"a": list(comparison.levels_a), "b": list(comparison.levels_b)},
    }


def parse_numbers(text: str, flag: str, integer: bool) -> Sequence[float]:
    """``--rates 1,2.5,4`` or ``--concurrencies 1,4,16``: positive numbers, ascending."""
    try:
        values = [int(v) if integer else float(v) for v in text.split(",") if v.strip()]
    except ValueError as e:
        raise UsageError(f"{flag} {text!r}: not a list of numbers", f"e.g. {flag} 1,2,4") from e
    if not values or any(v <= 0 or v != v or v == float("inf") for v in values):
        raise UsageError(f"{flag} {text!r}: give positive numbers", f"e.g. {flag} 1,2,4")
    return sorted(set(values))
