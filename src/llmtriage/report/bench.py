"""A load test of the bundle (``bench/``, as ``llmtriage bench --out`` writes it) -> the latency distributions the
HTML report draws. Pure: the texts of ``result.json`` and ``requests.csv`` in, a :class:`BenchRun` out; never raises.

Only measured requests that completed count (warmup rows and failed rows are left out, as the bench's summary
does). ITL is every gap of every completed request.
"""

from __future__ import annotations

import csv
import io
import json
import math
from dataclasses import dataclass, field
from typing import Any

from llmtriage.bench.result import non_finite_at, number_at
from llmtriage.bench.summary import Stats
from llmtriage.facts import Problem

# requests.csv column -> what the report calls it (docs/bench-schema.md; llmtriage.bench.result.CSV_COLUMNS).
DISTRIBUTIONS = (("ttft_ms", "TTFT"), ("tpot_ms", "TPOT"), ("itl_ms", "ITL"), ("e2e_ms", "E2E latency"))
# A latency past a year is no measurement: such a cell is skipped like NaN (and keeps sums and plots finite).
MAX_LATENCY_MS = 365 * 24 * 3600 * 1000.0


@dataclass(frozen=True, slots=True)
class Distribution:
    """The values of one latency of a run, in ms, with their summary."""

    name: str
    values_ms: tuple[float, ...]
    stats: Stats


@dataclass(slots=True)
class BenchRun:
    """What the report shows of a load test: its label and settings, its latency distributions, and what failed."""

    source: str
    label: str | None = None
    load: str | None = None
    requests_completed: int | None = None
    requests_failed: int | None = None
    output_token_throughput_per_s: float | None = None
    distributions: list[Distribution] = field(default_factory=list)
    problems: list[Problem] = field(default_factory=list)


def _object(data: dict[str, Any], key: str) -> dict[str, Any]:
    value = data.get(key)
    return value if isinstance(value, dict) else {}


def _number(data: dict[str, Any], path: tuple[str, ...], source: str, run: BenchRun) -> float | None:
    """The number at ``path``; a value that is not finite (NaN, Infinity, 1e400) is missing, and a problem."""
    if non_finite_at(data, *path):
        run.problems.append(Problem(source, f"{'.'.join(path)} is not a finite number: read as missing"))
    return number_at(data, *path)


def _read_result(text: str, source: str, run: BenchRun) -> None:
    try:
        data = json.loads(text)
    except json.JSONDecodeError as e:
        run.problems.append(Problem(source, f"not JSON: {e.msg}"))
        return
    except (ValueError, RecursionError) as e:  # a number of too many digits, nesting too deep
        run.problems.append(Problem(source, f"not a bench result: {e}"[:200]))
        return
    if not isinstance(data, dict):
        run.problems.append(Problem(source, "not a bench result"))
        return
    meta, config = _object(data, "run"), _object(data, "config")
    label = meta.get("label")
    run.label = label if isinstance(label, str) else None
    load = config.get("load")
    if isinstance(load, str):
        concurrency = _number(data, ("config", "concurrency"), source, run)
        rate = _number(data, ("config", "request_rate_per_s"), source, run)
        detail = f"concurrency {concurrency:g}" if load == "closed" and concurrency else None
        if load == "open" and rate:
            detail = f"{rate:g} requests/s"
        run.load = f"{load} loop" + (f", {detail}" if detail else "")
    completed = _number(data, ("summary", "requests", "completed"), source, run)
    failed = _number(data, ("summary", "requests", "failed"), source, run)
    run.requests_completed = None if completed is None else int(completed)
    run.requests_failed = None if failed is None else int(failed)
    run.output_token_throughput_per_s = _number(data, ("summary", "output_token_throughput_per_s"), source, run)


def _read_requests(text: str, source: str, run: BenchRun) -> None:
    rows = csv.DictReader(io.StringIO(text))
    values: dict[str, list[float]] = {}
    unreadable = non_finite = 0
    try:
        wanted = [(column, name) for column, name in DISTRIBUTIONS if column in (rows.fieldnames or ())]
        if not wanted:
            run.problems.append(Problem(source, "no latency columns (ttft_ms, tpot_ms, itl_ms, e2e_ms)"))
            return
        values = {column: [] for column, _ in wanted}
        for row in rows:
            if row.get("warmup") == "1" or (row.get("error_kind") or ""):
                continue
            for column, _ in wanted:
                try:
                    cell = [float(v) for v in (row.get(column) or "").split()]
                except ValueError:
                    unreadable += 1
                    continue
                finite = [v for v in cell if math.isfinite(v) and abs(v) <= MAX_LATENCY_MS]
                non_finite += len(cell) - len(finite)
                values[column].extend(finite)
    except csv.Error as e:  # e.g. a cell over the csv module's field size limit: keep the rows before it
        run.problems.append(Problem(source, f"line {rows.line_num + 1}: {e}; the rows from it on were not read"))
    if unreadable:
        run.problems.append(Problem(source, f"{unreadable} unreadable latency cells skipped"))
    if non_finite:
        run.problems.append(
            Problem(source, f"{non_finite} latency values that are not finite (NaN, inf) or absurdly large skipped")
        )
    for column, name in DISTRIBUTIONS:
        ordered = tuple(sorted(values.get(column, ())))
        if ordered:
            run.distributions.append(Distribution(name, ordered, Stats.of(ordered)))


def read_bench(
    result_text: str | None, result_source: str, requests_text: str | None, requests_source: str
) -> BenchRun | None:
    """The run of ``result.json`` and/or ``requests.csv`` (either may be missing); None when neither is there."""
    if result_text is None and requests_text is None:
        return None
    run = BenchRun(source=result_source if result_text is not None else requests_source)
    if result_text is not None:
        _read_result(result_text, result_source, run)
    if requests_text is not None:
        _read_requests(requests_text, requests_source, run)
    return run
