"""The incident report: one self-contained HTML page (inline CSS, inline SVG plots, no script, no network).

``build`` is pure: a diagnosis and its evidence in, the page as a string out; only the CLI writes it. Order, as an
incident report reads: the verdict with the first cause and its fix (and any figures that disagree), the path
through the flowchart, the ranked causes with their evidence and fixes, the plots on one time axis, the load test,
the stack and launch configuration, what to collect next, what the runbook has seen before, then the details
(GPUs, kernel, read problems). Every string from the evidence is escaped (:func:`esc`).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

from llmtriage import __version__, catalog
from llmtriage.catalog import Thresholds, Tree
from llmtriage.diagnose.model import INCONCLUSIVE_NOTE, Diagnosis, Evidence, PathStep
from llmtriage.facts import BenchFigures, Citation, GpuFacts, GpuSample, KernelFacts, LaunchConfig, MetricsFacts
from llmtriage.facts import Evidence as EvidenceFacts
from llmtriage.parse import prom
from llmtriage.report import svg, timeseries
from llmtriage.report.bench import BenchRun
from llmtriage.report.markup import esc, esc_code

MAX_LISTED = 50
CLOCK_RATIO = 1.5
"""A server-side TTFT p95 this many times the client's (or longer than the whole run) cannot be the same clock."""
"""Longest list (kernel events, read problems, inputs) shown in full; the rest is counted."""
COLLECT_SERIES = (
    "llmtriage capture --metrics-url http://HOST:PORT/metrics --duration 5m --interval 1s"
    "   (scrapes metrics/ and samples gpu/samples.csv every second)"
)
COLLECT_BENCH = "llmtriage bench --base-url http://HOST:PORT --out BUNDLE/bench   (result.json and requests.csv)"

