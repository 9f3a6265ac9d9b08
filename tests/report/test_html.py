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
from llmtriage.report.bench import read_bundle_bench
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
SECTIONS = ("verdict", "flowchart", "causes", "plots", "bench", "stack", "missing", "runbook", "details")


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


def test_the_same_place_is_cited_once_with_its_notes_joined(surge: Rendered) -> None:
    top = surge.diagnosis.causes[0]
    cited = top.evidence[0]
    twice = replace(top, evidence=[cited, replace(cited, note="a second reading of the same line"), *top.evidence])
    page = html.build(replace(surge.diagnosis, causes=[twice, *surge.diagnosis.causes[1:]]), surge.evidence)
    block = page[page.index(f'id="cause-{top.id}"') :]
    block = block[: block.index("</article>")]
    items = re.findall(r"<li>(.*?)</li>", block[block.index('<ul class="ev">') : block.index("</ul>")])
    assert len(items) == len({e.citation for e in top.evidence})
    assert "a second reading of the same line" in block


def test_a_chart_of_one_reading_is_a_sentence(tmp_path: Path) -> None:
    rendered = render(series.write_bundle(tmp_path, 1))  # one scrape, one GPU sample
    plots = rendered.page[rendered.page.index('id="plots"') : rendered.page.index('id="bench"')]
    # Only the log's stats lines (many of them) are drawn; the scrape and the GPU sample are sentences.
    assert re.findall(r'<figure id="([^"]+)"', plots) == ["plot-log-throughput"]
    sentence = re.search(r'<p class="sparse" id="plot-gpu-memory">(.*?)</p>', plots)
    assert sentence is not None
    assert re.search(r"one reading, used [\d.]+, total 79\.6 GiB at 14:08:20 UTC", sentence.group(1))
    kv = re.search(r'<p class="sparse" id="plot-kv">(.*?)</p>', plots)
    assert kv is not None and "nearly full" not in kv.group(1)  # the threshold line is no reading


def test_every_request_of_the_bench_on_the_time_axis(surge: Rendered) -> None:
    plots = surge.page[surge.page.index('id="plots"') : surge.page.index('id="bench"')]
    figure = plots[plots.index('id="plot-requests-latency"') :]
    figure = figure[: figure.index("</figure>")]
    assert figure.count("<circle") == 2 * 60  # TTFT and E2E of the 60 measured requests (warmup left out)
    domains = set(re.findall(r'data-x0="([^"]+)" data-x1="([^"]+)"', plots))
    assert len(domains) == 1  # every time chart on the same axis
    ticks = re.findall(r'<text class="xt"[^>]*>([^<]*)</text>', plots)
    assert ticks and all(re.fullmatch(r"\d\d:\d\d:\d\d(\.\d)?", t) for t in ticks)
    assert "no per-request latencies" not in surge.page.lower()


def test_two_clocks_are_named_when_the_server_saw_longer_than_its_client(surge: Rendered) -> None:
    run = read_bundle_bench(surge.bundle)
    assert run is not None
    ttft = run.distribution("TTFT")
    assert ttft is not None and ttft.stats.p95 is not None
    assert "Two clocks" not in surge.page  # the bench server's own TTFT p95 is under what its client measured
    run.server_ttft_p95_ms = ttft.stats.p95 * 1.2  # a server a little faster than its client: the same clock
    assert "Two clocks" not in html.build(surge.diagnosis, surge.evidence, run)
    run.server_ttft_p95_ms = ttft.stats.p95 * 25  # the simulator at --speed 20: its time, not the wall's
    page = html.build(surge.diagnosis, surge.evidence, run)
    verdict = page[: page.index('id="flowchart"')]
    assert "Two clocks" in verdict and f"{ttft.stats.p95 * 25 / 1000:.3g} s" in verdict
