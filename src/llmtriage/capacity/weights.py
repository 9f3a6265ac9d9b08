"""Parameter counts from the architecture, and the bytes the weights take by dtype and quantization."""

from __future__ import annotations

from dataclasses import dataclass

from llmtriage import catalog
from llmtriage.capacity.model import ModelSpec
from llmtriage.errors import UsageError

DTYPE_BYTES = {
    "auto": 2,
    "bfloat16": 2,
    "float16": 2,
    "half": 2,
    "fp16": 2,
    "bf16": 2,
    "float32": 4,
    "float": 4,
    "fp32": 4,
}
# Quantizations that touch only the MoE experts (the attention and dense layers stay 16-bit).
_EXPERTS_ONLY = frozenset({"mxfp4"})


@dataclass(frozen=True, slots=True)
class ParamCounts:
    """Parameters by kind: embeddings (vocab x hidden, never quantized), attention, dense MLP, experts."""

    embedding: int
    attention: int
    dense_mlp: int
    experts: int
    expert_size: int

    @property
    def total(self) -> int:
        """Every parameter."""
        return self.embedding + self.attention + self.dense_mlp + self.experts


def param_counts(model: ModelSpec) -> ParamCounts:
    """Count the parameters of ``model`` layer by layer (norms and biases are left out: under 0.1%)."""
    h, layers = model.hidden_size, model.num_layers
    if model.is_mla:
        nope = model.qk_nope_head_dim or model.head_dim
        rope = model.qk_rope_head_dim or 0
        v_dim = model.v_head_dim or model.head_dim
        heads = model.num_attention_heads
        q = (
            h * model.q_lora_rank + model.q_lora_rank * heads * (nope + rope)
            if model.q_lora_rank
            else h * heads * (nope + rope)
        )
        kv = h * ((model.kv_lora_rank or 0) + rope) + (model.kv_lora_rank or 0) * heads * (nope + v_dim)
        attention = q + kv + heads * v_dim * h
    else:
        q_width = model.num_attention_heads * model.head_dim
        attention = 2 * h * q_width + 2 * h * model.num_kv_heads * model.head_dim
    moe_layers = model.moe_layers()
    dense_width = model.intermediate_size or 0
    expert_size = 3 * h * (model.moe_intermediate_size or 0)
    experts = 0
    if moe_layers:
        per_layer = ((model.num_experts or 0) + model.shared_experts) * expert_size + h * (model.num_experts or 0)
        experts = moe_layers * per_layer
    dense_mlp = (layers - moe_layers) * 3 * h * dense_width
    vocab = model.vocab_size or 0
    embedding = vocab * h * (1 if model.tie_word_embeddings else 2)
    return ParamCounts(embedding, attention * layers, dense_mlp, experts, expert_size)


def dtype_bytes(dtype: str) -> int:
    """Bytes per activation / unquantized weight; ``auto`` runs fp32 configs in 16 bit, as vLLM does."""
    name = (dtype or "auto").lower()
    if name not in DTYPE_BYTES:
        raise UsageError(f"--dtype {dtype!r}: unknown", f"one of {', '.join(sorted(DTYPE_BYTES))}")
    return DTYPE_BYTES[name]


def quant_bytes(quantization: str | None) -> float | None:
    """Bytes per quantized weight, None for no quantization; an unknown method is a usage error."""
    if not quantization:
        return None
    table = catalog.capacity_facts().quantization_bytes_per_param
    method = quantization.lower()
    if method not in table:
        raise UsageError(f"--quantization {quantization!r}: unknown", f"one of {', '.join(sorted(table))}")
    return table[method]


def weights_bytes(model: ModelSpec, quantization: str | None, dtype: str) -> int:
    """All the weights' bytes: the checkpoint's when read from safetensors headers, else from the architecture."""
    if model.weights_bytes is not None:
        return model.weights_bytes
    counts = param_counts(model)
    wbytes = dtype_bytes(dtype)
    method = (quantization or model.quantization or "").lower() or None
    qbytes = quant_bytes(method) if method else None
    if qbytes is None:
        return counts.total * wbytes
    if method in _EXPERTS_ONLY:
        return int(counts.experts * qbytes + (counts.total - counts.experts) * wbytes)
    return int(counts.embedding * wbytes + (counts.total - counts.embedding) * qbytes)


def active_params(model: ModelSpec, batch: int = 1) -> float:
    """Parameters one decode step reads for ``batch`` sequences: MoE layers read only the experts routed to."""
    counts = param_counts(model)
    if not model.is_moe or not counts.experts:
        return float(counts.total)
    experts = model.num_experts or 1
    k = model.experts_per_token or 1
    touched = experts * (1.0 - (1.0 - k / experts) ** max(1, batch))
    per_layer_touched = (touched + model.shared_experts) * counts.expert_size
    return float(counts.total - counts.experts + model.moe_layers() * per_layer_touched)
