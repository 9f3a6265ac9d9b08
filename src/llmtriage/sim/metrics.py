"""The simulator's /metrics: vLLM V1 0.32's families, types, labels and buckets, through prometheus_client.

Names, help texts, label sets and buckets follow a real vLLM 0.32.0 scrape (tests/fixtures/vllm-cpu/metrics/);
a conformance test keeps them equal. Time values are simulated seconds.
"""

from __future__ import annotations

from prometheus_client import (
    CollectorRegistry,
    Counter,
    Gauge,
    Histogram,
    Summary,
    gc_collector,
    generate_latest,
    platform_collector,
    process_collector,
)

REQUEST_LATENCY_BUCKETS = (
    0.3, 0.5, 0.8, 1.0, 1.5, 2.0, 2.5, 5.0, 10.0, 15.0, 20.0, 30.0, 40.0, 50.0, 60.0, 120.0, 240.0, 480.0, 960.0,
    1920.0, 7680.0,
)  # fmt: skip
TTFT_BUCKETS = (
    0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5, 10.0, 20.0, 40.0, 80.0,
    160.0, 640.0, 2560.0,
)  # fmt: skip
ITL_BUCKETS = (
    0.01,
    0.025,
    0.05,
    0.075,
    0.1,
    0.15,
    0.2,
    0.3,
    0.4,
    0.5,
    0.75,
    1.0,
    2.5,
    5.0,
    7.5,
    10.0,
    20.0,
    40.0,
    80.0,
)
ITERATION_BUCKETS = (1, 8, 16, 32, 64, 128, 256, 512, 1024, 2048, 4096, 8192, 16384)
PREEMPTION_BUCKETS = (1, 2, 3, 4, 5, 10, 20)
N_BUCKETS = (1, 2, 5, 10, 20)
HIGHR_BUCKETS = (
    0.01, 0.025, 0.05, 0.075, 0.1, 0.25, 0.5, 0.75, 1.0, 1.5, 2.0, 2.5, 3.0, 3.5, 4.0, 4.5, 5.0, 7.5, 10.0, 30.0, 60.0,
)  # fmt: skip
FINISH_REASONS = ("stop", "length", "abort", "error", "repetition")


def buckets_1_2_5(limit: int) -> tuple[float, ...]:
    """vLLM's build_1_2_5_buckets: 1, 2, 5, 10, 20, 50, ... up to ``limit``."""
    out: list[float] = []
    exponent = 0
    while True:
        for mantissa in (1, 2, 5):
            value = mantissa * 10**exponent
            if value > limit:
                return tuple(out)
            out.append(float(value))
        exponent += 1


def observe_many(histogram: Histogram, value: float, count: int) -> None:
    """Record ``count`` observations of ``value`` as ``count`` calls of ``observe`` would, in one update: the engine
    observes a step's inter-token gaps this way (prometheus_client has no counted observe; this uses the child's
    ``_sum``, ``_buckets`` and ``_upper_bounds``, and a test holds it equal to repeated ``observe`` calls)."""
    histogram._sum.inc(value * count)
    for bucket, bound in zip(histogram._buckets, histogram._upper_bounds, strict=True):
        if value <= bound:
            bucket.inc(count)
            return


