"""The page itself (pure ``build``): self-contained, verdict first, the path highlighted, causes with evidence and
fixes, what was missing, runbook matches, and every string from the evidence escaped."""

from __future__ import annotations

import re
from dataclasses import replace
from html.parser import HTMLParser
from pathlib import Path

import pytest

from llmtriage import catalog
from llmtriage.diagnose.engine import diagnose
from llmtriage.evidence.bundle import LooseFiles, read_evidence
from llmtriage.report import html, svg
from llmtriage.report.markup import esc, esc_code

from ..conftest import INCIDENTS, incident_bundle, load_incident
from . import series
from .conftest import EXAMPLES, Rendered, render

# The elements the renderer writes: nothing that fetches, runs or embeds anything.
TAGS = frozenset(
    [
        "html",
        "head",
        "meta",
        "title",
        "style",
        "body",
        "main",
        "h1",
        "h2",
        "h3",
        "h4",
        "div",
        "nav",
        "a",
        "p",
        "section",
        "article",
        "span",
        "strong",
        "b",
        "i",
        "code",
        "pre",
        "ul",
        "ol",
        "li",
        "figure",
        "figcaption",
        "svg",
        "rect",
        "path",
        "text",
        "circle",
        "table",
        "tr",
        "th",
        "td",
        "dl",
        "dt",
        "dd",
        "details",
        "summary",
        "footer",
    ]
)
SECTIONS = ("verdict", "flowchart", "causes", "plots", "bench", "missing", "runbook", "details")


class _Elements(HTMLParser):
    def __init__(self) -> None:
        super().__init__()
        self.tags: list[tuple[str, list[tuple[str, str | None]]]] = []
        self.style = ""
        self._in_style = False

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.tags.append((tag, attrs))
        self._in_style = tag == "style"

    def handle_endtag(self, tag: str) -> None:
        self._in_style = False

    def handle_data(self, data: str) -> None:
        if self._in_style:
            self.style += data


def assert_self_contained(page: str) -> None:
    assert page.startswith("<!DOCTYPE html>")
    parsed = _Elements()
    parsed.feed(page)
    for tag, attrs in parsed.tags:
        assert tag in TAGS, tag
        for name, value in attrs:
            assert not name.startswith("on"), (tag, name, value)
            assert name not in ("src", "srcset", "action", "xlink:href", "background"), (tag, name, value)
            if name == "href":
                assert (value or "").startswith("#"), (tag, value)
            if name == "style":
                assert "url(" not in (value or ""), value
    assert "url(" not in parsed.style and "@import" not in parsed.style
    assert "default-src 'none'" in page  # and a CSP that would stop anything the escaping missed


def assert_sections_in_order(page: str) -> None:
    positions = [page.index(f'id="{anchor}"') for anchor in SECTIONS]
    assert positions == sorted(positions)


def assert_diagnosis_shown(rendered: Rendered) -> None:
    page, diagnosis = rendered.page, rendered.diagnosis
    verdict = page[page.index('id="verdict"') : page.index('id="flowchart"')]
    assert esc(diagnosis.symptom_title) in verdict
    if diagnosis.causes:
        assert esc(diagnosis.causes[0].title) in verdict
    for cause in diagnosis.causes:
        block = page[page.index(f'id="cause-{cause.id}"') :]
        block = block[: block.index("</article>")]
        for fix in cause.fixes:
            assert esc_code(fix) in block
        for evidence in cause.evidence:
            c = evidence.citation
            assert esc(c.excerpt if c.metric is None else c.metric) in block
    for missing in diagnosis.missing:
        assert esc(missing.collect) in page


@pytest.mark.parametrize("example", EXAMPLES, ids=[p.name for p in EXAMPLES])
def test_examples(example: Path) -> None:
    rendered = render(example)
    assert_self_contained(rendered.page)
    assert_sections_in_order(rendered.page)
    assert_diagnosis_shown(rendered)


@pytest.mark.parametrize("path", INCIDENTS, ids=[p.stem for p in INCIDENTS])
def test_incidents(path: Path, tmp_path: Path) -> None:
    rendered = render(incident_bundle(load_incident(path), tmp_path))
    assert_self_contained(rendered.page)
    assert_sections_in_order(rendered.page)
    assert_diagnosis_shown(rendered)
    assert len(rendered.page.encode()) < 200_000


def test_surge_bundle(surge: Rendered) -> None:
    assert surge.diagnosis.symptom_class == "slow_ttft"
    assert_self_contained(surge.page)
    assert_sections_in_order(surge.page)
    assert_diagnosis_shown(surge)
    for chart in ("gpu-memory", "ttft", "decode", "requests", "kv", "throughput", "gpu-power", "gpu-temperature"):
        assert f'id="plot-{chart}"' in surge.page
    assert 'id="plot-gpu-clock"' in surge.page and 'class="band"' in surge.page
    for latency in ("ttft", "tpot", "itl", "e2e"):
        assert f'id="bench-{latency}"' in surge.page


