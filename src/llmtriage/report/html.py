"""The incident report: one self-contained HTML page (inline CSS, inline SVG plots, no script, no network).

``build`` is pure: a diagnosis and its evidence in, the page as a string out; only the CLI writes it. Order:
the verdict, the path through the flowchart, the ranked causes with their evidence and fixes, the plots over
time, the load test, what was missing and how to collect it, what the runbook has seen before, then the
details (GPUs, kernel, launch, read problems). Every string from the evidence is escaped (:func:`esc`).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

from llmtriage import __version__, catalog
from llmtriage.catalog import Thresholds, Tree
from llmtriage.diagnose.model import INCONCLUSIVE_NOTE, Diagnosis, Evidence, PathStep
from llmtriage.facts import BenchFigures, Citation, GpuFacts, GpuSample, KernelFacts, LaunchConfig, MetricsFacts
from llmtriage.facts import Evidence as EvidenceFacts
from llmtriage.report import svg, timeseries
from llmtriage.report.bench import BenchRun
from llmtriage.report.markup import esc, esc_code

MAX_LISTED = 50
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
main{max-width:1080px;margin:0 auto;padding:20px 24px 60px}
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
.verdict p{margin:6px 0}
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
.why{font-size:13px;color:var(--dim);margin:2px 0 2px 4px}
.cause{border:1px solid var(--line);border-radius:6px;padding:10px 14px;margin:10px 0}
.cause h3{margin:0 0 6px}.kind{font-size:12px;padding:1px 6px;border-radius:8px;background:var(--soft);color:var(--dim)}
.kind.hardware{background:#fde8e6;color:var(--bad)}
.conf{display:inline-block;width:120px;height:8px;background:var(--soft);border-radius:4px;vertical-align:middle;
overflow:hidden}.conf b{display:block;height:100%;background:var(--on)}
ul.ev,ol.fix{margin:4px 0 8px;padding-left:22px}ul.ev li{margin:2px 0}
.excerpt{white-space:pre-wrap;overflow-wrap:anywhere}
.note{color:var(--dim);font-style:italic}
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
"""


def build(
    diagnosis: Diagnosis,
    evidence: EvidenceFacts,
    bench: BenchRun | None = None,
    thresholds: Thresholds | None = None,
) -> str:
    """The whole report page. ``bench``: the bundle's load test, when one ran; ``thresholds``: the ones used."""
    limits = thresholds or catalog.thresholds()
    charts = timeseries.charts(evidence.gpu, evidence.metrics, evidence.logs, limits)
    title = f"llmtriage: {diagnosis.symptom_class} — {diagnosis.origin}"
    sections = [
        _verdict(diagnosis),
        _section("flowchart", "Path through the flowchart", _flowchart(catalog.tree(), diagnosis.path)),
        _section("causes", "Causes, most likely first", _causes(diagnosis)),
        _section("plots", "Over time", _plots(charts)),
        _section("bench", "Load test", _bench(bench, evidence)),
        _section("missing", "Not in the evidence: collect it next time", _missing(diagnosis)),
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
            ("missing", "Missing"),
            ("runbook", "Seen before"),
            ("details", "Details"),
        )
    )
    return (
        "<!DOCTYPE html>\n"
        '<html lang="en"><head><meta charset="utf-8">'
        "<meta http-equiv=\"Content-Security-Policy\" content=\"default-src 'none'; style-src 'unsafe-inline'\">"
        '<meta name="viewport" content="width=device-width,initial-scale=1">'
        f'<meta name="generator" content="llmtriage {esc(__version__)}">'
        f"<title>{esc(title)}</title><style>{CSS}</style></head>\n<body><main>"
        f'<h1>llmtriage incident report</h1><div class="dim small">evidence: <code>{esc(diagnosis.origin)}</code>'
        f"{_engine(diagnosis)}</div>{_stack(diagnosis)}<nav>{nav}</nav>\n"
        + "\n".join(sections)
        + f"\n<footer>llmtriage {esc(__version__)}. The page is self-contained: no scripts, no network.</footer>"
        "</main></body></html>\n"
    )


def _section(anchor: str, heading: str, body: str) -> str:
    return f'<section id="{anchor}"><h2>{esc(heading)}</h2>{body}</section>'


def _engine(diagnosis: Diagnosis) -> str:
    if not diagnosis.engine:
        return ""
    version = f" {diagnosis.engine_version}" if diagnosis.engine_version else ""
    return f" · engine: {esc(diagnosis.engine + version)}"


def _stack(diagnosis: Diagnosis) -> str:
    if diagnosis.stack is None:
        return ""
    lines = "".join(f"<div>{esc(line)}</div>" for line in diagnosis.stack.lines())
    return f'<div class="dim small" id="stack">stack: {lines}</div>'


def _percent(confidence: float) -> str:
    return f"{confidence * 100:.0f}%"


# ---------------------------------------------------------------- verdict


def _verdict(diagnosis: Diagnosis) -> str:
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
            lines.append(f"<p>First fix: {esc_code(top.fixes[0])}</p>")
        if len(diagnosis.causes) > 1:
            others = ", ".join(f"{esc(c.title)} ({_percent(c.confidence)})" for c in diagnosis.causes[1:])
            lines.append(f'<p class="small">Also: {others}</p>')
    elif diagnosis.healthy:
        lines.append("<p>Nothing wrong found in the evidence.</p>")
    elif diagnosis.symptom_class == "inconclusive":
        lines.append(f"<p>{esc(INCONCLUSIVE_NOTE)}</p>")
    else:
        lines.append("<p>No cause could be named from this evidence: see what was missing below.</p>")
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


def _evidence(evidence: Evidence) -> str:
    note = f' <span class="note">— {esc(evidence.note)}</span>' if evidence.note else ""
    return _citation(evidence.citation) + note


