"""`llmtriage alerts`: rules generated from the metric-name data, right per engine version, that promtool checks,
and rule unit tests (promtool test rules) where each alert fires on the series that should fire it and stays
quiet on the ones that should not. The test series use the names the rules were generated for."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

from llmtriage import catalog
from llmtriage.watch import rules, signals
from llmtriage.watch.signals import EngineSignals, Series

GROUP = {"job": "llm", "instance": "10.0.0.1:8000"}
LABEL_VALUES = {"status": "5xx", "finished_reason": "abort"}
VERSIONS = [("vllm", None), ("vllm", "0.10"), ("vllm", "0.8"), ("sglang", None)]


def _alerts_cli(*args: str) -> str:
    result = subprocess.run(
        [sys.executable, "-m", "llmtriage", "alerts", *args], capture_output=True, text=True, timeout=60
    )
    assert result.returncode == 0, result.stderr
    return result.stdout


def test_names_follow_the_engine_version() -> None:
    newest = _alerts_cli("--slo", "ttft_p95=2s,tpot_p95=100ms,error_rate=1%,queue=20")
    assert "vllm:num_preemptions_total" in newest
    assert not re.search(r"vllm:num_preemptions(?!_total)", newest)
    assert "vllm:kv_cache_usage_perc" in newest and "vllm:gpu_cache_usage_perc" not in newest
    assert "vllm:request_time_per_output_token_seconds" in newest
    old = _alerts_cli("--vllm-version", "0.8")
    assert "vllm:gpu_cache_usage_perc" in old and "vllm:kv_cache_usage_perc" not in old
    assert "vllm:time_per_output_token_seconds" in old and "vllm:inter_token_latency_seconds" not in old
    assert "vllm:request_time_per_output_token_seconds" not in old  # no per-request TPOT: the ITL one stands in
    assert "vllm:num_preemptions_total" in old
    v11 = signals.engine_signals("vllm", "0.11")
    assert v11.get("itl_seconds") is not None and v11.get("itl_seconds").name == "vllm:inter_token_latency_seconds"  # type: ignore[union-attr]
    sglang = _alerts_cli("--engine", "sglang")
    assert "sglang:token_usage" in sglang and "sglang:num_retracted_reqs" in sglang and "vllm:" not in sglang


def test_bad_options_are_usage_errors() -> None:
    for args in (["--engine", "sglang", "--vllm-version", "0.10"], ["--vllm-version", "ten"], ["--engine", "tgx"],
                 ["--slo", "ttft_p99=2s"]):  # fmt: skip
        result = subprocess.run(
            [sys.executable, "-m", "llmtriage", "alerts", *args], capture_output=True, text=True, timeout=60
        )
        assert result.returncode == 2, (args, result.stderr)
        assert "Traceback" not in result.stderr


@pytest.mark.parametrize(("engine", "version"), VERSIONS)
def test_promtool_checks_the_rules(engine: str, version: str | None, tmp_path: Path, promtool: str) -> None:
    args = ["--engine", engine] + (["--vllm-version", version] if version else [])
    path = tmp_path / "rules.yaml"
    path.write_text(_alerts_cli(*args))
    result = subprocess.run([promtool, "check", "rules", str(path)], capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "SUCCESS" in result.stdout


# ---------------------------------------------------------------- promtool test rules


def _series(series: Series, suffix: str = "", **labels: str) -> str:
    filters = {key: LABEL_VALUES.get(key, prefix) for key, prefix in series.labels}
    merged = {**GROUP, **filters, **labels}
    return series.name + suffix + "{" + ",".join(f'{k}="{v}"' for k, v in merged.items()) + "}"


def _histogram(series: Series, latency_s: float, per_minute: int, minutes: int, go_style: bool) -> list[dict[str, str]]:
    """Input series of a histogram whose observations all take ``latency_s``."""
    out = []
    for bound in series.buckets:
        le = f"{bound:g}" if go_style else repr(bound)  # Go's client prints 1, Python's 1.0
        rate_per_min = per_minute if bound >= latency_s else 0
        out.append({"series": _series(series, "_bucket", le=le), "values": f"0+{rate_per_min}x{minutes}"})
    out.append({"series": _series(series, "_bucket", le="+Inf"), "values": f"0+{per_minute}x{minutes}"})
    out.append({"series": _series(series, "_count"), "values": f"0+{per_minute}x{minutes}"})
    return out


class Cases:
    """Rule unit tests for one generated rule set: each alert fires on one input and stays quiet on another."""

    def __init__(self, found: EngineSignals, generated: rules.RuleSet) -> None:
        self.found = found
        self.alerts = {r["alert"]: r for r in generated.alerting}
        self.tests: list[dict[str, Any]] = []

    def expected(self, name: str) -> list[dict[str, Any]]:
        rule = self.alerts[name]
        annotations = {
            k: re.sub(r"\{\{ \$labels\.(\w+) \}\}", lambda m: GROUP[m.group(1)], v)
            for k, v in rule["annotations"].items()
        }
        return [{"exp_labels": {**GROUP, **rule["labels"]}, "exp_annotations": annotations}]

    def add(self, name: str, eval_minutes: int, firing: list[dict[str, str]], quiet: list[dict[str, str]]) -> None:
        assert name in self.alerts, f"{name} not generated for {self.found.described}"
        for inputs, expected in ((firing, self.expected(name)), (quiet, [])):
            self.tests.append(
                {
                    "name": f"{name} {'fires' if expected else 'stays quiet'}",
                    "interval": "1m",
                    "input_series": inputs,
                    "alert_rule_test": [{"eval_time": f"{eval_minutes}m", "alertname": name, "exp_alerts": expected}],
                }
            )


def _cases(found: EngineSignals, generated: rules.RuleSet) -> Cases:
    cases = Cases(found, generated)
    running, waiting = found.get("running"), found.get("waiting")
    generation, kv, preemption = found.get("generation_tokens"), found.get("kv_usage_ratio"), found.preemption
    assert running and waiting and generation and kv and preemption
    busy = [{"series": _series(running), "values": "4x30"}, {"series": _series(waiting), "values": "0x30"}]
    cases.add(
        "LLMEngineStalled",
        10,
        [*busy, {"series": _series(generation), "values": "0+100x5 500x25"}],
        [*busy, {"series": _series(generation), "values": "0+100x30"}],
    )
    up = "up{" + ",".join(f'{k}="{v}"' for k, v in GROUP.items()) + "}"
    cases.add(
        "LLMTargetDown",
        10,
        [{"series": up, "values": "1x5 0x10"}, {"series": _series(running), "values": "4x5"}],
        [{"series": up, "values": "1x15"}, {"series": _series(running), "values": "4x15"}],
    )
    cases.add("LLMKvCacheSaturated", 10, [{"series": _series(kv), "values": "0.95x15"}],
              [{"series": _series(kv), "values": "0.5x15"}])  # fmt: skip
    cases.add("LLMQueueGrowing", 15, [{"series": _series(waiting), "values": "0+5x20"}],
              [{"series": _series(waiting), "values": "30x20"}])  # fmt: skip
    if preemption.kind == "counter":
        firing, quiet = "0+3x20", "5x20"
    else:
        firing, quiet = "2x20", "0x20"
    cases.add("LLMPreempting", 15, [{"series": _series(preemption), "values": firing}],
              [{"series": _series(preemption), "values": quiet}])  # fmt: skip
    for slo_id, slow_s, fast_s in (("ttft_p95", 5.0, 0.05), ("tpot_p95", 0.5, 0.01)):
        series = found.slo_histograms[slo_id]
        for severity in ("Page", "Ticket"):
            cases.add(
                f"LLM{slo_id.replace('_p95', '').capitalize()}P95BudgetBurn{severity}",
                70,
                _histogram(series, slow_s, 100, 80, go_style=severity == "Page"),
                _histogram(series, fast_s, 100, 80, go_style=severity == "Ticket"),
            )
    bad, total = found.error_bad, found.error_total
    assert bad is not None and total is not None
    ok = {"series": _series(total, status="2xx") if bad.name == total.name else _series(total), "values": "0+100x80"}
    failing = {"series": _series(bad), "values": "0+50x80"}
    for severity in ("Page", "Ticket"):
        cases.add(f"LLMErrorsBudgetBurn{severity}", 70, [ok, failing], [ok])
    return cases


@pytest.mark.parametrize(("engine", "version"), VERSIONS)
def test_promtool_rule_tests_fire_and_stay_quiet(
    engine: str, version: str | None, tmp_path: Path, promtool: str
) -> None:
    thresholds = catalog.thresholds()
    found = signals.engine_signals(engine, version)
    generated = rules.build_rules(found, thresholds.slo, thresholds)
    rules_path = tmp_path / "rules.yaml"
    rules_path.write_text(rules.render(generated, found, thresholds.slo, "test"))
    cases = _cases(found, generated)
    assert {t["alert_rule_test"][0]["alertname"] for t in cases.tests} == set(cases.alerts)  # every alert tested
    test_path = tmp_path / "rules_test.yaml"
    test_path.write_text(
        yaml.safe_dump({"rule_files": [rules_path.name], "evaluation_interval": "1m", "tests": cases.tests})
    )
    result = subprocess.run(
        [promtool, "test", "rules", str(test_path)], capture_output=True, text=True, timeout=120, cwd=tmp_path
    )
    assert result.returncode == 0, result.stdout[-6000:] + result.stderr[-3000:]
    assert "SUCCESS" in result.stdout