def test_the_path_taken_is_highlighted(surge: Rendered) -> None:
    flowchart = surge.page[surge.page.index('id="flowchart"') : surge.page.index('id="causes"')]
    # The root, then the answer taken at every step.
    assert flowchart.count('<li class="taken">') == len(surge.diagnosis.path) + 1
    tree = catalog.tree()
    for step in surge.diagnosis.path:
        branch = tree.questions[step.question_id].branch(step.answer)
        target = tree.classes[branch.symptom_class] if branch.symptom_class else tree.questions[str(branch.next)].text
        assert re.search(
            rf'<li class="taken"><span class="ans">{re.escape(esc(step.answer))}</span> → <span class="(?:leaf|node)"'
            rf"[^>]*>{re.escape(esc(target))}</span>",
            flowchart,
        ), step
    # Every question of the tree is drawn, taken or not.
    for question in tree.questions.values():
        assert esc(question.text) in flowchart


def test_planted_html_is_text(planted: Rendered) -> None:
    page = planted.page
    assert_self_contained(page)  # no <script>, <img> or any other element came through
    escaped, bare = esc(series.PLANTED), esc(series.PLANTED_BARE)

    def part(start: str, end: str) -> str:
        return page[page.index(start) : page.index(end, page.index(start))]

    assert escaped in part('id="flowchart"', 'id="causes"')  # the log line the path cites
    assert escaped in part('id="bench"', 'id="missing"')  # the run's label
    assert escaped in part("<h3>GPUs (last reading)</h3>", "</table>")  # the GPU's name
    assert bare in part("<h3>Launch configuration", "</dl>")  # the served model name
    assert bare in part("<h3>Server configuration from /metrics", "</dl>")  # a cache_config_info label


def test_strings_from_the_runbook_and_problems_are_escaped(surge: Rendered) -> None:
    diagnosis = replace(
        surge.diagnosis,
        seen_before=[{"summary": series.PLANTED, "match": "fingerprint", "causes": ["<i>x</i>"], "entry_ids": [3]}],
        problems=[f"logs/server.log: {series.PLANTED}"],
    )
    page = html.build(diagnosis, surge.evidence)
    assert_self_contained(page)
    assert "<i>x</i>" not in page and esc("<i>x</i>") in page
    runbook = page[page.index('id="runbook"') : page.index('id="details"')]
    assert esc(series.PLANTED) in runbook and "llmtriage runbook show ID" in runbook
    assert esc(series.PLANTED) in page[: page.index('id="flowchart"')]  # the verdict names the match too


def test_control_characters_are_shown_not_obeyed(tmp_path: Path) -> None:
    log = tmp_path / "server.log"
    log.write_bytes(b"ERROR 11-29 14:07:38 [core.py:1510] OSError: [Errno 98] Address already in use\x07\x08\x7f\r\n")
    evidence = read_evidence(None, LooseFiles(logs=[log]))
    page = html.build(diagnose(evidence), evidence)
    assert not any(c in page for c in "\x07\x08\x7f\r")
    assert "Address already in use\u2407\u2408\u2421" in page  # ␇␈␡


def test_no_time_series_says_how_to_collect_them() -> None:
    rendered = render(next(p for p in EXAMPLES if p.name == "port-in-use"))
    plots = rendered.page[rendered.page.index('id="plots"') : rendered.page.index('id="bench"')]
    assert "<svg" not in plots
    assert esc(html.COLLECT_SERIES) in plots
    assert esc(html.COLLECT_BENCH) in rendered.page


def test_build_is_pure(surge: Rendered) -> None:
    again = html.build(surge.diagnosis, surge.evidence, None)
    assert again == html.build(surge.diagnosis, surge.evidence, None)
    assert 'id="bench-ttft"' not in again  # without the bench run, no distributions


def test_slo_lines_follow_the_thresholds_given(surge: Rendered) -> None:
    limits = catalog.thresholds()
    tighter = replace(limits, slo=replace(limits.slo, ttft_p95_s=0.5))
    assert "SLO 0.5 s" in html.build(surge.diagnosis, surge.evidence, None, tighter)
    assert "SLO 2 s" in surge.page


def test_a_30_minute_capture_stays_small_and_keeps_its_spikes(capture_30min: Rendered) -> None:
    page = capture_30min.page
    assert len(page.encode()) < 2_000_000
    assert_self_contained(page)
    figure = page[page.index('id="plot-gpu-memory"') :]
    figure = figure[: figure.index("</figure>")]
    assert "1,800 samples" in figure
    used = re.search(r'<path class="line" d="([^"]+)"', figure)
    assert used is not None
    points = [tuple(map(float, p.split(" "))) for p in used.group(1).lstrip("M").split("L")]
    assert len(points) < 1800 / 2
    # The one-second 5.4 GiB spike at t = 600 s (a third of the capture) is the top of the drawn line.
    spike_x, spike_y = min(points, key=lambda p: p[1])
    assert spike_x == pytest.approx(svg.LEFT + svg.PLOT_W / 3, abs=1.0)
    assert spike_y < min(y for x, y in points if abs(x - spike_x) > 2) - 5
