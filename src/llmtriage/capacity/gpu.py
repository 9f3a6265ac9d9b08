"""GPUs by name: catalog names, aliases, the names nvidia-smi prints and the ones people write.

Matching (no fuzzy picks; a name that is not one GPU is an error that lists the candidates):

1. A name is normalised into tokens: lower case; vendor and brand words ("NVIDIA", "GeForce", "Tesla", "AMD",
   "Instinct"), memory types ("HBM3") and filler ("GPU", "Generation") dropped; split at anything not a letter or
   digit; "SXM2/4/5" read as "sxm", "RTX4090" as "rtx 4090"; a memory size ("80GB", "80G", "80 GB") taken out
   as a number of GB.
2. Exact: the tokens and memory size equal those of a catalog name or alias -> that GPU. This is how nvidia-smi
   names and curated aliases ("A100 80GB" -> A100 SXM 80GB) resolve.
3. Else whole tokens: a GPU matches when every token of its catalog name is in the query, except the form-factor
   words people leave out (sxm, pcie, nvl, rtx); every query token is a token of its name or aliases; and a
   memory size in the query equals the GPU's. One match -> that GPU; several -> ambiguous; none -> unknown.
"""

from __future__ import annotations

import difflib
import re
from dataclasses import dataclass, replace
from functools import cache
from typing import Any

from llmtriage import catalog
from llmtriage.errors import UsageError

# Words that never tell two GPUs apart: vendors, brands, memory types, filler.
_NOISE = frozenset(
    {"nvidia", "geforce", "tesla", "quadro", "amd", "instinct", "radeon", "gpu", "tensor", "core", "graphics"}
    | {"generation", "hbm2", "hbm2e", "hbm3", "hbm3e", "gddr6", "gddr6x", "gddr7", "accelerator"}
)
# Words of a catalog name that a query may leave out: form factors and the RTX brand.
_OPTIONAL = frozenset({"sxm", "pcie", "nvl", "rtx"})
_MEMORY = re.compile(r"^(\d+(?:\.\d+)?)(?:gb|g|gib)$")
_MEMORY_UNIT = frozenset({"gb", "g", "gib"})
_NUMBER = re.compile(r"^(\d+(?:\.\d+)?)$")
_WORD = re.compile(r"[a-z0-9.]+")
_SXM = re.compile(r"sxm\d*")
_RTX = re.compile(r"rtx(\d+)")
# Two memory sizes within this many GB are the same (the catalog's figures are whole marketing sizes).
_MEMORY_TOLERANCE_GB = 1.0
_SUGGESTIONS = 5


@dataclass(frozen=True, slots=True)
class GpuSpec:
    """One GPU: memory as torch reports it, memory bandwidth and dense bf16 throughput."""

    name: str
    total_memory_gib: float
    bandwidth_gbs: float | None
    bf16_tflops: float | None
    total_is_estimate: bool = False
    compute_capability: str | None = None

    def with_reported_total(self, total_gib: float) -> GpuSpec:
        """This GPU with the total memory it reports (NVML, nvidia-smi, a log): that wins over the catalog's."""
        return replace(self, total_memory_gib=total_gib, total_is_estimate=False)


@dataclass(frozen=True, slots=True)
class _Key:
    """A name as tokens and a memory size in GB (None when it states none)."""

    tokens: frozenset[str]
    memory_gb: float | None


def _key(name: str) -> _Key:
    words = _WORD.findall(name.lower())
    tokens: set[str] = set()
    memory: float | None = None
    i = 0
    while i < len(words):
        word = words[i].strip(".")
        i += 1
        if not word:
            continue
        found = _MEMORY.match(word)
        if found is None and _NUMBER.match(word) and i < len(words) and words[i] in _MEMORY_UNIT:
            found, i = _NUMBER.match(word), i + 1
        if found is not None:
            memory = float(found.group(1))
            continue
        if word in _NOISE:
            continue
        if _SXM.fullmatch(word):
            tokens.add("sxm")
        elif (split := _RTX.fullmatch(word)) is not None:
            tokens.update(("rtx", split.group(1)))
        else:
            tokens.add(word)
    return _Key(frozenset(tokens), memory)


@dataclass(frozen=True, slots=True)
class _Entry:
    info: catalog.GpuInfo
    keys: tuple[_Key, ...]  # the name's, then each alias's
    required: frozenset[str]
    allowed: frozenset[str]


@cache
def _entries() -> tuple[_Entry, ...]:
    entries = []
    for info in catalog.gpus():
        keys = tuple(_key(n) for n in (info.name, *info.aliases))
        allowed = frozenset().union(*(k.tokens for k in keys))
        entries.append(_Entry(info, keys, keys[0].tokens - _OPTIONAL, allowed))
    return tuple(entries)


def _same_memory(a: float, b: float) -> bool:
    return abs(a - b) <= _MEMORY_TOLERANCE_GB


def _candidates(name: str) -> list[catalog.GpuInfo]:
    """The catalog GPUs ``name`` can mean, by the rule in the module docstring."""
    wanted = _key(name)
    if not wanted.tokens:
        return []
    entries = _entries()
    exact = [e.info for e in entries if wanted in e.keys]
    if exact:
        return exact
    return [
        e.info
        for e in entries
        if e.required <= wanted.tokens
        and wanted.tokens <= e.allowed
        and (wanted.memory_gb is None or _same_memory(wanted.memory_gb, e.info.memory_gb))
    ]