CSS = """
:root{--fg:#1d232a;--dim:#5b6570;--line:#d5dbe1;--bg:#fff;--soft:#f4f6f8;--bad:#b42318;--ok:#1a7f37;
--warn:#9a6700;--on:#0b5cad}
*{box-sizing:border-box}
body{margin:0;font:15px/1.45 system-ui,-apple-system,"Segoe UI",Roboto,sans-serif;color:var(--fg);background:var(--bg)}
main{max-width:1080px;margin:0 auto;padding:16px 16px 60px}
h1{font-size:20px;margin:0 0 4px}h2{font-size:18px;margin:34px 0 10px;border-bottom:1px solid var(--line);
padding-bottom:4px}h3{font-size:15px;margin:16px 0 6px}
code,pre{font:13px/1.4 ui-monospace,SFMono-Regular,Menlo,Consolas,monospace}
code{background:var(--soft);padding:1px 4px;border-radius:3px;overflow-wrap:anywhere}
pre{background:var(--soft);padding:8px 10px;border-radius:4px;white-space:pre-wrap;overflow-wrap:anywhere;margin:4px 0}
.dim{color:var(--dim)}.small{font-size:13px}
nav{font-size:13px;margin:6px 0 0}nav a{margin-right:12px;color:var(--on)}
.verdict{border:2px solid var(--bad);border-radius:8px;padding:14px 18px;margin-top:14px;background:#fff6f5}
.verdict.healthy{border-color:var(--ok);background:#f3fbf5}
.verdict .cls{font-size:22px;font-weight:700;color:var(--bad)}.verdict.healthy .cls{color:var(--ok)}
.verdict p{margin:6px 0}.verdict .fix1{font-size:16px}
.clocks{border-left:4px solid var(--warn);background:#fff8e6;padding:6px 10px;margin:8px 0;font-size:14px}
.bad{color:var(--bad);font-weight:700}.sparse{margin:10px 0}
ol.path{margin:4px 0 8px;padding-left:22px}ol.path li{margin:4px 0}
svg .event{stroke-width:1.5;stroke-dasharray:4 3}svg .event.breach{stroke:var(--warn)}svg .event.error{stroke:var(--bad)}
svg .et{text-anchor:start;font-weight:700}.warnkey{color:var(--warn);font-weight:700}svg .et.breach{fill:var(--warn)}svg .et.error{fill:var(--bad)}
.events{font-size:13px;margin:4px 0;padding-left:20px}
table{max-width:100%;display:block;overflow-x:auto}
.tree,.tree ul{list-style:none;margin:0;padding-left:18px}.tree{padding-left:0}
.tree li{position:relative;padding:3px 0 3px 14px;border-left:1px solid var(--line)}
.tree li:last-child{border-left-color:transparent}
.tree li::before{content:"";position:absolute;left:-1px;top:0;width:12px;height:14px;border-left:1px solid var(--line);
border-bottom:1px solid var(--line)}
.tree>li{border:0;padding-left:0}.tree>li::before{display:none}
.tree li.taken::before{border-color:var(--on);border-width:2px}
.tree .node{font-weight:600}.tree .off{opacity:.5}
.tree .taken>.node,.tree .taken>.ans{color:var(--on)}
.ans{font-weight:600}.leaf{display:inline-block;padding:0 6px;border:1px solid var(--line);border-radius:10px;font-size:13px}
.taken>.leaf{border:2px solid var(--on);background:#e8f1fb;font-weight:700}
.why{font-size:13px;margin:2px 0 2px 4px}
.cause{border:1px solid var(--line);border-radius:6px;padding:10px 14px;margin:10px 0}
.cause h3{margin:0 0 6px}.kind{font-size:12px;padding:1px 6px;border-radius:8px;background:var(--soft);color:var(--dim)}
.kind.hardware{background:#fde8e6;color:var(--bad)}
.conf{display:inline-block;width:120px;height:8px;background:var(--soft);border-radius:4px;vertical-align:middle;
overflow:hidden}.conf b{display:block;height:100%;background:var(--on)}
ul.ev,ol.fix{margin:4px 0 8px;padding-left:22px}ul.ev li{margin:2px 0}
.excerpt{white-space:pre-wrap;overflow-wrap:anywhere}
.note{font-style:italic}
figure{margin:18px 0;padding:0}figcaption{font-weight:600}
svg.chart{width:100%;height:auto;display:block;margin-top:4px}
svg .plot{fill:#fbfcfd;stroke:var(--line)}svg .grid{stroke:#e7ebef;stroke-width:1}
svg text{font:11px system-ui,sans-serif;fill:var(--dim)}svg .yt{text-anchor:end;dominant-baseline:middle}
svg .xt,svg .mt{text-anchor:middle}svg .line{fill:none;stroke-width:1.6;stroke-linejoin:round}
svg .band{fill:#f28e2b;fill-opacity:.22}svg .bar{fill:#4e79a7}svg .marker{stroke:var(--bad);stroke-dasharray:3 3}
svg .mt{fill:var(--bad)}
.legend{list-style:none;padding:0;margin:2px 0;font-size:13px;display:flex;flex-wrap:wrap;gap:4px 16px}
.legend i{display:inline-block;width:14px;height:0;border-top:3px solid;margin-right:5px;vertical-align:middle}
.legend i.dash{border-top-style:dashed}.legend i.bandkey{height:10px;border:0;background:#f28e2b;opacity:.35}
.cap{font-size:12px;color:var(--dim);margin:2px 0}
table{border-collapse:collapse;font-size:13px;margin:6px 0}th,td{border:1px solid var(--line);padding:3px 8px;
text-align:left;vertical-align:top}th{background:var(--soft)}td.n{text-align:right;font-variant-numeric:tabular-nums}
dl.kv{columns:3 260px;column-gap:24px;font-size:13px;margin:6px 0}dl.kv div{break-inside:avoid;display:flex;gap:8px;
border-bottom:1px solid var(--soft);padding:2px 0}dl.kv dt{color:var(--dim);min-width:40%}dl.kv dd{margin:0;
overflow-wrap:anywhere}
footer{margin-top:40px;font-size:12px;color:var(--dim)}
@media (max-width:600px){svg text{font-size:19px}.verdict{padding:10px 12px}h2{margin-top:26px}}
"""


def build(
    diagnosis: Diagnosis,
    evidence: EvidenceFacts,
    bench: BenchRun | None = None,
    thresholds: Thresholds | None = None,
) -> str:
    """The whole report page. ``bench``: the bundle's load test, when one ran; ``thresholds``: the ones used."""
    limits = thresholds or catalog.thresholds()
    plotted = timeseries.over_time(evidence.gpu, evidence.metrics, evidence.logs, limits, bench)
    clocks = _clocks(evidence.metrics, bench)
    title = f"llmtriage: {diagnosis.symptom_class} — {diagnosis.origin}"
    sections = [
        _verdict(diagnosis, bench, clocks),
        _section("flowchart", "Path through the flowchart", _flowchart(catalog.tree(), diagnosis.path)),
        _section("causes", "Causes, most likely first", _causes(diagnosis)),
        _section("plots", "Over time", _plots(plotted, clocks is not None)),
        _section("bench", "Load test", _bench(bench, evidence, limits)),
        _section("stack", "Stack and launch configuration", _stack(diagnosis, evidence)),
        _section("missing", "What to collect next", _missing(diagnosis)),
        _section("runbook", "Seen before (runbook)", _seen_before(diagnosis)),
        _section("details", "Details", _details(diagnosis, evidence)),
    ]
    nav = "".join(
        f'<a href="#{anchor}">{text}</a>'
        for anchor, text in (
            ("flowchart", "Flowchart"),
            ("causes", "Causes"),
            ("plots", "Over time"),
            ("bench", "Load test"),
            ("stack", "Stack"),
            ("missing", "Collect next"),
            ("runbook", "Seen before"),
            ("details", "Details"),
        )
    )
    return page(
        title,
        CSS,
        f'<h1>llmtriage incident report</h1><div class="dim small">evidence: <code>{esc(diagnosis.origin)}</code>'
        f"{_engine(diagnosis)}</div>\n" + sections[0] + f"<nav>{nav}</nav>\n" + "\n".join(sections[1:]) + "\n",
    )


