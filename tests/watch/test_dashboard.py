"""`llmtriage dashboard`: a Grafana JSON model of the watched signals, every expression valid PromQL (promtool
parses it), with the engine version's metric names."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import yaml

from llmtriage import catalog
from llmtriage.watch import dashboard, signals


def _dashboard_cli(*args: str) -> dict[str, object]:
    result = subprocess.run(
        [sys.executable, "-m", "llmtriage", "dashboard", *args], capture_output=True, text=True, timeout=60
    )
    assert result.returncode == 0, result.stderr
    data: dict[str, object] = json.loads(result.stdout)
    return data


def test_the_dashboard_json_and_its_panels() -> None:
    board = _dashboard_cli("--slo", "ttft_p95=1s")
    assert board["uid"] == "llmtriage-vllm" and board["schemaVersion"] == dashboard.SCHEMA_VERSION
    panels = board["panels"]
    assert isinstance(panels, list)
    titles = [p["title"] for p in panels]
    for wanted in ("TTFT p95 (vllm:time_to_first_token_seconds)", "TPOT p95", "ITL p95", "Requests running and waiting",
                   "KV cache usage (vllm:kv_cache_usage_perc)", "Preemptions/s (vllm:num_preemptions_total)",
                   "Tokens/s", "Error ratio", "SLO error-budget burn rate", "Targets up", "GPU memory used",
                   "GPU power", "SM clock"):  # fmt: skip
        assert any(t.startswith(wanted) for t in titles), (wanted, titles)
    ttft = next(p for p in panels if p["title"].startswith("TTFT"))
    assert ttft["fieldConfig"]["defaults"]["thresholds"]["steps"][1]["value"] == 1.0  # the SLO line
    ids = [p["id"] for p in panels]
    assert len(set(ids)) == len(ids)


def test_every_expression_parses(tmp_path: Path, promtool: str) -> None:
    thresholds = catalog.thresholds()
    for engine, version in (("vllm", None), ("vllm", "0.8"), ("sglang", None)):
        board = dashboard.build_dashboard(signals.engine_signals(engine, version), thresholds.slo, thresholds)
        expressions = dashboard.expressions(board)
        assert len(expressions) >= 12
        if version == "0.8":
            assert any("vllm:gpu_cache_usage_perc" in e for e in expressions)
        # Grafana's variables, as Grafana substitutes them; each expression as a recording rule promtool parses
        concrete = [e.replace("$__rate_interval", "1m").replace("$instance", ".*") for e in expressions]
        rules = {"groups": [{"name": "dashboard", "rules": [{"record": f"panel:e{i}", "expr": e}
                                                            for i, e in enumerate(concrete)]}]}  # fmt: skip
        path = tmp_path / f"{engine}-{version}.yaml"
        path.write_text(yaml.safe_dump(rules))
        result = subprocess.run([promtool, "check", "rules", str(path)], capture_output=True, text=True, timeout=60)
        assert result.returncode == 0, result.stdout + result.stderr
