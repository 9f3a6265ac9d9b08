"""``bench sweep`` against the built-in simulator (a real ``llmtriage sim`` process on 127.0.0.1), its page
(``sweep.html`` as Debian's headless Chromium lays it out) and ``bench compare`` across sweeps. Each sweep is a few
levels of a few short requests: seconds, not minutes."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from llmtriage.bench import sweep
from llmtriage.errors import UsageError
from llmtriage.report.sweep import build as build_sweep_page
from llmtriage.report.sweep import sweep_chart, sweep_figure

from ..report.browser import CHROMIUM, PageReport, load_page
from ..sim.conftest import RunningSim
from .test_run import closed_port

ENV = {**os.environ, "COLUMNS": "200"}
SHORT = ["--requests", "8", "--max-tokens", "8", "--prompt-chars", "200", "--no-scrape"]
DESKTOP, PHONE = (1280, 900), (390, 844)


def llmtriage(*args: str | Path, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    cmd = [sys.executable, "-m", "llmtriage", *map(str, args)]
    return subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, env=ENV, stdin=subprocess.DEVNULL)


@pytest.fixture
def sim(tmp_path: Path) -> Iterator[RunningSim]:
    """A simulated Llama-3.1-8B on an H100."""
    running = RunningSim([], tmp_path)
    assert running.wait_ready()
    yield running
    running.stop()


@pytest.fixture
def narrow_sim(tmp_path: Path) -> Iterator[RunningSim]:
    """A server that batches at most 2 sequences: past 2 in flight, requests queue and TTFT climbs."""
    running = RunningSim(["--max-num-seqs", "2"], tmp_path)
    assert running.wait_ready()
    yield running
    running.stop()


def test_the_spread_is_guidellms() -> None:
    """GuideLLM: rates = linspace(synchronous, throughput, levels - 1)[1:]."""
    assert sweep.spread_rates(2.0, 10.0, 10) == pytest.approx([3.0, 4.0, 5.0, 6.0, 7.0, 8.0, 9.0, 10.0])
    assert sweep.spread_rates(1.0, 4.0, 4) == pytest.approx([2.5, 4.0])
    assert sweep.spread_rates(5.0, 5.0, 10) == (5.0,)  # nothing to spread over
    assert sweep.parse_numbers("4,1,2,2", "--rates", False) == [1.0, 2.0, 4.0]
    for bad in ("0,1", "a,b", "-1", "", "nan"):
        with pytest.raises(UsageError):
            sweep.parse_numbers(bad, "--rates", False)


def knee_of(doc: dict[str, Any]) -> dict[str, Any] | None:
    """The highest-rate level that meets the SLOs, found from the levels themselves."""
    passing = [lv for lv in doc["levels"] if lv["meets_slo"]]
    return max(passing, key=lambda lv: lv["rate_per_s"], default=None)


def test_a_sweep_measures_both_ends_then_spreads_rates_between(sim: RunningSim, tmp_path: Path) -> None:
    out = tmp_path / "sweep"
    started = time.monotonic()
    proc = llmtriage("bench", "sweep", "--base-url", sim.url, "--levels", "4", "--max-concurrency", "16",
                     "--slo", "ttft=2s,tpot=200ms", "--out", out, *SHORT)  # fmt: skip
    took = time.monotonic() - started
    assert proc.returncode == 0, proc.stderr
    assert took < 60, took
    doc = json.loads((out / "sweep.json").read_text())
    assert doc["schema_version"] == 1 and doc["kind"] == "sweep" and doc["model"]
    kinds = [lv["kind"] for lv in doc["levels"]]
    assert kinds == ["synchronous", "throughput", "rate", "rate"]
    sync, most = doc["levels"][0], doc["levels"][1]
    assert sync["concurrency"] == 1 and most["concurrency"] == 16
    assert most["request_throughput_per_s"] > sync["request_throughput_per_s"]  # 16 in flight serve more
    expected = sweep.spread_rates(sync["request_throughput_per_s"], most["request_throughput_per_s"], 4)
    assert [lv["requested_rate_per_s"] for lv in doc["levels"][2:]] == pytest.approx(expected, rel=1e-4)
    for level in doc["levels"]:
        result = json.loads((out / level["result"]).read_text())
        assert result["summary"]["requests"]["measured"] == 8 == level["requests"]["measured"]
        assert (out / level["name"] / "requests.csv").is_file()
    rate_run = json.loads((out / doc["levels"][2]["result"]).read_text())
    assert rate_run["config"]["load"] == "open" and rate_run["config"]["arrival"] == "constant"
    assert rate_run["config"]["concurrency"] == 16  # the cap
    knee = knee_of(doc)
    assert knee is not None and doc["knee"]["level"] == knee["name"]
    # One line per level as it finished, then the table with the knee.
    lines = [ln for ln in proc.stderr.splitlines() if ln.startswith("level ")]
    assert [ln.split()[1] for ln in lines] == ["1/4", "2/4", "3/4", "4/4"]
    assert f"knee: {knee['rate_per_s']:,.2f} req/s ({knee['name']})" in proc.stdout
    assert proc.stderr.rstrip().endswith(f"the page: {out / 'sweep.html'}")
    # `llmtriage report` of the sweep (its directory, or its sweep.json) writes the same page.
    page = tmp_path / "page.html"
    again = llmtriage("report", out, "-o", page)
    assert again.returncode == 0, again.stderr
    assert page.read_bytes() == (out / "sweep.html").read_bytes()
    assert f"sweep — knee: {knee['rate_per_s']:,.2f} req/s" in again.stderr
    as_json = llmtriage("report", out / "sweep.json", "-o", page, "--format", "json")
    assert as_json.returncode == 0 and json.loads(as_json.stdout) == doc
    with_log = llmtriage("report", out, "-o", page, "--log", out / "sweep.json")
    assert with_log.returncode == 2 and "takes no evidence files" in with_log.stderr
    (out / "sweep.json").write_text('{"kind": "sweep", "levels": [')  # cut short
    cut = llmtriage("report", out, "-o", page)
    assert cut.returncode == 3 and "sweep.json: not JSON" in cut.stderr and "Traceback" not in cut.stderr


def test_the_knee_is_the_highest_rate_meeting_the_slos(narrow_sim: RunningSim, tmp_path: Path) -> None:
    """Past the server's batch, requests queue: the throughput level misses the TTFT objective, the synchronous
    level meets it, and the knee is the highest rate that still does (paced arrivals up to the throughput rate
    may all meet it: a constant rate at capacity builds no queue)."""
    out = tmp_path / "narrow"
    proc = llmtriage("bench", "sweep", "--base-url", narrow_sim.url, "--levels", "5", "--max-concurrency", "16",
                     "--slo", "ttft=80ms,tpot=200ms", "--out", out, "--format", "json", *SHORT)  # fmt: skip
    doc = json.loads(proc.stdout)
    sync, most = doc["levels"][0], doc["levels"][1]
    assert sync["meets_slo"], sync
    assert not most["meets_slo"] and any(m.startswith("TTFT p95") for m in most["missed"]), most
    knee = knee_of(doc)
    assert knee is not None and doc["knee"]["rate_per_s"] == pytest.approx(knee["rate_per_s"])
    assert knee["kind"] != "throughput" and knee["rate_per_s"] <= most["request_throughput_per_s"] * 1.0001
    assert doc["knee"]["level"] == knee["name"]
    assert proc.returncode == 0, proc.stderr
    # The report's chart of it: each level's TTFT p95 at its rate, the objective dashed, the knee in the caption.
    chart = sweep_chart(doc)
    assert chart is not None and chart.caption.startswith(f"knee: {knee['rate_per_s']:,.2f} req/s")
    ttft, _, objective, _ = chart.series
    assert sorted(ttft.points) == sorted((lv["rate_per_s"], lv["ttft_ms"]["p95"]) for lv in doc["levels"])
    assert objective.dashed and {y for _, y in objective.points} == {80.0}
    figure = sweep_figure(doc)
    assert figure is not None and figure.count('class="line"') == 4 and "TTFT objective" in figure
    # sweep.html, as a person's browser shows it.
    page = (out / "sweep.html").read_text()
    for series in ("TTFT p95", "TPOT p95"):  # every level is a vertex of each latency line
        d = re.search(rf'<path class="line" d="([^"]+)" stroke="[^"]+"><title>{series}</title>', page)
        assert d is not None and len(re.findall("[ML]", d.group(1))) == len(doc["levels"]), series
    for size in (DESKTOP, PHONE):
        report = open_sweep_page(out, size)
        text, layout = report.dom["text"], report.layout
        assert f"knee: {knee['rate_per_s']:,.2f} req/s" in text and knee["name"] in text
        assert f"peak goodput: {doc['best_goodput']['goodput_per_s']:,.2f} req/s" in text
        assert [c["points"] for c in layout["charts"]] == [len(doc["levels"])]
        assert level_rows(text, doc) == sorted((lv["name"] for lv in doc["levels"]), key=rate_of(doc))
        assert layout["scroll_width"] <= layout["width"], size  # no sideways scrolling, at 390 px either
        assert layout["verdict"] is not None and layout["verdict"]["bottom"] <= layout["height"]  # first screen


def open_sweep_page(out: Path, size: tuple[int, int]) -> PageReport:
    """The sweep's page in Chromium: it loads clean (no console error, no request, no script)."""
    if CHROMIUM is None:
        pytest.fail("chromium is not installed: `make dev` installs it", pytrace=False)
    report = load_page(out / "sweep.html", size)
    assert report.console_errors == [] and report.exceptions == [] and report.requests == []
    assert report.dom["scripts"] == 0 and report.dom["images"] == 0 and report.dom["iframes"] == 0
    return report


