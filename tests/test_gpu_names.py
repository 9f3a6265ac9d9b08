"""GPU names as people and tools write them: one catalog GPU, or an error that lists the candidates, never a guess."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from types import SimpleNamespace
from typing import Any

import pytest
from typer.testing import CliRunner

import llmtriage.cli  # noqa: F401 - registers every command on the app
from llmtriage import catalog
from llmtriage.capacity.gpu import find_gpu, local_gpu, resolve_gpu
from llmtriage.capture import nvml as nvml_module
from llmtriage.capture.nvml import Nvml
from llmtriage.cli.app import app
from llmtriage.errors import UsageError

# (spelling, catalog name, marketing memory in GB)
SPELLINGS = [
    # marketing names, with or without memory
    ("A100 80GB", "A100 SXM 80GB", 80),
    ("A100 80 GB", "A100 SXM 80GB", 80),  # a spaced memory size
    ("A100 40 GB PCIe", "A100 PCIe 40GB", 40),
    ("A100-80GB", "A100 SXM 80GB", 80),
    ("a100 80g", "A100 SXM 80GB", 80),
    ("A100 40GB", "A100 SXM 40GB", 40),
    ("A100 PCIe 40GB", "A100 PCIe 40GB", 40),
    ("A100 80GB PCIe", "A100 PCIe 80GB", 80),
    ("H100 80GB", "H100 SXM", 80),
    ("H100 SXM5", "H100 SXM", 80),
    ("H100 PCIe", "H100 PCIe", 80),
    ("H100 94GB", "H100 NVL", 94),
    ("RTX 4090", "RTX 4090", 24),
    ("4090", "RTX 4090", 24),
    ("rtx4090", "RTX 4090", 24),
    ("L40S", "L40S", 48),
    ("L40", "L40", 48),
    ("A10G", "A10G", 24),
    ("A10", "A10", 24),
    ("T4", "T4", 16),
    ("V100-32GB", "V100 SXM2 32GB", 32),
    ("V100 16GB", "V100 SXM2 16GB", 16),
    ("V100 PCIe 16GB", "V100 PCIe 16GB", 16),
    ("MI300X", "MI300X", 192),
    ("MI325X", "MI325X", 256),
    ("H200", "H200 SXM", 141),
    ("B200", "B200", 180),
    ("L4", "L4", 24),
    ("RTX 3090", "RTX 3090", 24),
    ("A6000", "RTX A6000", 48),
    ("RTX A5000", "RTX A5000", 24),
    ("A40", "A40", 48),
    ("RTX 6000 Ada", "RTX 6000 Ada", 48),
    ("H20", "H20", 96),
    ("A800", "A800 SXM 80GB", 80),
    ("GH200", "GH200", 96),
    # nvidia-smi's name column (and NVML's nvmlDeviceGetName)
    ("NVIDIA A100-SXM4-80GB", "A100 SXM 80GB", 80),
    ("NVIDIA A100-SXM4-40GB", "A100 SXM 40GB", 40),
    ("NVIDIA A100 80GB PCIe", "A100 PCIe 80GB", 80),
    ("NVIDIA A100-PCIE-40GB", "A100 PCIe 40GB", 40),
    ("NVIDIA H100 80GB HBM3", "H100 SXM", 80),
    ("NVIDIA H100 PCIe", "H100 PCIe", 80),
    ("NVIDIA H100 NVL", "H100 NVL", 94),
    ("NVIDIA H200", "H200 SXM", 141),
    ("NVIDIA GeForce RTX 4090", "RTX 4090", 24),
    ("Tesla T4", "T4", 16),
    ("Tesla V100-SXM2-16GB", "V100 SXM2 16GB", 16),
    ("Tesla V100-PCIE-32GB", "V100 PCIe 32GB", 32),
    ("NVIDIA A10G", "A10G", 24),
    ("NVIDIA L40S", "L40S", 48),
    ("NVIDIA RTX A6000", "RTX A6000", 48),
    ("NVIDIA RTX 6000 Ada Generation", "RTX 6000 Ada", 48),
    ("NVIDIA GH200 480GB", "GH200", 96),
    ("AMD Instinct MI300X", "MI300X", 192),
    # consumer and workstation cards, marketing spellings
    ("RTX 4060", "RTX 4060", 8),
    ("RTX 4060 Ti 16GB", "RTX 4060 Ti 16GB", 16),
    ("4060 Ti 8GB", "RTX 4060 Ti 8GB", 8),
    ("RTX 4070 Super", "RTX 4070 Super", 12),
    ("rtx4070", "RTX 4070", 12),
    ("RTX 4070 Ti", "RTX 4070 Ti", 12),
    ("RTX 4080 SUPER", "RTX 4080 Super", 16),
    ("RTX 5060 Ti 16GB", "RTX 5060 Ti 16GB", 16),
    ("5080", "RTX 5080", 16),
    ("RTX 3060 12GB", "RTX 3060 12GB", 12),
    ("RTX 3080 10GB", "RTX 3080 10GB", 10),
    ("RTX 3080-12GB", "RTX 3080 12GB", 12),
    ("RTX 3090 Ti", "RTX 3090 Ti", 24),
    ("2080 Ti", "RTX 2080 Ti", 11),
    ("Titan RTX", "TITAN RTX", 24),
    ("RTX A2000 12GB", "RTX A2000 12GB", 12),
    ("A4500", "RTX A4500", 20),
    ("RTX 4000 Ada", "RTX 4000 Ada", 20),
    ("RTX PRO 6000", "RTX PRO 6000 Blackwell", 96),
    ("P100 16GB", "P100 PCIe 16GB", 16),
    ("P40", "P40", 24),
    ("H800", "H800 SXM", 80),
    # ... and as nvidia-smi prints them
    ("NVIDIA GeForce RTX 4060", "RTX 4060", 8),
    ("NVIDIA GeForce RTX 4070 Ti SUPER", "RTX 4070 Ti Super", 16),
    ("NVIDIA GeForce RTX 5070 Ti", "RTX 5070 Ti", 16),
    ("NVIDIA GeForce RTX 5070", "RTX 5070", 12),
    ("NVIDIA GeForce RTX 3070", "RTX 3070", 8),
    ("NVIDIA GeForce RTX 3080 Ti", "RTX 3080 Ti", 12),
    ("NVIDIA RTX 4000 Ada Generation", "RTX 4000 Ada", 20),
    ("NVIDIA RTX A2000 12GB", "RTX A2000 12GB", 12),
    ("NVIDIA RTX PRO 6000 Blackwell Workstation Edition", "RTX PRO 6000 Blackwell", 96),
    ("Tesla P100-PCIE-16GB", "P100 PCIe 16GB", 16),
    ("Tesla P40", "P40", 24),
    ("NVIDIA A30", "A30", 24),
    ("NVIDIA H800", "H800 SXM", 80),
]

AMBIGUOUS = {
    "A100": {"A100 SXM 80GB", "A100 PCIe 80GB", "A100 SXM 40GB", "A100 PCIe 40GB"},
    "H100": {"H100 SXM", "H100 PCIe", "H100 NVL"},
    "NVIDIA H100": {"H100 SXM", "H100 PCIe", "H100 NVL"},
    "V100": {"V100 SXM2 32GB", "V100 SXM2 16GB", "V100 PCIe 16GB", "V100 PCIe 32GB"},
    "A100 PCIe": {"A100 PCIe 80GB", "A100 PCIe 40GB"},
    # memory variants nvidia-smi names alike: the bare name is ambiguous (fit users add --gpu-memory-gib)
    "RTX 4060 Ti": {"RTX 4060 Ti 8GB", "RTX 4060 Ti 16GB"},
    "NVIDIA GeForce RTX 4060 Ti": {"RTX 4060 Ti 8GB", "RTX 4060 Ti 16GB"},
    "NVIDIA GeForce RTX 5060 Ti": {"RTX 5060 Ti 8GB", "RTX 5060 Ti 16GB"},
    "NVIDIA GeForce RTX 3080": {"RTX 3080 10GB", "RTX 3080 12GB"},
    "RTX 3060": {"RTX 3060 12GB", "RTX 3060 8GB"},
    "NVIDIA RTX A2000": {"RTX A2000 12GB", "RTX A2000 6GB"},
    "P100": {"P100 PCIe 16GB", "P100 PCIe 12GB"},
}

# Unknown names and the wrong GPU each must never become (the old prefix/contains fallbacks picked these).
UNKNOWN = {
    "RTX 4090 Ti": "RTX 4090",
    "A100 120GB": "A10",
    "H100 SXM 94GB": "H100 SXM",
    "RTX 6000": "RTX 6000 Ada",
    "RTX 4060 Ti 12GB": "RTX 4060 Ti 16GB",  # a memory size no 4060 Ti has
    "RTX 3060 Ti": "RTX 3060 12GB",
    "RTX 4000 SFF Ada Generation": "RTX 4000 Ada",  # a different (70 W) card
    "NVIDIA RTX PRO 6000 Blackwell Max-Q Workstation Edition": "RTX PRO 6000 Blackwell",
    "NVIDIA H200 NVL": "H200 SXM",
    "Tesla V100-PCIE-32GB-LS": "V100 PCIe 32GB",
    "NVIDIA GH200 144G HBM3e": "GH200",
    "H10O": "H100 SXM",
    "H100 80GB PCIe SXM": "H100 SXM",  # contradictory: no GPU is both
}


def _flat(text: str) -> str:
    return " ".join(text.split())


@pytest.mark.parametrize(("spelling", "name", "memory_gb"), SPELLINGS)
def test_spelling_resolves_to_one_catalog_gpu(spelling: str, name: str, memory_gb: float) -> None:
    info = find_gpu(spelling)
    assert info is not None and (info.name, info.memory_gb) == (name, memory_gb)
    spec = resolve_gpu(spelling)
    assert spec.name == name
    assert spec.total_memory_gib < memory_gb  # a torch total in GiB, never more than the marketing GB


def test_the_table_is_big_enough() -> None:
    assert len(SPELLINGS) >= 25


def test_a100_80gb_is_not_a10() -> None:
    for spelling in ("A100 80GB", "A100-80GB", "A100 40GB"):
        assert resolve_gpu(spelling).name.startswith("A100 ")
    assert resolve_gpu("A100 80GB").total_memory_gib > 70


@pytest.mark.parametrize("spelling", sorted(AMBIGUOUS))
def test_ambiguous_names_raise_with_every_candidate(spelling: str) -> None:
    assert find_gpu(spelling) is None
    with pytest.raises(UsageError) as e:
        resolve_gpu(spelling)
    text = e.value.message + " " + e.value.hint
    for name in AMBIGUOUS[spelling]:
        info = next(g for g in catalog.gpus() if g.name == name)
        assert f"{name} ({info.memory_gb:g} GB)" in text


@pytest.mark.parametrize(("spelling", "not_this"), sorted(UNKNOWN.items()))
def test_unknown_names_raise_and_never_pick(spelling: str, not_this: str) -> None:
    assert find_gpu(spelling) is None
    with pytest.raises(UsageError) as e:
        resolve_gpu(spelling)
    assert "not a GPU this tool knows" in e.value.message
    # The GPU the old prefix/contains fallbacks picked may be suggested, but only as another part.
    assert "did you mean" in e.value.hint and f"These are other parts, not {spelling!r}" in e.value.hint
    assert not_this not in e.value.hint or e.value.hint.index(not_this) < e.value.hint.index("other parts")


def test_unknown_name_suggests_its_own_family_only() -> None:
    with pytest.raises(UsageError) as e:
        resolve_gpu("RTX 4090 Ti")
    assert "RTX 4090 (24 GB)" in e.value.hint and "RTX 5090" not in e.value.hint
    with pytest.raises(UsageError) as e:
        resolve_gpu("A100 120GB")
    assert "A100 SXM 80GB (80 GB)" in e.value.hint and "A10 (" not in e.value.hint


def test_names_with_no_gpu_in_them() -> None:
    for spelling in ("", "NVIDIA", "80GB", "  "):
        assert find_gpu(spelling) is None
        with pytest.raises(UsageError):
            resolve_gpu(spelling)


def test_every_catalog_name_and_alias_resolves_to_its_own_row() -> None:
    for info in catalog.gpus():
        for spelling in (info.name, *info.aliases):
            found = find_gpu(spelling)
            assert found is not None and found.name == info.name, spelling


def test_every_catalog_row_has_a_source_and_a_compute_capability() -> None:
    for info in catalog.gpus():
        assert info.source.startswith("https://"), info.name
        assert info.cc_source.startswith("https://"), info.name
        assert re.fullmatch(r"\d+\.\d+|gfx[0-9a-f]+", info.compute_capability), info.name
        assert resolve_gpu(info.name).compute_capability == info.compute_capability
    cc = {g.name: g.compute_capability for g in catalog.gpus()}
    assert (cc["A100 SXM 80GB"], cc["H100 SXM"], cc["L4"], cc["T4"], cc["V100 SXM2 32GB"]) == (
        "8.0",
        "9.0",
        "8.9",
        "7.5",
        "7.0",
    )
    assert (cc["RTX 3090"], cc["B200"], cc["MI300X"]) == ("8.6", "10.0", "gfx942")


def test_torch_totals_name_catalog_gpus() -> None:
    names = {g.name for g in catalog.gpus()}
    assert set(catalog.capacity_facts().gpu_total_gib) <= names


# ---------------------------------------------------------------- --gpu auto


class _NvmlError(Exception):
    pass


class _FakeNvml:
    """A stand-in for pynvml: one or more GPUs with these names and totals (bytes); or no driver at all."""

    NVMLError = _NvmlError

    def __init__(self, devices: list[tuple[str, int]] | None) -> None:
        self.devices = devices

    def nvmlInit(self) -> None:
        if self.devices is None:
            raise _NvmlError("NVML Shared Library Not Found")

    def nvmlShutdown(self) -> None:
        pass

    def nvmlDeviceGetCount(self) -> int:
        return len(self.devices or ())

    def nvmlDeviceGetHandleByIndex(self, index: int) -> int:
        return index

    def nvmlDeviceGetName(self, handle: int) -> str:
        return (self.devices or [])[handle][0]

    def nvmlDeviceGetMemoryInfo(self, handle: int) -> Any:
        total = (self.devices or [])[handle][1]
        return SimpleNamespace(total=total, used=0, free=total)


def _use_nvml(monkeypatch: pytest.MonkeyPatch, devices: list[tuple[str, int]] | None) -> None:
    monkeypatch.setattr(nvml_module, "Nvml", lambda: Nvml(_FakeNvml(devices)))


def _fit(*args: str) -> Any:
    return CliRunner().invoke(app, ["fit", "--model", "meta-llama/Llama-3.1-8B-Instruct", *args])


def test_auto_without_nvml_is_a_usage_error(monkeypatch: pytest.MonkeyPatch) -> None:
    _use_nvml(monkeypatch, None)
    with pytest.raises(UsageError) as e:
        local_gpu()
    assert "NVML is not available" in e.value.message and "--gpu-memory-gib" in e.value.hint
    result = _fit("--gpu", "auto")
    assert result.exit_code == 2
    assert "NVML is not available" in _flat(result.stderr) and "--gpu NAME" in _flat(result.stderr)


def test_auto_resolves_the_reported_name_and_uses_the_reported_total(monkeypatch: pytest.MonkeyPatch) -> None:
    total = 81920 * 2**20  # NVML's total for an 80 GB A100: 80 GiB, more than torch's 79.32
    _use_nvml(monkeypatch, [("NVIDIA A100-SXM4-80GB", total)] * 2)
    spec = local_gpu()
    assert (spec.name, spec.total_memory_gib, spec.total_is_estimate) == ("A100 SXM 80GB", 80.0, False)
    assert spec.bandwidth_gbs == 2039 and spec.compute_capability == "8.0"
    result = _fit("--gpu", "auto", "--format", "json")
    assert result.exit_code in (0, 1), result.stderr
    data = json.loads(result.stdout)
    assert data["gpu"] == "A100 SXM 80GB" and data["gpu_total_gib"] == 80.0


def test_auto_with_a_gpu_the_catalog_lacks_keeps_its_name_and_total(monkeypatch: pytest.MonkeyPatch) -> None:
    _use_nvml(monkeypatch, [("NVIDIA GeForce RTX 3050", 8188 * 2**20)])
    spec = local_gpu()
    assert spec.name == "NVIDIA GeForce RTX 3050" and spec.total_memory_gib == pytest.approx(7.996, abs=0.01)
    assert spec.bandwidth_gbs is None


def test_auto_with_different_gpus_is_a_usage_error(monkeypatch: pytest.MonkeyPatch) -> None:
    _use_nvml(monkeypatch, [("NVIDIA L4", 23034 * 2**20), ("Tesla T4", 15360 * 2**20)])
    with pytest.raises(UsageError) as e:
        local_gpu()
    assert "NVIDIA L4" in e.value.message and "Tesla T4" in e.value.message


# ---------------------------------------------------------------- llmtriage fit as a user runs it


def _run(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "llmtriage", "fit", "--model", "meta-llama/Llama-3.1-8B-Instruct", *args],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


def test_fit_a100_80gb_reports_the_a100_it_assumed() -> None:
    done = _run("--gpu", "A100 80GB", "--format", "json")
    assert done.returncode in (0, 1), done.stderr
    data = json.loads(done.stdout)
    assert data["gpu"] == "A100 SXM 80GB"
    assert data["gpu_total_gib"] == pytest.approx(79.32)


def test_fit_a100_alone_exits_2_with_the_candidates() -> None:
    done = _run("--gpu", "A100")
    assert done.returncode == 2 and done.stdout == ""
    err = _flat(done.stderr)
    for name in ("A100 SXM 80GB (80 GB)", "A100 PCIe 80GB (80 GB)", "A100 SXM 40GB (40 GB)", "A100 PCIe 40GB (40 GB)"):
        assert name in err
