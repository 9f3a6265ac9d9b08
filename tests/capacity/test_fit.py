"""vLLM's accounting at its threshold edges, by engine version."""

from __future__ import annotations

from dataclasses import replace

import pytest

from llmtriage.capacity import (
    FitRequest,
    LaunchSettings,
    decode_roofline,
    fit,
    parse_version,
    resolve_gpu,
    resolve_model,
)
from llmtriage.capacity.fit import GIB, kv_layout

LLAMA8B = resolve_model("meta-llama/Llama-3.1-8B-Instruct")
# 32 layers x 2 (K and V) x 8 KV heads x 128 x 2 bytes.
LLAMA8B_KV_BYTES_PER_TOKEN = 32 * 2 * 8 * 128 * 2


def _request(
    model: str = "meta-llama/Llama-3.1-8B-Instruct", gpu: str = "H100 SXM", version: str = "0.10.1", **launch: object
) -> FitRequest:
    return FitRequest(resolve_model(model), resolve_gpu(gpu), LaunchSettings(**launch), parse_version(version))  # type: ignore[arg-type]


def test_v1_kv_check_edge_one_request_exactly_fits() -> None:
    needed_gib = 8192 * LLAMA8B_KV_BYTES_PER_TOKEN / GIB
    exact = fit(replace(_request(max_model_len=8192), available_kv_gib=needed_gib))
    assert exact.starts and exact.kv_tokens == 8192 and exact.max_concurrency == pytest.approx(1.0)
    short = fit(replace(_request(max_model_len=8192), available_kv_gib=needed_gib * 0.999))
    assert short.error == "kv_cache_too_small_for_max_model_len"
    assert short.max_model_len_that_fits == 8192 - 16


def test_v1_no_memory_for_blocks_at_zero() -> None:
    assert fit(replace(_request(), available_kv_gib=0.0)).error == "no_available_memory_for_cache_blocks"


