"""Prometheus text -> normalised metric snapshots, and the arithmetic over them: histogram quantiles,
and with two or more scrapes, windowed quantiles and rates from bucket and counter deltas (resets handled).

Parsing goes through prometheus_client's parser one metric family at a time, so one malformed family
costs only itself. Names are mapped to engine-independent ones by catalog/metrics.yaml.
"""

from __future__ import annotations

import math
import re
from collections import defaultdict
from collections.abc import Iterable
from dataclasses import dataclass

from prometheus_client.parser import text_string_to_metric_families

from llmtriage import catalog
from llmtriage.facts import Histogram, MetricSnapshot, Problem

_FAMILY_START = re.compile(r"^# HELP ", re.MULTILINE)


@dataclass(frozen=True, slots=True)
class _Sample:
    name: str
    labels: dict[str, str]
    value: float


def _samples(text: str, source: str, problems: list[Problem]) -> list[_Sample]:
    starts = [m.start() for m in _FAMILY_START.finditer(text)]
    if not starts or starts[0] != 0:
        starts.insert(0, 0)
    blocks = [text[a:b] for a, b in zip(starts, [*starts[1:], len(text)], strict=True)]
    samples: list[_Sample] = []
    bad = 0
    for block in blocks:
        if not block.strip():
            continue
        try:
            parsed = [
                _Sample(s.name, dict(s.labels), float(s.value))
                for family in text_string_to_metric_families(block)
                for s in family.samples
            ]
        except (ValueError, TypeError, IndexError, KeyError):
            bad += 1
            continue
        samples.extend(parsed)
    if bad:
        problems.append(Problem(source, f"{bad} malformed metric famil{'y' if bad == 1 else 'ies'} skipped"))
    return samples


Entry = tuple[dict[str, str], float, float | None]
"""One sample: its labels, its value, and its bucket bound (``le``) when it is a histogram bucket."""


def parse_metrics(text: str, source: str, timestamp_s: float | None = None) -> tuple[MetricSnapshot, list[Problem]]:
    """Parse one scrape into a normalised snapshot."""
    problems: list[Problem] = []
    samples = _samples(text, source, problems)
    by_name: dict[str, list[Entry]] = defaultdict(list)
    for s in samples:
        by_name[s.name].append((s.labels, s.value, bucket_bound(s.labels)))
    mapping = catalog.metric_map()
    engine = engine_of(by_name, mapping)
    snap = snapshot(by_name, mapping, engine, source, timestamp_s, len(samples))
    return snap, problems + unrecognised(snap)


def engine_of(names: Iterable[str], mapping: catalog.MetricMap) -> str | None:
    """The first engine, in catalog/metrics.yaml's order, whose metric prefix one of ``names`` carries."""
    names = list(names)
    return next((e for e, prefix in mapping.engine_prefixes.items() if any(n.startswith(prefix) for n in names)), None)


def snapshot(
    by_name: dict[str, list[Entry]],
    mapping: catalog.MetricMap,
    engine: str | None,
    source: str,
    timestamp_s: float | None,
    sample_count: int,
) -> MetricSnapshot:
    """The normalised snapshot of one scrape's samples, by series name (catalog/metrics.yaml's names)."""
    snap = MetricSnapshot(source=source, timestamp_s=timestamp_s, engine=engine, sample_count=sample_count)
    for spec in mapping.specs:
        for name in spec.names:
            entries = by_name.get(name + "_bucket" if spec.kind == "histogram" else name)
            if not entries:
                continue
            if spec.labels:
                entries = [e for e in entries if _labels_match(e[0], spec.labels)]
                if not entries:
                    continue
            snap.raw_names[spec.canonical] = name
            if spec.kind == "histogram":
                hist = _histogram(name, entries, by_name)
                if hist is not None:
                    snap.histograms[spec.canonical] = hist
            else:
                values = [e[1] for e in entries if not math.isnan(e[1])]
                if not values:
                    continue
                value = max(values) if spec.aggregate == "max" else sum(values)
                (snap.gauges if spec.kind == "gauge" else snap.counters)[spec.canonical] = value
            break
    for canonical, names in mapping.info.items():
        for name in names:
            found = by_name.get(name)
            if found:
                snap.labels[canonical] = dict(found[0][0])
                snap.raw_names[canonical] = name
                break
    return snap


def unrecognised(snap: MetricSnapshot) -> list[Problem]:
    """The problem of a scrape that has samples but none an inference server in the catalog writes."""
    if snap.sample_count and not snap.raw_names and snap.engine is None:
        return [Problem(snap.source, "no known inference-server metrics in this scrape")]
    return []


