"""Model architectures from config.json fields, and a checkpoint's exact weight bytes from its safetensors headers.

A model directory with ``*.safetensors`` gives the exact weight bytes from the files' headers (the 8-byte
header length, then a JSON table of tensors and their byte ranges); nothing is loaded. Where a name leads to
a config is ``llmtriage.capacity.resolve``'s business.
"""

from __future__ import annotations

import functools
import json
import struct
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from llmtriage import catalog
from llmtriage.capacity import quantization
from llmtriage.capacity.quantization import QuantScheme
from llmtriage.errors import UsageError
from llmtriage.parse.hf_config import language_model_fields

_HEADER_LIMIT_BYTES = 100 * 2**20
_CONFIG_LIMIT_BYTES = 64 * 2**20
# Sanity bounds on a config's numbers: far above any real model, low enough that no loop or product runs away.
_MAX_LAYERS = 100_000
_MAX_SIZE = 2**40
_CONFIG_HINT = "give the model's own config.json (Hugging Face format), or a catalog model name"


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
    quant: QuantScheme | None = None
    weights_bytes: int | None = None
    source: str = ""
    note: str = ""

    @property
    def is_mla(self) -> bool:
        """Multi-head latent attention (DeepSeek V2/V3): one compressed latent per token and layer."""
        return self.kv_lora_rank is not None and self.qk_rope_head_dim is not None

    @property
    def shape(self) -> tuple[int | None, ...]:
        """The sizes memory depends on: two checkpoints with the same shape are priced alike."""
        return (
            self.num_layers,
            self.hidden_size,
            self.num_attention_heads,
            self.num_kv_heads,
            self.head_dim,
            self.intermediate_size,
            self.num_experts,
            self.moe_intermediate_size,
            self.kv_lora_rank,
            self.vocab_size,
        )

    @property
    def is_moe(self) -> bool:
        """Mixture of experts."""
        return bool(self.num_experts) and bool(self.experts_per_token)

    def moe_layers(self) -> int:
        """Layers whose MLP is a mixture of experts."""
        if not self.is_moe:
            return 0
        # Layers i in [first_dense_layers, num_layers) with (i + 1) a multiple of the step.
        step = max(1, self.moe_layer_step)
        first = min(max(0, self.first_dense_layers), self.num_layers)
        return self.num_layers // step - first // step


def _int(
    data: Mapping[str, Any], source: str, *keys: str, positive: bool = False, limit: int = _MAX_SIZE
) -> int | None:
    """The first of ``keys`` (a field's spellings across architectures) that is set, as a whole number.

    A set field that holds no whole number in [0, ``limit``] (NaN, Infinity, a fraction, a negative number,
    text), or 0 where ``positive``, is a usage error naming it: no estimate is better than one from nonsense.
    """
    for key in keys:
        value = data.get(key)
        if value is None or isinstance(value, bool):
            continue
        if isinstance(value, float) and value.is_integer():
            value = int(value)
        if not isinstance(value, int):
            shown = repr(value) if isinstance(value, str | float) else type(value).__name__
            raise UsageError(f"{source}: {key} is {shown[:40]}, not a whole number", _CONFIG_HINT)
        if value < 0 or value > limit or (positive and value == 0):
            bound = "positive" if positive else "non-negative"
            raise UsageError(f"{source}: {key} is {value}; it must be {bound} and at most {limit:,}", _CONFIG_HINT)
        return value
    return None


def _layer_kinds(data: Mapping[str, Any], layers: int, source: str) -> tuple[int, int]:
    """(sliding-window layers, chunked-local layers) as vLLM builds them."""
    window = _int(data, source, "sliding_window")
    chunk = _int(data, source, "attention_chunk_size")
    layer_types = data.get("layer_types")
    if isinstance(layer_types, list):
        sliding = sum(1 for t in layer_types if "sliding" in str(t))
        chunked = sum(1 for t in layer_types if "chunk" in str(t))
        return min(sliding, layers), min(chunked, layers - min(sliding, layers))
    if chunk:
        no_rope = data.get("no_rope_layers")
        if isinstance(no_rope, list) and len(no_rope) == layers:
            return 0, sum(1 for flag in no_rope if flag)
        return 0, layers - layers // 4
    if not window or data.get("use_sliding_window") is False:
        return 0, 0
    if isinstance(layer_types, str) and "alternating" in layer_types:
        return layers - layers // 2, 0
    pattern = _int(data, source, "sliding_window_pattern")
    if pattern:
        return layers - layers // pattern, 0
    if str(data.get("architecture") or "").startswith("Gemma2") or "Gemma2" in str(data.get("architectures")):
        return layers - layers // 2, 0
    return layers, 0


