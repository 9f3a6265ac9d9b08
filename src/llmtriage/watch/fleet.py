"""Diagnose every inference server Prometheus scrapes: range queries of the catalog's series, turned into one
snapshot per instance and step, each instance diagnosed like a live server, worst first.

The series come back from Prometheus as values; each step's samples go through the snapshot builder every scrape
goes through (:func:`llmtriage.parse.prom.snapshot`), so names and label filters follow catalog/metrics.yaml
exactly.
"""

from __future__ import annotations

import json
import math
import time
import urllib.parse
from collections import defaultdict
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from llmtriage import catalog
from llmtriage.catalog import Thresholds
from llmtriage.diagnose.engine import diagnose
from llmtriage.diagnose.model import Diagnosis
from llmtriage.errors import UnavailableError, UsageError
from llmtriage.evidence import live
from llmtriage.facts import Evidence, MetricsFacts, MetricSnapshot, Problem
from llmtriage.parse import prom
from llmtriage.urls import check_url

SCHEMA_VERSION = 1
STEPS_PER_WINDOW = 60  # fine enough to see a stall of stall_seconds begin inside a 5-minute window
MIN_STEP_S = 1.0
MAX_RESPONSE_BYTES = 256 << 20
# Worst first: a stalled engine keeps its place behind the load balancer (/health answers) and eats requests.
SEVERITY_ORDER = (
    "engine_stalled",
    "down",
    "hardware_fault",
    "runtime_oom",
    "request_failure",
    "startup_oom",
    "startup_failure",
    "slow_ttft",
    "slow_generation",
    "request_rejected",
    "no_data",
    "healthy",
)

InstanceKey = tuple[str, str]  # (job, instance)


@dataclass(frozen=True, slots=True)
class RangeSeries:
    """One series of a range query: its labels and (time, value) points."""

    labels: dict[str, str]
    points: tuple[tuple[float, float], ...]


class PrometheusClient:
    """Prometheus's HTTP API (``/api/v1/query_range``, ``/api/v1/query``); every failure is an UnavailableError,
    a rejected query a UsageError. Each call has a total deadline and a size cap (:func:`llmtriage.evidence.live.get`).
    """

    def __init__(self, base_url: str, timeout_s: float = 30.0) -> None:
        if not base_url.startswith(("http://", "https://")):
            raise UsageError(f"--prometheus {base_url}: not an http:// URL", "e.g. --prometheus http://127.0.0.1:9090")
        check_url(base_url, "--prometheus", "e.g. --prometheus http://127.0.0.1:9090")
        self.base_url = base_url.rstrip("/")
        self.timeout_s = timeout_s

    def api(self, path: str, params: dict[str, str]) -> Any:
        """The `data` of a GET of the API at `path`."""
        url = f"{self.base_url}{path}?{urllib.parse.urlencode(params)}"
        try:
            answer = live.get(url, self.timeout_s, MAX_RESPONSE_BYTES, {"Accept": "application/json"})
        except live.FetchError as e:
            raise UnavailableError(
                f"Prometheus at {self.base_url} cannot be read: {e.reason}",
                "is Prometheus running, and is the URL right?",
            ) from e
        if answer.status in (400, 422):
            raise UsageError(
                f"Prometheus rejected the query: {_error_detail(answer.body)}",
                "check --selector, e.g. '{job=\"vllm\"}'",
            )
        if not answer.ok:
            raise UnavailableError(f"Prometheus at {self.base_url}: HTTP {answer.status} {_error_detail(answer.body)}")
        if answer.truncated:
            raise UnavailableError(
                f"Prometheus at {self.base_url} answered more than {MAX_RESPONSE_BYTES >> 20} MiB",
                "narrow --selector or --window",
            )
        doc = _json(answer.body)
        if doc is None:
            raise UnavailableError(
                f"{self.base_url} did not answer as Prometheus's API (not JSON, or nested too deeply)"
            )
        if not isinstance(doc, dict) or doc.get("status") != "success":
            error = doc.get("error") if isinstance(doc, dict) else doc
            raise UnavailableError(f"Prometheus at {self.base_url}: {str(error)[:200]}")
        return doc.get("data")

    def query_range(self, expr: str, start_s: float, end_s: float, step_s: float) -> list[RangeSeries]:
        """The matrix of ``expr`` from ``start_s`` to ``end_s`` every ``step_s``."""
        data = self.api(
            "/api/v1/query_range",
            {"query": expr, "start": f"{start_s:.3f}", "end": f"{end_s:.3f}", "step": f"{step_s:g}"},
        )
        return self._shaped(_matrix, data)

    def query(self, expr: str, at_s: float | None = None) -> list[RangeSeries]:
        """The instant vector of ``expr`` (each series with one point)."""
        params = {"query": expr} if at_s is None else {"query": expr, "time": f"{at_s:.3f}"}
        return self._shaped(_vector, self.api("/api/v1/query", params))

    def _shaped(self, read: Callable[[Any], list[RangeSeries]], data: Any) -> list[RangeSeries]:
        try:
            return read(data)
        except (AttributeError, TypeError, ValueError) as e:
            raise UnavailableError(
                f"Prometheus at {self.base_url} answered a result of an unknown shape ({type(e).__name__}: {e})"[:300],
                "is this Prometheus's URL?",
            ) from e


