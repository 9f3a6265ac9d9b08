"""Prometheus text -> normalised metric snapshots, and the arithmetic over them: histogram quantiles,
and with two or more scrapes, windowed quantiles and rates from bucket and counter deltas (resets handled).

A scrape is read line by line, in one pass: a malformed line costs only itself (a problem counts them), and
only the series catalog/metrics.yaml maps are kept, so a scrape of a million foreign series costs its text and
no more. The label sets of the kept series go through prometheus_client's parser (one call per distinct series);
every other line is checked for a metric name and a number and counted, never materialised.
"""

from __future__ import annotations

import math
import re
from collections import defaultdict
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field

from llmtriage import catalog
from llmtriage.facts import Histogram, MetricSnapshot, Problem

# At most this many samples of catalog series are kept from one scrape (a real vLLM scrape has a few hundred;
# more would be a cardinality explosion, whose memory and parse time this bounds). The rest are counted.
MAX_KEPT_SAMPLES = 100_000
# A reader remembers at most this many parsed series (a watch of many servers, each with its own label values).
MAX_CACHED_SERIES = 200_000
# ... and the names of this many other series (a scrape's process_*, http_* ...; a million of them are not kept).
MAX_FOREIGN_SERIES = 4096

# lines_of splits this much text at a time: C speed, and at most this much is held twice.
_SLICE_CHARS = 256 << 10
_METRIC_NAME = re.compile(r"[a-zA-Z_:][a-zA-Z0-9_:]*")

Entry = tuple[dict[str, str], float, float | None]
"""One sample: its labels, its value, and its bucket bound (``le``) when it is a histogram bucket."""

_Head = tuple[str, dict[str, str], float | None]  # a parsed series: its name, its labels, its bucket bound


def catalog_series_names(mapping: catalog.MetricMap) -> frozenset[str]:
    """Every series catalog/metrics.yaml reads (histograms by bucket, sum and count), info metrics included."""
    names: set[str] = set()
    for spec in mapping.specs:
        for name in spec.names:
            if spec.kind == "histogram":
                names.update((f"{name}_bucket", f"{name}_sum", f"{name}_count"))
            else:
                names.add(name)
    for info in mapping.info.values():
        names.update(info)
    return frozenset(names)


def lines_of(text: str) -> Iterator[str]:
    """The lines of ``text``, a slice at a time (``splitlines`` would hold a million of them at once)."""
    start, size, find = 0, len(text), text.find
    while start < size:
        end = find("\n", start + _SLICE_CHARS)
        if end < 0:
            end = size
        yield from text[start:end].split("\n")
        start = end + 1


@dataclass(slots=True)
class _Pass:
    """What one pass over a scrape's lines keeps."""

    by_name: dict[str, list[Entry]] = field(default_factory=lambda: defaultdict(list))
    engines: set[str] = field(default_factory=set)  # whose metric prefix a series carries
    samples: int = 0
    kept: int = 0
    bad: int = 0
    dropped: int = 0


def sample_value(rest: str) -> float | None:
    """The value of ``value`` or ``value timestamp`` after a series; None when it is not a number."""
    if "_" in rest:  # float() reads 1_000; the exposition format does not
        return None
    try:
        return float(rest)
    except ValueError:
        pass
    parts = rest.split()
    if len(parts) != 2:
        return None
    try:
        float(parts[1])
        return float(parts[0])
    except ValueError:
        return None


def _parse_head(head: str) -> _Head | None:
    """A series (name and labels) by prometheus_client's parser; None when it cannot read it."""
    # Imported on the first series read: the package brings its HTTP exposition along (~30 ms of every start-up,
    # which a diagnose of a log alone need not pay).
    from prometheus_client.parser import text_string_to_metric_families

    try:
        for family in text_string_to_metric_families(head + " 0\n"):
            for sample in family.samples:
                labels = dict(sample.labels)
                return sample.name, labels, bucket_bound(labels)
    except (ValueError, TypeError, IndexError, KeyError):
        return None
    return None