def _tied(core: Mapping[str, Any], data: Mapping[str, Any], architecture: str | None) -> bool:
    """Whether lm_head shares the embedding matrix: the config's word, else its architecture's default."""
    for fields in (core, data):
        if isinstance(fields.get("tie_word_embeddings"), bool):
            return bool(fields["tie_word_embeddings"])
    defaults = catalog.capacity_facts().tied_embeddings_by_default
    return bool(architecture) and str(architecture).startswith(defaults)


def spec_from_config(
    data: Mapping[str, Any],
    name: str,
    source: str,
    *,
    weights_bytes: int | None = None,
    note: str = "",
) -> ModelSpec:
    """A ModelSpec from config.json fields; multimodal configs are read through their ``text_config``.

    The quantization is the checkpoint's own ``quantization_config`` (at the top or in the text config).
    """
    core = language_model_fields(data)
    layers = _int(core, source, "num_hidden_layers", "n_layer", "num_layers", positive=True, limit=_MAX_LAYERS)
    hidden = _int(core, source, "hidden_size", "n_embd", "d_model", positive=True)
    heads = _int(core, source, "num_attention_heads", "n_head", positive=True)
    missing = [
        field
        for field, value in (("num_hidden_layers", layers), ("hidden_size", hidden), ("num_attention_heads", heads))
        if value is None
    ]
    if layers is None or hidden is None or heads is None:
        raise UsageError(
            f"{source}: the model config lacks {', '.join(missing)}",
            _CONFIG_HINT,
        )
    head_dim = _int(core, source, "head_dim", positive=True) or hidden // heads
    if head_dim == 0:
        raise UsageError(f"{source}: hidden_size {hidden} is smaller than num_attention_heads {heads}", _CONFIG_HINT)
    int_field = functools.partial(_int, core, source)
    architectures = data.get("architectures") or core.get("architectures") or []
    architecture = (
        str(architectures[0]) if architectures else (str(core["architecture"]) if core.get("architecture") else None)
    )
    sliding, chunked = _layer_kinds({**core, "architecture": architecture}, layers, source)
    experts = int_field("n_routed_experts", "num_local_experts", "num_experts")
    return ModelSpec(
        name=name,
        architecture=architecture,
        num_layers=layers,
        hidden_size=hidden,
        num_attention_heads=heads,
        num_kv_heads=int_field("num_key_value_heads", "num_kv_heads", positive=True) or heads,
        head_dim=head_dim,
        intermediate_size=int_field("intermediate_size_mlp", "intermediate_size", "ffn_dim"),
        vocab_size=int_field("vocab_size"),
        max_position_embeddings=int_field(
            "max_position_embeddings", "n_positions", "max_seq_len", "seq_length", positive=True
        ),
        torch_dtype=str(core.get("torch_dtype") or core.get("dtype") or "").split(" ")[0] or None,
        tie_word_embeddings=_tied(core, data, architecture),
        sliding_window=int_field("sliding_window") if sliding else None,
        sliding_layers=sliding,
        attention_chunk_size=int_field("attention_chunk_size") if chunked else None,
        chunked_layers=chunked,
        kv_lora_rank=int_field("kv_lora_rank"),
        q_lora_rank=int_field("q_lora_rank"),
        qk_nope_head_dim=int_field("qk_nope_head_dim"),
        qk_rope_head_dim=int_field("qk_rope_head_dim"),
        v_head_dim=int_field("v_head_dim"),
        num_experts=experts,
        experts_per_token=int_field("num_experts_per_tok", "num_experts_per_token") if experts else None,
        moe_intermediate_size=(int_field("moe_intermediate_size") or int_field("intermediate_size"))
        if experts
        else None,
        shared_experts=int_field("n_shared_experts") or (1 if core.get("shared_expert") else 0),
        first_dense_layers=int_field("first_k_dense_replace") or 0,
        moe_layer_step=int_field("interleave_moe_layer_step", "decoder_sparse_step") or 1,
        quant=quantization.from_config(data.get("quantization_config") or core.get("quantization_config")),
        weights_bytes=weights_bytes,
        source=source,
        note=note,
    )