def _describe(info: catalog.GpuInfo) -> str:
    return f"{info.name} ({info.memory_gb:g} GB)"


def _nearby(name: str) -> list[catalog.GpuInfo]:
    """Catalog GPUs whose names are close to ``name``: its model tokens with other sizes or suffixes, then
    spelling neighbours. Offered as other parts to choose from, never taken in its place."""
    wanted = _key(name)
    if not wanted.tokens:
        return []
    entries = _entries()
    family = [e.info for e in entries if e.required and e.required <= wanted.tokens]
    if family:
        # Its model with another memory size or suffix ("A100 120GB", "RTX 4090 Ti"): those parts only.
        return family[:_SUGGESTIONS]
    near = [e.info for e in entries if wanted.tokens & e.required]
    spelled = " ".join(sorted(wanted.tokens))
    by_key = {" ".join(sorted(k.tokens)): e.info for e in entries for k in e.keys if k.tokens}
    near += [by_key[k] for k in difflib.get_close_matches(spelled, list(by_key), n=_SUGGESTIONS, cutoff=0.5)]
    by_name = {n: e.info for e in entries for n in (e.info.name, *e.info.aliases)}
    near += [by_name[n] for n in difflib.get_close_matches(name, list(by_name), n=_SUGGESTIONS, cutoff=0.4)]
    return list(dict.fromkeys(near))[:_SUGGESTIONS]


def find_gpu(name: str) -> catalog.GpuInfo | None:
    """The one catalog GPU ``name`` means (its name, an alias, an nvidia-smi name), else None: an unknown name
    and a name that fits several GPUs ("A100") both give None, never a guess."""
    found = _candidates(name)
    return found[0] if len(found) == 1 else None


def _spec(info: catalog.GpuInfo) -> GpuSpec:
    facts = catalog.capacity_facts()
    if info.total_gib is not None:
        total, estimate = info.total_gib, False
    else:
        total, estimate = info.memory_gb * facts.gpu_total_default_ratio, True
    return GpuSpec(info.name, total, info.bandwidth_gbs, info.bf16_tflops, estimate, info.compute_capability or None)


def resolve_gpu(name: str) -> GpuSpec:
    """The GPU called ``name``. A name that fits several catalog GPUs, or none, is a usage error that lists the
    candidates (for several: each one's full name and memory; for none: the closest names, as other parts)."""
    found = _candidates(name)
    if len(found) == 1:
        return _spec(found[0])
    if found:
        raise UsageError(
            f"--gpu {name!r} could be {len(found)} GPUs: {'; '.join(_describe(i) for i in found)}",
            "give the full name of one of them (its memory size or form factor), or --gpu-memory-gib with the"
            " total nvidia-smi shows",
        )
    near = _nearby(name)
    if near:
        hint = (
            f"did you mean {', '.join(_describe(i) for i in near)}? These are other parts, not {name!r}:"
            " give one of them, or --gpu-memory-gib with the total nvidia-smi shows"
        )
    else:
        hint = "give the GPU's name as nvidia-smi prints it, or --gpu-memory-gib with the total nvidia-smi shows"
    raise UsageError(f"--gpu {name!r}: not a GPU this tool knows", hint)


def local_gpu(nvml: Any = None) -> GpuSpec:
    """The GPU of this machine as NVML reports it (``--gpu auto``): its name resolves to a catalog GPU when it is
    exactly one, and its total memory is the one NVML reports. Without NVML this is a usage error."""
    from llmtriage.capture import nvml as nvml_module  # only here: the capture package costs `fit` ~70 ms to import

    session = nvml if nvml is not None else nvml_module.Nvml()
    try:
        return _local_gpu(session)
    finally:
        if nvml is None:
            session.stop()


def _local_gpu(session: Any) -> GpuSpec:
    hint = "give --gpu NAME (e.g. 'H100 SXM', 'NVIDIA L4') or --gpu-memory-gib with the total nvidia-smi shows"
    count = session.query("nvmlDeviceGetCount")
    if count.value is None:
        raise UsageError(f"--gpu auto: NVML is not available ({count.reason})", hint)
    if not count.value:
        raise UsageError("--gpu auto: NVML sees no GPU on this machine", hint)
    devices: list[tuple[str, float]] = []
    for index in range(int(count.value)):
        handle = session.query("nvmlDeviceGetHandleByIndex", index)
        name = session.query("nvmlDeviceGetName", handle.value) if handle.value is not None else handle
        memory = session.query("nvmlDeviceGetMemoryInfo", handle.value) if handle.value is not None else handle
        if name.value is None or memory.value is None:
            raise UsageError(f"--gpu auto: NVML could not read GPU {index} ({name.reason or memory.reason})", hint)
        text = name.value.decode() if isinstance(name.value, bytes) else str(name.value)
        devices.append((text, float(memory.value.total) / 2**30))
    if len({d[0] for d in devices}) > 1:
        listed = ", ".join(f"GPU {i}: {n} ({gib:.2f} GiB)" for i, (n, gib) in enumerate(devices))
        raise UsageError(f"--gpu auto: this machine has different GPUs ({listed})", hint)
    smi_name, total = devices[0][0], min(d[1] for d in devices)
    info = find_gpu(smi_name)
    if info is None:
        return GpuSpec(smi_name, total, None, None)
    return _spec(info).with_reported_total(total)


def catalog_specs() -> list[GpuSpec]:
    """Every catalog GPU, smallest memory first."""
    return sorted((_spec(info) for info in catalog.gpus()), key=lambda g: g.total_memory_gib)
