"""The decode roofline: a decode step reads every weight on the GPU once plus the KV of every sequence.

step time >= (weights per GPU + KV read per GPU) / memory bandwidth, so the per-sequence token rate is at
most 1 / step time and the batch's at most batch / step time. Mixture-of-experts layers read only the
experts the batch is routed to. Prefill is compute bound: 2 x active parameters x tokens, plus attention.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from llmtriage.capacity.fit import GIB, FitRequest, kv_layout
from llmtriage.capacity.weights import active_params, param_counts, weights_bytes
from llmtriage.errors import UsageError


@dataclass(frozen=True, slots=True)
class Roofline:
    """Speed limits for ``batch`` sequences at ``context_tokens`` of context each, on one GPU of the group."""

    batch: int
    context_tokens: int
    bandwidth_gbs: float
    bf16_tflops: float
    weights_read_gib: float
    kv_read_gib: float
    tpot_floor_ms: float
    tokens_per_s_per_sequence: float
    tokens_per_s: float
    prefill_tflop: float
    prefill_ms: float

    def to_dict(self) -> dict[str, Any]:
        """JSON form."""
        return {
            "batch": self.batch,
            "context_tokens": self.context_tokens,
            "bandwidth_gbs": self.bandwidth_gbs,
            "bf16_tflops": self.bf16_tflops,
            "weights_read_gib": round(self.weights_read_gib, 3),
            "kv_read_gib": round(self.kv_read_gib, 3),
            "tpot_floor_ms": round(self.tpot_floor_ms, 3),
            "tokens_per_s_per_sequence": round(self.tokens_per_s_per_sequence, 1),
            "tokens_per_s": round(self.tokens_per_s, 1),
            "prefill_tflop": round(self.prefill_tflop, 3),
            "prefill_ms": round(self.prefill_ms, 1),
        }


def decode_roofline(request: FitRequest, batch: int, context_tokens: int) -> Roofline:
    """The decode ceiling and the prefill time of ``request``'s model on its GPU, tensor parallel included."""
    if batch <= 0 or context_tokens <= 0:
        raise UsageError("--batch and --context must be positive")
    gpu, model, launch = request.gpu, request.model, request.launch
    if not gpu.bandwidth_gbs or not gpu.bf16_tflops:
        raise UsageError(
            f"{gpu.name}: its memory bandwidth and FLOPs are unknown", "give --gpu with a catalog GPU name"
        )
    tp = launch.tensor_parallel_size
    all_weights = weights_bytes(model, launch.quantization, launch.dtype)
    counts = param_counts(model)
    read_share = active_params(model, batch) / counts.total
    weights_read = all_weights * read_share / tp
    full_layers = model.num_layers - model.sliding_layers - model.chunked_layers
    tokens_read = (
        full_layers * context_tokens
        + model.sliding_layers * min(context_tokens, model.sliding_window or context_tokens)
        + model.chunked_layers * min(context_tokens, model.attention_chunk_size or context_tokens)
    )
    kv_read = batch * tokens_read * kv_layout(request).bytes_per_token_layer
    step_s = (weights_read + kv_read) / (gpu.bandwidth_gbs * 1e9)
    attention_flop = 2 * model.num_layers * model.num_attention_heads * model.head_dim * context_tokens**2
    prefill_flop = 2 * active_params(model, 1) * context_tokens + attention_flop
    prefill_s = prefill_flop / (gpu.bf16_tflops * 1e12 * tp)
    return Roofline(
        batch=batch,
        context_tokens=context_tokens,
        bandwidth_gbs=gpu.bandwidth_gbs,
        bf16_tflops=gpu.bf16_tflops,
        weights_read_gib=weights_read / GIB,
        kv_read_gib=kv_read / GIB,
        tpot_floor_ms=step_s * 1000,
        tokens_per_s_per_sequence=1 / step_s,
        tokens_per_s=batch / step_s,
        prefill_tflop=prefill_flop / 1e12,
        prefill_ms=prefill_s * 1000,
    )
