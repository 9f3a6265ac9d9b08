"""Fixes in the engine's own knobs, filled with the values the evidence already knows.

A fix in catalog/tree.yaml may hold ``{name|text}``: the value of ``name`` below when the evidence has it
(the port that is taken, the largest max-model-len that fits, the PID holding GPU memory), else ``text``.
"""

from __future__ import annotations

import math
import re

from llmtriage.diagnose.scene import Scene

_SLOT = re.compile(r"\{(?P<name>\w+)\|(?P<fallback>[^{}]*)\}")
_PORT_IN_TEXT = re.compile(r"(?:port[:= ]\s*|', |:)(?P<port>\d{2,5})\b")
# Margin kept under free ÷ total when suggesting a memory fraction.
UTIL_MARGIN = 0.02


def fix_engine(scene: Scene, engine: str | None) -> str | None:
    """The engine whose knobs the fixes use; vLLM on the CPU backend has its own."""
    if engine == "vllm" and scene.on_cpu:
        return "vllm_cpu"
    return engine


def fill(fix: str, values: dict[str, str]) -> str:
    """``fix`` with each ``{name|text}`` replaced by the known value, else by its text."""
    return _SLOT.sub(lambda m: values.get(m.group("name")) or m.group("fallback"), fix)


def known_values(scene: Scene) -> dict[str, str]:
    """The values a fix may name, read from the evidence (only those that are known)."""
    values: dict[str, str] = {}
    mem = scene.memory
    if (port := bound_port(scene)) is not None:
        values["port"] = str(port)
    if mem.estimated_max_model_len is not None:
        values["estimated_max_model_len"] = f"{mem.estimated_max_model_len:.0f}"
    if mem.kv_cache_tokens is not None:
        values["kv_cache_tokens"] = f"{mem.kv_cache_tokens:,.0f} tokens"
    if mem.free_memory_gib is not None:
        values["free_gib"] = f"{mem.free_memory_gib:.2f} GiB"
    if (util := suggested_utilization(scene)) is not None:
        values["suggested_util"] = f"{util:.2f}"
    if (holder := scene.other_process) is not None:
        values["other_pid"] = f"PID {holder.pid} ({holder.gib:.2f} GiB)"
    if scene.max_model_len is not None:
        values["max_model_len"] = f"{scene.max_model_len.value:.0f}"
    model = scene.evidence.model
    if model is not None and model.max_position_embeddings is not None:
        values["max_position_embeddings"] = str(model.max_position_embeddings)
    if model is not None and model.num_attention_heads is not None:
        values["num_attention_heads"] = f"{model.num_attention_heads} heads"
    for event in scene.events:
        if (heads := event.value("num_attention_heads")) is not None:
            values.setdefault("num_attention_heads", f"{heads} heads")
        if (pe := event.value("max_position_embeddings")) is not None:
            values.setdefault("max_position_embeddings", pe.removesuffix(".0"))
        if event.family == "oom" and (prefill := event.value("prefill_tokens")) is not None:
            values.setdefault("prefill_tokens", prefill)
    offload = scene.log.offload
    if offload.offloaded_layers is not None and offload.total_layers:
        values["offloaded_layers"] = f"{offload.offloaded_layers:g} of {offload.total_layers:g} layers on the GPU"
    return values


def bound_port(scene: Scene) -> int | None:
    """The port the server could not bind: from the bind error, else the launch."""
    for event in scene.events:
        if event.family != "bind":
            continue
        raw = event.value("port")
        if raw is None and (m := _PORT_IN_TEXT.search(event.text)) is not None:
            raw = m.group("port")
        if raw is not None:
            return int(raw)
    if scene.launch is not None and scene.launch.port is not None:
        return scene.launch.port
    return None


def suggested_utilization(scene: Scene) -> float | None:
    """A memory fraction that fits: just under free ÷ total when both are known, else a step down from a high one."""
    mem = scene.memory
    if mem.free_memory_gib is not None and mem.total_memory_gib:
        share = mem.free_memory_gib / mem.total_memory_gib - UTIL_MARGIN
        return math.floor(share * 100) / 100 if share > 0 else None
    util = scene.utilization
    if util is not None and util.value >= scene.t.util_elevated:
        return min(0.90, math.floor((util.value - 0.05) * 100) / 100)
    return None
