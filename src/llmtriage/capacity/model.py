"""Model architectures: from a local config.json or model directory, the catalog, or the Hugging Face Hub.

A model directory with ``*.safetensors`` gives the exact weight bytes from the files' headers (the 8-byte
header length, then a JSON table of tensors and their byte ranges); nothing is loaded.
"""

from __future__ import annotations

import difflib
import json
import struct
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from llmtriage import catalog
from llmtriage.errors import UsageError
from llmtriage.parse.model_config import first_int, language_model_fields

_HEADER_LIMIT_BYTES = 100 * 2**20


@dataclass(frozen=True, slots=True)
class ModelSpec:
    """What memory and speed depend on, read from a config.json (field names as Hugging Face writes them)."""

    name: str
    architecture: str | None
    num_layers: int
    hidden_size: int
    num_attention_heads: int
    num_kv_heads: int
    head_dim: int
    intermediate_size: int | None
    vocab_size: int | None
    max_position_embeddings: int | None
    torch_dtype: str | None
    tie_word_embeddings: bool = False
    sliding_window: int | None = None
    sliding_layers: int = 0
    attention_chunk_size: int | None = None
    chunked_layers: int = 0
    kv_lora_rank: int | None = None
    q_lora_rank: int | None = None
    qk_nope_head_dim: int | None = None
    qk_rope_head_dim: int | None = None
    v_head_dim: int | None = None
    num_experts: int | None = None
    experts_per_token: int | None = None
    moe_intermediate_size: int | None = None
    shared_experts: int = 0
    first_dense_layers: int = 0
    moe_layer_step: int = 1
    quantization: str | None = None
    weights_bytes: int | None = None
    source: str = ""

    @property
    def is_mla(self) -> bool:
        """Multi-head latent attention (DeepSeek V2/V3): one compressed latent per token and layer."""
        return self.kv_lora_rank is not None and self.qk_rope_head_dim is not None

    @property
    def is_moe(self) -> bool:
        """Mixture of experts."""
        return bool(self.num_experts) and bool(self.experts_per_token)

    def moe_layers(self) -> int:
        """Layers whose MLP is a mixture of experts."""
        if not self.is_moe:
            return 0
        return sum(
            1
            for i in range(self.num_layers)
            if i >= self.first_dense_layers and (i + 1) % max(1, self.moe_layer_step) == 0
        )


def _layer_kinds(data: Mapping[str, Any], layers: int) -> tuple[int, int]:
    """(sliding-window layers, chunked-local layers) as vLLM builds them."""
    window = first_int(data, "sliding_window")
    chunk = first_int(data, "attention_chunk_size")
    layer_types = data.get("layer_types")
    if isinstance(layer_types, list):
        sliding = sum(1 for t in layer_types if "sliding" in str(t))
        chunked = sum(1 for t in layer_types if "chunk" in str(t))
        return sliding, chunked
    if chunk:
        no_rope = data.get("no_rope_layers")
        if isinstance(no_rope, list) and len(no_rope) == layers:
            return 0, sum(1 for flag in no_rope if flag)
        return 0, layers - layers // 4
    if not window or data.get("use_sliding_window") is False:
        return 0, 0
    if isinstance(layer_types, str) and "alternating" in layer_types:
        return layers - layers // 2, 0
    pattern = first_int(data, "sliding_window_pattern")
    if pattern:
        return layers - layers // pattern, 0
    if str(data.get("architecture") or "").startswith("Gemma2") or "Gemma2" in str(data.get("architectures")):
        return layers - layers // 2, 0
    return layers, 0


def _quant_method(data: Mapping[str, Any]) -> str | None:
    quant = data.get("quantization_config")
    if isinstance(quant, Mapping) and quant.get("quant_method"):
        return str(quant["quant_method"]).lower()
    return None


