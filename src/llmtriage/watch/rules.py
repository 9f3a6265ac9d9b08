"""Prometheus alerting rules for one engine version: multiwindow burn rates of the TTFT, TPOT and error-rate SLOs
(Google SRE workbook), a growing queue, a saturated KV cache, preemptions, a stalled engine and a target down.

Every expression is built from the series :mod:`llmtriage.watch.signals` resolves, so the names follow the
engine version (``vllm:num_preemptions_total``, ``vllm:kv_cache_usage_perc`` or ``vllm:gpu_cache_usage_perc``).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import yaml

from llmtriage import __version__
from llmtriage.catalog import Slo, Thresholds
from llmtriage.watch import promql
from llmtriage.watch.signals import AlertShape, EngineSignals, Series, alert_shape

RECORD_PREFIX = "llmtriage"


@dataclass(frozen=True, slots=True)
class Sli:
    """One SLO as a ratio of bad events: its budget, and the expression of its error ratio over a window."""

    id: str
    title: str
    objective: str
    budget_ratio: float
    symptom_class: str
    series: tuple[Series, ...]

    def record(self, window: str) -> str:
        """The recording rule's name for ``window``."""
        return f"{RECORD_PREFIX}:{self.id}:error_ratio_rate{window}"


@dataclass(slots=True)
class RuleSet:
    """A rule file and what was left out of it, with why."""

    engine: str
    recording: list[dict[str, Any]] = field(default_factory=list)
    alerting: list[dict[str, Any]] = field(default_factory=list)
    skipped: list[str] = field(default_factory=list)

    def document(self) -> dict[str, Any]:
        """The rule file (groups of recording and alerting rules)."""
        return {
            "groups": [
                {"name": f"{RECORD_PREFIX}-{self.engine}-slo-ratios", "rules": self.recording},
                {"name": f"{RECORD_PREFIX}-{self.engine}-alerts", "rules": self.alerting},
            ]
        }


def _slis(signals: EngineSignals, slo: Slo) -> tuple[list[tuple[Sli, float | None]], list[str]]:
    """The SLOs this engine version can measure (with the latency threshold), and those it cannot."""
    budget = 1.0 - promql.LATENCY_QUANTILE
    found: list[tuple[Sli, float | None]] = []
    skipped: list[str] = []
    for slo_id, title, threshold_s, symptom in (
        ("ttft_p95", "TTFT", slo.ttft_p95_s, "slow_ttft"),
        ("tpot_p95", "TPOT", slo.itl_p95_s, "slow_generation"),
    ):
        series = signals.slo_histograms.get(slo_id)
        if series is None or not series.buckets:
            skipped.append(f"{title} SLO burn rate: {signals.described} has no {title} histogram with known buckets")
            continue
        objective = f"{promql.LATENCY_QUANTILE:.0%} of requests with {title} <= {_seconds(threshold_s)}"
        found.append((Sli(slo_id, title, objective, budget, symptom, (series,)), threshold_s))
    if signals.error_bad is not None and signals.error_total is not None:
        objective = f"error rate <= {slo.error_rate:.2%}"
        pair = (signals.error_bad, signals.error_total)
        found.append((Sli("errors", "error-rate", objective, slo.error_rate, "request_failure", pair), None))
    else:
        skipped.append(f"error-rate SLO burn rate: {signals.described} counts no failed requests")
    return found, skipped


def _ratio_expr(sli: Sli, threshold_s: float | None, window: str, group: tuple[str, ...]) -> str:
    if threshold_s is not None:
        return promql.slower_ratio(sli.series[0], threshold_s, window, group)
    bad, total = sli.series
    return promql.ratio(bad, total, window, group)


def _burn_alert(sli: Sli, severity: str, shape: AlertShape) -> dict[str, Any]:
    clauses = []
    for pair in shape.burn_rates[severity]:
        limit = f"{pair.factor * sli.budget_ratio:.6g}"
        clauses.append(f"({sli.record(pair.long)} > {limit} and {sli.record(pair.short)} > {limit})")
    windows = ", ".join(f"{p.factor:g}x over {p.long} and {p.short}" for p in shape.burn_rates[severity])
    return {
        "alert": f"LLM{_camel(sli.id)}BudgetBurn{_camel(severity)}",
        "expr": " or ".join(clauses),
        "labels": {"severity": severity, "slo": sli.id, "llmtriage_class": sli.symptom_class},
        "annotations": {
            "summary": f"{sli.title} SLO error budget burning ({severity}) on {{{{ $labels.instance }}}}",
            "description": f"SLO: {sli.objective}. The budget ({sli.budget_ratio:.2%} of requests) burns at "
            f"least {windows} (30-day budget). Run `llmtriage watch --metrics-url` on the instance to see it live.",
        },
    }


def build_rules(signals: EngineSignals, slo: Slo, thresholds: Thresholds, shape: AlertShape | None = None) -> RuleSet:
    """The recording and alerting rules for ``signals``' engine version and ``slo``."""
    shape = shape or alert_shape()
    group = shape.group_by
    rules = RuleSet(engine=signals.engine)
    slis, rules.skipped = _slis(signals, slo)
    for sli, threshold_s in slis:
        for window in shape.windows:
            rules.recording.append({"record": sli.record(window), "expr": _ratio_expr(sli, threshold_s, window, group)})
        for severity in shape.burn_rates:
            rules.alerting.append(_burn_alert(sli, severity, shape))
    _state_alerts(rules, signals, slo, thresholds, shape)
    return rules