class SimMetrics:
    """One registry with vLLM V1's metric families for one model on engine 0."""

    def __init__(self, model_name: str, max_model_len: int, cache_config: dict[str, str]) -> None:
        self.registry = CollectorRegistry()
        process_collector.ProcessCollector(registry=self.registry)
        platform_collector.PlatformCollector(registry=self.registry)
        gc_collector.GCCollector(registry=self.registry)
        r = self.registry
        base = ["model_name", "engine"]
        labels = {"model_name": model_name, "engine": "0"}
        token_buckets = buckets_1_2_5(max_model_len)

        def counter(name: str, doc: str) -> Counter:
            return Counter(name, doc, base, registry=r)

        def hist(name: str, doc: str, buckets: tuple[float, ...]) -> Histogram:
            return Histogram(name, doc, base, buckets=buckets, registry=r)

        flops = counter(
            "vllm:estimated_flops_per_gpu",
            "Estimated number of floating point operations per GPU (for Model Flops Utilization calculations).",
        )
        read = counter(
            "vllm:estimated_read_bytes_per_gpu",
            "Estimated number of bytes read from memory per GPU (for Model Flops Utilization calculations).",
        )
        write = counter(
            "vllm:estimated_write_bytes_per_gpu",
            "Estimated number of bytes written to memory per GPU (for Model Flops Utilization calculations).",
        )
        running = Gauge("vllm:num_requests_running", "Number of requests in model execution batches.", base, registry=r)
        waiting = Gauge("vllm:num_requests_waiting", "Number of requests waiting to be processed.", base, registry=r)
        waiting_by_reason = Gauge(
            "vllm:num_requests_waiting_by_reason",
            "Number of waiting requests by reason. Reason labels: 'capacity' = waiting for scheduling capacity; "
            "'deferred' = deferred by transient constraints (LoRA budget, KV transfer, blocked status). Sum of all "
            "reasons equals vllm:num_requests_waiting.",
            [*base, "reason"],
            registry=r,
        )
        sleep = Gauge(
            "vllm:engine_sleep_state",
            "Engine sleep state; awake = 0 means engine is sleeping; awake = 1 means engine is awake; "
            "weights_offloaded = 1 means sleep level 1; discard_all = 1 means sleep level 2.",
            ["engine", "model_name", "sleep_state"],
            registry=r,
        )
        kv = Gauge("vllm:kv_cache_usage_perc", "KV-cache usage. 1 means 100 percent usage.", base, registry=r)
        pc_queries = counter("vllm:prefix_cache_queries", "Prefix cache queries, in terms of number of queried tokens.")
        pc_hits = counter("vllm:prefix_cache_hits", "Prefix cache hits, in terms of number of cached tokens.")
        counter(
            "vllm:external_prefix_cache_queries",
            "External prefix cache queries from KV connector cross-instance cache sharing, in terms of number of "
            "queried tokens.",
        ).labels(**labels)
        counter(
            "vllm:external_prefix_cache_hits",
            "External prefix cache hits from KV connector cross-instance cache sharing, in terms of number of cached "
            "tokens.",
        ).labels(**labels)
        counter("vllm:mm_cache_queries", "Multi-modal cache queries, in terms of number of queried items.").labels(
            **labels
        )
        counter("vllm:mm_cache_hits", "Multi-modal cache hits, in terms of number of cached items.").labels(**labels)
        preemptions = counter("vllm:num_preemptions", "Cumulative number of preemption from the engine.")
        prompt_tokens = counter("vllm:prompt_tokens", "Number of prefill tokens processed.")
        by_source = Counter(
            "vllm:prompt_tokens_by_source", "Number of prompt tokens by source.", [*base, "source"], registry=r
        )
        cached = counter("vllm:prompt_tokens_cached", "Number of cached prompt tokens (local + external).")
        cached_by_source = Counter(
            "vllm:prompt_tokens_cached_by_source",
            "Prefix-cache hit tokens by the cache tier that supplied them: device (local HBM), host (offloaded to "
            "DRAM), disk, p2p (transferred from another vLLM instance) or external_unspecified. Counted at admission; "
            "sums to vllm:prefix_cache_hits + vllm:external_prefix_cache_hits.",
            [*base, "source"],
            registry=r,
        )
        generation = counter("vllm:generation_tokens", "Number of generation tokens processed.")
        success = Counter(
            "vllm:request_success",
            "Count of successfully processed requests.",
            [*base, "finished_reason"],
            registry=r,
        )
        rejections = Counter(
            "vllm:admission_rejections",
            "Number of admission attempts rejected by a queue limit, by reason.",
            ["model_name", "reason"],
            registry=r,
        )
        self.request_prompt_tokens = hist(
            "vllm:request_prompt_tokens", "Number of prefill tokens processed.", token_buckets
        ).labels(**labels)
        self.request_generation_tokens = hist(
            "vllm:request_generation_tokens", "Number of generation tokens processed.", token_buckets
        ).labels(**labels)
        self.iteration_tokens = hist(
            "vllm:iteration_tokens_total", "Histogram of number of tokens per engine_step.", ITERATION_BUCKETS
        ).labels(**labels)
        self.request_max_tokens = hist(
            "vllm:request_max_num_generation_tokens",
            "Histogram of maximum number of requested generation tokens.",
            token_buckets,
        ).labels(**labels)
        self.request_params_n = hist(
            "vllm:request_params_n", "Histogram of the n request parameter.", N_BUCKETS
        ).labels(**labels)
        self.request_params_max_tokens = hist(
            "vllm:request_params_max_tokens", "Histogram of the max_tokens request parameter.", token_buckets
        ).labels(**labels)
        self.ttft = hist(
            "vllm:time_to_first_token_seconds", "Histogram of time to first token in seconds.", TTFT_BUCKETS
        ).labels(**labels)
        self.itl = hist(
            "vllm:inter_token_latency_seconds", "Histogram of inter-token latency in seconds.", ITL_BUCKETS
        ).labels(**labels)
        self.tpot = hist(
            "vllm:request_time_per_output_token_seconds",
            "Histogram of time_per_output_token_seconds per request.",
            ITL_BUCKETS,
        ).labels(**labels)
        self.e2e = hist(
            "vllm:e2e_request_latency_seconds", "Histogram of e2e request latency in seconds.", REQUEST_LATENCY_BUCKETS
        ).labels(**labels)
        self.queue_time = hist(
            "vllm:request_queue_time_seconds",
            "Histogram of time spent in WAITING phase for request.",
            REQUEST_LATENCY_BUCKETS,
        ).labels(**labels)
        self.inference_time = hist(
            "vllm:request_inference_time_seconds",
            "Histogram of time spent in RUNNING phase for request.",
            REQUEST_LATENCY_BUCKETS,
        ).labels(**labels)
        self.prefill_time = hist(
            "vllm:request_prefill_time_seconds",
            "Histogram of time spent in PREFILL phase for request.",
            REQUEST_LATENCY_BUCKETS,
        ).labels(**labels)
        self.decode_time = hist(
            "vllm:request_decode_time_seconds",
            "Histogram of time spent in DECODE phase for request.",
            REQUEST_LATENCY_BUCKETS,
        ).labels(**labels)
        self.request_preemptions = hist(
            "vllm:request_num_preemptions",
            "Histogram of the number of times a request was preempted.",
            PREEMPTION_BUCKETS,
        ).labels(**labels)
        self.prefill_kv_computed = hist(
            "vllm:request_prefill_kv_computed_tokens",
            "Histogram of new KV tokens computed during prefill (excluding cached tokens).",
            token_buckets,
        ).labels(**labels)
        info = Gauge(
            "vllm:cache_config_info",
            "Information of the LLMEngine CacheConfig",
            sorted(cache_config),
            registry=r,
        )
        info.labels(**cache_config).set(1)

        self.flops = flops.labels(**labels)
        self.read_bytes = read.labels(**labels)
        self.write_bytes = write.labels(**labels)
        self.running = running.labels(**labels)
        self.waiting = waiting.labels(**labels)
        self.waiting_capacity = waiting_by_reason.labels(**labels, reason="capacity")
        waiting_by_reason.labels(**labels, reason="deferred")
        sleep.labels(engine="0", model_name=model_name, sleep_state="awake").set(1)
        sleep.labels(engine="0", model_name=model_name, sleep_state="weights_offloaded")
        sleep.labels(engine="0", model_name=model_name, sleep_state="discard_all")
        self.kv_usage = kv.labels(**labels)
        self.prefix_queries = pc_queries.labels(**labels)
        self.prefix_hits = pc_hits.labels(**labels)
        self.preemptions = preemptions.labels(**labels)
        self.prompt_tokens = prompt_tokens.labels(**labels)
        self.prompt_tokens_computed = by_source.labels(**labels, source="local_compute")
        self.prompt_tokens_cache_hit = by_source.labels(**labels, source="local_cache_hit")
        by_source.labels(**labels, source="external_kv_transfer")
        self.prompt_tokens_cached = cached.labels(**labels)
        self.prompt_tokens_cached_device = cached_by_source.labels(**labels, source="device")
        for source in ("host", "disk", "p2p", "external_unspecified"):
            cached_by_source.labels(**labels, source=source)
        self.generation_tokens = generation.labels(**labels)
        self.success = {reason: success.labels(**labels, finished_reason=reason) for reason in FINISH_REASONS}
        for reason in ("max_num_queued_reqs", "max_num_queued_tokens"):
            rejections.labels(model_name=model_name, reason=reason)

        self.http_requests = Counter(
            "http_requests",
            "Total number of requests by method, status and handler.",
            ["handler", "method", "status"],
            registry=r,
        )
        self.http_request_size = Summary(
            "http_request_size_bytes",
            "Content length of incoming requests by handler. Only value of header is respected. Otherwise ignored. "
            "No percentile calculated. ",
            ["handler"],
            registry=r,
        )
        self.http_response_size = Summary(
            "http_response_size_bytes",
            "Content length of outgoing responses by handler. Only value of header is respected. Otherwise ignored. "
            "No percentile calculated. ",
            ["handler"],
            registry=r,
        )
        self.http_duration_highr = Histogram(
            "http_request_duration_highr_seconds",
            "Latency with many buckets but no API specific labels. Made for more accurate percentile calculations. ",
            buckets=HIGHR_BUCKETS,
            registry=r,
        )
        self.http_duration = Histogram(
            "http_request_duration_seconds",
            "Latency with only few buckets by handler. Made to be only used if aggregation by handler is important. ",
            ["handler", "method"],
            buckets=(0.1, 0.5, 1.0),
            registry=r,
        )

    def observe_http(
        self, handler: str, method: str, status: int, seconds: float, request_bytes: int, response_bytes: int
    ) -> None:
        """What prometheus_fastapi_instrumentator records for one request."""
        self.http_requests.labels(handler=handler, method=method, status=f"{status // 100}xx").inc()
        self.http_request_size.labels(handler=handler).observe(request_bytes)
        self.http_response_size.labels(handler=handler).observe(response_bytes)
        self.http_duration_highr.observe(seconds)
        self.http_duration.labels(handler=handler, method=method).observe(seconds)

    def render(self) -> bytes:
        """The Prometheus text exposition."""
        return generate_latest(self.registry)
