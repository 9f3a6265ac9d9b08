"""``bench compare A B``: what changed between two runs, figure by figure, and which way is better."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from llmtriage.bench.result import number_at

NOISE_RATIO = 0.02
"""Changes smaller than this share of A's value are shown as unchanged."""


@dataclass(frozen=True, slots=True)
class Figure:
    """A figure of result.json: where it lives, its unit, and whether lower is better (None: neither)."""

    label: str
    path: tuple[str, ...]
    unit: str
    lower_is_better: bool | None


FIGURES = (
    Figure("completed", ("summary", "requests", "completed"), "req", False),
    Figure("failed", ("summary", "requests", "failed"), "req", True),
    Figure("request throughput", ("summary", "request_throughput_per_s"), "req/s", False),
    Figure("output throughput", ("summary", "output_token_throughput_per_s"), "tok/s", False),
    Figure("achieved rate", ("summary", "achieved_rate_per_s"), "req/s", None),
    Figure("goodput", ("summary", "goodput", "goodput_per_s"), "req/s", False),
    Figure("TTFT mean", ("summary", "ttft_ms", "mean"), "ms", True),
    Figure("TTFT p50", ("summary", "ttft_ms", "p50"), "ms", True),
    Figure("TTFT p95", ("summary", "ttft_ms", "p95"), "ms", True),
    Figure("TTFT p99", ("summary", "ttft_ms", "p99"), "ms", True),
    Figure("TPOT mean", ("summary", "tpot_ms", "mean"), "ms", True),
    Figure("TPOT p50", ("summary", "tpot_ms", "p50"), "ms", True),
    Figure("TPOT p99", ("summary", "tpot_ms", "p99"), "ms", True),
    Figure("ITL p50", ("summary", "itl_ms", "p50"), "ms", True),
    Figure("ITL p99", ("summary", "itl_ms", "p99"), "ms", True),
    Figure("E2E p50", ("summary", "e2e_ms", "p50"), "ms", True),
    Figure("E2E p99", ("summary", "e2e_ms", "p99"), "ms", True),
    Figure("client queue p99", ("summary", "queue_ms", "p99"), "ms", True),
    Figure("server TTFT p50", ("server", "ttft_ms", "p50"), "ms", True),
    Figure("server TTFT p99", ("server", "ttft_ms", "p99"), "ms", True),
    Figure("server TPOT mean", ("server", "tpot_ms", "mean"), "ms", True),
    Figure("server queue p99", ("server", "queue_ms", "p99"), "ms", True),
    Figure("server KV usage peak", ("server", "kv_usage_peak_ratio"), "ratio", True),
    Figure("server preemptions", ("server", "preemptions"), "", True),
)
SETTINGS = (
    ("model", ("run", "model")),
    ("endpoint", ("config", "endpoint")),
    ("load", ("config", "load")),
    ("concurrency", ("config", "concurrency")),
    ("request rate", ("config", "request_rate_per_s")),
    ("requests", ("config", "requests")),
    ("duration", ("config", "duration_s")),
    ("classes", ("config", "classes")),
    ("ignore_eos", ("config", "ignore_eos")),
    ("workers", ("config", "workers")),
)


@dataclass(frozen=True, slots=True)
class Change:
    """One figure in A and in B, and the verdict: better, worse, same, changed (neither better nor worse)."""

    figure: Figure
    a: float | None
    b: float | None
    delta: float | None
    ratio: float | None
    verdict: str


@dataclass(frozen=True, slots=True)
class Comparison:
    """Two runs side by side: settings that differ, figures, and each run's warnings."""

    label_a: str
    label_b: str
    settings: tuple[tuple[str, str, str], ...]
    changes: tuple[Change, ...]
    warnings_a: tuple[str, ...]
    warnings_b: tuple[str, ...]


def _get(data: Any, path: tuple[str, ...]) -> Any:
    for key in path:
        if not isinstance(data, dict):
            return None
        data = data.get(key)
    return data


def _verdict(figure: Figure, a: float | None, b: float | None) -> str:
    if a is None or b is None:
        return "n/a"
    if a == b or (a != 0 and abs(b - a) / abs(a) < NOISE_RATIO):
        return "same"
    if figure.lower_is_better is None:
        return "changed"
    return "better" if (b < a) == figure.lower_is_better else "worse"


def compare(a: dict[str, Any], b: dict[str, Any]) -> Comparison:
    """Compare result documents ``a`` (before) and ``b`` (after)."""
    changes = []
    for figure in FIGURES:
        va, vb = number_at(a, *figure.path), number_at(b, *figure.path)
        delta = None if va is None or vb is None else vb - va
        ratio = None if delta is None or not va else delta / abs(va)
        changes.append(Change(figure, va, vb, delta, ratio, _verdict(figure, va, vb)))
    settings = tuple(
        (name, str(_get(a, path)), str(_get(b, path))) for name, path in SETTINGS if _get(a, path) != _get(b, path)
    )

    def warnings(doc: dict[str, Any]) -> tuple[str, ...]:
        found = doc.get("warnings")
        return tuple(str(w.get("code")) for w in found if isinstance(w, dict)) if isinstance(found, list) else ()

    return Comparison(
        label_a=str(_get(a, ("run", "label"))),
        label_b=str(_get(b, ("run", "label"))),
        settings=settings,
        changes=tuple(changes),
        warnings_a=warnings(a),
        warnings_b=warnings(b),
    )


def to_dict(comparison: Comparison) -> dict[str, Any]:
    """JSON form of a comparison."""
    return {
        "a": comparison.label_a,
        "b": comparison.label_b,
        "settings": [{"name": n, "a": a, "b": b} for n, a, b in comparison.settings],
        "figures": [
            {
                "name": c.figure.label,
                "unit": c.figure.unit,
                "a": c.a,
                "b": c.b,
                "delta": c.delta,
                "ratio": c.ratio,
                "verdict": c.verdict,
            }
            for c in comparison.changes
        ],
        "warnings": {"a": list(comparison.warnings_a), "b": list(comparison.warnings_b)},
    }