def _json(body: bytes) -> Any:
    """The document in ``body``; None when it is not JSON, or nests too deeply for the parser."""
    try:
        return json.loads(body)
    except (json.JSONDecodeError, UnicodeDecodeError, RecursionError):
        return None


def _labels(metric: Any) -> dict[str, str]:
    if not isinstance(metric, dict):
        raise TypeError(f"labels are {type(metric).__name__}, not an object")
    return {str(k): str(v) for k, v in metric.items()}


def _matrix(data: Any) -> list[RangeSeries]:
    if not isinstance(data, dict) or data.get("resultType") != "matrix":
        return []
    return [
        RangeSeries(
            _labels(item.get("metric") or {}), tuple((float(t), _float(v)) for t, v in item.get("values") or [])
        )
        for item in data.get("result") or []
    ]


def _vector(data: Any) -> list[RangeSeries]:
    if not isinstance(data, dict) or data.get("resultType") != "vector":
        return []
    result = []
    for item in data.get("result") or []:
        t, v = item.get("value") or [0, "NaN"]
        result.append(RangeSeries(_labels(item.get("metric") or {}), ((float(t), _float(v)),)))
    return result


def _float(text: Any) -> float:
    try:
        return float(text)
    except (TypeError, ValueError):
        return math.nan


def _error_detail(body: bytes) -> str:
    doc = _json(body[:4096])
    if doc is None:
        return live.excerpt(body)
    return (str(doc.get("error", doc)) if isinstance(doc, dict) else str(doc))[:200]


# ---------------------------------------------------------------- snapshots from range queries


def selector_matchers(selector: str | None) -> str:
    """``'{job="vllm"}'`` -> ``'job="vllm"'`` (empty for none)."""
    if not selector:
        return ""
    text = selector.strip()
    if not (text.startswith("{") and text.endswith("}")):
        raise UsageError(f"--selector {selector}: not a label selector", "e.g. --selector '{job=\"vllm\"}'")
    return text[1:-1].strip().rstrip(",")


def catalog_series_regex() -> str:
    """A ``__name__`` regex of every series catalog/metrics.yaml reads (histograms by bucket, sum and count)."""
    return "|".join(sorted(prom.catalog_series_names(catalog.metric_map())))


def _key(labels: dict[str, str]) -> InstanceKey:
    return labels.get("job", ""), labels.get("instance", "")


def instance_snapshots(
    matrix: list[RangeSeries], source: str
) -> tuple[dict[InstanceKey, list[MetricSnapshot]], dict[InstanceKey, list[Problem]]]:
    """One snapshot per instance and step from a range query of the catalog's series, oldest first."""
    by_instance: dict[InstanceKey, dict[float, dict[str, list[prom.Entry]]]] = defaultdict(
        lambda: defaultdict(lambda: defaultdict(list))
    )
    for series in matrix:
        labels = {k: v for k, v in series.labels.items() if k != "__name__"}
        entries = by_instance[_key(series.labels)]
        for t, value in series.points:
            entries[t][series.labels.get("__name__", "")].append((labels, value, prom.bucket_bound(labels)))
    mapping = catalog.metric_map()
    result: dict[InstanceKey, list[MetricSnapshot]] = {}
    problems: dict[InstanceKey, list[Problem]] = defaultdict(list)
    for key, steps in by_instance.items():
        snaps = []
        for t in sorted(steps):
            by_name = steps[t]
            name = f"{source} {key[1]} @{t:.0f}"
            engine = prom.engine_of(by_name, mapping)
            snap = prom.snapshot(by_name, mapping, engine, name, t, sum(map(len, by_name.values())))
            problems[key].extend(prom.unrecognised(snap))
            snaps.append(snap)
        result[key] = snaps
    return result, problems


# ---------------------------------------------------------------- the fleet's diagnosis


@dataclass(slots=True)
class InstanceReport:
    """One instance: whether Prometheus can scrape it, and the diagnosis of its window."""

    job: str
    instance: str
    up: bool | None
    down_since_s: float | None
    snapshots: int
    diagnosis: Diagnosis | None
    problems: list[str] = field(default_factory=list)

    @property
    def state(self) -> str:
        """``down``, ``no_data``, or the symptom class of the diagnosis."""
        if self.up is False:
            return "down"
        if self.diagnosis is None:
            return "no_data"
        return self.diagnosis.symptom_class

    @property
    def rank(self) -> int:
        """Position in :data:`SEVERITY_ORDER` (0 is the worst)."""
        state = self.state
        return SEVERITY_ORDER.index(state) if state in SEVERITY_ORDER else len(SEVERITY_ORDER)

    def to_dict(self) -> dict[str, Any]:
        """JSON form."""
        return {
            "job": self.job,
            "instance": self.instance,
            "state": self.state,
            "up": self.up,
            "down_since_s": self.down_since_s,
            "snapshots": self.snapshots,
            "diagnosis": self.diagnosis.to_dict() if self.diagnosis is not None else None,
            "problems": list(self.problems),
        }