def page(title: str, css: str, body: str) -> str:
    """A self-contained page: no scripts and no network (its Content-Security-Policy says so), ``body`` in
    ``<main>`` above the footer."""
    return (
        "<!DOCTYPE html>\n"
        '<html lang="en"><head><meta charset="utf-8">'
        "<meta http-equiv=\"Content-Security-Policy\" content=\"default-src 'none'; style-src 'unsafe-inline'\">"
        '<meta name="viewport" content="width=device-width,initial-scale=1">'
        f'<meta name="generator" content="llmtriage {esc(__version__)}">'
        f"<title>{esc(title)}</title><style>{css}</style></head>\n<body><main>"
        f"{body}<footer>llmtriage {esc(__version__)}. The page is self-contained: no scripts, no network.</footer>"
        "</main></body></html>\n"
    )


def _section(anchor: str, heading: str, body: str) -> str:
    return f'<section id="{anchor}"><h2>{esc(heading)}</h2>{body}</section>'


def _engine(diagnosis: Diagnosis) -> str:
    if not diagnosis.engine:
        return ""
    version = f" {diagnosis.engine_version}" if diagnosis.engine_version else ""
    return f" · engine: {esc(diagnosis.engine + version)}"


def _percent(confidence: float) -> str:
    return f"{confidence * 100:.0f}%"


# ---------------------------------------------------------------- clocks


def _server_ttft_p95_s(metrics: MetricsFacts | None, bench: BenchRun) -> float | None:
    """TTFT p95 as the server's /metrics histogram has it over the load test: the bench's own reading, or the
    scrapes taken while it ran (a capture's other scrapes cover other requests)."""
    if bench.server_ttft_p95_ms is not None:
        return bench.server_ttft_p95_ms / 1000.0
    if metrics is None or bench.origin_epoch_s is None or bench.duration_s is None:
        return None
    start, end = bench.origin_epoch_s - 1.0, bench.origin_epoch_s + bench.duration_s + 1.0
    during = [s for s in metrics.snapshots if s.timestamp_s is not None and start <= s.timestamp_s <= end]
    if len(during) < 2:
        return None
    delta = prom.histogram_delta(during[0].histograms.get("ttft_seconds"), during[-1].histograms.get("ttft_seconds"))
    return prom.quantile(delta, 0.95)


def _clocks(metrics: MetricsFacts | None, bench: BenchRun | None) -> str | None:
    """A note when the server's latencies and the load test's cannot be in the same clock; None when they can."""
    if bench is None:
        return None
    server = _server_ttft_p95_s(metrics, bench)
    ttft = bench.distribution("TTFT")
    client = ttft.stats.p95 / 1000.0 if ttft is not None and ttft.stats.p95 is not None else None
    if server is None or (client is None and bench.duration_s is None):
        return None
    too_long = bench.duration_s is not None and server > bench.duration_s
    if not too_long and (client is None or server <= CLOCK_RATIO * client):
        return None
    measured = [f"the load test measured {client:.3g} s (its TTFT p95)" if client is not None else ""]
    if bench.duration_s is not None:
        measured.append(f"the whole load test took {bench.duration_s:.3g} s")
    return (
        f"<strong>Two clocks.</strong> The server's own /metrics put TTFT p95 at <strong>{server:.3g} s</strong>; "
        f"on this host's wall clock {esc(' and '.join(m for m in measured if m))}. A server cannot see a longer "
        "TTFT than its client, so its clock is not the wall clock (the llmtriage simulator reports simulated time, "
        "<code>--speed</code> times the wall clock). The flowchart, the causes and the /metrics latencies are "
        "in the server's clock; the load test and the plots' time axis are in the wall clock."
    )


# ---------------------------------------------------------------- verdict


def _bench_headline(run: BenchRun | None) -> str:
    if run is None or not run.requests_measured:
        return ""
    measured, failed = run.requests_measured, run.requests_failed or 0
    if failed:
        worst = f" ({esc(run.errors[0][0])})" if run.errors else ""
        return f'<p>Load test: <span class="bad">{failed:,} of {measured:,} requests failed</span>{worst}.</p>'
    return ""


