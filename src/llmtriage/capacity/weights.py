"""Parameter counts from the architecture, and the bytes the weights take by dtype and quantization."""

from __future__ import annotations

from dataclasses import dataclass

from llmtriage.capacity.model import ModelSpec
from llmtriage.capacity.quantization import QuantScheme, requested, scheme
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


def weight_quantization(model: ModelSpec, quantization: str | None) -> QuantScheme | None:
    """The quantization the weights load in: ``--quantization`` if given, else the checkpoint's own.

    vLLM's kernel variants of a checkpoint's method (``awq_marlin`` for ``awq``) keep the checkpoint's bits.
    """
    method = requested(quantization)
    if method is None:
        return model.quant
    own = model.quant
    if own is not None and (own.method in method or method in own.method):
        return own
    return scheme(method, "--quantization")


def reads_checkpoint_bytes(model: ModelSpec, quant: QuantScheme | None) -> bool:
    """Whether the weights load as the checkpoint stores them, so its safetensors bytes (when read) are exact."""
    return model.weights_bytes is not None and quant is model.quant


def _expert_padding(model: ModelSpec, quant: QuantScheme) -> float:
    """How many times the experts' weights vLLM allocates, padding their sizes to the kernel's multiples."""
    if quant.pad_experts is None or not model.moe_intermediate_size:
        return 1.0
    inter, hidden = model.moe_intermediate_size, model.hidden_size
    pad_inter, pad_hidden = quant.pad_experts
    padded = -(-inter // pad_inter) * pad_inter * (-(-hidden // pad_hidden) * pad_hidden)
    return padded / (inter * hidden)


def weights_bytes(model: ModelSpec, quantization: str | None, dtype: str) -> int:
    """All the weights' bytes as vLLM allocates them: the checkpoint's safetensors bytes when read (plus any padding
    the quantization's kernels add), else from the architecture."""
    quant = weight_quantization(model, quantization)
    counts = param_counts(model)
    wbytes = dtype_bytes(dtype)
    per_weight = quant.bytes_per_weight if quant is not None else float(wbytes)
    padding = counts.experts * per_weight * (_expert_padding(model, quant) - 1) if quant is not None else 0.0
    exact = model.weights_bytes if reads_checkpoint_bytes(model, quant) else None
    if exact is not None:
        return int(exact + padding)
    if quant is None:
        return counts.total * wbytes
    if quant.experts_only:
        return int(counts.experts * per_weight + padding + (counts.total - counts.experts) * wbytes)
    return int(counts.embedding * wbytes + (counts.total - counts.embedding) * per_weight)


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
