"""Why the first token is slow, and why generation is slow."""

from __future__ import annotations

from collections.abc import Iterator

from llmtriage.diagnose.questions import slow_generation_evidence
from llmtriage.diagnose.rules import Signal, rule, signal
from llmtriage.diagnose.scene import Scene
from llmtriage.facts import Citation

# ---------------------------------------------------------------- first token


@rule("slow_ttft")
def queueing(scene: Scene) -> Iterator[Signal]:
    """A queue that stands or grows; queue time dominating TTFT; more offered than served."""
    t = scene.t
    waiting = scene.peak_waiting
    if waiting is not None and waiting.value >= 1:
        weight = 0.4 if waiting.value >= t.waiting_queue else 0.2
        yield signal("queueing_over_capacity", weight, waiting.citation, f"{waiting.value:g} requests waiting at peak")
    queue = scene.histogram_mean("queue_seconds")
    ttft = scene.histogram_mean("ttft_seconds")
    if queue is not None and ttft is not None and ttft.value > 0 and queue.value / ttft.value >= t.queue_share:
        yield signal(
            "queueing_over_capacity",
            0.3,
            queue.citation,
            f"queueing is {queue.value / ttft.value:.0%} of the mean TTFT ({queue.value:.2f} of {ttft.value:.2f} s)",
        )
    bench = scene.bench
    rate, served = bench.requested_rate, bench.request_throughput
    if rate is not None and served and rate >= t.overload_factor * served:
        yield signal(
            "queueing_over_capacity",
            0.6,
            bench.citations.get("request_throughput"),
            f"offered {rate:g} req/s, served {served:g} req/s",
        )


@rule("slow_ttft")
def prefill_jam(scene: Scene) -> Iterator[Signal]:
    """Long prompts with a short queue; prefill time dominating TTFT; very long prompts in flight."""
    t = scene.t
    prompt = scene.histogram_quantile("prompt_tokens_per_request", 0.95)
    tail = scene.histogram_quantile("prompt_tokens_per_request", 0.99)
    median = scene.histogram_quantile("prompt_tokens_per_request", 0.5)
    waiting = scene.peak_waiting
    short_queue = waiting is None or waiting.value < t.waiting_queue
    long = t.long_prompt_tokens
    if (limit := scene.max_model_len) is not None:
        long = min(long, t.long_prompt_context_share * limit.value)
    if tail is not None and median is not None and tail.value >= max(long, t.prompt_mix_ratio * median.value):
        yield signal(
            "prefill_congestion",
            0.5,
            tail.citation,
            f"prompt p99 {tail.value:,.0f} tokens, median {median.value:,.0f}: long prompts among short ones",
        )
    elif prompt is not None and prompt.value >= long and short_queue:
        yield signal("prefill_congestion", 0.5, prompt.citation, f"prompt p95 {prompt.value:,.0f} tokens, queue short")
    prefill = scene.histogram_mean("prefill_seconds")
    ttft = scene.histogram_mean("ttft_seconds")
    if prefill is not None and ttft is not None and ttft.value > 0 and prefill.value / ttft.value >= t.queue_share:
        yield signal(
            "prefill_congestion",
            0.3,
            prefill.citation,
            f"prefill is {prefill.value / ttft.value:.0%} of the mean TTFT",
        )
    bench = scene.bench
    if bench.long_prompt_ktokens is not None and bench.long_prompt_ktokens * 1000 >= t.very_long_prompt_tokens:
        yield signal(
            "prefill_congestion",
            0.6,
            bench.citations.get("long_prompt_ktokens"),
            f"prompts of {bench.long_prompt_ktokens:g}K tokens in flight",
        )
    prefill_only = [
        p
        for p in scene.log.stats
        if (p.running or 0) >= 1 and (p.prompt_tps or 0) > 0 and p.generation_tps is not None and p.generation_tps == 0
    ]
    if len(prefill_only) >= t.prefill_only_steps:
        first = prefill_only[0]
        yield signal(
            "prefill_congestion",
            0.5,
            first.cite(),
            f"{len(prefill_only)} stats intervals ran prompts only (generation 0 tokens/s, {first.running:g} requests"
            " running): new prompts stall the decoding ones",
        )
    launch = scene.launch
    if launch is not None and launch.enable_chunked_prefill is False:
        yield signal(
            "prefill_congestion",
            0.2,
            launch.citations.get("enable_chunked_prefill"),
            "chunked prefill disabled",
        )