def _verdict(diagnosis: Diagnosis, bench: BenchRun | None, clocks: str | None) -> str:
    healthy = " healthy" if diagnosis.healthy else ""
    lines = [
        f'<div class="verdict{healthy}" id="verdict"><div class="cls">{esc(diagnosis.symptom_title)}</div>',
        f'<div class="dim">symptom class <code>{esc(diagnosis.symptom_class)}</code></div>',
    ]
    if diagnosis.causes:
        top = diagnosis.causes[0]
        lines.append(
            f"<p>Most likely: <strong>{esc(top.title)}</strong> <code>{esc(top.id)}</code> "
            f"(confidence {_percent(top.confidence)})</p>"
        )
        if top.fixes:
            lines.append(f'<p class="fix1">First fix: <strong>{esc_code(top.fixes[0])}</strong></p>')
        if len(diagnosis.causes) > 1:
            others = ", ".join(f"{esc(c.title)} ({_percent(c.confidence)})" for c in diagnosis.causes[1:])
            lines.append(f'<p class="small">Also: {others}</p>')
    elif diagnosis.healthy:
        lines.append("<p>Nothing wrong found in the evidence.</p>")
    elif diagnosis.symptom_class == "inconclusive":
        lines.append(f"<p>{esc(INCONCLUSIVE_NOTE)}</p>")
    else:
        lines.append("<p>No cause could be named from this evidence: see what to collect next below.</p>")
    lines.append(_bench_headline(bench))
    if clocks is not None:
        lines.append(f'<div class="clocks" id="clocks">{clocks}</div>')
    for note in diagnosis.version_notes:
        sources = ", ".join(f'<a href="{esc(url)}">{esc(url)}</a>' for url in note.source)
        lines.append(f'<p class="small version-note">Known regression: {esc(note.summary)} ({sources})</p>')
    if diagnosis.seen_before:
        lines.append(f'<p class="small">Seen before: {esc(diagnosis.seen_before[0].get("summary", ""))}</p>')
    lines.append("</div>")
    return "".join(lines)


# ---------------------------------------------------------------- flowchart


def _citation(citation: Citation) -> str:
    if citation.metric is not None:
        shown = "unknown" if citation.value is None else f"{citation.value:g}"
        where = f"<code>{esc(citation.source)}</code> " if citation.source else ""
        threshold = f' <span class="dim">({esc(citation.threshold)})</span>' if citation.threshold else ""
        return f"{where}<code>{esc(citation.metric)}</code> = <strong>{esc(shown)}</strong>{threshold}"
    where = citation.source if citation.line is None else f"{citation.source}:{citation.line}"
    excerpt = f' <span class="excerpt">{esc(citation.excerpt)}</span>' if citation.excerpt else ""
    return f"<code>{esc(where)}</code>{excerpt}"


def _evidence_lines(evidence: Sequence[Evidence]) -> list[str]:
    """One line per cited place (file:line, or metric and source): the notes of the same place joined on it."""
    notes: dict[Citation, list[str]] = {}
    for e in evidence:
        said = notes.setdefault(e.citation, [])
        if e.note and e.note not in said:
            said.append(e.note)
    return [
        _citation(citation) + (f' <span class="note">— {esc("; ".join(said))}</span>' if said else "")
        for citation, said in notes.items()
    ]


def _flowchart(tree: Tree, path: Sequence[PathStep]) -> str:
    steps = {step.question_id: step for step in path}

    def answers(question_id: str, step: PathStep | None) -> str:
        """The answers of a question as a list; each leads to a class or, on the same line, the next question."""
        items = []
        for branch in tree.questions[question_id].branches:
            taken = step is not None and branch.answer == step.answer
            cls = "taken" if taken else ("off" if step is not None else "")
            if branch.symptom_class is not None:
                leaf = tree.classes.get(branch.symptom_class, branch.symptom_class)
                target = f'<span class="leaf" title="{esc(branch.symptom_class)}">{esc(leaf)}</span>'
            elif branch.next is not None:
                following = steps.get(branch.next) if taken else None
                target = (
                    f'<span class="node">{esc(tree.questions[branch.next].text)}</span>'
                    f"{answers(branch.next, following)}"
                )
            else:
                continue
            items.append(f'<li class="{cls}"><span class="ans">{esc(branch.answer)}</span> → {target}</li>')
        return f"<ul>{''.join(items)}</ul>"

    taken = []
    for step in path:
        branch = tree.questions[step.question_id].branch(step.answer)
        leaf = (
            f' → <span class="leaf">{esc(tree.classes.get(branch.symptom_class, branch.symptom_class))}</span>'
            if branch.symptom_class is not None
            else ""
        )
        why = "".join(f'<div class="why">{line}</div>' for line in _evidence_lines(step.evidence)[:2])
        taken.append(
            f"<li>{esc(tree.questions[step.question_id].text)} <strong>{esc(step.answer)}</strong>{leaf}{why}</li>"
        )
    note = (
        '<span class="small">The whole flowchart, with the path in blue (hardware causes are checked on every '
        "path and rank above configuration causes)</span>"
    )
    root = f'<span class="node">{esc(tree.questions[tree.root].text)}</span>'
    whole = f'<ul class="tree"><li class="taken">{root}{answers(tree.root, steps.get(tree.root))}</li></ul>'
    return f'<ol class="path">{"".join(taken)}</ol><details><summary>{note}</summary>{whole}</details>'


