"""How a checkpoint's weights are quantized: from its config.json ``quantization_config``, its name, or --quantization.

vLLM reads the method from ``quantization_config.quant_method`` and each method's own fields (``bits`` and
``group_size`` for GPTQ/AWQ, ``config_groups`` for compressed-tensors, ``load_in_4bit`` for bitsandbytes,
``quant_algo`` for ModelOpt); the bytes a weight takes follow from the bits and the scales stored per group.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from llmtriage import catalog
from llmtriage.errors import UsageError

_FP8_BLOCK_SCALE_BYTES = 4  # one fp32 scale per weight block (DeepSeek-V3, Qwen3-FP8: [128, 128])


@dataclass(frozen=True, slots=True)
class QuantScheme:
    """One quantization: vLLM's method name, bits per weight, and the scale bytes per group of weights."""

    method: str
    bits: float
    group_size: int | None
    scale_bytes: float
    experts_only: bool
    origin: str
    pad_experts: tuple[int, int] | None = None

    @property
    def bytes_per_weight(self) -> float:
        """Stored bytes per quantized weight, scales included."""
        return self.bits / 8 + (self.scale_bytes / self.group_size if self.group_size else 0.0)

    @property
    def label(self) -> str:
        """``gptq 4-bit, groups of 128``."""
        bits = f"{self.bits:g}-bit"
        groups = f", groups of {self.group_size}" if self.group_size and self.group_size > 1 else ""
        scope = ", experts only" if self.experts_only else ""
        return f"{self.method} {bits}{groups}{scope}"


def requested(quantization: str | None) -> str | None:
    """A --quantization value as a method name; None for none (vLLM's default and "None" in its logs)."""
    method = (quantization or "").strip().lower()
    return None if method in {"", "none", "null"} else method


def known_methods() -> list[str]:
    """The --quantization names this tool can price."""
    return sorted(catalog.capacity_facts().quantization)


def scheme(method: str, origin: str, *, bits: float | None = None, group_size: int | None = None) -> QuantScheme:
    """``method``'s defaults (capacity.yaml), with the checkpoint's own bits and group size where it gives them."""
    table = catalog.capacity_facts().quantization
    name = method.strip().lower()
    defaults = table.get(name)
    if defaults is None:
        raise UsageError(f"{origin}: quantization {method!r} is not one this tool can price", _hint())
    if bits is not None and not 1 <= bits <= 16:
        raise UsageError(f"{origin}: {bits:g} bits per weight is not a quantization", _hint())
    return QuantScheme(
        method=name,
        bits=bits if bits is not None else defaults.bits,
        group_size=group_size if group_size is not None else defaults.group_size,
        scale_bytes=defaults.scale_bytes,
        experts_only=defaults.experts_only,
        origin=origin,
        pad_experts=defaults.pad_experts,
    )


def _hint() -> str:
    return f"give --quantization as one of {', '.join(known_methods())}"


def _number(value: object) -> float | None:
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    return float(value)


def _group(value: object) -> int | None:
    """A group size; -1 or 0 (one scale per output channel, negligible) is 0; None when not a number."""
    number = _number(value)
    if number is None or not number.is_integer():
        return None
    return max(0, int(number))


def from_config(quant: object, origin: str = "config.json quantization_config") -> QuantScheme | None:
    """The scheme a config.json ``quantization_config`` describes; None when there is none."""
    if not isinstance(quant, Mapping):
        return None
    method = str(quant.get("quant_method") or "").lower()
    if not method:
        if "quant_algo" in quant:  # hf_quant_config.json's inner "quantization" block
            method = "modelopt"
        else:
            return None
    if method == "fp8":
        block = quant.get("weight_block_size")
        if isinstance(block, list) and len(block) == 2 and all(_group(b) for b in block):
            size = int(block[0]) * int(block[1])
            return QuantScheme("fp8", 8, size, _FP8_BLOCK_SCALE_BYTES, False, origin)
        return scheme("fp8", origin)
    if method in {"awq", "gptq", "awq_marlin", "gptq_marlin", "moe_wna16"}:
        bits = _number(quant.get("bits", quant.get("w_bit")))
        group = _group(quant.get("group_size", quant.get("q_group_size")))
        return scheme(method, origin, bits=bits, group_size=group)
    if method == "compressed-tensors":
        return _compressed_tensors(quant, origin)
    if method == "bitsandbytes":
        if quant.get("load_in_8bit"):
            return QuantScheme("bitsandbytes", 8, 0, 0.0, False, origin)
        return scheme("bitsandbytes", origin)
    if method == "modelopt":
        return _modelopt(quant, origin)
    return scheme(method, origin)


def _compressed_tensors(quant: Mapping[str, Any], origin: str) -> QuantScheme:
    """llm-compressor's checkpoints: the weights of the first config group say the bits and the groups."""
    groups = quant.get("config_groups")
    weights: Mapping[str, Any] = {}
    if isinstance(groups, Mapping):
        first: Mapping[str, Any] = next((g for g in groups.values() if isinstance(g, Mapping)), {})
        found = first.get("weights")
        weights = found if isinstance(found, Mapping) else {}
    bits = _number(weights.get("num_bits")) or 4.0
    strategy = str(weights.get("strategy") or "").lower()
    group = _group(weights.get("group_size")) if strategy in {"group", "tensor_group"} else 0
    if bits == 4 and str(weights.get("type") or "").lower() == "float":
        return QuantScheme("compressed-tensors", 4, group or 16, 1.0, False, origin)  # NVFP4: fp8 scale per 16
    if bits >= 8:
        return QuantScheme("compressed-tensors", bits, 0, 0.0, False, origin)
    return scheme("compressed-tensors", origin, bits=bits, group_size=group)


def _modelopt(quant: Mapping[str, Any], origin: str) -> QuantScheme:
    nested = quant.get("quantization")
    inner: Mapping[str, Any] = nested if isinstance(nested, Mapping) else quant
    algo = str(inner.get("quant_algo") or "FP8").upper()
    if "FP4" in algo:
        return scheme("modelopt_fp4", origin, group_size=_group(inner.get("group_size")))
    return scheme("modelopt", origin)
