"""Will vLLM start, and with how much KV cache: its own startup arithmetic, by engine version.

The order follows vLLM's: the context limit is checked against the model when the config is built; V1
then refuses to start when free memory is below ``total x gpu_memory_utilization`` (another process's
memory matters only here: the budget is a fraction of *total* memory); the weights load; a profiling
run measures the activation peak (a ``max_num_batched_tokens`` batch in V1, ``max_model_len`` tokens
in V0); from 0.21 the CUDA-graph estimate comes out of the budget too; what is left is the KV cache,
which must hold one ``max_model_len`` request.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace
from typing import Any

from llmtriage import catalog
from llmtriage.capacity.gpu import GpuSpec, catalog_specs
from llmtriage.capacity.model import ModelSpec
from llmtriage.capacity.quantization import requested, scheme
from llmtriage.capacity.version import EngineVersion
from llmtriage.capacity.weights import dtype_bytes, reads_checkpoint_bytes, weight_quantization, weights_bytes
from llmtriage.errors import UsageError

GIB = 2**30
SCHEMA_VERSION = 1
KV_DTYPE_BYTES = {"auto": None, "fp8": 1, "fp8_e4m3": 1, "fp8_e5m2": 1, "bfloat16": 2, "float16": 2}


@dataclass(frozen=True, slots=True)
class LaunchSettings:
    """The engine arguments that memory depends on; None means vLLM's default for the version and GPU."""

    max_model_len: int | None = None
    gpu_memory_utilization: float = 0.9
    tensor_parallel_size: int = 1
    pipeline_parallel_size: int = 1
    max_num_seqs: int | None = None
    max_num_batched_tokens: int | None = None
    block_size: int | None = None
    kv_cache_dtype: str = "auto"
    quantization: str | None = None
    dtype: str = "auto"
    enforce_eager: bool = False

    def validate(self) -> None:
        """Nonsense values are usage errors with a hint."""
        if not 0 < self.gpu_memory_utilization <= 1:
            raise UsageError(
                f"--gpu-memory-utilization {self.gpu_memory_utilization:g}: must be in (0, 1]",
                "it is a fraction of the GPU's total memory, e.g. 0.9",
            )
        for flag, value in (
            ("--max-model-len", self.max_model_len),
            ("--tp", self.tensor_parallel_size),
            ("--pp", self.pipeline_parallel_size),
            ("--max-num-seqs", self.max_num_seqs),
            ("--max-num-batched-tokens", self.max_num_batched_tokens),
            ("--block-size", self.block_size),
        ):
            if value is not None and value <= 0:
                raise UsageError(f"{flag} {value}: must be a positive whole number")
        if self.kv_cache_dtype.lower() not in KV_DTYPE_BYTES:
            raise UsageError(
                f"--kv-cache-dtype {self.kv_cache_dtype!r}: unknown", f"one of {', '.join(KV_DTYPE_BYTES)}"
            )
        if requested(self.quantization):
            scheme(str(self.quantization), "--quantization")
        dtype_bytes(self.dtype)


@dataclass(frozen=True, slots=True)
class FitRequest:
    """A model on a GPU with launch settings, for one vLLM version.

    ``available_kv_gib`` is what vLLM printed ("Available KV cache memory"); given, the budget is not
    estimated and the KV figures follow from it exactly. ``free_memory_gib`` is the free memory before
    start (what other processes leave).
    """

    model: ModelSpec
    gpu: GpuSpec
    launch: LaunchSettings
    version: EngineVersion
    free_memory_gib: float | None = None
    available_kv_gib: float | None = None


@dataclass(frozen=True, slots=True)
class KvGroup:
    """Layers that share a block table: full attention, a sliding window, or chunked local attention."""

    kind: str
    window: int | None


@dataclass(frozen=True, slots=True)
class KvLayout:
    """How one GPU's KV cache is laid out: bytes per token and layer, block size, layer groups."""

    bytes_per_token_layer: int
    block_size: int
    layers: int
    group_size: int
    groups: tuple[KvGroup, ...]

    @property
    def page_bytes(self) -> int:
        """One block of one layer."""
        return self.bytes_per_token_layer * self.block_size

    @property
    def bytes_per_token(self) -> int:
        """One token across every layer on the GPU."""
        return self.bytes_per_token_layer * self.layers