def _flowchart(tree: Tree, path: Sequence[PathStep]) -> str:
    steps = {step.question_id: step for step in path}

    def answers(question_id: str, step: PathStep | None) -> str:
        """The answers of a question as a list; each leads to a class or, on the same line, the next question."""
        items = []
        for branch in tree.questions[question_id].branches:
            taken = step is not None and branch.answer == step.answer
            cls = "taken" if taken else ("off" if step is not None else "")
            why = "".join(f'<div class="why">{_evidence(e)}</div>' for e in step.evidence[:2]) if taken and step else ""
            if branch.symptom_class is not None:
                leaf = tree.classes.get(branch.symptom_class, branch.symptom_class)
                target = f'<span class="leaf" title="{esc(branch.symptom_class)}">{esc(leaf)}</span>{why}'
            elif branch.next is not None:
                following = steps.get(branch.next) if taken else None
                target = (
                    f'<span class="node">{esc(tree.questions[branch.next].text)}</span>{why}'
                    f"{answers(branch.next, following)}"
                )
            else:
                continue
            items.append(f'<li class="{cls}"><span class="ans">{esc(branch.answer)}</span> → {target}</li>')
        return f"<ul>{''.join(items)}</ul>"

    note = (
        '<p class="small dim">The path taken is in blue, with the evidence for each answer; '
        "hardware causes are checked on every path and rank above configuration causes.</p>"
    )
    root = f'<span class="node">{esc(tree.questions[tree.root].text)}</span>'
    return f'{note}<ul class="tree"><li class="taken">{root}{answers(tree.root, steps.get(tree.root))}</li></ul>'


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
        evidence = "".join(f"<li>{_evidence(e)}</li>" for e in cause.evidence)
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


def _figure(chart: timeseries.Chart) -> str:
    caption = f"{chart.caption}; {chart.samples:,} samples" if chart.samples > 1 else chart.caption
    return (
        f'<figure id="plot-{esc(chart.id)}"><figcaption>{esc(chart.title)} '
        f'<span class="dim">({esc(chart.unit)})</span></figcaption>'
        f'{svg.line_chart(chart)}{svg.legend(chart)}<p class="cap">{esc(caption)}</p></figure>'
    )


def _plots(charts: Sequence[timeseries.Chart]) -> str:
    lacking = []
    if all(c.id.startswith("gpu-") for c in charts):
        lacking.append("scrapes of /metrics over time (latency, requests, KV cache, throughput)")
    if not any(c.id.startswith("gpu-") for c in charts):
        lacking.append("GPU samples over time (memory, power, temperature, clocks)")
    body = "".join(_figure(c) for c in charts)
    if lacking:
        body += (
            f"<p>No {' and no '.join(esc(x) for x in lacking)} in the evidence. "
            f"Collect them with:</p><pre>{esc(COLLECT_SERIES)}</pre>"
        )
    return body


# ---------------------------------------------------------------- load test


def _bench(run: BenchRun | None, evidence: EvidenceFacts) -> str:
    figures = evidence.bench or (evidence.logs.bench if evidence.logs is not None else None)
    parts = []
    if run is not None:
        facts = [
            ("run", run.label),
            ("load", run.load),
            ("completed", None if run.requests_completed is None else f"{run.requests_completed:,}"),
            ("failed", None if run.requests_failed is None else f"{run.requests_failed:,}"),
            (
                "output tokens/s",
                None if run.output_token_throughput_per_s is None else f"{run.output_token_throughput_per_s:,.1f}",
            ),
        ]
        shown = " · ".join(f"{name}: <strong>{esc(value)}</strong>" for name, value in facts if value is not None)
        parts.append(f"<p>From <code>{esc(run.source)}</code>{': ' + shown if shown else ''}</p>")
        if run.distributions:
            parts.append(_stats_table(run))
            for d in run.distributions:
                s = d.stats
                markers = [
                    svg.Marker(value, label)
                    for value, label in ((s.p50, "p50"), (s.p95, "p95"), (s.p99, "p99"))
                    if value is not None
                ]
                parts.append(
                    f'<figure id="bench-{esc(d.name.split()[0].lower())}"><figcaption>{esc(d.name)} distribution '
                    f'<span class="dim">(ms)</span></figcaption>{svg.histogram(d.name, "ms", d.values_ms, markers)}'
                    f'<p class="cap">{len(d.values_ms):,} values; bars up to the 99.5th percentile, the rest in '
                    "the last bar; dashed lines: p50, p95, p99</p></figure>"
                )
        else:
            parts.append("<p>No per-request latencies (<code>requests.csv</code>) with this run.</p>")
        parts.extend(f'<p class="small dim">{esc(p.source)}: {esc(p.message)}</p>' for p in run.problems)
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


def _details(diagnosis: Diagnosis, evidence: EvidenceFacts) -> str:
    parts = []
    if evidence.gpu is not None:
        parts.append(_gpu_details(evidence.gpu))
    if evidence.kernel is not None:
        parts.append(_kernel_details(evidence.kernel))
    if evidence.launch is not None:
        parts.append(_launch_details(evidence.launch))
    if evidence.metrics is not None:
        parts.append(_server_config(evidence.metrics))
    if diagnosis.problems:
        parts.append("<h3>Read with problems</h3>" + _capped([esc(p) for p in diagnosis.problems]))
    if diagnosis.inputs:
        parts.append(
            f"<details><summary>{len(diagnosis.inputs):,} inputs read</summary>"
            + _capped([f"<code>{esc(i)}</code>" for i in diagnosis.inputs])
            + "</details>"
        )
    return "".join(parts) or "<p>Nothing more.</p>"
