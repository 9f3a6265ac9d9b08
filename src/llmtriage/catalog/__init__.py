"""The catalogs: data files shipped with the package, loaded once and validated on load.

Signatures, the diagnostic tree, the Xid table, metric name maps, launch flags, GPUs and models all
live in ``*.yaml`` next to this module; code never hard-codes what these files say. Their classes and loaders are in
``catalog.triage`` and ``catalog.capacity`` and are reached through this package (``catalog.signatures()``).
"""

from __future__ import annotations

import contextlib
import importlib
import marshal
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

from llmtriage import usercache

ROLES = frozenset({"error", "wrapper", "context", "marker", "fact", "stats", "access", "frame"})
FACT_TARGETS = frozenset({"memory", "launch", "meta", "bench", "offload", "stack"})
# The per-engine signature files under catalog/signatures/, read after the common signatures.yaml.
SIGNATURE_GROUPS = ("vllm", "sglang", "tgi", "llama_cpp", "ollama", "trtllm", "lmdeploy", "stack", "hf")
# Error families (signatures.yaml explains each). Fatal ones stop a server; serving ones are printed only by a server
# that answered or was working on requests; engine_dead marks wrappers of an error printed elsewhere.
FATAL_FAMILIES = frozenset(
    {"oom", "config", "model_path", "bind", "distributed", "driver", "hardware", "kernel", "killed", "timeout"}
    | {"unrecognized"}
)
SERVING_FAMILIES = frozenset({"request", "capacity", "offload", "overload"})
FAMILIES = FATAL_FAMILIES | SERVING_FAMILIES | {"engine_dead"}
# vLLM's CPU backend has fixes of its own, in host-memory knobs.
CPU_BACKEND = "vllm_cpu"


class CatalogError(Exception):
    """A catalog data file is malformed (a packaging bug, caught by the tests)."""


def load_yaml(name: str) -> Any:
    """Parse the catalog file ``name`` (``signatures/vllm.yaml``) with libyaml, or take the parse from the cache when
    the file is unchanged (models.yaml alone takes tens of milliseconds to parse, which every `fit` would pay)."""
    return load_packaged_yaml(Path(__file__).parent.joinpath(*name.split("/")))


def load_packaged_yaml(path: Path) -> Any:
    """A data file shipped in the package (a catalog, watch/signals.yaml, the runbook's seeds), parsed as
    :func:`load_yaml` parses it."""
    name = f"{path.parent.name}/{path.name}"
    entry = usercache.file_key(
        "catalog", [path], name, f"py{sys.version_info[0]}.{sys.version_info[1]}", f"m{marshal.version}"
    )
    cached = usercache.read(entry)
    if cached is not None:
        try:
            return marshal.loads(cached)
        except (EOFError, ValueError, TypeError):
            pass  # a corrupt entry: parse again and overwrite it
    import yaml  # only a changed file is parsed; the import costs every start-up ~8 ms

    # libyaml's loader parses the same documents ~10x faster than the pure-Python one; wheels without libyaml lack it.
    data = yaml.load(path.read_text(encoding="utf-8"), Loader=getattr(yaml, "CSafeLoader", yaml.SafeLoader))
    with contextlib.suppress(ValueError):  # a value marshal cannot store (a YAML date): parsed each time
        usercache.write(entry, marshal.dumps(data))
    return data


# The classes and loaders live in two modules, made on first use (PEP 562): `fit` needs only the capacity ones, and
# building the triage ones' ~20 dataclasses would cost it ~10 ms of start-up.
_MODULE_OF = {
    "GpuInfo": "capacity",
    "gpus": "capacity",
    "CatalogModel": "capacity",
    "models": "capacity",
    "QuantDefaults": "capacity",
    "VllmAccounting": "capacity",
    "CapacityFacts": "capacity",
    "capacity_facts": "capacity",
    "Signature": "triage",
    "SIGNATURE_FILES": "triage",
    "signatures": "triage",
    "FramePhase": "triage",
    "frame_phases": "triage",
    "Branch": "triage",
    "Question": "triage",
    "CauseInfo": "triage",
    "EvidenceSource": "triage",
    "Tree": "triage",
    "tree": "triage",
    "EngineInfo": "triage",
    "engines": "triage",
    "XidInfo": "triage",
    "xids": "triage",
    "ClocksReason": "triage",
    "NvidiaSmiFields": "triage",
    "nvidia_smi_fields": "triage",
    "MetricSpec": "triage",
    "MetricMap": "triage",
    "metric_map": "triage",
    "LaunchOption": "triage",
    "LaunchFlags": "triage",
    "launch_flags": "triage",
    "Slo": "triage",
    "Thresholds": "triage",
    "thresholds": "triage",
    "version_tuple": "triage",
    "ToolkitDriver": "triage",
    "GpuFeature": "triage",
    "CudaStack": "triage",
    "cuda_stack": "triage",
}

if TYPE_CHECKING:
    from llmtriage.catalog.capacity import (
        CapacityFacts,
        CatalogModel,
        GpuInfo,
        QuantDefaults,
        VllmAccounting,
        capacity_facts,
        gpus,
        models,
    )
    from llmtriage.catalog.triage import (
        SIGNATURE_FILES,
        Branch,
        CauseInfo,
        ClocksReason,
        CudaStack,
        EngineInfo,
        EvidenceSource,
        FramePhase,
        GpuFeature,
        LaunchFlags,
        LaunchOption,
        MetricMap,
        MetricSpec,
        NvidiaSmiFields,
        Question,
        Signature,
        Slo,
        Thresholds,
        ToolkitDriver,
        Tree,
        XidInfo,
        cuda_stack,
        engines,
        frame_phases,
        launch_flags,
        metric_map,
        nvidia_smi_fields,
        signatures,
        thresholds,
        tree,
        version_tuple,
        xids,
    )

__all__ = [
    "CPU_BACKEND",
    "FACT_TARGETS",
    "FAMILIES",
    "FATAL_FAMILIES",
    "ROLES",
    "SERVING_FAMILIES",
    "SIGNATURE_FILES",
    "SIGNATURE_GROUPS",
    "Branch",
    "CapacityFacts",
    "CatalogError",
    "CatalogModel",
    "CauseInfo",
    "ClocksReason",
    "CudaStack",
    "EngineInfo",
    "EvidenceSource",
    "FramePhase",
    "GpuFeature",
    "GpuInfo",
    "LaunchFlags",
    "LaunchOption",
    "MetricMap",
    "MetricSpec",
    "NvidiaSmiFields",
    "QuantDefaults",
    "Question",
    "Signature",
    "Slo",
    "Thresholds",
    "ToolkitDriver",
    "Tree",
    "VllmAccounting",
    "XidInfo",
    "capacity_facts",
    "cuda_stack",
    "engines",
    "frame_phases",
    "gpus",
    "launch_flags",
    "load_packaged_yaml",
    "load_yaml",
    "metric_map",
    "models",
    "nvidia_smi_fields",
    "signatures",
    "thresholds",
    "tree",
    "version_tuple",
    "xids",
]


def __getattr__(name: str) -> object:  # not Any: mypy still flags a misspelt name
    module = _MODULE_OF.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(f"{__name__}.{module}"), name)
    globals()[name] = value
    return value
