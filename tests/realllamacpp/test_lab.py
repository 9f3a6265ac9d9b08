"""The lab on a real llama-server (CPU): the scenarios it can show, each diagnosed as expected; the others skipped
with a reason."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from llmtriage.lab.run import make_target, run_scenario
from llmtriage.lab.scenarios import scenario

from .conftest import CACHE, LlamaEnv


def _observed(folder: Path) -> dict[str, object]:
    """What the run saw, for a failure message: the verdict, the first causes and the load's figures."""
    summary = json.loads((folder / "summary.json").read_text())
    diagnosis = json.loads((folder / "diagnosis.json").read_text())
    shown: dict[str, object] = {
        "observed": summary["observed"],
        "causes": [(c["id"], round(c["confidence"], 2)) for c in diagnosis["causes"][:3]],
    }
    bench = folder / "bench" / "result.json"
    if bench.exists():
        load = json.loads(bench.read_text())["summary"]
        shown["bench"] = {"requests": load["requests"], "ttft_ms": load["ttft_ms"], "duration_s": load["duration_s"]}
    return shown


@pytest.mark.timeout(300)
@pytest.mark.parametrize("name", ["prefill-jam", "context-overflow", "runtime-oom"])
def test_lab_scenario_on_real_llama_server(llama_env: LlamaEnv, name: str, tmp_path: Path) -> None:
    outcome = run_scenario(scenario(name), make_target("llamacpp-cpu", CACHE, 1.0, ""), tmp_path)
    folder = tmp_path / name
    assert outcome.status == "matched", _observed(folder)
    (bundle,) = folder.glob("bundle-*")
    assert "llama_server: listening on http://127.0.0.1:" in (bundle / "logs" / "server.log").read_text()
    assert json.loads((folder / "diagnosis.json").read_text())["engine"] == "llama_cpp"
    assert (folder / "report.html").exists()


@pytest.mark.parametrize(("name", "why"), [("startup-oom", "no GPU memory"), ("throttle", "no GPU clocks")])
def test_what_llama_server_on_a_cpu_cannot_show_is_skipped(name: str, why: str, tmp_path: Path) -> None:
    outcome = run_scenario(scenario(name), make_target("llamacpp-cpu", CACHE, 1.0, ""), tmp_path)
    assert outcome.status == "skipped" and why in outcome.reason, outcome.reason
    assert not (tmp_path / name).exists()