@dataclass(frozen=True, slots=True)
class FitResult:
    """vLLM's startup arithmetic for one request, and its verdict. Memory figures are per GPU, in GiB."""

    starts: bool
    error: str | None
    detail: str
    engine: str
    engine_version: str
    model: str
    gpu: str
    gpu_total_gib: float
    budget_gib: float
    weights_gib: float
    activation_gib: float
    non_torch_gib: float
    cuda_graph_gib: float
    cuda_graph_in_budget: bool
    available_kv_gib: float
    available_kv_source: str
    kv_bytes_per_token: int
    block_size: int
    num_gpu_blocks: int
    kv_tokens: int
    max_model_len: int
    max_concurrency: float
    kv_needed_gib: float
    max_model_len_that_fits: int
    max_num_batched_tokens: int
    max_num_seqs: int
    quantization: str | None = None
    weights_source: str = "architecture"
    model_note: str = ""
    warnings: tuple[str, ...] = ()
    suggestions: tuple[str, ...] = ()

    def to_dict(self) -> dict[str, Any]:
        """The JSON document of ``llmtriage fit --format json``."""
        return {
            "schema_version": SCHEMA_VERSION,
            "starts": self.starts,
            "error": self.error,
            "detail": self.detail,
            "engine": self.engine,
            "engine_version": self.engine_version,
            "model": self.model,
            "gpu": self.gpu,
            "gpu_total_gib": round(self.gpu_total_gib, 2),
            "budget_gib": round(self.budget_gib, 2),
            "weights_gib": round(self.weights_gib, 2),
            "activation_gib": round(self.activation_gib, 2),
            "non_torch_gib": round(self.non_torch_gib, 2),
            "cuda_graph_gib": round(self.cuda_graph_gib, 2),
            "cuda_graph_in_budget": self.cuda_graph_in_budget,
            "available_kv_gib": round(self.available_kv_gib, 2),
            "available_kv_source": self.available_kv_source,
            "kv_bytes_per_token": self.kv_bytes_per_token,
            "block_size": self.block_size,
            "num_gpu_blocks": self.num_gpu_blocks,
            "kv_tokens": self.kv_tokens,
            "max_model_len": self.max_model_len,
            "max_concurrency": round(self.max_concurrency, 2),
            "kv_needed_gib": round(self.kv_needed_gib, 2),
            "max_model_len_that_fits": self.max_model_len_that_fits,
            "max_num_batched_tokens": self.max_num_batched_tokens,
            "max_num_seqs": self.max_num_seqs,
            "quantization": self.quantization,
            "weights_source": self.weights_source,
            "model_note": self.model_note,
            "warnings": list(self.warnings),
            "suggestions": list(self.suggestions),
        }