def test_v0_counts_blocks_and_checks_tokens() -> None:
    request = replace(_request(version="0.6.4", max_model_len=4096), available_kv_gib=0.5)
    result = fit(request)
    assert result.engine == "v0"
    assert result.num_gpu_blocks == int(0.5 * GIB // (16 * LLAMA8B_KV_BYTES_PER_TOKEN))
    assert result.kv_tokens == result.num_gpu_blocks * 16
    assert result.max_concurrency == pytest.approx(result.kv_tokens / 4096)


def test_kv_heads_replicate_when_tp_exceeds_them() -> None:
    per_layer = [
        kv_layout(_request("Qwen/Qwen3-235B-A22B", tensor_parallel_size=tp)).bytes_per_token_layer for tp in (1, 4, 8)
    ]
    assert per_layer == [2 * 4 * 128 * 2, 2 * 1 * 128 * 2, 2 * 1 * 128 * 2]


def test_mla_one_latent_per_token_no_tp_saving_bigger_blocks_on_hopper() -> None:
    h100 = [kv_layout(_request("deepseek-ai/DeepSeek-V3", "H100 SXM", tensor_parallel_size=tp)) for tp in (1, 8)]
    assert {layout.bytes_per_token for layout in h100} == {61 * (512 + 64) * 2}
    assert h100[0].block_size == 64
    assert kv_layout(_request("deepseek-ai/DeepSeek-V3", "A100 SXM 80GB", tensor_parallel_size=8)).block_size == 16
    # Before V0 learned MLA, every head's K and V was cached, split across TP ranks.
    old = kv_layout(_request("deepseek-ai/DeepSeek-V3", "H100 SXM", version="0.6.0", tensor_parallel_size=8))
    assert old.bytes_per_token == 61 * (128 // 8) * ((128 + 64) + 128) * 2


def test_hybrid_sliding_window_groups_from_the_hybrid_manager() -> None:
    new = kv_layout(_request("google/gemma-3-27b-it", version="0.10.0"))
    assert new.group_size == 10 and len(new.groups) == 7
    assert [g.kind for g in new.groups].count("sliding") == 6
    old = kv_layout(_request("google/gemma-3-27b-it", version="0.9.2"))
    assert len(old.groups) == 1 and old.groups[0].kind == "full"
    result = fit(
        replace(_request("google/gemma-3-27b-it", version="0.10.0", max_model_len=32768), available_kv_gib=10.0)
    )
    assert result.kv_tokens == result.num_gpu_blocks // 7 * 16
    # Before, all 62 layers were charged as full attention: the same memory no longer holds one request.
    all_full = fit(
        replace(_request("google/gemma-3-27b-it", version="0.9.2", max_model_len=32768), available_kv_gib=10.0)
    )
    assert all_full.error == "kv_cache_too_small_for_max_model_len"
    assert result.max_concurrency > 2 * all_full.max_concurrency


def test_activation_follows_max_model_len_in_v0_and_batched_tokens_in_v1() -> None:
    v0 = [fit(_request(version="0.6.4", gpu="A100 SXM 80GB", max_model_len=n)).activation_gib for n in (8192, 16384)]
    assert v0[1] > 1.8 * v0[0]
    v1 = [fit(_request(version="0.10.1", gpu="A100 SXM 80GB", max_model_len=n)).activation_gib for n in (8192, 16384)]
    assert v1[0] == pytest.approx(v1[1])
    bigger = fit(_request(version="0.10.1", gpu="A100 SXM 80GB", max_num_batched_tokens=16384)).activation_gib
    assert bigger > v1[0]


def test_cuda_graphs_counted_inside_the_budget_from_0_21() -> None:
    before, after = (fit(_request(version=v)) for v in ("0.20.2", "0.21.0"))
    assert not before.cuda_graph_in_budget and after.cuda_graph_in_budget
    assert before.available_kv_gib - after.available_kv_gib == pytest.approx(after.cuda_graph_gib)
    eager = fit(_request(version="0.21.0", enforce_eager=True))
    assert eager.cuda_graph_gib == 0 and eager.available_kv_gib > after.available_kv_gib


def test_budget_is_a_fraction_of_total_and_free_memory_only_gates_v1_start() -> None:
    request = _request(gpu="L4", max_model_len=4096)
    budget = fit(request).budget_gib
    assert budget == pytest.approx(22.05 * 0.9)
    just_enough = fit(replace(request, free_memory_gib=budget))
    assert just_enough.starts and just_enough.available_kv_gib == fit(request).available_kv_gib
    short = fit(replace(request, free_memory_gib=budget - 0.01))
    assert short.error == "free_memory_less_than_requested"
    # V0 before 0.6.4 charged another process's memory to the KV budget instead.
    old = _request(gpu="L4", version="0.5.0", max_model_len=4096)
    assert fit(old).available_kv_gib - fit(replace(old, free_memory_gib=20.0)).available_kv_gib == pytest.approx(2.05)


def test_context_beyond_the_model_is_refused_first() -> None:
    result = fit(_request("Qwen/Qwen2.5-72B-Instruct", max_model_len=131072, tensor_parallel_size=8))
    assert result.error == "max_model_len_exceeds_model"


def test_weights_that_do_not_fit_the_gpu() -> None:
    result = fit(_request("meta-llama/Llama-3.1-70B-Instruct", "L4", max_model_len=4096))
    assert result.error == "no_available_memory_for_cache_blocks" and "weights alone" in result.detail
    assert fit(
        _request("meta-llama/Llama-3.1-70B-Instruct", "H100 SXM", max_model_len=4096, tensor_parallel_size=4)
    ).starts


def test_fp8_kv_doubles_the_tokens() -> None:
    auto = fit(replace(_request(max_model_len=8192), available_kv_gib=4.0))
    fp8 = fit(replace(_request(max_model_len=8192, kv_cache_dtype="fp8"), available_kv_gib=4.0))
    assert fp8.kv_bytes_per_token * 2 == auto.kv_bytes_per_token
    assert fp8.kv_tokens == 2 * auto.kv_tokens


def test_quantized_weights_are_smaller() -> None:
    full = fit(_request(max_model_len=4096)).weights_gib
    awq = fit(_request(max_model_len=4096, quantization="awq")).weights_gib
    assert full == pytest.approx(8.03e9 * 2 / GIB, rel=0.01)
    assert awq < 0.4 * full


def test_roofline_reads_weights_per_step_and_moe_reads_its_routed_experts() -> None:
    dense = decode_roofline(_request(max_model_len=4096), batch=1, context_tokens=1)
    bandwidth = resolve_gpu("H100 SXM").bandwidth_gbs or 0
    assert dense.tpot_floor_ms == pytest.approx(8.03e9 * 2 / (bandwidth * 1e9) * 1000, rel=0.02)
    batched = decode_roofline(_request(max_model_len=4096), batch=8, context_tokens=1)
    assert batched.tokens_per_s > 7 * dense.tokens_per_s
    moe = decode_roofline(_request("Qwen/Qwen3-30B-A3B"), batch=1, context_tokens=1)
    assert moe.weights_read_gib < 0.2 * fit(_request("Qwen/Qwen3-30B-A3B")).weights_gib
    long_context = decode_roofline(_request(max_model_len=32768), batch=8, context_tokens=32768)
    assert long_context.kv_read_gib == pytest.approx(8 * 32768 * LLAMA8B_KV_BYTES_PER_TOKEN / GIB)