# ---------------------------------------------------------------- causes


def _causes(diagnosis: Diagnosis) -> str:
    if not diagnosis.causes:
        if diagnosis.healthy:
            return "<p>None: the server looks healthy in this evidence.</p>"
        if diagnosis.symptom_class == "inconclusive":
            return f"<p>None named: {esc(INCONCLUSIVE_NOTE)}</p>"
        return "<p>No cause reached the confidence to be named. The missing evidence below is the next step.</p>"
    out = []
    for rank, cause in enumerate(diagnosis.causes, start=1):
        evidence = "".join(f"<li>{line}</li>" for line in _evidence_lines(cause.evidence))
        fixes = "".join(f"<li>{esc_code(fix)}</li>" for fix in cause.fixes)
        out.append(
            f'<article class="cause" id="cause-{esc(cause.id)}"><h3>{rank}. {esc(cause.title)} '
            f'<code>{esc(cause.id)}</code> <span class="kind {esc(cause.kind)}">{esc(cause.kind)}</span></h3>'
            f'<div class="small">confidence <span class="conf"><b style="width:{cause.confidence * 100:.0f}%"></b>'
            f"</span> {_percent(cause.confidence)}</div>"
            f'<h4 class="small">Evidence</h4><ul class="ev">{evidence or "<li>(none cited)</li>"}</ul>'
            f'<h4 class="small">Fix</h4><ol class="fix">{fixes}</ol></article>'
        )
    return "".join(out)


# ---------------------------------------------------------------- plots


def _reading(chart: timeseries.Chart, timeline: timeseries.Timeline | None) -> str:
    """A chart of fewer than two readings, said as a sentence: its one value of each series, and when."""
    values = []
    when = ""
    for series in chart.series:
        if series.dashed and series.name.startswith(("SLO", "nearly full")):
            continue  # a reference line, not a reading
        point = next(((x, y) for x, y in series.points if y is not None), None)
        if point is None:
            continue
        values.append(f"{series.name} {svg.format_value(point[1])}")
        if not when and chart.x_kind == "time" and timeline is not None:
            when = f" at {timeline.clock(point[0])} UTC"
    shown = ", ".join(values) if values else "nothing measured"
    return (
        f'<p class="sparse" id="plot-{esc(chart.id)}"><strong>{esc(chart.title)}</strong>: one reading, '
        f"{esc(shown)} {esc(chart.unit)}{esc(when)} <span class=dim>({esc(chart.caption)})</span>.</p>"
    )


def _figure(chart: timeseries.Chart, timeline: timeseries.Timeline | None, server_clock: bool) -> str:
    if chart.samples < 2:
        return _reading(chart, timeline)
    caption = f"{chart.caption}; {chart.samples:,} samples"
    if server_clock and chart.id in ("ttft", "decode"):
        caption += "; latencies in the server's clock (see the note on two clocks above)"
    if chart.x_kind != "time":
        caption += "; x: in order, no times to place it on the page's time axis"
    return (
        f'<figure id="plot-{esc(chart.id)}"><figcaption>{esc(chart.title)} '
        f'<span class="dim">({esc(chart.unit)})</span></figcaption>'
        f'{svg.line_chart(chart, timeline)}{svg.legend(chart)}<p class="cap">{esc(caption)}</p></figure>'
    )


def _timeline(timeline: timeseries.Timeline) -> str:
    notes = "; ".join(timeline.notes)
    events = "".join(
        f'<li><span class="{"bad" if e.kind == "error" else "warnkey"}">{esc(e.kind)}</span> at '
        f"{esc(timeline.clock(e.at_s, tenths=True))}: {esc(e.label)}</li>"
        for e in timeline.events
    )
    marked = f'<ul class="events">{events}</ul>' if events else ""
    return f'<p class="cap" id="timeline">{esc(timeline.day())}, {esc(notes)}.</p>{marked}'


def _plots(plotted: timeseries.OverTime, server_clock: bool) -> str:
    charts = plotted.charts
    lacking = []
    if all(c.id.startswith(("gpu-", "requests-latency")) for c in charts):
        lacking.append("scrapes of /metrics over time (latency, requests, KV cache, throughput)")
    if not any(c.id.startswith("gpu-") for c in charts):
        lacking.append("GPU samples over time (memory, power, temperature, clocks)")
    body = _timeline(plotted.timeline) if plotted.timeline is not None and charts else ""
    body += "".join(_figure(c, plotted.timeline, server_clock) for c in charts)
    if lacking:
        body += (
            f"<p>No {' and no '.join(esc(x) for x in lacking)} in the evidence. "
            f"Collect them with:</p><pre>{esc(COLLECT_SERIES)}</pre>"
        )
    return body