def level_rows(text: str, doc: dict[str, Any]) -> list[str]:
    """The level of each row of the page's table (its first cell), as the browser lays the rows out."""
    names = {lv["name"] for lv in doc["levels"]}
    return [cells[0] for line in text.splitlines() if (cells := line.split("\t"))[0] in names and len(cells) > 1]


def rate_of(doc: dict[str, Any]) -> Any:
    rates = {lv["name"]: lv["rate_per_s"] for lv in doc["levels"]}
    return lambda name: rates[name]


def test_no_level_meeting_the_slos_exits_1(sim: RunningSim, tmp_path: Path) -> None:
    proc = llmtriage("bench", "sweep", "--base-url", sim.url, "--rates", "5,10", "--slo", "ttft=0.01ms",
                     "--out", tmp_path / "s", *SHORT)  # fmt: skip
    assert proc.returncode == 1, proc.stderr
    doc = json.loads((tmp_path / "s" / "sweep.json").read_text())
    assert [lv["requested_rate_per_s"] for lv in doc["levels"]] == [5.0, 10.0]
    assert doc["knee"] is None and all("TTFT p95" in lv["missed"][0] for lv in doc["levels"])
    assert "no level meets the SLOs" in proc.stdout
    page = (tmp_path / "s" / "sweep.html").read_text()
    assert "no level meets the SLOs" in page and "knee:" not in page and page.count("<tr>") == 1 + 2
    # A hand-edited sweep.json: what it says is shown as text, and values of the wrong type are left blank.
    planted = "<script>alert(1)</script>"
    doc |= {"label": planted, "notes": [planted], "model": planted}
    doc["levels"][0] |= {"name": planted, "missed": [planted], "rate_per_s": "fast", "ttft_ms": None}
    hand_edited = build_sweep_page(doc)
    assert "<script" not in hand_edited
    # In the title, the label line, the model, the note, the level's row and what it missed.
    assert hand_edited.count("&lt;script&gt;alert(1)&lt;/script&gt;") == 6
    assert "Fewer than two levels with a request rate" in hand_edited  # one level's rate is no number