def bucket_bound(labels: dict[str, str]) -> float | None:
    """The ``le`` bound of a histogram bucket; None for other samples and unreadable bounds."""
    try:
        bound = float(labels.get("le", "nan"))
    except ValueError:
        return None
    return None if math.isnan(bound) else bound


def _labels_match(labels: dict[str, str], wanted: tuple[tuple[str, str], ...]) -> bool:
    return all(labels.get(k, "").startswith(v) for k, v in wanted)


def _histogram(name: str, buckets: list[Entry], by_name: dict[str, list[Entry]]) -> Histogram | None:
    merged: dict[float, float] = defaultdict(float)
    for _, value, bound in buckets:
        if bound is not None:
            merged[bound] += value
    if not merged or math.inf not in merged:
        return None
    total = sum(e[1] for e in by_name.get(name + "_sum", []))
    count = sum(e[1] for e in by_name.get(name + "_count", [])) or merged[math.inf]
    return Histogram(buckets=tuple(sorted(merged.items())), total=total, count=count)


# ---------------------------------------------------------------- arithmetic


def quantile(hist: Histogram | None, q: float) -> float | None:
    """Prometheus' histogram_quantile: linear interpolation inside the bucket holding rank q*count."""
    if hist is None or hist.count <= 0 or not hist.buckets:
        return None
    rank = q * hist.buckets[-1][1]
    lower_bound, lower_count = 0.0, 0.0
    for upper, cumulative in hist.buckets:
        if cumulative >= rank:
            if math.isinf(upper):
                # The rank falls in +Inf: the best answer is the largest finite bound.
                return lower_bound
            if cumulative == lower_count:
                return upper
            return lower_bound + (upper - lower_bound) * (rank - lower_count) / (cumulative - lower_count)
        lower_bound, lower_count = upper, cumulative
    return lower_bound


def mean(hist: Histogram | None) -> float | None:
    """sum / count."""
    if hist is None or hist.count <= 0:
        return None
    return hist.total / hist.count


def histogram_delta(old: Histogram | None, new: Histogram | None) -> Histogram | None:
    """Observations between two scrapes; a reset (counts falling, buckets changed) restarts from ``new``."""
    if new is None:
        return None
    if old is None:
        return new
    old_bounds = [b for b, _ in old.buckets]
    new_bounds = [b for b, _ in new.buckets]
    if old_bounds != new_bounds or new.count < old.count:
        return new
    deltas = [(b, n - o) for (b, n), (_, o) in zip(new.buckets, old.buckets, strict=True)]
    if any(d < 0 for _, d in deltas):
        return new
    return Histogram(buckets=tuple(deltas), total=max(0.0, new.total - old.total), count=new.count - old.count)


# Time per output token, as an SLO compares it: the per-request TPOT histogram when it has observations (it is
# recorded when a request finishes), else the inter-token latency, the same quantity token by token.
PER_TOKEN_HISTOGRAMS = ("tpot_seconds", "itl_seconds")


def counter_delta(old: float | None, new: float | None) -> float | None:
    """Increase of a counter between two scrapes; a reset (value falling) counts from zero."""
    if new is None:
        return None
    if old is None:
        return None
    return new if new < old else new - old


@dataclass(frozen=True, slots=True)
class Window:
    """What happened between the first and the last scrape."""

    first: MetricSnapshot
    last: MetricSnapshot
    seconds: float | None

    def histogram(self, name: str) -> Histogram | None:
        """Observations of histogram ``name`` inside the window."""
        return histogram_delta(self.first.histograms.get(name), self.last.histograms.get(name))

    def delta(self, name: str, *, appeared_from_zero: bool = False) -> float | None:
        """Increase of counter ``name`` inside the window. With ``appeared_from_zero``, a counter the first scrape
        lacks started inside the window (labelled counters such as the 5xx count appear on their first event)."""
        old = self.first.counters.get(name)
        if old is None and appeared_from_zero and self.first.sample_count:
            old = 0.0
        return counter_delta(old, self.last.counters.get(name))

    def rate(self, name: str) -> float | None:
        """Per-second increase of counter ``name``; None without timestamps."""
        d = self.delta(name)
        if d is None or not self.seconds:
            return None
        return d / self.seconds


def window(snapshots: list[MetricSnapshot]) -> Window | None:
    """The window spanned by two or more scrapes, else None."""
    if len(snapshots) < 2:
        return None
    first, last = snapshots[0], snapshots[-1]
    seconds = None
    if first.timestamp_s is not None and last.timestamp_s is not None and last.timestamp_s > first.timestamp_s:
        seconds = last.timestamp_s - first.timestamp_s
    return Window(first=first, last=last, seconds=seconds)
