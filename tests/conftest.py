"""Shared test helpers: fixture paths and incident bundles."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from .incidents import INCIDENTS, incident_bundle, load_incident

__all__ = ["FIXTURES", "INCIDENTS", "incident_bundle", "load_incident"]

FIXTURES = Path(__file__).parent / "fixtures"

# The cause ids of DESIGN.md's flowchart: the catalog keeps each, the runbook seeds an entry for each.
DESIGN_CAUSE_IDS = (
    "weights_kv_exceed_memory",
    "gpu_mem_util_too_high",
    "other_process_holds_memory",
    "kv_cache_too_small_for_max_model_len",
    "max_model_len_exceeds_model",
    "driver_cuda_mismatch",
    "gpu_not_visible",
    "model_path_or_permission",
    "port_in_use",
    "unsupported_model",
    "nccl_or_distributed_init",
    "prompt_exceeds_max_model_len",
    "concurrency_exceeds_kv_pool",
    "long_prompt_surge",
    "activation_peak",
    "allocator_fragmentation",
    "cuda_graph_capture_memory",
    "xid_hardware_or_driver",
    "illegal_memory_access_kernel_bug",
    "queueing_over_capacity",
    "prefill_congestion",
    "prefix_cache_miss",
    "kv_pressure_preemption",
    "power_thermal_throttling",
    "gpu_contention_other_process",
    "memory_bandwidth_bound",
    "engine_stalled",
    "invalid_engine_argument",
    "tp_size_not_divisible",
    "dtype_unsupported_by_gpu",
    "trust_remote_code_required",
    "gpu_arch_not_supported_by_build",
    "worker_process_killed",
    "partial_cpu_offload",
    "no_gpu_offload",
    "enforce_eager_disables_cuda_graphs",
    "unrecognized_error",
)


@pytest.fixture(autouse=True, scope="session")
def _private_user_cache(tmp_path_factory: pytest.TempPathFactory) -> Iterator[None]:
    """The parsed catalogs and the Hyperscan database go to a cache of this session's own (inherited by the CLI
    processes tests start), never to the user's ~/.cache/llmtriage."""
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("LLMTRIAGE_CACHE_DIR", str(tmp_path_factory.mktemp("user-cache")))
        yield


@pytest.fixture
def fixtures() -> Path:
    return FIXTURES


async def _drive(url: str, payloads: list[dict[str, object]], concurrency: int, timeout_s: float) -> list[int]:
    import asyncio
    import sys

    import aiohttp

    statuses: list[int] = []
    gate = asyncio.Semaphore(concurrency)
    # A fresh connection per request: uvicorn closes idle keep-alive connections after 5 s, and a POST on one
    # it just closed fails with "Can not write request body" (seen against real vLLM under load).
    connector = aiohttp.TCPConnector(force_close=True, limit=0)
    async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=timeout_s), connector=connector) as session:

        async def one(payload: dict[str, object]) -> None:
            async with gate:
                try:
                    async with session.post(url + "/v1/completions", json=payload) as resp:
                        async for _ in resp.content:
                            pass
                        statuses.append(resp.status)
                except (aiohttp.ClientError, TimeoutError) as e:
                    print(f"request failed: {e!r}", file=sys.stderr)
                    statuses.append(0)

        await asyncio.gather(*(one(p) for p in payloads))
    return statuses


def drive(url: str, payloads: list[dict[str, object]], concurrency: int, timeout_s: float = 600) -> list[int]:
    """Send the payloads as streaming completions, at most `concurrency` at once; the HTTP statuses (0: no answer)."""
    import asyncio

    return asyncio.run(_drive(url, payloads, concurrency, timeout_s))


def completion(prompt_tokens: int, max_tokens: int, stream: bool = True) -> dict[str, object]:
    """A completion request of about `prompt_tokens` tokens for the simulator (4 characters a token)."""
    return {
        "prompt": "word " * (prompt_tokens * 4 // 5),
        "max_tokens": max_tokens,
        "stream": stream,
        "ignore_eos": True,
    }
