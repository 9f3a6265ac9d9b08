"""The pages ``llmtriage demo`` writes, as a person sees them in Chromium at 1280 and 390 px wide: the verdict and
its first fix on the first screen, nothing wider than the screen, one time axis, no chart of fewer than two points,
no evidence line twice or dimmed, and figures from two clocks named as such.

The demo runs for real: the simulator on 127.0.0.1, a capture and a load test per scenario (about 15 s).
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from .browser import CHROMIUM, PageReport, load_page, luminance_variance

DESKTOP = (1280, 900)
PHONE = (390, 844)
SCENARIOS = ("startup-oom", "runtime-oom", "prefill-jam")


@pytest.fixture(scope="module")
def demo(tmp_path_factory: pytest.TempPathFactory) -> Path:
    if CHROMIUM is None:
        pytest.fail("chromium is not installed: `make dev` installs it", pytrace=False)
    out = tmp_path_factory.mktemp("demo")
    proc = subprocess.run(
        [sys.executable, "-m", "llmtriage", "demo", "--out", str(out)], capture_output=True, text=True, timeout=300
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    return out


@pytest.fixture(scope="module")
def pages(demo: Path) -> dict[tuple[str, int], PageReport]:
    return {
        (name, size[0]): load_page(demo / name / "report.html", size) for name in SCENARIOS for size in (DESKTOP, PHONE)
    }


def _first_screen(layout: dict[str, Any]) -> None:
    for part in ("verdict", "cause", "first_fix"):
        box = layout[part]
        assert box is not None, part
        assert box["top"] >= 0 and box["bottom"] <= layout["height"], (part, box, layout["height"])


@pytest.mark.parametrize("width", [DESKTOP[0], PHONE[0]])
@pytest.mark.parametrize("name", SCENARIOS)
def test_the_first_screen_holds_the_verdict_and_fits(
    pages: dict[tuple[str, int], PageReport], name: str, width: int
) -> None:
    report = pages[(name, width)]
    assert report.console_errors == [] and report.exceptions == [] and report.requests == []
    layout = report.layout
    _first_screen(layout)
    assert layout["scroll_width"] <= layout["width"]  # no horizontal scrolling, at 390 px either
    assert luminance_variance(report.screenshot_png) > 50.0


@pytest.mark.parametrize("name", ["runtime-oom", "prefill-jam"])  # startup-oom's GPU has one reading: no chart
def test_charts_share_one_axis_and_none_is_a_lone_dot(pages: dict[tuple[str, int], PageReport], name: str) -> None:
    layout = pages[(name, DESKTOP[0])].layout
    charts = layout["charts"]
    assert charts, name
    assert [c["label"] for c in charts if c["points"] < 2] == []
    timed = [c for c in charts if c["x0"] is not None]
    assert timed and len({(c["x0"], c["x1"]) for c in timed}) == 1  # one domain for every time chart
    assert len({tuple(c["ticks"]) for c in timed}) == 1  # the same wall-clock ticks under each
    assert not any(t.startswith("-") for c in charts for t in c["ticks"])  # no "-1:59:59"
    assert all(":" in t for c in timed for t in c["ticks"])  # times of day


@pytest.mark.parametrize("name", SCENARIOS)
def test_evidence_lines_appear_once_and_are_not_dimmed(pages: dict[tuple[str, int], PageReport], name: str) -> None:
    layout = pages[(name, DESKTOP[0])].layout
    assert layout["evidence_lists"]
    for lines in layout["evidence_lists"]:
        assert len(lines) == len(set(lines)), lines
    assert layout["dimmed"] == 0


def test_prefill_jam_names_the_two_clocks_and_draws_every_request(pages: dict[tuple[str, int], PageReport]) -> None:
    report = pages[("prefill-jam", DESKTOP[0])]
    text = report.dom["text"]
    # The simulator's TTFT (simulated time) far above what the load test measured on the wall clock: said so.
    assert "Two clocks." in text and "server's clock" in text
    assert "no per-request latencies" not in text.lower()
    labels = [c["label"] for c in report.layout["charts"]]
    assert "Per-request latency (load test) (ms)" in labels
    assert sum(c["cdf"] for c in report.layout["charts"]) >= 2  # TTFT and E2E at least, from requests.csv
    breach = [c for c in report.layout["charts"] if c["events"]]
    assert breach and all("breach" in c["events"] for c in breach)


def test_runtime_oom_says_how_many_requests_failed(pages: dict[tuple[str, int], PageReport], demo: Path) -> None:
    report = pages[("runtime-oom", DESKTOP[0])]
    verdict = report.dom["text"][: report.dom["text"].index("Path through the flowchart")]
    result = json.loads(next(demo.glob("runtime-oom/bundle-*/bench/result.json")).read_text())
    counts = result["summary"]["requests"]
    assert counts["failed"] > counts["measured"] / 2  # the server died under the load test (256 of 256 usually)
    assert f"{counts['failed']:,} of {counts['measured']:,} requests failed" in verdict
    plots = report.dom["text"][report.dom["text"].index("Over time") :]
    assert re.search(r"error at \d\d:\d\d:\d\d", plots)  # the first error, marked on the time axis
    assert any("error" in c["events"] for c in report.layout["charts"])


def test_startup_oom_has_lone_readings_as_sentences(pages: dict[tuple[str, int], PageReport]) -> None:
    layout = pages[("startup-oom", DESKTOP[0])].layout
    assert layout["charts"] == []
    assert len(layout["sparse"]) == 4 and all("one reading" in s for s in layout["sparse"])  # memory, power, ...