@rule("slow_ttft")
def prefix_reuse(scene: Scene) -> Iterator[Signal]:
    """Prefix caching off, or nothing hit, while prompts are long."""
    enabled = scene.cache_config_flag("enable_prefix_caching")
    cite: Citation | None = None
    if enabled is None and scene.launch is not None:
        enabled = scene.launch.enable_prefix_caching
        cite = scene.launch.citations.get("enable_prefix_caching")
    prompt = scene.histogram_mean("prompt_tokens_per_request")
    long_prompts = prompt is not None and prompt.value >= 1000
    if enabled is False and long_prompts:
        yield signal(
            "prefix_cache_miss",
            0.35,
            cite or Citation(source=scene.snapshots[-1].source, excerpt="enable_prefix_caching=False"),
            "prefix caching is off while prompts are long",
        )


@rule("slow_ttft", "slow_generation")
def kv_pressure(scene: Scene) -> Iterator[Signal]:
    """Preemptions, requests waiting for KV capacity, a KV cache at its limit."""
    t = scene.t
    preemptions = scene.counter_increase("preemptions")
    if preemptions is not None and preemptions.value > 0:
        yield signal("kv_pressure_preemption", 0.5, preemptions.citation, f"{preemptions.value:g} preemptions")
    capacity_wait = scene.gauge_peak("waiting_for_capacity")
    kv = scene.peak_kv_usage
    kv_tight = (preemptions is not None and preemptions.value > 0) or (kv is not None and kv.value >= t.kv_usage_high)
    # vLLM counts every request the scheduler could not admit as waiting for capacity (token budget too);
    # it is KV pressure only when the KV cache is what ran out.
    if capacity_wait is not None and capacity_wait.value > 0 and kv_tight:
        yield signal(
            "kv_pressure_preemption",
            0.4,
            capacity_wait.citation,
            f"{capacity_wait.value:g} requests waiting for KV capacity",
        )
    if kv is not None and kv.value >= t.kv_usage_high:
        yield signal("kv_pressure_preemption", 0.3, kv.citation, f"KV cache usage reached {kv.value:.0%}")
    crowded = [p for p in scene.log.stats if (p.waiting or 0) > 0 and (p.kv_usage_ratio or 0) >= t.kv_usage_high]
    if crowded:
        worst = max(crowded, key=lambda p: p.waiting or 0)
        yield signal(
            "kv_pressure_preemption",
            0.4,
            worst.cite(),
            f"{worst.waiting:g} requests waiting while the KV cache is {worst.kv_usage_ratio:.0%} full",
        )
    stats_preempt = scene.stats_peak("preemptions")
    if stats_preempt is not None and stats_preempt.value > 0:
        yield signal("kv_pressure_preemption", 0.3, stats_preempt.citation, f"{stats_preempt.value:g} preemptions")


@rule("slow_ttft")
def kv_pool_small(scene: Scene) -> Iterator[Signal]:
    """More requests in flight than the KV cache holds at max-model-len."""
    capacity = scene.kv_max_concurrency
    running = scene.gauge_peak("running") or scene.stats_peak("running")
    waiting = scene.peak_waiting
    if capacity is None or running is None:
        return
    in_flight = running.value + (waiting.value if waiting else 0.0)
    if in_flight > 2 * capacity.value:
        yield signal(
            "concurrency_exceeds_kv_pool",
            0.3,
            capacity.citation,
            f"{in_flight:g} requests in flight; the KV cache holds {capacity.value:g} at max-model-len",
        )


@rule("slow_ttft", "slow_generation")
def neighbours(scene: Scene) -> Iterator[Signal]:
    """Other processes sharing the GPU."""
    processes = scene.gpu.processes
    if len(processes) >= 2:
        names = ", ".join(f"{p.pid} {p.name}" for p in processes[:4])
        yield signal(
            "gpu_contention_other_process",
            0.4,
            scene.gpu.processes_citation or Citation(source="gpu"),
            f"{len(processes)} processes on the GPU: {names}",
        )