# ---------------------------------------------------------------- load test


def _counts(run: BenchRun) -> str:
    measured, completed, failed = run.requests_measured, run.requests_completed, run.requests_failed
    parts = []
    if measured:
        if completed is not None:
            parts.append(f"completed <strong>{completed:,} of {measured:,}</strong>")
        if failed:
            parts.append(f'<span class="bad">failed {failed:,} of {measured:,} ({failed / measured:.0%})</span>')
        elif failed == 0:
            parts.append("failed 0")
        if run.good_requests is not None:
            slos = [
                f"{name} ≤ {value:g} ms"
                for name, value in (("TTFT", run.slo_ttft_ms), ("TPOT", run.slo_tpot_ms))
                if value is not None
            ]
            within = f" ({', '.join(slos)})" if slos else ""
            parts.append(f"within the SLOs{esc(within)}: <strong>{run.good_requests:,} of {measured:,}</strong>")
    else:
        if completed is not None:
            parts.append(f"completed <strong>{completed:,}</strong>")
        if failed is not None:
            parts.append(f"failed <strong>{failed:,}</strong>")
    return " · ".join(parts)


def _bench(run: BenchRun | None, evidence: EvidenceFacts, limits: Thresholds) -> str:
    figures = evidence.bench or (evidence.logs.bench if evidence.logs is not None else None)
    parts = []
    if run is not None:
        facts = [
            ("run", run.label),
            ("load", run.load),
            (
                "output tokens/s",
                None if run.output_token_throughput_per_s is None else f"{run.output_token_throughput_per_s:,.1f}",
            ),
        ]
        shown = " · ".join(f"{name}: <strong>{esc(value)}</strong>" for name, value in facts if value is not None)
        parts.append(f"<p>From <code>{esc(run.source)}</code>{': ' + shown if shown else ''}</p>")
        counts = _counts(run)
        if counts:
            parts.append(f"<p>{counts}</p>")
        if run.errors:
            parts.append(
                "<table><tr><th>requests</th><th>failed with</th></tr>"
                + "".join(f"<tr><td class=n>{n:,}</td><td>{esc(what)}</td></tr>" for what, n in run.errors)
                + "</table>"
            )
        parts.append(
            "<p class=\"small\">Measured by the load test's client on the wall clock: a request's TTFT and E2E "
            "include the network and the server's queue.</p>"
        )
        if run.distributions:
            parts.append(_stats_table(run))
            slo_ms = {
                "TTFT": run.slo_ttft_ms if run.slo_ttft_ms is not None else limits.slo.ttft_p95_s * 1000.0,
                "TPOT": run.slo_tpot_ms,
            }
            for d in run.distributions:
                s = d.stats
                if len(d.values_ms) < 2:
                    parts.append(
                        f'<p class="sparse" id="bench-{esc(d.name.split()[0].lower())}"><strong>{esc(d.name)}</strong>: '
                        f"one value, {_ms(s.max)} ms: too few for a distribution.</p>"
                    )
                    continue
                markers = [
                    svg.Marker(value, label)
                    for value, label in ((s.p50, "p50"), (s.p95, "p95"), (s.p99, "p99"), (slo_ms.get(d.name), "SLO"))
                    if value is not None
                ]
                parts.append(
                    f'<figure id="bench-{esc(d.name.split()[0].lower())}"><figcaption>{esc(d.name)}: share of '
                    f'requests at or under each latency <span class="dim">(ms, %)</span></figcaption>'
                    f"{svg.cdf(d.name, 'ms', d.values_ms, markers)}"
                    f'<p class="cap">{len(d.values_ms):,} values; dashed lines: '
                    f"{', '.join(m.label for m in markers)}</p></figure>"
                )
        elif run.requests:
            parts.append("<p>No request completed, so there is no latency distribution to draw.</p>")
        else:
            parts.append("<p>No per-request latencies (<code>requests.csv</code>) with this run.</p>")
        parts.extend(f'<p class="small">{esc(p.source)}: {esc(p.message)}</p>' for p in run.problems)
    elif figures is not None and figures.citations:
        parts.append(_figures_table(figures))
    else:
        parts.append(f"<p>No load test in the evidence. To measure under load:</p><pre>{esc(COLLECT_BENCH)}</pre>")
    return "".join(parts)


def _ms(value: float | None) -> str:
    return "" if value is None else f"{value:,.1f}"


