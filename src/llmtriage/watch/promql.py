"""PromQL built from resolved series: selectors, per-instance aggregations, windowed quantiles and SLO ratios.

Rules, the dashboard and the fleet view share these builders, so one series name or label filter is written
in one place. ``group`` is the ``by (...)`` label list (``job, instance``); ``matchers`` are extra label matchers
(``instance=~"$instance"``) added to every selector.
"""

from __future__ import annotations

import bisect
import math
import re

from llmtriage.watch.signals import Series

LATENCY_QUANTILE = 0.95


def quote(text: str) -> str:
    """A PromQL double-quoted string."""
    return '"' + text.replace("\\", "\\\\").replace('"', '\\"') + '"'


def _matchers(series: Series, matchers: tuple[str, ...], extra: tuple[str, ...] = ()) -> str:
    parts = [f"{key}=~{quote(re.escape(prefix) + '.*')}" for key, prefix in series.labels]
    parts.extend(matchers)
    parts.extend(extra)
    return "{" + ", ".join(parts) + "}" if parts else ""


def selector(series: Series, matchers: tuple[str, ...] = (), suffix: str = "", extra: tuple[str, ...] = ()) -> str:
    """``name{catalog label filters, matchers}``; ``suffix`` picks ``_bucket``/``_count``/``_sum`` of a histogram."""
    return f"{series.name}{suffix}{_matchers(series, matchers, extra)}"


def by(group: tuple[str, ...]) -> str:
    """`` by (job, instance)``."""
    return f" by ({', '.join(group)})"


def le_matcher(bound: float) -> str:
    """A matcher for the bucket whose upper bound is ``bound``, however the exporter printed it
    (Go: ``1``, Python's client: ``1.0``; Prometheus 3 normalises to the Go form)."""
    pattern = f"{int(bound)}(\\.0)?" if bound.is_integer() else re.escape(repr(bound))
    return f"le=~{quote(pattern)}"


def gauge(series: Series, group: tuple[str, ...], matchers: tuple[str, ...] = ()) -> str:
    """The gauge per group, combined as the catalog says (sum or max)."""
    return f"{series.aggregate}{by(group)} ({selector(series, matchers)})"


def rate(series: Series, window: str, group: tuple[str, ...], matchers: tuple[str, ...] = ()) -> str:
    """Per-second increase of a counter per group."""
    return f"sum{by(group)} (rate({selector(series, matchers)}[{window}]))"


def increase(series: Series, window: str, group: tuple[str, ...], matchers: tuple[str, ...] = ()) -> str:
    """Increase of a counter per group over ``window``."""
    return f"sum{by(group)} (increase({selector(series, matchers)}[{window}]))"


def quantile(series: Series, q: float, window: str, group: tuple[str, ...], matchers: tuple[str, ...] = ()) -> str:
    """The q-quantile of a histogram over ``window`` per group (from bucket rates, not lifetime totals)."""
    inner = f"sum{by((*group, 'le'))} (rate({selector(series, matchers, '_bucket')}[{window}]))"
    return f"histogram_quantile({q:g}, {inner})"


def slower_ratio(
    series: Series, threshold_s: float, window: str, group: tuple[str, ...], matchers: tuple[str, ...] = ()
) -> str:
    """Share of observations above ``threshold_s`` over ``window``: the error ratio of a latency SLO.

    Inside a bucket the observations are taken as spread evenly, as histogram_quantile takes them, so the ratio
    and the quantile agree; a threshold beyond the last finite bound counts everything above that bound.
    """

    def bucket(bound: float) -> str:
        return f"sum{by(group)} (rate({selector(series, matchers, '_bucket', (le_matcher(bound),))}[{window}]))"

    bounds = series.buckets
    total = f"sum{by(group)} (rate({selector(series, matchers, '_count')}[{window}]))"
    at = bisect.bisect_left(bounds, threshold_s)
    if at < len(bounds) and math.isclose(bounds[at], threshold_s):
        within = bucket(bounds[at])
    elif at >= len(bounds):
        within = bucket(bounds[-1])
    elif at == 0:
        within = f"{bucket(bounds[0])} * {threshold_s / bounds[0]:.6g}"
    else:
        lower, upper = bounds[at - 1], bounds[at]
        share = (threshold_s - lower) / (upper - lower)
        within = f"({bucket(lower)} + ({bucket(upper)} - {bucket(lower)}) * {share:.6g})"
    return f"1 - {within} / {total}"


def ratio(bad: Series, total: Series, window: str, group: tuple[str, ...], matchers: tuple[str, ...] = ()) -> str:
    """Rate of ``bad`` over rate of ``total`` per group; 0, not nothing, while no bad event has been counted
    (a labelled counter has no series until its first increment)."""
    all_rate = rate(total, window, group, matchers)
    return f"({rate(bad, window, group, matchers)} or {all_rate} * 0) / {all_rate}"