def _read(
    lines: Iterable[str],
    wanted: frozenset[str],
    engines: dict[str, str],
    heads: dict[str, _Head | None],
    foreign: dict[str, str],
    redact: Callable[[str], str] | None = None,
) -> _Pass:
    """One pass over a scrape's lines; ``engines`` maps each engine to its metric prefix; ``heads`` remembers the
    series of ``wanted`` names already parsed (across scrapes), each parsed after ``redact``, and ``foreign`` the
    names of the first other series seen."""
    found = _Pass()
    by_name = found.by_name
    unseen = tuple(engines.values())  # the prefixes of the engines no series has named yet
    last_name = ""
    samples = kept = bad = dropped = 0
    for line in lines:
        if not line or line[0] in "# \t\r":
            line = line.strip()
            if not line or line[0] == "#":
                continue
        close = line.rfind("}")
        series = heads.get(line[: close + 1]) if close > 0 else None
        if series is not None:
            # A catalog series this reader has parsed before: only its value is new.
            value = sample_value(line[close + 1 :])
            if value is None:
                bad += 1
                continue
            name = series[0]
        elif close > 0 and (name := foreign.get(line[: close + 1], "")):
            value = sample_value(line[close + 1 :])
            if value is None:
                bad += 1
                continue
        else:
            match = _METRIC_NAME.match(line)
            if match is None:
                if line[0] != "{":  # {"utf-8.name", a="b"} 1: the name quoted among the labels
                    bad += 1
                    continue
                name, end = "", 0
            else:
                name, end = match.group(), match.end()
            if end < len(line) and line[end] == "{":
                if close < end:
                    bad += 1
                    continue
                head = line[: close + 1]
                value = sample_value(line[close + 1 :])
            else:
                head, rest = name, line[end:]
                # else the name goes on with a bad character
                value = sample_value(rest) if rest[:1] in (" ", "\t") else None
            if value is None:
                bad += 1
                continue
            if not name:
                parsed = _parse_head(head)
                if parsed is None:
                    bad += 1
                    continue
                name = parsed[0]
            if name not in wanted:
                if head != name and len(foreign) < MAX_FOREIGN_SERIES:
                    foreign[head] = name
            elif kept < MAX_KEPT_SAMPLES:
                if head in heads:
                    series = heads[head]
                else:
                    if len(heads) >= MAX_CACHED_SERIES:
                        heads.clear()
                    series = heads[head] = _parse_head(redact(head) if redact is not None else head)
                if series is None:
                    bad += 1
                    continue
        samples += 1
        if name != last_name:
            last_name = name
            if unseen and name.startswith(unseen):
                found.engines.update(e for e, prefix in engines.items() if name.startswith(prefix))
                unseen = tuple(prefix for e, prefix in engines.items() if e not in found.engines)
        if series is None:
            if name in wanted:
                dropped += 1
            continue
        if kept >= MAX_KEPT_SAMPLES:
            dropped += 1
            continue
        kept += 1
        by_name[series[0]].append((series[1], value, series[2]))
    found.samples, found.kept, found.bad, found.dropped = samples, kept, bad, dropped
    return found


class ScrapeReader:
    """Reads scrapes into normalised snapshots, remembering every catalog series (name and labels) it has parsed.

    The scrapes of a server repeat the same few hundred series, so after the first one a line costs a lookup and a
    ``float()``: one reader serves all the scrapes of a bundle (report, diagnose, capture) or of a watch. ``redact``
    is applied to each series before it is parsed, once (values are numbers; comments and foreign series are never
    kept).
    """

    def __init__(self, redact: Callable[[str], str] | None = None) -> None:
        self._mapping = catalog.metric_map()
        self._wanted = catalog_series_names(self._mapping)
        self._heads: dict[str, _Head | None] = {}
        self._foreign: dict[str, str] = {}
        self._redact = redact

    def read(self, text: str, source: str, timestamp_s: float | None = None) -> tuple[MetricSnapshot, list[Problem]]:
        """One scrape's text as a snapshot, and what was wrong with it."""
        return self.read_lines(lines_of(text), source, timestamp_s)

    def read_lines(
        self, lines: Iterable[str], source: str, timestamp_s: float | None = None
    ) -> tuple[MetricSnapshot, list[Problem]]:
        """One scrape, given line by line (a file or a stream), as a snapshot, and what was wrong with it."""
        mapping = self._mapping
        found = _read(lines, self._wanted, mapping.engine_prefixes, self._heads, self._foreign, self._redact)
        problems: list[Problem] = []
        if found.bad:
            problems.append(
                Problem(source, f"{found.bad} malformed sample line{'s' if found.bad != 1 else ''} skipped")
            )
        if found.dropped:
            problems.append(
                Problem(
                    source,
                    f"{found.dropped} samples of catalog series beyond the first {MAX_KEPT_SAMPLES} skipped "
                    "(a cardinality explosion?)",
                )
            )
        engine = next((e for e in mapping.engine_prefixes if e in found.engines), None)
        snap = snapshot(found.by_name, mapping, engine, source, timestamp_s, found.samples)
        return snap, problems + unrecognised(snap)


def parse_metrics(text: str, source: str, timestamp_s: float | None = None) -> tuple[MetricSnapshot, list[Problem]]:
    """Parse one scrape into a normalised snapshot (a :class:`ScrapeReader` reads many faster)."""
    return ScrapeReader().read(text, source, timestamp_s)


def parse_metric_lines(
    lines: Iterable[str], source: str, timestamp_s: float | None = None
) -> tuple[MetricSnapshot, list[Problem]]:
    """Parse one scrape, given line by line (a file or a stream), into a normalised snapshot."""
    return ScrapeReader().read_lines(lines, source, timestamp_s)


def has_samples(text: str) -> bool:
    """True when ``text`` holds at least one Prometheus sample line (it stops at the first)."""
    return any(_read((line,), frozenset(), {}, {}, {}).samples for line in lines_of(text))


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