def _stats_table(run: BenchRun) -> str:
    head = "<tr><th>ms</th><th>count</th><th>mean</th><th>p50</th><th>p90</th><th>p95</th><th>p99</th><th>max</th></tr>"
    rows = "".join(
        f"<tr><th>{esc(d.name)}</th><td class=n>{d.stats.count:,}</td>"
        + "".join(
            f"<td class=n>{_ms(v)}</td>"
            for v in (d.stats.mean, d.stats.p50, d.stats.p90, d.stats.p95, d.stats.p99, d.stats.max)
        )
        + "</tr>"
        for d in run.distributions
    )
    return f"<table>{head}{rows}</table>"


def _figures_table(figures: BenchFigures) -> str:
    rows = "".join(
        f"<tr><th>{esc(name)}</th><td class=n>{esc(f'{c.value:g}' if c.value is not None else '')}</td>"
        f"<td>{_citation(c)}</td></tr>"
        for name, c in figures.citations.items()
    )
    return (
        "<p>Load-test figures found in the evidence (no per-request latencies to draw):</p>"
        f"<table><tr><th>figure</th><th>value</th><th>from</th></tr>{rows}</table>"
    )


# ---------------------------------------------------------------- missing, runbook


def _missing(diagnosis: Diagnosis) -> str:
    if not diagnosis.missing:
        return "<p>Nothing the diagnosis needed was missing.</p>"
    return "".join(
        f'<h3>{esc(m.source)}</h3><p class="small dim">{esc(m.why)}</p><pre>{esc(m.collect)}</pre>'
        for m in diagnosis.missing
    )


def _seen_before(diagnosis: Diagnosis) -> str:
    if not diagnosis.seen_before:
        return "<p>No match in the runbook (or no runbook was consulted).</p>"
    rows = []
    for match in diagnosis.seen_before:
        causes = ", ".join(str(c) for c in match.get("causes", []))
        entries = ", ".join(str(i) for i in match.get("entry_ids", []))
        rows.append(
            f"<tr><td>{esc(match.get('match', ''))}</td><td>{esc(match.get('summary', ''))}</td>"
            f"<td>{esc(causes)}</td><td>{esc(match.get('last_seen', ''))}</td><td>{esc(entries)}</td></tr>"
        )
    return (
        "<table><tr><th>match</th><th>what</th><th>causes recorded</th><th>last seen</th><th>entries</th></tr>"
        + "".join(rows)
        + '</table><p class="small dim">Show an entry: <code>llmtriage runbook show ID</code></p>'
    )


# ---------------------------------------------------------------- details


def _capped(items: Sequence[str]) -> str:
    shown = "".join(f"<li>{item}</li>" for item in items[:MAX_LISTED])
    more = f"<li class=dim>… and {len(items) - MAX_LISTED:,} more</li>" if len(items) > MAX_LISTED else ""
    return f"<ul class=ev>{shown}{more}</ul>"


def _table(header: Iterable[str], rows: Iterable[Iterable[object]]) -> str:
    head = "".join(f"<th>{esc(h)}</th>" for h in header)
    body = "".join("<tr>" + "".join(f"<td>{esc('' if v is None else v)}</td>" for v in row) + "</tr>" for row in rows)
    return f"<table><tr>{head}</tr>{body}</table>"


def _pairs(rows: Iterable[tuple[str, object]]) -> str:
    items = "".join(f"<div><dt>{esc(name)}</dt><dd>{esc(value)}</dd></div>" for name, value in rows)
    return f'<dl class="kv">{items}</dl>'


def _gpu_details(gpu: GpuFacts) -> str:
    parts = []
    versions = [
        f"driver {gpu.driver_version}" if gpu.driver_version else "",
        f"CUDA {gpu.cuda_version}" if gpu.cuda_version else "",
    ]
    shown = ", ".join(v for v in versions if v)
    if shown:
        parts.append(f"<p>{esc(shown)}</p>")
    latest: dict[int | None, GpuSample] = {}
    for sample in [*gpu.snapshot, *gpu.samples]:
        latest[sample.index] = sample
    if latest:
        labels = {r.field: r.label for r in catalog.nvidia_smi_fields().reasons}
        rows = []
        for index, s in latest.items():
            reasons = gpu.active_reasons.get(index, ()) if index is not None else ()
            reasons = reasons or s.clocks_event_reasons or ()
            memory = (
                f"{s.memory_used_mib:,.0f} / {s.memory_total_mib:,.0f} MiB"
                if s.memory_used_mib is not None and s.memory_total_mib is not None
                else ""
            )
            rows.append(
                (
                    index,
                    s.name,
                    memory,
                    None if s.utilization_gpu_pct is None else f"{s.utilization_gpu_pct:g} %",
                    _power(s),
                    None if s.temperature_c is None else f"{s.temperature_c:g} °C",
                    None if s.sm_clock_mhz is None else f"{s.sm_clock_mhz:g} MHz",
                    ", ".join(labels.get(r, r) for r in reasons),
                )
            )
        parts.append(
            "<h3>GPUs (last reading)</h3>"
            + _table(("GPU", "name", "memory", "util", "power", "temp", "SM clock", "clocks event reasons"), rows)
        )
    if gpu.processes:
        parts.append(
            "<h3>GPU processes</h3>"
            + _table(
                ("GPU", "pid", "name", "memory MiB"),
                ((p.gpu_index, p.pid, p.name, p.used_memory_mib) for p in gpu.processes),
            )
        )
    if gpu.errors:
        parts.append("<h3>GPU errors</h3>" + _capped([_citation(e.cite()) for e in gpu.errors]))
    return "".join(parts)