def _cdiv(a: int, b: int) -> int:
    return -(-a // b)


# ---------------------------------------------------------------- the KV cache layout


def kv_layout(request: FitRequest) -> KvLayout:
    """Bytes per token and layer on one GPU, the block size, and the layer groups vLLM forms."""
    model, launch, version = request.model, request.launch, request.version
    acct = catalog.capacity_facts().vllm
    kv_dtype = KV_DTYPE_BYTES[launch.kv_cache_dtype.lower()] or dtype_bytes(launch.dtype)
    tp = launch.tensor_parallel_size
    mla = model.is_mla and version.at_least("mla_latent_cache")
    if mla:
        # One latent (compressed KV + the rope part) per token and layer, the same on every TP rank.
        per_layer = ((model.kv_lora_rank or 0) + (model.qk_rope_head_dim or 0)) * kv_dtype
        default_block = acct.mla_block_size.get(request.gpu.name, acct.block_size)
    elif model.is_mla:
        heads = max(1, model.num_attention_heads // tp)
        k_dim = (model.qk_nope_head_dim or model.head_dim) + (model.qk_rope_head_dim or 0)
        per_layer = heads * (k_dim + (model.v_head_dim or model.head_dim)) * kv_dtype
        default_block = acct.block_size
    else:
        # vLLM keeps at least one KV head per rank: with TP above the KV heads, heads are replicated.
        per_layer = 2 * max(1, model.num_kv_heads // tp) * model.head_dim * kv_dtype
        default_block = acct.block_size
    block = launch.block_size or default_block
    layers = _cdiv(model.num_layers, launch.pipeline_parallel_size)
    share = layers / model.num_layers
    sliding = round(model.sliding_layers * share)
    chunked = round(model.chunked_layers * share)
    full = layers - sliding - chunked
    hybrid = sum(1 for n in (full, sliding, chunked) if n) > 1
    engine_v1 = version.engine == "v1"
    if hybrid and not (engine_v1 and version.at_least("hybrid_kv_manager")):
        return KvLayout(per_layer, block, layers, layers, (KvGroup("full", None),))
    if not hybrid:
        if sliding and engine_v1:
            return KvLayout(per_layer, block, layers, layers, (KvGroup("sliding", model.sliding_window),))
        return KvLayout(per_layer, block, layers, layers, (KvGroup("full", None),))
    counts = [n for n in (full, sliding, chunked) if n]
    group_size = max(counts) if max(counts) < 1.5 * min(counts) else min(counts)
    groups: list[KvGroup] = []
    for kind, n, window in (
        ("full", full, None),
        ("sliding", sliding, model.sliding_window),
        ("chunked", chunked, model.attention_chunk_size),
    ):
        groups.extend(KvGroup(kind, window) for _ in range(_cdiv(n, group_size) if n else 0))
    return KvLayout(per_layer, block, layers, group_size, tuple(groups))


def _blocks_per_request(group: KvGroup, layout: KvLayout, max_model_len: int, batched_tokens: int) -> int:
    """Blocks one layer of ``group`` needs for a ``max_model_len`` request (KVCacheSpec.max_memory_usage_bytes)."""
    block = layout.block_size
    if group.kind == "sliding" and group.window:
        return _cdiv(min(group.window - 1 + batched_tokens, max_model_len), block) + 1
    if group.kind == "chunked" and group.window:
        return _cdiv(min(group.window + batched_tokens, max_model_len), block)
    return _cdiv(max_model_len, block)


def kv_needed_bytes(layout: KvLayout, max_model_len: int, batched_tokens: int) -> int:
    """The KV bytes one ``max_model_len`` request needs on one GPU (V1's check before allocating)."""
    blocks = sum(_blocks_per_request(g, layout, max_model_len, batched_tokens) for g in layout.groups)
    return layout.group_size * layout.page_bytes * blocks


# ---------------------------------------------------------------- the budget


@dataclass(frozen=True, slots=True)
class _Budget:
    budget_gib: float
    weights_gib: float
    activation_gib: float
    non_torch_gib: float
    cuda_graph_gib: float
    graph_in_budget: bool
    available_kv_gib: float
    source: str


def _scheduler_defaults(request: FitRequest, max_model_len: int) -> tuple[int, int]:
    """(max_num_batched_tokens, max_num_seqs) as vLLM would set them."""
    acct = catalog.capacity_facts().vllm
    launch, gpu = request.launch, request.gpu
    if request.version.engine == "v1":
        d = acct.v1_defaults
        large = gpu.total_memory_gib >= float(d["large_gpu_min_gib"]) and not any(
            s in gpu.name for s in d["small_name_contains"]
        )
        batched = int(d["large_max_num_batched_tokens"] if large else d["max_num_batched_tokens"])
        seqs = int(d["large_max_num_seqs"] if large else d["max_num_seqs"])
    else:
        v0 = acct.v0_defaults
        if max_model_len > v0["chunked_prefill_above_len"]:
            batched = v0["chunked_prefill_batched_tokens"]
        else:
            batched = max(max_model_len, v0["min_batched_tokens"])
        seqs = v0["max_num_seqs"]
    return launch.max_num_batched_tokens or batched, launch.max_num_seqs or seqs


def _budget(request: FitRequest, batched_tokens: int, max_num_seqs: int) -> _Budget:
    model, launch, gpu, version = request.model, request.launch, request.gpu, request.version
    est = catalog.capacity_facts().vllm.estimates
    ranks = launch.tensor_parallel_size * launch.pipeline_parallel_size
    budget = gpu.total_memory_gib * launch.gpu_memory_utilization
    weights = weights_bytes(model, launch.quantization, launch.dtype) / ranks / GIB
    act_bytes = dtype_bytes(launch.dtype)
    if model.is_moe:
        width = (model.moe_intermediate_size or 0) * (model.experts_per_token or 1)
    else:
        width = model.intermediate_size or 4 * model.hidden_size
    per_token = act_bytes * (
        est["mlp_factor"] * width / launch.tensor_parallel_size + est["hidden_factor"] * model.hidden_size
    )
    logits = max_num_seqs * (model.vocab_size or 0) / launch.tensor_parallel_size * 4 * est["logits_copies"]
    activation = (batched_tokens * per_token + logits) / GIB
    non_torch = est["non_torch_gib"] + est["non_torch_gib_per_extra_rank"] * (ranks - 1)
    graph = 0.0 if launch.enforce_eager else est["cuda_graph_gib"]
    in_budget = version.engine == "v1" and version.at_least("cuda_graph_in_budget")
    if request.available_kv_gib is not None:
        available, source = request.available_kv_gib, "given"
    else:
        available = budget - weights - activation - non_torch - (graph if in_budget else 0.0)
        if request.free_memory_gib is not None and not version.at_least("instance_only_accounting"):
            available -= gpu.total_memory_gib - request.free_memory_gib
        source = "estimated"
    return _Budget(budget, weights, activation, non_torch, graph, in_budget, available, source)


# ---------------------------------------------------------------- the verdict


def _estimate_max_len(layout: KvLayout, available_bytes: int, limit: int, batched_tokens: int) -> int:
    """vLLM's binary search: the longest context whose KV for one request fits in the available bytes."""
    if kv_needed_bytes(layout, 1, batched_tokens) > available_bytes:
        return 0
    low, high, best = 1, limit, 1
    while low <= high:
        mid = (low + high) // 2
        if kv_needed_bytes(layout, mid, batched_tokens) <= available_bytes:
            best, low = mid, mid + 1
        else:
            high = mid - 1
    return best


def fit(request: FitRequest) -> FitResult:
    """Reproduce vLLM's startup decision for ``request``."""
    launch, model, version, gpu = request.launch, request.model, request.version, request.gpu
    launch.validate()
    if gpu.total_memory_gib <= 0:
        raise UsageError(f"GPU memory {gpu.total_memory_gib:g} GiB: must be positive")
    if request.free_memory_gib is not None and not 0 <= request.free_memory_gib <= gpu.total_memory_gib:
        raise UsageError(
            f"--free-memory-gib {request.free_memory_gib:g}: must be between 0 and the GPU's total"
            f" ({gpu.total_memory_gib:.2f} GiB)"
        )
    model_limit = model.max_position_embeddings
    max_model_len = launch.max_model_len or model_limit
    if max_model_len is None:
        raise UsageError(f"{model.name}: the config has no max_position_embeddings", "give --max-model-len")
    batched, seqs = _scheduler_defaults(request, max_model_len)
    layout = kv_layout(request)
    budget_parts = _budget(request, batched, seqs)
    available_bytes = int(budget_parts.available_kv_gib * GIB)
    engine_v1 = version.engine == "v1"

    if engine_v1:
        num_blocks = max(0, available_bytes // layout.page_bytes // layout.group_size)
        per_group = num_blocks // len(layout.groups) if version.at_least("hybrid_kv_manager") else num_blocks
        kv_tokens = per_group * layout.block_size
        needed = kv_needed_bytes(layout, max_model_len, batched)
        if version.at_least("concurrency_in_blocks"):
            per_request = sum(_blocks_per_request(g, layout, max_model_len, batched) for g in layout.groups)
            concurrency = num_blocks / per_request
        else:
            concurrency = kv_tokens / max_model_len
        fits_len = _estimate_max_len(layout, available_bytes, model_limit or max_model_len, batched)
    else:
        num_blocks = max(0, available_bytes // (layout.page_bytes * layout.layers))
        kv_tokens = num_blocks * layout.block_size
        needed = _cdiv(max_model_len, layout.block_size) * layout.page_bytes * layout.layers
        concurrency = kv_tokens / max_model_len
        fits_len = min(kv_tokens, model_limit or kv_tokens)

    error, detail = _verdict(request, budget_parts, max_model_len, needed, available_bytes, kv_tokens, fits_len)
    warnings = _warnings(request, budget_parts)
    quant = weight_quantization(model, launch.quantization)
    return FitResult(
        starts=error is None,
        error=error,
        detail=detail,
        engine=version.engine,
        engine_version=str(version),
        model=model.name,
        gpu=gpu.name,
        gpu_total_gib=gpu.total_memory_gib,
        budget_gib=budget_parts.budget_gib,
        weights_gib=budget_parts.weights_gib,
        activation_gib=budget_parts.activation_gib,
        non_torch_gib=budget_parts.non_torch_gib,
        cuda_graph_gib=budget_parts.cuda_graph_gib,
        cuda_graph_in_budget=budget_parts.graph_in_budget,
        available_kv_gib=budget_parts.available_kv_gib,
        available_kv_source=budget_parts.source,
        kv_bytes_per_token=layout.bytes_per_token,
        block_size=layout.block_size,
        num_gpu_blocks=num_blocks,
        kv_tokens=kv_tokens,
        max_model_len=max_model_len,
        max_concurrency=concurrency,
        kv_needed_gib=needed / GIB,
        max_model_len_that_fits=fits_len,
        max_num_batched_tokens=batched,
        max_num_seqs=seqs,
        quantization=quant.label if quant is not None else None,
        weights_source="safetensors headers" if reads_checkpoint_bytes(model, quant) else "architecture",
        model_note=model.note,
        warnings=warnings,
    )


def _verdict(
    request: FitRequest,
    budget_parts: _Budget,
    max_model_len: int,
    needed_bytes: int,
    available_bytes: int,
    kv_tokens: int,
    fits_len: int,
) -> tuple[str | None, str]:
    model, version, gpu, launch = request.model, request.version, request.gpu, request.launch
    limit = model.max_position_embeddings
    if launch.max_model_len is not None and limit is not None and launch.max_model_len > limit:
        return (
            "max_model_len_exceeds_model",
            f"--max-model-len {launch.max_model_len} > the model's max_position_embeddings {limit}",
        )
    free = request.free_memory_gib
    if free is not None and free < budget_parts.budget_gib and request.available_kv_gib is None:
        if version.engine == "v1":
            return (
                "free_memory_less_than_requested",
                f"free memory {free:.2f} GiB < {launch.gpu_memory_utilization:g} x {gpu.total_memory_gib:.2f}"
                f" = {budget_parts.budget_gib:.2f} GiB requested: another process holds"
                f" {gpu.total_memory_gib - free:.2f} GiB",
            )
        if version.at_least("instance_only_accounting"):
            return (
                "free_memory_less_than_requested",
                f"V0 sizes its KV cache to fill {budget_parts.budget_gib:.2f} GiB but only {free:.2f} GiB is free:"
                " the allocation runs out of memory",
            )
    room = free if free is not None else gpu.total_memory_gib
    if budget_parts.weights_gib >= room:
        return (
            "no_available_memory_for_cache_blocks",
            f"the weights alone ({budget_parts.weights_gib:.2f} GiB per GPU) exceed the GPU's {room:.2f} GiB:"
            " out of memory while loading",
        )
    if available_bytes <= 0 or (version.engine == "v0" and kv_tokens == 0):
        return (
            "no_available_memory_for_cache_blocks",
            f"nothing left for the KV cache: {budget_parts.available_kv_gib:.2f} GiB after the weights"
            f" ({budget_parts.weights_gib:.2f}), activations ({budget_parts.activation_gib:.2f}) and the rest of the"
            f" {budget_parts.budget_gib:.2f} GiB budget",
        )
    if version.engine == "v1" and needed_bytes > available_bytes:
        return (
            "kv_cache_too_small_for_max_model_len",
            f"one {max_model_len:,}-token request needs {needed_bytes / GIB:.2f} GiB of KV cache,"
            f" {available_bytes / GIB:.2f} GiB is available; the largest max-model-len that fits is {fits_len:,}",
        )
    if version.engine == "v0" and max_model_len > kv_tokens:
        return (
            "kv_cache_too_small_for_max_model_len",
            f"max seq len {max_model_len:,} > the {kv_tokens:,} tokens the KV cache holds",
        )
    return None, "fits"


def _warnings(request: FitRequest, budget_parts: _Budget) -> tuple[str, ...]:
    notes = []
    if request.gpu.total_is_estimate:
        notes.append(
            f"{request.gpu.name}: total memory estimated as {request.gpu.total_memory_gib:.2f} GiB;"
            " give --gpu-memory-gib with the total vLLM or nvidia-smi reports for exact figures"
        )
    outside = request.gpu.total_memory_gib - budget_parts.budget_gib
    if (
        budget_parts.cuda_graph_gib
        and not budget_parts.graph_in_budget
        and budget_parts.cuda_graph_gib + budget_parts.non_torch_gib > outside
    ):
        notes.append(
            f"CUDA graphs (~{budget_parts.cuda_graph_gib:.2f} GiB) are captured outside the budget in this version, and"
            f" only {outside:.2f} GiB is left outside it: capture may run out of memory"
        )
    if budget_parts.source == "estimated":
        notes.append("activation, non-torch and CUDA-graph memory are estimates; vLLM measures them at startup")
    return tuple(notes)


# ---------------------------------------------------------------- what to change


def suggest(request: FitRequest, result: FitResult) -> FitResult:
    """``result`` with what to change: the largest max-model-len, fp8 KV, the TP needed, a bigger GPU."""
    if result.starts:
        return result
    tips: list[str] = []
    launch = request.launch
    if result.error == "max_model_len_exceeds_model":
        tips.append(f"--max-model-len {request.model.max_position_embeddings} (the model's own limit)")
        return replace(result, suggestions=tuple(tips))
    if result.error == "kv_cache_too_small_for_max_model_len" and result.max_model_len_that_fits > 0:
        tips.append(f"--max-model-len {result.max_model_len_that_fits} (the largest that fits)")
    if launch.kv_cache_dtype == "auto":
        fp8 = fit(replace(request, launch=replace(launch, kv_cache_dtype="fp8")))
        if fp8.starts:
            tips.append(f"--kv-cache-dtype fp8 (holds {fp8.kv_tokens:,} tokens)")
    if result.error == "free_memory_less_than_requested" and request.free_memory_gib is not None:
        util = math.floor(request.free_memory_gib / request.gpu.total_memory_gib * 100) / 100
        tips.append(f"free the memory other processes hold, or --gpu-memory-utilization {util:.2f}")
    if request.available_kv_gib is None:
        for tp in (2, 4, 8):
            if tp <= launch.tensor_parallel_size or request.model.num_attention_heads % tp:
                continue
            if _starts(request, tensor_parallel_size=tp):
                tips.append(f"--tensor-parallel-size {tp} ({tp} GPUs)")
                break
        for gpu in catalog_specs():
            if gpu.total_memory_gib <= request.gpu.total_memory_gib:
                continue
            if fit(replace(request, gpu=gpu, free_memory_gib=None)).starts:
                tips.append(f"a bigger GPU: {gpu.name} ({gpu.total_memory_gib:.0f} GiB)")
                break
    return replace(result, suggestions=tuple(tips))


def _starts(request: FitRequest, **changes: Any) -> bool:
    return fit(replace(request, launch=replace(request.launch, **changes))).starts
