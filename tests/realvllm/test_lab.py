"""The lab on a real vLLM (CPU): the scenarios a CPU can show, each diagnosed as expected."""

from __future__ import annotations

from pathlib import Path

import pytest

from llmtriage.lab.run import make_target, run_scenario
from llmtriage.lab.scenarios import scenario

from .conftest import CACHE, VllmEnv


@pytest.mark.parametrize("name", ["startup-oom", "runtime-oom", "prefill-jam"])
def test_lab_scenario_on_real_vllm(vllm_env: VllmEnv, name: str, tmp_path: Path) -> None:
    outcome = run_scenario(scenario(name), make_target("vllm-cpu", CACHE, 1.0, ""), tmp_path)
    assert outcome.status == "matched", {k: v for k, v in outcome.to_dict().items() if k in ("observed", "reason")}
    assert (tmp_path / name / "report.html").exists()
