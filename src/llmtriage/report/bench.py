"""A load test of the bundle (``bench/``, as ``llmtriage bench --out`` writes it) -> what the HTML report shows of
it: counts, failures, goodput, the latency distributions and every request on the wall clock.

:func:`read_bench` is pure (the texts of ``result.json`` and ``requests.csv`` in, a :class:`BenchRun` out; never
raises); :func:`read_bundle_bench` reads them from a bundle (the evidence reader does not keep ``requests.csv``).
Only measured requests that completed count in the distributions (warmup rows and failed rows are left out, as the
bench's summary does). ITL is every gap of every completed request.
"""

from __future__ import annotations

import csv
import io
import json
import math
import re
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from llmtriage.bench.result import REQUESTS_CSV, RESULT_JSON, non_finite_at, number_at
from llmtriage.bench.summary import Stats
from llmtriage.evidence.bundle import read_capped
from llmtriage.facts import Problem

# requests.csv column -> what the report calls it (docs/bench-schema.md; llmtriage.bench.result.CSV_COLUMNS).
DISTRIBUTIONS = (("ttft_ms", "TTFT"), ("tpot_ms", "TPOT"), ("itl_ms", "ITL"), ("e2e_ms", "E2E latency"))
# A latency past a year is no measurement: such a cell is skipped like NaN (and keeps sums and plots finite).
MAX_LATENCY_MS = 365 * 24 * 3600 * 1000.0
BENCH_DIR = "bench"
_SCRAPE_NAME = re.compile(r"scrape-(\d{10,16})\.prom")


@dataclass(frozen=True, slots=True)
class RequestRow:
    """One measured request: when it was sent (seconds after the run's origin), its latencies, how it failed."""

    sent_s: float
    ttft_ms: float | None
    e2e_ms: float | None
    error_kind: str = ""


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
    requests_measured: int | None = None
    requests_completed: int | None = None
    requests_failed: int | None = None
    output_token_throughput_per_s: float | None = None
    duration_s: float | None = None
    good_requests: int | None = None
    slo_ttft_ms: float | None = None
    slo_tpot_ms: float | None = None
    errors: list[tuple[str, int]] = field(default_factory=list)
    """``(kind: message, count)`` of the failures, as result.json's ``errors`` lists them."""
    server_ttft_p95_ms: float | None = None
    """TTFT p95 the server's own /metrics histogram gave over the run (result.json ``server.ttft_ms.p95``)."""
    started_at_s: float | None = None
    """Epoch seconds of ``run.started_at`` (whole seconds)."""
    origin_epoch_s: float | None = None
    """Wall clock (epoch seconds) of the run's origin, where ``sent_s`` is 0; None when the bundle does not say."""
    origin_note: str = ""
    requests: list[RequestRow] = field(default_factory=list)
    distributions: list[Distribution] = field(default_factory=list)
    problems: list[Problem] = field(default_factory=list)

    def distribution(self, name: str) -> Distribution | None:
        """The distribution called ``name`` (TTFT, TPOT, ITL, E2E latency), if the run has one."""
        return next((d for d in self.distributions if d.name == name), None)


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
    measured = _number(data, ("summary", "requests", "measured"), source, run)
    completed = _number(data, ("summary", "requests", "completed"), source, run)
    failed = _number(data, ("summary", "requests", "failed"), source, run)
    good = _number(data, ("summary", "goodput", "good_requests"), source, run)
    run.requests_measured = None if measured is None else int(measured)
    run.requests_completed = None if completed is None else int(completed)
    run.requests_failed = None if failed is None else int(failed)
    run.good_requests = None if good is None else int(good)
    run.slo_ttft_ms = _number(data, ("summary", "goodput", "ttft_slo_ms"), source, run)
    run.slo_tpot_ms = _number(data, ("summary", "goodput", "tpot_slo_ms"), source, run)
    run.output_token_throughput_per_s = _number(data, ("summary", "output_token_throughput_per_s"), source, run)
    run.duration_s = _number(data, ("summary", "duration_s"), source, run)
    run.server_ttft_p95_ms = _number(data, ("server", "ttft_ms", "p95"), source, run)
    errors = data.get("errors")
    for error in errors if isinstance(errors, list) else ():
        count = number_at(error, "count")
        if isinstance(error, dict) and count is not None:
            kind, message = str(error.get("kind") or "error"), str(error.get("message") or "")
            run.errors.append((f"{kind}: {message}" if message else kind, int(count)))
    started = meta.get("started_at")
    if isinstance(started, str):
        try:
            run.started_at_s = datetime.strptime(started, "%Y-%m-%dT%H:%M:%SZ").replace(tzinfo=UTC).timestamp()
        except ValueError:
            run.problems.append(Problem(source, f"run.started_at {started!r} is not a UTC time: left off the axis"))


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
            if row.get("warmup") == "1":
                continue
            request = _request(row)
            if request is not None:
                run.requests.append(request)
            if row.get("error_kind") or "":
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


def _cell(row: dict[str, str], column: str) -> float | None:
    try:
        value = float(row.get(column) or "")
    except ValueError:
        return None
    return value if math.isfinite(value) and abs(value) <= MAX_LATENCY_MS else None


def _request(row: dict[str, str]) -> RequestRow | None:
    sent = _cell(row, "sent_s")
    if sent is None:
        sent = _cell(row, "scheduled_s")
    if sent is None:
        return None
    return RequestRow(sent, _cell(row, "ttft_ms"), _cell(row, "e2e_ms"), row.get("error_kind") or "")


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


def _anchor(run: BenchRun, scrape_names: list[str]) -> None:
    """The wall clock of the run's origin: the bench scrapes /metrics just before its first request and names the
    file by its epoch milliseconds, so the first scrape at or after ``started_at`` is the origin (within one scrape's
    time); without scrapes, ``started_at`` itself (whole seconds, so within 1 s)."""
    if run.started_at_s is None:
        return
    stamps = sorted(int(m.group(1)) / 1000.0 for name in scrape_names if (m := _SCRAPE_NAME.fullmatch(name)))
    after = [t for t in stamps if run.started_at_s <= t < run.started_at_s + 60.0]
    if after:
        run.origin_epoch_s = after[0]
        run.origin_note = "requests placed by the load test's first /metrics scrape, taken just before its first send"
    else:
        run.origin_epoch_s = run.started_at_s
        run.origin_note = "requests placed by the load test's start time (whole seconds: within 1 s)"


def read_bundle_bench(bundle: Path | None) -> BenchRun | None:
    """The load test a bundle holds (``bench/result.json``, ``bench/requests.csv``, ``bench/scrapes/``), if any."""
    if bundle is None:
        return None
    problems: list[Problem] = []
    names = (f"{BENCH_DIR}/{RESULT_JSON}", f"{BENCH_DIR}/{REQUESTS_CSV}")
    result_text, requests_text = (
        read_capped(bundle / name, name, problems) if (bundle / name).is_file() else None for name in names
    )
    run = read_bench(result_text, names[0], requests_text, names[1])
    if run is None:
        return None
    run.problems[:0] = problems
    scrapes = bundle / BENCH_DIR / "scrapes"
    _anchor(run, [p.name for p in scrapes.iterdir()] if scrapes.is_dir() else [])
    return run
