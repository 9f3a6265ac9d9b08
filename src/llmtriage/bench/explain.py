"""What each figure of ``llmtriage bench`` means, and what other load generators call the same thing.

The published tools disagree on names and on definitions; where their number differs from ours, the
entry says how.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class MetricDefinition:
    """One figure: our name, its definition, and its names in vllm bench serve, GuideLLM and genai-perf."""

    name: str
    definition: str
    vllm_bench_serve: str
    guidellm: str
    genai_perf: str


DEFINITIONS = (
    MetricDefinition(
        "ttft_ms",
        "Time to first token: request sent → first event carrying a token of any kind (content, reasoning or a "
        "tool call). The empty role chunk of chat streams does not count. Includes server queueing, prefill "
        "and the network; excludes client queue time.",
        "TTFT (ttft_ms): first event with choices, which on chat is the empty role chunk",
        "time_to_first_token_ms",
        "time_to_first_token (skips empty responses)",
    ),
    MetricDefinition(
        "tpot_ms",
        "Time per output token, per request: (E2E − TTFT) / (output tokens − 1), output tokens from the "
        "server's usage (else the client's count of token events). Requests with fewer than 2 tokens have none.",
        "TPOT (tpot_ms): same formula, E2E ending at the last token",
        "inter_token_latency_ms (same formula; its time_per_output_token_ms divides by all output tokens)",
        "inter_token_latency (same formula, per request)",
    ),
    MetricDefinition(
        "itl_ms",
        "Inter-token latency: every gap between two consecutive token-carrying events of a request as the "
        "client received them, pooled over requests. Events that arrive in one read have a gap of 0.",
        "ITL (itl_ms): the same per-event gaps",
        "none per gap (its inter_token_latency_ms is our tpot_ms)",
        "none per gap (its inter_token_latency is our tpot_ms)",
    ),
    MetricDefinition(
        "e2e_ms",
        "End-to-end latency: request sent → end of the response ([DONE], or the last byte).",
        "E2EL (e2el_ms), ending at the last token",
        "request_latency (seconds)",
        "request_latency",
    ),
    MetricDefinition(
        "queue_ms",
        "Client queue time: scheduled send time → actual send. Open loop: waiting for a --concurrency slot "
        "and any lateness of the client; closed loop: the time to build the request.",
        "client_queue_time (per request, not summarised)",
        "scheduler queued time (request timings)",
        "none",
    ),
    MetricDefinition(
        "first_byte_ms",
        "Request sent → response headers received.",
        "none",
        "none",
        "none",
    ),
    MetricDefinition(
        "request_throughput_per_s",
        "Completed measured requests / measured window (first measured send → last measured response end).",
        "request_throughput (over the whole benchmark duration)",
        "requests_per_second",
        "request_throughput",
    ),
    MetricDefinition(
        "output_token_throughput_per_s",
        "Output tokens of completed measured requests / measured window.",
        "output_throughput",
        "output_tokens_per_second",
        "output_token_throughput",
    ),
    MetricDefinition(
        "goodput_per_s",
        "Completed requests with TTFT <= the ttft SLO and TPOT <= the tpot SLO (each request on its own) / "
        "measured window; set with --slo ttft=2s,tpot=100ms.",
        "request_goodput (--goodput ttft:MS tpot:MS)",
        "none (constraints stop a run instead)",
        "goodput (--goodput)",
    ),
    MetricDefinition(
        "achieved_rate_per_s",
        "Sends per second actually achieved (requests − 1 over first → last send), next to the requested rate "
        "and the rate of the drawn schedule itself (a Poisson draw differs from its mean).",
        "none (request_rate is the target only)",
        "requests_per_second of the achieved load",
        "request_rate target only",
    ),
    MetricDefinition(
        "server ttft_ms / tpot_ms / itl_ms / queue_ms / e2e_ms",
        "The server's own histograms (vllm:time_to_first_token_seconds, request_time_per_output_token, "
        "inter_token_latency, request_queue_time, e2e_request_latency) between the first and last scrape: "
        "means exact, percentiles interpolated inside buckets.",
        "none (client side only)",
        "none",
        "server metrics (Triton only)",
    ),
)
