"""The page in a real browser (Debian's headless chromium, driven over the DevTools protocol): it renders, logs
no console error, makes no network request, paints a non-blank screen, and planted HTML stays text."""

from __future__ import annotations

from pathlib import Path

import pytest

from . import series
from .browser import CHROMIUM, PageReport, load_page, luminance_variance, png_pixels
from .conftest import EXAMPLES, Rendered, render

MIN_VARIANCE = 50.0  # luminance variance of a page with text and charts is in the hundreds; a blank one is 0


@pytest.fixture(autouse=True)
def chromium() -> None:
    if CHROMIUM is None:
        pytest.fail(
            "chromium is not installed: `make dev` installs it (scripts/ensure-debian-packages.sh)", pytrace=False
        )


def open_page(page: str, tmp_path: Path) -> PageReport:
    path = tmp_path / "report.html"
    path.write_text(page, encoding="utf-8")
    return load_page(path)


def assert_clean(report: PageReport, page: str) -> None:
    assert report.console_errors == []
    assert report.exceptions == []
    assert report.requests == []
    dom = report.dom
    assert dom["scripts"] == 0 and dom["images"] == 0 and dom["iframes"] == 0 and dom["event_handlers"] == 0
    assert dom["sections"] == ["flowchart", "causes", "plots", "bench", "stack", "missing", "runbook", "details"]
    assert dom["charts"] == page.count('<svg class="chart"')
    width, height, _, _ = png_pixels(report.screenshot_png)
    assert (width, height) == (550, 450)  # the first screen at half scale
    assert luminance_variance(report.screenshot_png) > MIN_VARIANCE


def test_the_harness_sees_what_a_bad_page_does(tmp_path: Path) -> None:
    bad = (
        "<!DOCTYPE html><html><body><p>x</p><img src='http://127.0.0.1:9/pixel.png'>"
        "<script>console.error('boom'); undefined_function();</script></body></html>"
    )
    report = open_page(bad, tmp_path)
    assert "boom" in report.console_errors
    assert any("undefined_function" in e for e in report.exceptions)
    assert report.requests == ["http://127.0.0.1:9/pixel.png"]
    assert report.dom["scripts"] == 1 and report.dom["images"] == 1
    assert luminance_variance(report.screenshot_png) < MIN_VARIANCE  # one letter on a white screen


@pytest.mark.parametrize("example", EXAMPLES, ids=[p.name for p in EXAMPLES])
def test_examples(example: Path, tmp_path: Path) -> None:
    rendered = render(example)
    report = open_page(rendered.page, tmp_path)
    assert_clean(report, rendered.page)
    assert rendered.diagnosis.symptom_title in report.dom["text"]


def test_surge_with_a_bench_run(surge: Rendered, tmp_path: Path) -> None:
    report = open_page(surge.page, tmp_path)
    assert_clean(report, surge.page)
    assert report.dom["charts"] == 9 + 1 + 4  # 9 over time, every request of the bench, 4 bench distributions


def test_a_30_minute_capture(capture_30min: Rendered, tmp_path: Path) -> None:
    report = open_page(capture_30min.page, tmp_path)
    assert_clean(report, capture_30min.page)


def test_planted_html_is_visible_text(planted: Rendered, tmp_path: Path) -> None:
    report = open_page(planted.page, tmp_path)
    assert_clean(report, planted.page)
    assert report.dom["title"].startswith("llmtriage: ")  # no planted script ran
    assert not {"script", "img"} & set(report.dom["tags"])
    text = report.dom["text"]
    # The log line on the path, the GPU's name, the bench run's label; the launch line and the metric label.
    assert text.count(series.PLANTED) >= 3
    assert text.count(series.PLANTED_BARE) >= 2