def test_one_rate_level_is_a_sentence_not_a_chart(sim: RunningSim, tmp_path: Path) -> None:
    out = tmp_path / "one"
    proc = llmtriage("bench", "sweep", "--base-url", sim.url, "--rates", "4", "--slo", "ttft=2s,tpot=200ms",
                     "--out", out, "--format", "json", *SHORT)  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    doc = json.loads(proc.stdout)
    report = open_sweep_page(out, PHONE)
    assert report.dom["charts"] == 0
    assert [s for s in report.layout["sparse"] if "Fewer than two levels with a request rate" in s]
    assert f"knee: {doc['knee']['rate_per_s']:,.2f} req/s" in report.dom["text"]
    assert level_rows(report.dom["text"], doc) == [doc["levels"][0]["name"]]
    assert report.layout["scroll_width"] <= report.layout["width"]


def test_given_concurrencies_run_closed_loops(sim: RunningSim, tmp_path: Path) -> None:
    proc = llmtriage("bench", "sweep", "--base-url", sim.url, "--concurrencies", "4,1", "--out", tmp_path / "c",
                     "--format", "json", *SHORT)  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    doc = json.loads(proc.stdout)
    assert [(lv["kind"], lv["concurrency"], lv["name"]) for lv in doc["levels"]] == [
        ("concurrency", 1, "01-concurrency-1"),
        ("concurrency", 4, "02-concurrency-4"),
    ]