@dataclass(slots=True)
class FleetReport:
    """Every instance, worst first."""

    prometheus_url: str
    selector: str | None
    window_s: float
    end_s: float
    instances: list[InstanceReport]

    @property
    def healthy(self) -> bool:
        """True when every instance is up and healthy."""
        return all(r.state == "healthy" for r in self.instances)

    def to_dict(self) -> dict[str, Any]:
        """The JSON document of ``diagnose --prometheus --format json``."""
        return {
            "schema_version": SCHEMA_VERSION,
            "prometheus": self.prometheus_url,
            "selector": self.selector,
            "window_s": self.window_s,
            "end_s": self.end_s,
            "instances": [r.to_dict() for r in self.instances],
        }


def _up_state(series: RangeSeries) -> tuple[bool | None, float | None]:
    """Whether the last point of ``up`` is 1, and since when it has been 0."""
    points = [(t, v) for t, v in series.points if not math.isnan(v)]
    if not points:
        return None, None
    if points[-1][1] >= 1:
        return True, None
    since = points[-1][0]
    for t, v in reversed(points):
        if v >= 1:
            break
        since = t
    return False, since


def stalled_tail(snaps: list[MetricSnapshot], stall_s: float) -> list[MetricSnapshot] | None:
    """The trailing scrapes over which requests ran or waited and no token was generated, when they span at least
    ``stall_s``: a stall that began inside the window, which the whole window's token delta would hide."""
    last = snaps[-1]
    if "generation_tokens" not in last.counters:
        return None
    if (last.gauges.get("running") or 0.0) + (last.gauges.get("waiting") or 0.0) <= 0:
        return None
    moving = ("generation_tokens", "decode_steps")
    start = len(snaps) - 1
    while start > 0 and all(snaps[start - 1].counters.get(n) == last.counters.get(n) for n in moving):
        start -= 1
    first_s, last_s = snaps[start].timestamp_s, last.timestamp_s
    if first_s is None or last_s is None or last_s - first_s < stall_s:
        return None
    return snaps[start:]


def diagnose_fleet(
    client: PrometheusClient,
    selector: str | None,
    window_s: float,
    thresholds: Thresholds,
    end_s: float | None = None,
) -> FleetReport:
    """Diagnose every instance over the last ``window_s`` seconds, worst first."""
    end_s = time.time() if end_s is None else end_s
    start_s = end_s - window_s
    step_s = max(window_s / STEPS_PER_WINDOW, MIN_STEP_S)
    matchers = selector_matchers(selector)
    extra = f", {matchers}" if matchers else ""
    matrix = client.query_range(f'{{__name__=~"{catalog_series_regex()}"{extra}}}', start_s, end_s, step_s)
    snapshots, problems = instance_snapshots(matrix, client.base_url)
    up_states = {_key(s.labels): _up_state(s) for s in client.query_range(f"up{{{matchers}}}", start_s, end_s, step_s)}
    keys = set(snapshots) | ({k for k, (up, _) in up_states.items() if up is not None} if matchers else set())
    reports = []
    for key in keys:
        snaps = snapshots.get(key, [])
        up, down_since = up_states.get(key, (None, None))
        diagnosis = None
        own = [f"{p.source}: {p.message}" for p in problems.get(key, [])]
        if snaps:
            scene = stalled_tail(snaps, thresholds.stall_seconds) or snaps
            evidence = Evidence(
                origin=f"{key[1]} via {client.base_url}",
                metrics=MetricsFacts(snapshots=scene),
                read=[f"Prometheus range query, {len(scene)} steps of {step_s:g} s"],
            )
            diagnosis = diagnose(evidence, thresholds)
        reports.append(InstanceReport(key[0], key[1], up, down_since, len(snaps), diagnosis, own))
    reports.sort(key=lambda r: (r.rank, r.job, r.instance))
    return FleetReport(client.base_url, selector, window_s, end_s, reports)


def render_line(report: InstanceReport, end_s: float) -> str:
    """One line per instance: state, instance, the top cause with its first evidence."""
    name = f"{report.job}/{report.instance}" if report.job else report.instance
    diagnosis = report.diagnosis
    if report.up is False:
        ago = f" {max(0.0, end_s - report.down_since_s):.0f} s ago" if report.down_since_s is not None else ""
        before = f"; before: {_summary(diagnosis)}" if diagnosis is not None else ""
        return f"DOWN       {name}  target down{ago} (up == 0){before}"
    if diagnosis is None:
        return f"NO DATA    {name}  no engine metrics in the window"
    return f"{report.state.upper():<10} {name}  {_summary(diagnosis)}"


def _summary(diagnosis: Diagnosis) -> str:
    if diagnosis.healthy or not diagnosis.causes:
        return diagnosis.symptom_title
    top = diagnosis.causes[0]
    evidence = top.evidence[0].note if top.evidence and top.evidence[0].note else ""
    return f"{top.id} ({top.confidence:.0%})" + (f": {evidence}" if evidence else "")
