"""The series one engine version exposes for each catalog metric, and the shape of the alerts built on them.

catalog/metrics.yaml lists every name a metric has had (newest first); watch/signals.yaml says in which versions
each name is visible, the histogram buckets, and the error and preemption signals of each engine. Rules,
dashboards and fleet queries are generated from what this module resolves, never written by hand.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import Any

from llmtriage import catalog
from llmtriage.errors import UsageError

SCHEMA_VERSION = 1
_VERSION = re.compile(r"^v?(\d+)\.(\d+)(?:\.(\d+))?$")

Version = tuple[int, int, int]


def parse_version(text: str) -> Version:
    """``'0.10'`` -> (0, 10, 0); ``'v0.9.2'`` -> (0, 9, 2)."""
    m = _VERSION.match(text.strip())
    if m is None:
        raise UsageError(f"not an engine version: {text!r}", "use MAJOR.MINOR[.PATCH], e.g. 0.10 or 0.9.2")
    return int(m.group(1)), int(m.group(2)), int(m.group(3) or 0)


@dataclass(frozen=True, slots=True)
class Visibility:
    """The versions in which a series name is scraped: ``since`` inclusive, ``until`` exclusive."""

    since: Version | None = None
    until: Version | None = None
    exposed: bool = True

    def visible(self, version: Version | None) -> bool:
        """Visible in ``version``; None is the newest release."""
        if not self.exposed:
            return False
        if version is None:
            return self.until is None
        return (self.since is None or version >= self.since) and (self.until is None or version < self.until)


@dataclass(frozen=True, slots=True)
class Series:
    """A catalog metric as one engine version exposes it."""

    canonical: str
    kind: str  # gauge | counter | histogram
    name: str  # the scraped name (histograms without _bucket)
    labels: tuple[tuple[str, str], ...]  # label value prefixes the catalog keeps
    aggregate: str  # sum | max
    buckets: tuple[float, ...]  # histograms: the finite upper bounds (le); empty when not known


@dataclass(frozen=True, slots=True)
class EngineSignals:
    """Every catalog metric one engine version exposes, and which of them measure errors and preemption."""

    engine: str
    version: str | None
    series: dict[str, Series]
    error_bad: Series | None
    error_total: Series | None
    preemption: Series | None
    slo_histograms: dict[str, Series]  # ttft_p95 / tpot_p95 -> the histogram measuring it

    def get(self, canonical: str) -> Series | None:
        """The series of ``canonical``, if this version has one."""
        return self.series.get(canonical)

    @property
    def described(self) -> str:
        """``vllm 0.10`` or ``vllm (newest)``."""
        return f"{self.engine} {self.version}" if self.version else f"{self.engine} (newest)"


@dataclass(frozen=True, slots=True)
class BurnWindow:
    """One pair of windows of a multiwindow burn-rate alert."""

    long: str
    short: str
    factor: float


@dataclass(frozen=True, slots=True)
class AlertShape:
    """How the alerts are built (watch/signals.yaml ``alerts``); durations in PromQL syntax."""

    group_by: tuple[str, ...]
    burn_rates: dict[str, tuple[BurnWindow, ...]]  # severity -> window pairs
    queue_growth_window: str
    queue_growth_for: str
    kv_saturation_for: str
    preemption_window: str
    preemption_for: str
    stall_window: str
    stall_for: str
    target_down_seen: str
    target_down_for: str

    @property
    def windows(self) -> tuple[str, ...]:
        """Every burn-rate window, each once, in order of first use."""
        seen: dict[str, None] = {}
        for pairs in self.burn_rates.values():
            for pair in pairs:
                seen.setdefault(pair.short)
                seen.setdefault(pair.long)
        return tuple(seen)


@cache
def _data() -> dict[str, Any]:
    data: dict[str, Any] = catalog.load_packaged_yaml(Path(__file__).with_name("signals.yaml"))
    if data.get("schema_version") != SCHEMA_VERSION:
        raise catalog.CatalogError(f"watch/signals.yaml: schema_version {data.get('schema_version')} is not 1")
    return data


def engines() -> tuple[str, ...]:
    """The engines alerts and dashboards can be generated for."""
    return tuple(_data()["engines"])


def _visibility(raw: dict[str, Any]) -> Visibility:
    since, until = raw.get("since"), raw.get("until")
    return Visibility(
        since=parse_version(str(since)) if since is not None else None,
        until=parse_version(str(until)) if until is not None else None,
        exposed=bool(raw.get("exposed", True)),
    )


def _belongs(name: str, prefix: str, prefixes: dict[str, str]) -> bool:
    """A name of this engine, or a generic one (no engine's prefix, e.g. http_requests_total)."""
    return name.startswith(prefix) or not any(name.startswith(p) for p in prefixes.values())


@cache
def error_counters(engine: str | None) -> tuple[str, str]:
    """The canonical counters of failed and all requests for ``engine`` (signals.yaml ``errors``): the error-rate
    SLI that watch alerts on and the diagnosis' "do requests fail?" both read."""
    if engine in engines():
        found = engine_signals(engine)
        if found.error_bad is not None and found.error_total is not None:
            return found.error_bad.canonical, found.error_total.canonical
    return "http_5xx", "http_requests"


def engine_signals(engine: str, version: str | None = None) -> EngineSignals:
    """What ``engine`` at ``version`` (None: the newest) exposes for each catalog metric."""
    data = _data()["engines"]
    if engine not in data:
        raise UsageError(f"no alerting data for engine {engine!r}", f"known: {', '.join(data)}")
    wanted = parse_version(version) if version else None
    spec = data[engine]
    mapping = catalog.metric_map()
    prefix = mapping.engine_prefixes[engine]
    visibility = {name: _visibility(raw) for name, raw in (spec.get("versions") or {}).items()}
    buckets = {name: tuple(float(b) for b in bounds) for name, bounds in (spec.get("buckets") or {}).items()}
    labels = {name: tuple((k, str(v)) for k, v in raw.items()) for name, raw in (spec.get("labels") or {}).items()}
    series: dict[str, Series] = {}
    for metric in mapping.specs:
        for name in metric.names:
            if not _belongs(name, prefix, mapping.engine_prefixes):
                continue
            if not visibility.get(name, Visibility()).visible(wanted):
                continue
            series[metric.canonical] = Series(
                canonical=metric.canonical,
                kind=metric.kind,
                name=name,
                labels=labels.get(name, metric.labels),
                aggregate=metric.aggregate,
                buckets=buckets.get(name, ()),
            )
            break
    slo_histograms: dict[str, Series] = {}
    for slo_name, candidates in _data()["slo_histograms"].items():
        found = next((series[c] for c in candidates if c in series), None)
        if found is not None:
            slo_histograms[slo_name] = found
    errors = spec.get("errors") or {}
    return EngineSignals(
        engine=engine,
        version=version,
        series=series,
        error_bad=series.get(str(errors.get("bad"))),
        error_total=series.get(str(errors.get("total"))),
        preemption=series.get(str(spec.get("preemption"))),
        slo_histograms=slo_histograms,
    )


@cache
def alert_shape() -> AlertShape:
    """The alert windows, durations and grouping."""
    raw = _data()["alerts"]
    return AlertShape(
        group_by=tuple(raw["group_by"]),
        burn_rates={
            severity: tuple(BurnWindow(str(p["long"]), str(p["short"]), float(p["factor"])) for p in pairs)
            for severity, pairs in raw["burn_rates"].items()
        },
        queue_growth_window=str(raw["queue_growth"]["window"]),
        queue_growth_for=str(raw["queue_growth"]["for"]),
        kv_saturation_for=str(raw["kv_saturation"]["for"]),
        preemption_window=str(raw["preemption"]["window"]),
        preemption_for=str(raw["preemption"]["for"]),
        stall_window=str(raw["stall"]["window"]),
        stall_for=str(raw["stall"]["for"]),
        target_down_seen=str(raw["target_down"]["seen"]),
        target_down_for=str(raw["target_down"]["for"]),
    )


def gpu_exporter_series() -> dict[str, str]:
    """dcgm-exporter's series for GPU memory, power, clocks and temperature, by what they measure."""
    return {str(k): str(v) for k, v in _data()["gpu_exporter"].items()}
