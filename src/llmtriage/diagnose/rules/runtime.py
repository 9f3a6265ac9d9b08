"""Why a running server ran out of memory, failed or rejected requests, or stalled."""

from __future__ import annotations

from collections.abc import Iterator

from llmtriage.diagnose.questions import engine_died_silently, huge_last_prefill, stall_evidence
from llmtriage.diagnose.rules import Signal, rule, signal
from llmtriage.diagnose.scene import Scene
from llmtriage.facts import Citation


@rule("runtime_oom")
def concurrency_at_crash(scene: Scene) -> Iterator[Signal]:
    """Many requests running, or the KV cache full, when memory ran out."""
    dumps = scene.by_stats_signature("stats_vllm_crash_dump")
    if dumps and (dumps[-1].running or 0) >= scene.t.crash_running:
        crash = dumps[-1]
        yield signal(
            "concurrency_exceeds_kv_pool",
            0.5,
            crash.cite(),
            f"{crash.running:g} requests running when the engine died",
        )
    kv = scene.peak_kv_usage
    if kv is not None and kv.value >= scene.t.kv_usage_high:
        yield signal("concurrency_exceeds_kv_pool", 0.4, kv.citation, f"KV cache usage reached {kv.value:.0%}")
    running = scene.stats_peak("running") or scene.gauge_peak("running")
    capacity = scene.kv_max_concurrency
    if running is not None and capacity is not None and running.value > capacity.value:
        yield signal(
            "concurrency_exceeds_kv_pool",
            0.4,
            running.citation,
            f"{running.value:g} requests running; the KV cache holds {capacity.value:g} at max-model-len",
        )


@rule("runtime_oom")
def long_prompts(scene: Scene) -> Iterator[Signal]:
    """Long prompts just before the OOM."""
    p95 = scene.histogram_quantile("prompt_tokens_per_request", 0.95)
    limit = scene.max_model_len
    if p95 is None:
        return
    long = scene.t.long_prompt_tokens if limit is None else scene.t.long_prompt_context_share * limit.value
    if p95.value >= long:
        yield signal("long_prompt_surge", 0.5, p95.citation, f"prompt p95 {p95.value:,.0f} tokens")


@rule("runtime_oom")
def activation_peak(scene: Scene) -> Iterator[Signal]:
    """One huge prefill batch right before the end; unbounded prefill batches in the launch."""
    prefill = huge_last_prefill(scene)
    if prefill is not None:
        yield signal("activation_peak", 0.6, prefill, "a single prefill batch far above the context length")
    launch = scene.launch
    if launch is not None and launch.enable_chunked_prefill is False:
        yield signal(
            "activation_peak",
            0.3,
            launch.citations.get("enable_chunked_prefill"),
            "chunked prefill disabled: long prompts are prefilled whole",
        )
    if (
        launch is not None
        and launch.engine == "sglang"
        and launch.max_num_batched_tokens is None
        and prefill is not None
    ):
        yield signal(
            "activation_peak",
            0.2,
            Citation(source=launch.source, excerpt="no --max-prefill-tokens / --chunked-prefill-size"),
            "prefill batch size unbounded by the launch",
        )


@rule("runtime_oom")
def fragmentation(scene: Scene) -> Iterator[Signal]:
    """Reserved-but-unallocated memory large against the failed allocation."""
    mem = scene.memory
    reserved = mem.reserved_unallocated_gib
    if reserved is None:
        return
    tried = mem.tried_alloc_gib or 0.0
    t = scene.t
    share_of_request = tried and reserved >= t.fragmentation_share * tried and reserved >= t.fragmentation_floor_gib
    if reserved >= t.fragmentation_gib or share_of_request:
        yield signal(
            "allocator_fragmentation",
            0.6,
            mem.cite("reserved_unallocated_gib"),
            f"{reserved:.2f} GiB reserved but unallocated (tried to allocate {tried:.2f} GiB)",
        )


@rule("runtime_oom", "request_failure")
def silent_engine_death(scene: Scene) -> Iterator[Signal]:
    """The engine died serving with no error in the evidence: name the gap; blame headroom if it was thin."""
    if not engine_died_silently(scene):
        return
    died = scene.engine_dead[0].cite() if scene.engine_dead else None
    util = scene.utilization
    if util is not None and util.value >= scene.t.util_high:
        yield signal(
            "gpu_mem_util_too_high",
            0.4,
            died,
            "the engine died on a request with almost no memory outside the KV budget",
        )
    yield signal(
        "engine_died_root_cause_not_captured",
        0.5,
        died,
        "the first error that killed the engine is not in the evidence",
    )


@rule("startup_failure")
def wrapper_without_root(scene: Scene) -> Iterator[Signal]:
    """'Engine core initialization failed' / 'Shard failed to start' with no root error in the excerpt."""
    if scene.root is None and scene.startup_wrappers:
        wrapper = scene.startup_wrappers[0]
        yield signal(
            "engine_died_root_cause_not_captured",
            0.5,
            wrapper.cite(),
            "a wrapper error: the line that names the cause is printed earlier, outside this excerpt",
        )


@rule("runtime_oom")
def forward_oom(scene: Scene) -> Iterator[Signal]:
    """An allocation failed in a forward pass: the batch outgrew what the budget left, whatever else is known."""
    for event in scene.fatal_errors:
        if event.family == "oom" and scene.effective_phase(event) == "forward":
            yield signal("activation_peak", 0.2, event.cite(), "an allocation in the forward pass failed")
            util = scene.utilization
            if util is not None and util.value >= scene.t.util_elevated:
                yield signal(
                    "gpu_mem_util_too_high",
                    0.3,
                    util.citation,
                    f"gpu-memory-utilization {util.value:g} leaves little room outside the KV budget",
                )
            return


@rule("request_failure", "runtime_oom", "startup_failure")
def killed_worker(scene: Scene) -> Iterator[Signal]:
    """A worker killed by a signal; the kernel's OOM killer names host memory."""
    for event in scene.by_signature("vllm_worker_died"):
        code = event.value("exit_code")
        if code is None or not code.startswith("-"):
            continue
        yield signal("worker_process_killed", 0.5, event.cite(), f"the worker was killed by signal {code[1:]}")
        for kill in scene.kernel.events:
            if kill.kind == "oom_kill":
                yield signal("worker_process_killed", 0.5, kill.cite(), "the kernel's OOM killer (host memory)")
                break
        return


@rule("request_failure")
def overload(scene: Scene) -> Iterator[Signal]:
    """Requests refused because the server is full (429, 503): queueing past what it admits."""
    refused = scene.http_refused
    if not refused:
        return
    total = scene.http_posts[0]
    cite = scene.log.http_status_citations.get(503) or scene.log.http_status_citations.get(429)
    weight = 0.6 if refused >= 0.5 * total else 0.4
    yield signal("queueing_over_capacity", weight, cite, f"{refused} of {total} requests refused as busy (429/503)")


@rule("request_rejected")
def rejected_requests(scene: Scene) -> Iterator[Signal]:
    """HTTP 400s on completion endpoints back up the validation errors."""
    total, rejected, _ = scene.http_posts
    if rejected:
        yield signal(
            "prompt_exceeds_max_model_len",
            0.4,
            scene.log.http_status_citations.get(400) or scene.log.http_status_citations.get(422),
            f"{rejected} of {total} completion requests rejected",
        )


@rule("engine_stalled")
def stalled(scene: Scene) -> Iterator[Signal]:
    """Requests wait, tokens do not flow."""
    for evidence in stall_evidence(scene):
        yield signal("engine_stalled", 0.7, evidence.citation, evidence.note)