def _state_alerts(rules: RuleSet, signals: EngineSignals, slo: Slo, thresholds: Thresholds, shape: AlertShape) -> None:
    group = shape.group_by
    running, waiting = signals.get("running"), signals.get("waiting")
    where = "{{ $labels.instance }}"
    if waiting is not None:
        rules.alerting.append(
            _alert(
                "LLMQueueGrowing",
                f"{promql.gauge(waiting, group)} > {slo.queue:g}"
                f" and sum{promql.by(group)} (delta({promql.selector(waiting)}[{shape.queue_growth_window}])) > 0",
                shape.queue_growth_for,
                "ticket",
                "queueing_over_capacity",
                f"Queue above {slo.queue:g} requests and growing on {where}",
                f"More than {slo.queue:g} requests wait ({waiting.name}) and the queue grew over the last "
                f"{shape.queue_growth_window}: more is offered than served.",
            )
        )
    else:
        rules.skipped.append(f"queue growth: {signals.described} exposes no queue length")
    kv = signals.get("kv_usage_ratio")
    if kv is not None:
        rules.alerting.append(
            _alert(
                "LLMKvCacheSaturated",
                f"{promql.gauge(kv, group)} >= {thresholds.kv_usage_high:g}",
                shape.kv_saturation_for,
                "ticket",
                "kv_pressure_preemption",
                f"KV cache {thresholds.kv_usage_high:.0%} full or more on {where}",
                f"{kv.name} has stayed at or above {thresholds.kv_usage_high:g}: requests queue for KV space or are "
                "preempted. Lower concurrency or context, or add GPUs.",
            )
        )
    else:
        rules.skipped.append(f"KV cache saturation: {signals.described} exposes no KV cache usage")
    preemption = signals.preemption
    if preemption is not None:
        expr = (
            f"{promql.rate(preemption, shape.preemption_window, group)} > 0"
            if preemption.kind == "counter"
            else f"{promql.gauge(preemption, group)} > 0"
        )
        rules.alerting.append(
            _alert(
                "LLMPreempting",
                expr,
                shape.preemption_for,
                "ticket",
                "kv_pressure_preemption",
                f"Requests preempted for KV space on {where}",
                f"{preemption.name} keeps rising: the KV cache cannot hold the running batch, so requests are evicted "
                "and recomputed (slow TPOT).",
            )
        )
    else:
        rules.skipped.append(f"preemption rate: {signals.described} exposes no preemption signal")
    generated = signals.get("generation_tokens")
    if running is not None and waiting is not None and generated is not None:
        rules.alerting.append(
            _alert(
                "LLMEngineStalled",
                f"({promql.gauge(running, group)} + {promql.gauge(waiting, group)}) > 0"
                f" and {promql.increase(generated, shape.stall_window, group)} == 0",
                shape.stall_for,
                "page",
                "engine_stalled",
                f"Engine stalled on {where}: requests wait but no tokens flow",
                f"Requests run or wait but {generated.name} has not moved in {shape.stall_window}. A hung collective, "
                "a deadlock or a stuck scheduler: capture stacks (py-spy dump) before restarting.",
            )
        )
    else:
        rules.skipped.append(f"stall: {signals.described} lacks running/waiting gauges or a generated-token counter")
    if running is not None:
        on = ", ".join(group)
        rules.alerting.append(
            _alert(
                "LLMTargetDown",
                f"up == 0 and on ({on}) present_over_time({promql.selector(running)}[{shape.target_down_seen}])",
                shape.target_down_for,
                "page",
                None,
                f"Inference server {where} is down",
                f"Prometheus cannot scrape {where}, which served {running.name} within the last "
                f"{shape.target_down_seen}.",
            )
        )


def _alert(
    name: str,
    expr: str,
    for_: str,
    severity: str,
    cause: str | None,
    summary: str,
    description: str,
) -> dict[str, Any]:
    labels = {"severity": severity}
    if cause is not None:
        labels["llmtriage_cause"] = cause
    return {
        "alert": name,
        "expr": expr,
        "for": for_,
        "labels": labels,
        "annotations": {"summary": summary, "description": description},
    }


def render(rules: RuleSet, signals: EngineSignals, slo: Slo, command: str) -> str:
    """The rule file as YAML, with a header saying what it was generated for and what was left out."""
    header = [
        f"# Prometheus alerting rules for {signals.described}, generated by llmtriage {__version__}:",
        f"#   {command}",
        f"# SLOs: TTFT p95 <= {_seconds(slo.ttft_p95_s)}, TPOT p95 <= {_seconds(slo.itl_p95_s)}, "
        f"error rate <= {slo.error_rate:.2%}, queue <= {slo.queue:g}.",
        "# Series: " + ", ".join(f"{s.canonical} = {s.name}" for s in _used(signals)),
    ]
    header += [f"# Not generated: {why}" for why in rules.skipped]
    body = yaml.safe_dump(rules.document(), sort_keys=False, width=1 << 16, allow_unicode=True)
    return "\n".join(header) + "\n" + body


def _used(signals: EngineSignals) -> list[Series]:
    candidates = (
        *signals.slo_histograms.values(),
        signals.error_bad,
        signals.error_total,
        signals.get("running"),
        signals.get("waiting"),
        signals.get("kv_usage_ratio"),
        signals.preemption,
        signals.get("generation_tokens"),
    )
    seen: dict[str, Series] = {}
    for series in candidates:
        if series is not None:
            seen.setdefault(series.canonical, series)
    return list(seen.values())


def _camel(text: str) -> str:
    return "".join(part.capitalize() for part in text.split("_"))


def _seconds(value_s: float) -> str:
    return f"{value_s * 1000:g} ms" if value_s < 1 else f"{value_s:g} s"