# ---------------------------------------------------------------- generation


@rule("slow_generation", "slow_ttft")
def throttling(scene: Scene) -> Iterator[Signal]:
    """Clocks held down by power or heat while the GPU works."""
    t = scene.t
    for index, (reasons, cite) in scene.clock_reasons.items():
        severe = [r for r in reasons if r.startswith("hw_") or r == "sw_thermal_slowdown"]
        power = [r for r in reasons if r == "sw_power_cap"]
        if severe:
            yield signal("power_thermal_throttling", 0.7, cite, f"GPU {index}: {', '.join(severe)} active")
        elif power:
            yield signal("power_thermal_throttling", 0.35, cite, f"GPU {index}: SW power cap active")
    for sample in scene.gpu_samples:
        if sample.sm_clock_mhz is None or not sample.sm_clock_max_mhz:
            continue
        busy = sample.utilization_gpu_pct is None or sample.utilization_gpu_pct >= t.busy_utilization_pct
        ratio = sample.sm_clock_mhz / sample.sm_clock_max_mhz
        if busy and ratio < t.clock_ratio_low:
            yield signal(
                "power_thermal_throttling",
                0.3,
                sample.citation,
                f"SM clock {sample.sm_clock_mhz:g} of {sample.sm_clock_max_mhz:g} MHz while busy",
            )
            break


@rule("slow_generation")
def offload(scene: Scene) -> Iterator[Signal]:
    """Layers on the CPU: none offloaded, or only some."""
    offload = scene.log.offload
    launch = scene.launch
    if offload.offloaded_layers is not None and offload.total_layers:
        cite = offload.citations.get("offloaded_layers")
        if offload.offloaded_layers == 0:
            yield signal("no_gpu_offload", 0.8, cite, "0 layers offloaded to the GPU")
        elif offload.offloaded_layers < offload.total_layers:
            yield signal(
                "partial_cpu_offload",
                0.7,
                cite,
                f"{offload.offloaded_layers:g} of {offload.total_layers:g} layers on the GPU",
            )
    if launch is not None and launch.engine == "llama_cpp" and not launch.n_gpu_layers:
        yield signal(
            "no_gpu_offload",
            0.6,
            Citation(source=launch.source, excerpt="no -ngl / --n-gpu-layers"),
            "llama.cpp keeps every layer on the CPU unless told otherwise",
        )
        decode = scene.bench.decode_tokens_per_s
        if decode is not None and decode < scene.t.decode_slow_tokens_per_s:
            yield signal(
                "no_gpu_offload",
                0.3,
                scene.bench.citations.get("decode_tokens_per_s"),
                f"decode at {decode:g} tokens/s",
            )
        if launch.threads is not None and launch.threads > 256:
            yield signal(
                "no_gpu_offload",
                0.2,
                launch.citations.get("threads"),
                f"-t {launch.threads}: CPU threads, not CUDA cores",
            )


@rule("slow_generation")
def eager_mode(scene: Scene) -> Iterator[Signal]:
    """--enforce-eager turns CUDA graphs off (on a GPU: the CPU backend has none to turn off)."""
    launch = scene.launch
    if launch is not None and launch.enforce_eager and not scene.on_cpu:
        yield signal(
            "enforce_eager_disables_cuda_graphs",
            0.25,
            launch.citations.get("enforce_eager"),
            "--enforce-eager",
        )


@rule("slow_generation")
def bandwidth_bound(scene: Scene) -> Iterator[Signal]:
    """Slow decode with no other explanation found: the memory-bandwidth ceiling."""
    evidence = slow_generation_evidence(scene)
    latency = [e for e in evidence if "ITL" in e.note or "TPOT" in e.note]
    if not latency:
        return
    if scene.gpu.processes and len(scene.gpu.processes) >= 2:
        return
    throttled = {"sw_power_cap", "hw_slowdown", "sw_thermal_slowdown", "hw_thermal_slowdown", "hw_power_brake_slowdown"}
    if any(throttled & set(reasons) for reasons, _ in scene.clock_reasons.values()):
        return
    yield signal(
        "memory_bandwidth_bound",
        0.3,
        latency[0].citation,
        latency[0].note + "; nothing else explains it (compare with `llmtriage fit --roofline`)",
    )