def _power(sample: GpuSample) -> str | None:
    if sample.power_draw_w is None:
        return None
    limit = "" if sample.power_limit_w is None else f" / {sample.power_limit_w:g}"
    return f"{sample.power_draw_w:g}{limit} W"


def _kernel_details(kernel: KernelFacts) -> str:
    if not kernel.events:
        return "<h3>Kernel</h3><p>No GPU, Xid or OOM-killer messages in the kernel log.</p>"
    items = [
        f'<span class="kind">{esc(e.kind)}{"" if e.xid is None else f" {e.xid}"}</span> {_citation(e.cite())}'
        for e in kernel.events
    ]
    return "<h3>Kernel</h3>" + _capped(items)


def _launch_details(launch: LaunchConfig) -> str:
    known = [
        ("engine", launch.engine),
        ("model", launch.model),
        ("max_model_len", launch.max_model_len),
        ("gpu_memory_utilization", launch.gpu_memory_utilization),
        ("max_num_seqs", launch.max_num_seqs),
        ("max_num_batched_tokens", launch.max_num_batched_tokens),
        ("tensor_parallel_size", launch.tensor_parallel_size),
        ("pipeline_parallel_size", launch.pipeline_parallel_size),
        ("enable_prefix_caching", launch.enable_prefix_caching),
        ("enable_chunked_prefill", launch.enable_chunked_prefill),
        ("kv_cache_dtype", launch.kv_cache_dtype),
        ("quantization", launch.quantization),
        ("dtype", launch.dtype),
        ("enforce_eager", launch.enforce_eager),
        ("port", launch.port),
    ]
    rows = [(name, value) for name, value in known if value is not None]
    rows += [(f"env {k}", v) for k, v in sorted(launch.env.items())]
    if launch.unknown_args:
        rows.append(("other arguments", " ".join(launch.unknown_args)))
    source = f' <span class="dim small">from <code>{esc(launch.source)}</code></span>' if launch.source else ""
    if not rows:
        return ""
    return f"<h3>Launch configuration{source}</h3>" + _pairs(rows)


def _server_config(metrics: MetricsFacts) -> str:
    latest = metrics.latest
    if latest is None or not latest.labels:
        return ""
    parts = []
    for name, labels in sorted(latest.labels.items()):
        raw = latest.raw_names.get(name, name)
        parts.append(
            f"<h3>Server configuration from /metrics <code>{esc(raw)}</code></h3>" + _pairs(sorted(labels.items()))
        )
    return "".join(parts)


def _stack(diagnosis: Diagnosis, evidence: EvidenceFacts) -> str:
    parts = []
    if diagnosis.stack is not None:
        lines = "".join(f"<li>{esc(line)}</li>" for line in diagnosis.stack.lines())
        parts.append(f'<ul class="ev" id="stack-lines">{lines}</ul>')
    if evidence.launch is not None:
        parts.append(_launch_details(evidence.launch))
    if evidence.metrics is not None:
        parts.append(_server_config(evidence.metrics))
    return "".join(parts) or (
        "<p>No stack (versions) or launch configuration in the evidence: a bundle keeps them in "
        "<code>config/</code> (<code>llmtriage capture --pid PID</code>).</p>"
    )


def _details(diagnosis: Diagnosis, evidence: EvidenceFacts) -> str:
    parts = []
    if evidence.gpu is not None:
        parts.append(_gpu_details(evidence.gpu))
    if evidence.kernel is not None:
        parts.append(_kernel_details(evidence.kernel))
    if diagnosis.problems:
        parts.append("<h3>Read with problems</h3>" + _capped([esc(p) for p in diagnosis.problems]))
    if diagnosis.inputs:
        parts.append(
            f"<details><summary>{len(diagnosis.inputs):,} inputs read</summary>"
            + _capped([f"<code>{esc(i)}</code>" for i in diagnosis.inputs])
            + "</details>"
        )
    return "".join(parts) or "<p>Nothing more.</p>"
