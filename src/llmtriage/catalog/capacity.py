"""The capacity catalogs: GPUs (gpus.yaml), models (models.yaml) and vLLM's memory accounting (capacity.yaml).

Kept apart from the triage catalogs so that `llmtriage fit` builds only these classes at start-up.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cache
from typing import Any

from llmtriage.catalog import CatalogError, load_yaml


@dataclass(frozen=True, slots=True)
class GpuInfo:
    """A GPU of catalog/gpus.yaml, with the total memory torch reports on it when capacity.yaml knows it.

    ``compute_capability`` is CUDA's "major.minor" (an AMD part's gfx target); ``source`` and ``cc_source`` say
    where the figures and the compute capability come from, ``note`` what could not be checked.
    """

    name: str
    aliases: tuple[str, ...]
    memory_gb: float
    bandwidth_gbs: float
    bf16_tflops: float
    tdp_w: float | None
    total_gib: float | None
    compute_capability: str = ""
    source: str = ""
    cc_source: str = ""
    note: str = ""


@cache
def gpus() -> tuple[GpuInfo, ...]:
    """The GPUs of catalog/gpus.yaml."""
    totals = capacity_facts().gpu_total_gib
    result = []
    for raw in load_yaml("gpus.yaml")["gpus"]:
        name = str(raw["name"])
        result.append(
            GpuInfo(
                name=name,
                aliases=tuple(str(a) for a in raw.get("aliases", ())),
                memory_gb=float(raw["memory_gb"]),
                bandwidth_gbs=float(raw["bandwidth_gbs"]),
                bf16_tflops=float(raw["bf16_tflops"]),
                tdp_w=float(raw["tdp_w"]) if raw.get("tdp_w") is not None else None,
                total_gib=totals.get(name),
                compute_capability=str(raw.get("compute_capability") or ""),
                source=str(raw.get("source") or ""),
                cc_source=str(raw.get("cc_source") or ""),
                note=str(raw.get("note") or ""),
            )
        )
    names = [n for info in result for n in (info.name, *info.aliases)]
    if len(set(names)) != len(names):
        twice = sorted({n for n in names if names.count(n) > 1})
        raise CatalogError(f"gpus.yaml: a name or alias is used twice: {twice}")
    return tuple(result)


@dataclass(frozen=True, slots=True)
class CatalogModel:
    """A model of catalog/models.yaml: its fields named as in Hugging Face's config.json (mla/moe flattened)."""

    id: str
    config: dict[str, Any]
    source: str


@cache
def models() -> dict[str, CatalogModel]:
    """The models of catalog/models.yaml by id; ``same_as`` entries share their twin's architecture."""
    raw_entries = {str(m["id"]): m for m in load_yaml("models.yaml")["models"]}
    result: dict[str, CatalogModel] = {}
    for model_id, raw in raw_entries.items():
        base = raw_entries[str(raw["same_as"])] if raw.get("same_as") else raw
        flat = {k: v for k, v in base.items() if k not in ("mla", "moe", "source", "derived", "id", "same_as")}
        for group in ("mla", "moe"):
            flat.update(base.get(group) or {})
        source = raw.get("source") or {}
        result[model_id] = CatalogModel(
            id=model_id,
            config=flat,
            source=str(source.get("hf_config", "")) if isinstance(source, dict) else "",
        )
    return result


@dataclass(frozen=True, slots=True)
class QuantDefaults:
    """How a quantization method stores a weight unless the checkpoint says otherwise (capacity.yaml)."""

    bits: float
    group_size: int | None
    scale_bytes: float
    experts_only: bool
    pad_experts: tuple[int, int] | None  # the multiples vLLM pads experts' (intermediate, hidden) sizes to


@dataclass(frozen=True, slots=True)
class VllmAccounting:
    """How vLLM sizes its memory, and the versions where that changed (catalog/capacity.yaml ``vllm``)."""

    versions: dict[str, str]
    default_version: str
    block_size: int
    mla_block_size: dict[str, int]
    v1_defaults: dict[str, Any]
    v0_defaults: dict[str, int]
    estimates: dict[str, float]


@dataclass(frozen=True, slots=True)
class CapacityFacts:
    """catalog/capacity.yaml."""

    vllm: VllmAccounting
    gpu_total_gib: dict[str, float]
    gpu_total_default_ratio: float
    quantization: dict[str, QuantDefaults]
    tied_embeddings_by_default: tuple[str, ...]
    roofline_near_ratio: float
    roofline_far_ratio: float


@cache
def capacity_facts() -> CapacityFacts:
    """vLLM's memory accounting by version, GPU totals, bytes per quantized weight, capacity thresholds."""
    data = load_yaml("capacity.yaml")
    v = data["vllm"]
    vllm = VllmAccounting(
        versions={k: str(x) for k, x in v["versions"].items()},
        default_version=str(v["default_version"]),
        block_size=int(v["block_size"]),
        mla_block_size={str(k): int(x) for k, x in v["mla_block_size"].items()},
        v1_defaults=dict(v["v1_defaults"]),
        v0_defaults={k: int(x) for k, x in v["v0_defaults"].items()},
        estimates={k: float(x) for k, x in v["estimates"].items()},
    )
    return CapacityFacts(
        vllm=vllm,
        gpu_total_gib={str(k): float(x) for k, x in data["gpu_total_gib"].items()},
        gpu_total_default_ratio=float(data["gpu_total_default_ratio"]),
        quantization={
            str(k): QuantDefaults(
                bits=float(x["bits"]),
                group_size=int(x["group_size"]) if x.get("group_size") else None,
                scale_bytes=float(x.get("scale_bytes", 0)),
                experts_only=bool(x.get("experts_only", False)),
                pad_experts=(int(x["pad_experts"]["intermediate"]), int(x["pad_experts"]["hidden"]))
                if x.get("pad_experts")
                else None,
            )
            for k, x in data["quantization"].items()
        },
        tied_embeddings_by_default=tuple(str(a) for a in data["tied_embeddings_by_default"]),
        roofline_near_ratio=float(data["rules"]["roofline_near_ratio"]),
        roofline_far_ratio=float(data["rules"]["roofline_far_ratio"]),
    )


# ---------------------------------------------------------------- the software stack (cuda_drivers.yaml)
