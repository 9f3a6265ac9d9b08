"""GPUs by name: catalog names, aliases and the names nvidia-smi prints, with close matches on a miss."""

from __future__ import annotations

import difflib
import re
from dataclasses import dataclass

from llmtriage import catalog
from llmtriage.errors import UsageError

_NOISE = re.compile(r"\b(nvidia|geforce|tesla|amd|instinct)\b|[^a-z0-9]")


@dataclass(frozen=True, slots=True)
class GpuSpec:
    """One GPU: memory as torch reports it, memory bandwidth and dense bf16 throughput."""

    name: str
    total_memory_gib: float
    bandwidth_gbs: float | None
    bf16_tflops: float | None
    total_is_estimate: bool = False


def _key(name: str) -> str:
    return _NOISE.sub("", name.lower())


def _spec(info: catalog.GpuInfo) -> GpuSpec:
    facts = catalog.capacity_facts()
    if info.total_gib is not None:
        total, estimate = info.total_gib, False
    else:
        total, estimate = info.memory_gb * facts.gpu_total_default_ratio, True
    return GpuSpec(info.name, total, info.bandwidth_gbs, info.bf16_tflops, estimate)


def find_gpu(name: str) -> catalog.GpuInfo | None:
    """The catalog GPU called ``name`` (its name, an alias or an nvidia-smi name), else None."""
    wanted = _key(name)
    if not wanted:
        return None
    infos = catalog.gpus()
    for info in infos:
        if wanted in {_key(n) for n in (info.name, *info.aliases)}:
            return info
    # A short name ("H100") means the first catalog GPU whose name starts with it.
    prefixed = next((info for info in infos if _key(info.name).startswith(wanted)), None)
    if prefixed is not None:
        return prefixed
    # nvidia-smi adds form factor and memory ("NVIDIA A10G"): the longest catalog name it contains wins.
    contained = [
        (len(_key(n)), info) for info in infos for n in (info.name, *info.aliases) if _key(n) and _key(n) in wanted
    ]
    return max(contained, key=lambda pair: pair[0])[1] if contained else None


def resolve_gpu(name: str) -> GpuSpec:
    """The GPU called ``name``; an unknown name is a usage error that suggests the closest catalog names."""
    info = find_gpu(name)
    if info is not None:
        return _spec(info)
    names = [n for info in catalog.gpus() for n in (info.name, *info.aliases)]
    close = difflib.get_close_matches(name, names, n=3, cutoff=0.4)
    hint = f"did you mean {', '.join(close)}?" if close else "give --gpu-memory-gib with the total nvidia-smi shows"
    raise UsageError(f"--gpu {name!r}: not a GPU this tool knows", hint)


def catalog_specs() -> list[GpuSpec]:
    """Every catalog GPU, smallest memory first."""
    return sorted((_spec(info) for info in catalog.gpus()), key=lambda g: g.total_memory_gib)