def spec_from_config(
    data: Mapping[str, Any],
    name: str,
    source: str,
    *,
    weights_bytes: int | None = None,
) -> ModelSpec:
    """A ModelSpec from config.json fields; multimodal configs are read through their ``text_config``."""
    core = language_model_fields(data)
    layers = first_int(core, "num_hidden_layers", "n_layer", "num_layers")
    hidden = first_int(core, "hidden_size", "n_embd", "d_model")
    heads = first_int(core, "num_attention_heads", "n_head")
    missing = [
        field
        for field, value in (("num_hidden_layers", layers), ("hidden_size", hidden), ("num_attention_heads", heads))
        if value is None
    ]
    if layers is None or hidden is None or heads is None:
        raise UsageError(
            f"{source}: the model config lacks {', '.join(missing)}",
            "give the model's own config.json (Hugging Face format), or a catalog model name",
        )
    if layers <= 0 or hidden <= 0 or heads <= 0:
        raise UsageError(f"{source}: layers, hidden size and heads must be positive")
    architectures = data.get("architectures") or core.get("architectures") or []
    architecture = (
        str(architectures[0]) if architectures else (str(core["architecture"]) if core.get("architecture") else None)
    )
    sliding, chunked = _layer_kinds({**core, "architecture": architecture}, layers)
    experts = first_int(core, "n_routed_experts", "num_local_experts", "num_experts")
    return ModelSpec(
        name=name,
        architecture=architecture,
        num_layers=layers,
        hidden_size=hidden,
        num_attention_heads=heads,
        num_kv_heads=first_int(core, "num_key_value_heads", "num_kv_heads") or heads,
        head_dim=first_int(core, "head_dim") or hidden // heads,
        intermediate_size=first_int(core, "intermediate_size_mlp", "intermediate_size", "ffn_dim"),
        vocab_size=first_int(core, "vocab_size"),
        max_position_embeddings=first_int(core, "max_position_embeddings", "n_positions", "max_seq_len", "seq_length"),
        torch_dtype=str(core.get("torch_dtype") or core.get("dtype") or "").split(" ")[0] or None,
        tie_word_embeddings=bool(core.get("tie_word_embeddings", False)),
        sliding_window=first_int(core, "sliding_window") if sliding else None,
        sliding_layers=sliding,
        attention_chunk_size=first_int(core, "attention_chunk_size") if chunked else None,
        chunked_layers=chunked,
        kv_lora_rank=first_int(core, "kv_lora_rank"),
        q_lora_rank=first_int(core, "q_lora_rank"),
        qk_nope_head_dim=first_int(core, "qk_nope_head_dim"),
        qk_rope_head_dim=first_int(core, "qk_rope_head_dim"),
        v_head_dim=first_int(core, "v_head_dim"),
        num_experts=experts,
        experts_per_token=first_int(core, "num_experts_per_tok", "num_experts_per_token") if experts else None,
        moe_intermediate_size=(first_int(core, "moe_intermediate_size") or first_int(core, "intermediate_size"))
        if experts
        else None,
        shared_experts=first_int(core, "n_shared_experts") or (1 if core.get("shared_expert") else 0),
        first_dense_layers=first_int(core, "first_k_dense_replace") or 0,
        moe_layer_step=first_int(core, "interleave_moe_layer_step", "decoder_sparse_step") or 1,
        quantization=_quant_method(core),
        weights_bytes=weights_bytes,
        source=source,
    )


def safetensors_bytes(directory: Path) -> int | None:
    """The bytes of every tensor in ``directory/*.safetensors``, read from the headers; None when there are none."""
    files = sorted(directory.glob("*.safetensors"))
    if not files:
        return None
    total = 0
    for path in files:
        with path.open("rb") as f:
            head = f.read(8)
            if len(head) != 8:
                raise UsageError(f"{path}: not a safetensors file (shorter than its 8-byte header length)")
            (length,) = struct.unpack("<Q", head)
            if length > _HEADER_LIMIT_BYTES:
                raise UsageError(f"{path}: not a safetensors file (header of {length} bytes)")
            try:
                header = json.loads(f.read(length))
            except (json.JSONDecodeError, UnicodeDecodeError) as e:
                raise UsageError(f"{path}: not a safetensors file (header is not JSON)") from e
        for key, entry in header.items():
            if key == "__metadata__" or not isinstance(entry, dict):
                continue
            start, end = entry.get("data_offsets", (0, 0))
            total += int(end) - int(start)
    return total


def _read_config(path: Path) -> dict[str, Any]:
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError) as e:
        raise UsageError(f"{path}: cannot read it ({e})") from e
    except json.JSONDecodeError as e:
        raise UsageError(f"{path}: not JSON ({e.msg} at line {e.lineno})", "give the model's config.json") from e
    if not isinstance(data, dict):
        raise UsageError(f"{path}: not a JSON object", "give the model's config.json")
    return data


def from_catalog(model_id: str) -> ModelSpec | None:
    """The catalog model ``model_id`` (case-insensitive), else None."""
    models = catalog.models()
    entry = models.get(model_id) or next((m for k, m in models.items() if k.lower() == model_id.lower()), None)
    if entry is None:
        return None
    return spec_from_config(entry.config, entry.id, entry.source)


def _from_hub(model_id: str) -> ModelSpec:
    try:
        from huggingface_hub import hf_hub_download  # type: ignore[import-not-found]
    except ImportError as e:
        raise UsageError(
            f"--model {model_id!r}: not in the catalog, and huggingface_hub is not installed to fetch it",
            "pip install huggingface_hub, or give a local config.json or model directory",
        ) from e
    try:
        path = Path(hf_hub_download(model_id, "config.json"))
    except Exception as e:  # the hub raises many kinds: offline, gated, not found
        raise UsageError(f"--model {model_id!r}: could not fetch its config.json ({type(e).__name__})") from e
    return spec_from_config(_read_config(path), model_id, f"https://huggingface.co/{model_id}")


def resolve_model(name: str, *, online: bool = False) -> ModelSpec:
    """A model from a config.json, a model directory, a catalog id, or (``online``) the Hugging Face Hub."""
    path = Path(name)
    if path.is_dir():
        config = path / "config.json"
        if not config.is_file():
            raise UsageError(f"--model {name}: the directory has no config.json")
        return spec_from_config(_read_config(config), path.name, str(config), weights_bytes=safetensors_bytes(path))
    if path.is_file():
        return spec_from_config(_read_config(path), path.parent.name or path.name, str(path))
    found = from_catalog(name)
    if found is not None:
        return found
    if online and "/" in name:
        return _from_hub(name)
    close = difflib.get_close_matches(name, list(catalog.models()), n=3, cutoff=0.5)
    if not close:
        lowered = name.lower().split("/")[-1]
        close = [m for m in catalog.models() if lowered and lowered in m.lower()][:3]
    hint = f"did you mean {', '.join(close)}?" if close else "give a local config.json or model directory"
    if not online:
        hint += " (or --online to read its config.json from the Hugging Face Hub)"
    raise UsageError(f"--model {name!r}: no such file, directory or catalog model", hint)
