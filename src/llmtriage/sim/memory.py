"""The simulator's startup memory: vLLM's own accounting (``llmtriage.capacity.fit``) and vLLM's error texts.

budget = gpu_memory_utilization x total memory; weights, the profiled activation peak, non-torch memory and
CUDA graphs come out of it; what is left becomes KV cache blocks. Another process's memory only matters to
the free-memory check at startup.
"""

from __future__ import annotations

from dataclasses import dataclass

from llmtriage.capacity import FitRequest, FitResult, GpuSpec, LaunchSettings, ModelSpec, fit, parse_version

GIB = float(2**30)
VLLM_VERSION = "0.32.0"
# Where vLLM's files live in its image: the paths of the tracebacks the sim prints.
VLLM_SITE = "/usr/local/lib/python3.12/dist-packages/vllm"


@dataclass(frozen=True, slots=True)
class EngineArgs:
    """The vLLM engine arguments the simulator honours (vLLM's own flag names); None: vLLM's default."""

    max_model_len: int | None = None
    gpu_memory_utilization: float = 0.9
    max_num_seqs: int | None = None
    max_num_batched_tokens: int | None = None
    enable_prefix_caching: bool = True
    enable_chunked_prefill: bool = True
    enforce_eager: bool = False
    kv_cache_dtype: str = "auto"


@dataclass(frozen=True, slots=True)
class MemoryPlan:
    """vLLM's startup arithmetic for the simulated server, and the error text vLLM would print, if any."""

    fit: FitResult
    other_process_gib: float
    error_message: str | None

    @property
    def error(self) -> str | None:
        """The startup error id (capacity's vocabulary), or None when vLLM would start."""
        return self.fit.error

    @property
    def max_model_len(self) -> int:
        """The context limit the server runs with."""
        return self.fit.max_model_len

    @property
    def block_size(self) -> int:
        """Tokens per KV block."""
        return self.fit.block_size


def _message(result: FitResult, model: ModelSpec, args: EngineArgs, free_gib: float) -> str | None:
    """vLLM 0.32's wording of the error ``result`` names."""
    if result.error == "max_model_len_exceeds_model":
        return (
            f"User-specified max_model_len ({result.max_model_len}) is greater than the derived max_model_len "
            f"(max_position_embeddings={float(model.max_position_embeddings or 0)} or model_max_length=None in model's "
            "config.json). To allow overriding this maximum, set the env var VLLM_ALLOW_LONG_MAX_MODEL_LEN=1. "
            "VLLM_ALLOW_LONG_MAX_MODEL_LEN must be used with extreme caution."
        )
    if result.error == "free_memory_less_than_requested":
        return (
            f"Free memory on device cuda:0 ({free_gib:.2f}/{result.gpu_total_gib:.2f} GiB) on startup is less than "
            f"desired GPU memory utilization ({args.gpu_memory_utilization}, {result.budget_gib:.2f} GiB). Decrease "
            "GPU memory utilization or reduce GPU memory used by other processes."
        )
    if result.error == "no_available_memory_for_cache_blocks":
        return (
            "No available memory for the cache blocks. Try increasing `gpu_memory_utilization` when initializing "
            "the engine. See https://docs.vllm.ai/en/latest/configuration/conserving_memory/ for more details."
        )
    if result.error == "kv_cache_too_small_for_max_model_len":
        return (
            f"To serve at least one request with the model's max seq len ({result.max_model_len}), "
            f"({result.kv_needed_gib:.2f} GiB KV cache is needed, which is larger than the available KV cache memory "
            f"({result.available_kv_gib:.2f} GiB). Based on the available memory, the estimated maximum model length "
            f"is {result.max_model_len_that_fits}. Try increasing `gpu_memory_utilization` or decreasing "
            "`max_model_len` when initializing the engine."
        )
    return None


def plan(model: ModelSpec, gpu: GpuSpec, args: EngineArgs, other_process_gib: float = 0.0) -> MemoryPlan:
    """What vLLM 0.32 decides at startup for this model, GPU and settings."""
    free = gpu.total_memory_gib - other_process_gib
    launch = LaunchSettings(
        max_model_len=args.max_model_len,
        gpu_memory_utilization=args.gpu_memory_utilization,
        max_num_seqs=args.max_num_seqs,
        max_num_batched_tokens=args.max_num_batched_tokens,
        kv_cache_dtype=args.kv_cache_dtype,
        enforce_eager=args.enforce_eager,
    )
    launch.validate()
    result = fit(
        FitRequest(
            model=model,
            gpu=gpu,
            launch=launch,
            version=parse_version(VLLM_VERSION),
            free_memory_gib=free if other_process_gib else None,
        )
    )
    return MemoryPlan(
        fit=result, other_process_gib=other_process_gib, error_message=_message(result, model, args, free)
    )
