"""Recorded vLLM startups (tests/fixtures/fit-cases/*.yaml) as fit requests, with what vLLM printed."""

from __future__ import annotations

from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import yaml

from llmtriage.capacity.fit import FitRequest, LaunchSettings
from llmtriage.capacity.gpu import GpuSpec, find_gpu, resolve_gpu
from llmtriage.capacity.model import ModelSpec, spec_from_config
from llmtriage.capacity.resolve import from_catalog
from llmtriage.capacity.version import parse_version

# A GPU nobody named: only the figures that follow from --available-kv-gib are compared for it.
_UNNAMED_GPU_GIB = 80.0


@dataclass(frozen=True, slots=True)
class RecordedStart:
    """One recorded start: the request that reproduces it, what vLLM printed, and the outcome."""

    name: str
    source: str
    request: FitRequest
    printed: dict[str, float]
    starts: bool
    error: str | None
    predict: bool


def _model(data: dict[str, Any], name: str) -> ModelSpec:
    if data.get("model_config"):
        spec = spec_from_config(data["model_config"], name, str(data.get("model_config_source", "")))
    else:
        found = from_catalog(str(data["model"]))
        if found is None:
            raise ValueError(f"{name}: model {data['model']!r} is not in the catalog")
        spec = found
    overrides = data.get("model_overrides") or {}
    return replace(spec, **overrides)


def _gpu(data: dict[str, Any]) -> GpuSpec:
    name, total = data.get("gpu"), data.get("gpu_memory_gib")
    if name and find_gpu(str(name)) is not None:
        spec = resolve_gpu(str(name))
        return spec.with_reported_total(float(total)) if total else spec
    return GpuSpec(str(name or "unnamed GPU"), float(total or _UNNAMED_GPU_GIB), None, None)


def load_case(path: Path, *, with_printed_kv: bool) -> RecordedStart:
    """The case in ``path``; ``with_printed_kv`` feeds vLLM's printed available KV memory into the request."""
    data: dict[str, Any] = yaml.safe_load(path.read_text(encoding="utf-8"))
    printed = {k: float(v) for k, v in (data.get("printed") or {}).items()}
    launch = LaunchSettings(**(data.get("launch") or {}))
    request = FitRequest(
        model=_model(data, path.stem),
        gpu=_gpu(data),
        launch=launch,
        version=parse_version(str(data["engine_version"])),
        free_memory_gib=data.get("free_memory_gib"),
        available_kv_gib=printed.get("available_kv_gib") if with_printed_kv else None,
    )
    return RecordedStart(
        name=path.stem,
        source=str(data["source"]["url"]),
        request=request,
        printed=printed,
        starts=bool(data["starts"]),
        error=data.get("error"),
        predict=bool(data.get("predict", False)),
    )


def held_aside(directory: Path) -> list[Path]:
    """The cases listed in ``directory/HELD_ASIDE``."""
    lines = (directory / "HELD_ASIDE").read_text(encoding="utf-8").splitlines()
    return [directory / line.strip() for line in lines if line.strip() and not line.startswith("#")]
