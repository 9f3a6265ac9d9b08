"""A bundle's load test (bench/result.json and bench/requests.csv as ``llmtriage bench`` writes them) in the report."""

from __future__ import annotations

import csv
import io
import json
import shutil
from pathlib import Path

import pytest

from llmtriage.report import html
from llmtriage.report.bench import read_bench, read_bundle_bench
from llmtriage.report.markup import esc

from .conftest import Rendered


def test_the_distributions_are_those_the_bench_summarised(surge: Rendered) -> None:
    result = json.loads((surge.bundle / "bench" / "result.json").read_text())
    requests = (surge.bundle / "bench" / "requests.csv").read_text()
    run = read_bench(json.dumps(result), "bench/result.json", requests, "bench/requests.csv")
    assert run is not None and not run.problems
    assert run.label == "c8" and run.load == "closed loop, concurrency 8"
    assert run.requests_completed == 60 and run.requests_failed == 0
    by_name = {d.name: d for d in run.distributions}
    assert list(by_name) == ["TTFT", "TPOT", "ITL", "E2E latency"]
    for name, key in (("TTFT", "ttft_ms"), ("TPOT", "tpot_ms"), ("ITL", "itl_ms"), ("E2E latency", "e2e_ms")):
        theirs, ours = result["summary"][key], by_name[name].stats
        assert ours.count == theirs["count"]
        for q in ("p50", "p95", "p99", "max"):
            assert getattr(ours, q) == pytest.approx(theirs[q], abs=2e-3), (name, q)
    assert by_name["ITL"].stats.count == 60 * 31  # every gap of every measured request; warmup rows left out


def test_the_page_shows_the_run(surge: Rendered) -> None:
    bench = surge.page[surge.page.index('id="bench"') : surge.page.index('id="missing"')]
    assert "From <code>bench/result.json</code>" in bench and "closed loop, concurrency 8" in bench
    assert bench.count('<svg class="chart"') == 4


def _rows(text: str) -> list[dict[str, str]]:
    return list(csv.DictReader(io.StringIO(text)))


def _csv(rows: list[dict[str, str]]) -> str:
    out = io.StringIO()
    writer = csv.DictWriter(out, fieldnames=list(rows[0]))
    writer.writeheader()
    writer.writerows(rows)
    return out.getvalue()


def test_warmup_and_failed_requests_are_left_out(surge: Rendered) -> None:
    rows = _rows((surge.bundle / "bench" / "requests.csv").read_text())
    measured = [r for r in rows if r["warmup"] == "0"]
    measured[0]["error_kind"] = "http_status"
    run = read_bench(None, "bench/result.json", _csv(rows), "bench/requests.csv")
    assert run is not None and run.source == "bench/requests.csv" and run.label is None
    assert run.distributions[0].stats.count == len(measured) - 1


def test_bad_files_become_problems(surge: Rendered) -> None:
    assert read_bench(None, "r", None, "c") is None
    run = read_bench("{not json", "bench/result.json", "a,b\n1,2\n", "bench/requests.csv")
    assert run is not None and not run.distributions
    assert [p.message for p in run.problems] == [
        "not JSON: Expecting property name enclosed in double quotes",
        "no latency columns (ttft_ms, tpot_ms, itl_ms, e2e_ms)",
    ]
    rows = _rows((surge.bundle / "bench" / "requests.csv").read_text())
    rows[10]["itl_ms"] = "4.1 x 4.2"
    rows[20]["itl_ms"] = "1.0 " * 40_000  # one cell over the csv module's field limit: the rows before it stay
    run = read_bench("[]", "bench/result.json", _csv(rows), "bench/requests.csv")
    assert run is not None
    messages = [p.message for p in run.problems]
    assert messages[0] == "not a bench result"
    assert messages[1].startswith("line 22: field larger than field limit")
    assert messages[2] == "1 unreadable latency cells skipped"
    ttft, itl = run.distributions[0], run.distributions[2]
    assert ttft.stats.count == 20 - 4  # rows 0-19 read, 4 of them warmup
    assert itl.stats.count == (20 - 4 - 1) * 31  # row 10 lost its ITL only


def test_a_planted_label_is_text(planted: Rendered) -> None:
    bench = planted.page[planted.page.index('id="bench"') : planted.page.index('id="missing"')]
    assert esc("<script>") in bench and "<script" not in bench


def test_every_measured_request_is_kept_with_when_it_was_sent(surge: Rendered) -> None:
    rows = _rows((surge.bundle / "bench" / "requests.csv").read_text())
    measured = [r for r in rows if r["warmup"] == "0"]
    measured[3]["error_kind"] = "stream_error"
    run = read_bench(None, "bench/result.json", _csv(rows), "bench/requests.csv")
    assert run is not None
    assert [r.sent_s for r in run.requests] == [float(r["sent_s"]) for r in measured]
    assert [r.error_kind for r in run.requests].count("stream_error") == 1
    assert run.requests[0].ttft_ms == float(measured[0]["ttft_ms"])


def test_the_run_is_placed_on_the_wall_clock_by_its_first_scrape(surge: Rendered, tmp_path: Path) -> None:
    bench = tmp_path / "bench"
    shutil.copytree(surge.bundle / "bench", bench)
    shutil.rmtree(bench / "scrapes", ignore_errors=True)
    run = read_bundle_bench(tmp_path)
    assert run is not None and run.started_at_s is not None
    assert run.origin_epoch_s == run.started_at_s and "within 1 s" in run.origin_note  # no scrapes: its start
    (bench / "scrapes").mkdir()
    first_ms = round(run.started_at_s * 1000) + 437
    (bench / "scrapes" / f"scrape-{first_ms}.prom").write_text("")
    (bench / "scrapes" / f"scrape-{first_ms + 5000}.prom").write_text("")
    run = read_bundle_bench(tmp_path)
    assert run is not None and run.origin_epoch_s == first_ms / 1000 and "first /metrics scrape" in run.origin_note


def test_failures_and_a_lone_value_are_said_not_drawn(surge: Rendered) -> None:
    result = json.loads((surge.bundle / "bench" / "result.json").read_text())
    result["summary"]["requests"].update(measured=60, completed=1, failed=59)
    result["errors"] = [{"kind": "http", "status": 500, "message": "EngineCore died", "count": 59}]
    rows = _rows((surge.bundle / "bench" / "requests.csv").read_text())
    measured = [r for r in rows if r["warmup"] == "0"]
    for row in measured[1:]:
        row["error_kind"] = "http"
    run = read_bench(json.dumps(result), "bench/result.json", _csv(rows), "bench/requests.csv")
    assert run is not None and run.errors == [("http: EngineCore died", 59)]
    page = html.build(surge.diagnosis, surge.evidence, run)
    verdict = page[: page.index('id="flowchart"')]
    assert "59 of 60 requests failed" in verdict and "EngineCore died" in verdict
    section = page[page.index('id="bench"') : page.index('id="stack"')]
    assert "failed 59 of 60 (98%)" in section
    assert 'class="sparse" id="bench-ttft"' in section and "one value" in section  # one completed request
    assert 'id="bench-itl"' in section  # its 31 gaps are a distribution