def test_compare_across_sweeps(sim: RunningSim, narrow_sim: RunningSim, tmp_path: Path) -> None:
    for name, server in (("wide", sim), ("narrow", narrow_sim)):
        proc = llmtriage("bench", "sweep", "--base-url", server.url, "--levels", "3", "--max-concurrency", "16",
                         "--slo", "ttft=60ms,tpot=200ms", "--out", tmp_path / name, "--label", name, *SHORT)  # fmt: skip
        assert proc.returncode in (0, 1), proc.stderr
    proc = llmtriage("bench", "compare", tmp_path / "wide", tmp_path / "narrow" / "sweep.json", "--format", "json")
    assert proc.returncode == 0, proc.stderr
    doc = json.loads(proc.stdout)
    assert (doc["kind"], doc["a"], doc["b"]) == ("sweep", "wide", "narrow")
    assert doc["settings"] == []  # the same objectives and load: the knees compare
    figures = {f["name"]: f for f in doc["figures"]}
    peak = figures["peak request throughput"]
    assert peak["a"] > peak["b"] and peak["verdict"] == "worse"  # a batch of 2 serves less than one of 256
    assert doc["levels"]["b"][0]["name"] == "01-synchronous"
    text = llmtriage("bench", "compare", tmp_path / "wide", tmp_path / "narrow")
    assert text.returncode == 0 and "knee: highest rate meeting the SLOs" in text.stdout
    mixed = llmtriage("bench", "compare", tmp_path / "wide", tmp_path / "narrow" / "01-synchronous")
    assert mixed.returncode == 2 and "one is a sweep and the other a single run" in mixed.stderr


def test_an_unreachable_server_is_one_line_and_exit_4(tmp_path: Path) -> None:
    url = f"http://127.0.0.1:{closed_port()}"
    proc = llmtriage("bench", "sweep", "--base-url", url, "--model", "m", "--out", tmp_path / "s", *SHORT)
    assert proc.returncode == 4, proc.stderr
    assert "could not connect" in proc.stderr and proc.stdout == ""
    assert json.loads((tmp_path / "s" / "sweep.json").read_text())["levels"][0]["requests"]["failed"] == 8


def test_sigterm_keeps_the_levels_done(sim: RunningSim, tmp_path: Path) -> None:
    """SIGTERM during a level ends the sweep there: the levels so far and the cut one are written."""
    out = tmp_path / "cut"
    cmd = [sys.executable, "-m", "llmtriage", "bench", "sweep", "--base-url", sim.url, "--levels", "4",
           "--duration", "30s", "--max-tokens", "8", "--no-scrape", "--out", str(out)]  # fmt: skip
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=ENV)
    time.sleep(4.0)  # well into the synchronous level's 30 s
    proc.send_signal(signal.SIGTERM)
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == 143, err
    doc = json.loads((out / "sweep.json").read_text())
    assert doc["interrupted"] is True and len(doc["levels"]) >= 1
    assert doc["levels"][-1]["interrupted"] is True