def safetensors_bytes(directory: Path) -> int | None:
    """The bytes of every tensor in ``directory/*.safetensors``, read from the headers; None when there are none.

    A file that is not a safetensors file (too short, a header length past the file or the limit, a header that
    is not a JSON object of tensors with two whole-number byte offsets each) is a usage error naming it.
    """
    files = sorted(directory.glob("*.safetensors"))
    if not files:
        return None
    return sum(_safetensors_file_bytes(path) for path in files)


def _safetensors_file_bytes(path: Path) -> int:
    """The bytes of the tensors one safetensors file's header lists."""

    def bad(why: str) -> UsageError:
        return UsageError(
            f"{path}: not a safetensors file ({why})", "move it out of the model directory, or give its config.json"
        )

    if not path.is_file():  # a FIFO or a device would block or never end
        raise bad("not a regular file")
    try:
        with path.open("rb") as f:
            head = f.read(8)
            if len(head) != 8:
                raise bad("shorter than its 8-byte header length")
            (length,) = struct.unpack("<Q", head)
            if length > _HEADER_LIMIT_BYTES:
                raise bad(f"header of {length} bytes")
            raw = f.read(length)
    except OSError as e:
        raise UsageError(f"{path}: cannot read it ({e.strerror or e})") from e
    if len(raw) != length:
        raise bad(f"header of {length} bytes, but only {len(raw)} follow")
    try:
        header = json.loads(raw)
    except (ValueError, RecursionError) as e:  # JSONDecodeError and UnicodeDecodeError are ValueErrors
        raise bad("header is not JSON") from e
    if not isinstance(header, dict):
        raise bad(f"header is a JSON {type(header).__name__}, not an object")
    total = 0
    for key, entry in header.items():
        if key == "__metadata__" or not isinstance(entry, dict):
            continue
        offsets = entry.get("data_offsets")
        if (
            not isinstance(offsets, list)
            or len(offsets) != 2
            or not all(isinstance(o, int) and not isinstance(o, bool) and o >= 0 for o in offsets)
            or offsets[1] < offsets[0]
        ):
            raise bad(f"tensor {key[:60]!r} has data_offsets {str(offsets)[:40]}, not [start, end] in bytes")
        total += offsets[1] - offsets[0]
    return total


def read_config(path: Path) -> dict[str, Any]:
    """The JSON object in the config file ``path``; anything else is a usage error saying what it is."""
    if not path.is_file():
        raise UsageError(f"{path}: not a regular file", "give the model's config.json")
    try:
        with path.open("rb") as f:
            raw = f.read(_CONFIG_LIMIT_BYTES + 1)
    except OSError as e:
        raise UsageError(f"{path}: cannot read it ({e.strerror or e})") from e
    if len(raw) > _CONFIG_LIMIT_BYTES:
        raise UsageError(f"{path}: larger than {_CONFIG_LIMIT_BYTES // 2**20} MiB, not a config.json")
    try:
        data = json.loads(raw.decode("utf-8"))
    except UnicodeDecodeError as e:
        raise UsageError(f"{path}: not UTF-8 text ({e.reason})", "give the model's config.json") from e
    except json.JSONDecodeError as e:
        raise UsageError(f"{path}: not JSON ({e.msg} at line {e.lineno})", "give the model's config.json") from e
    except RecursionError as e:
        raise UsageError(f"{path}: not a config.json (nested too deeply)", "give the model's config.json") from e
    if not isinstance(data, dict):
        raise UsageError(f"{path}: not a JSON object", "give the model's config.json")
    return data
