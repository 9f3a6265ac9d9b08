"""The bench's typed records: what to run, what each request did, what a run brought back.

Times inside a run are seconds on ``time.perf_counter`` relative to the run's origin (``RunOutcome.
perf_origin_s``); durations carry their unit in their name.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import StrEnum

from llmtriage.bench.workers import WorkerChoice


class Endpoint(StrEnum):
    """The OpenAI-compatible API a run talks to."""

    chat = "chat"
    completions = "completions"

    @property
    def path(self) -> str:
        """The URL path under the server's root."""
        return "/v1/chat/completions" if self is Endpoint.chat else "/v1/completions"


class Arrival(StrEnum):
    """How an open-loop run spaces its requests."""

    poisson = "poisson"
    constant = "constant"


@dataclass(frozen=True, slots=True)
class RequestClass:
    """One kind of request in a mix: prompt length in characters, output cap in tokens, relative weight."""

    name: str
    prompt_chars: int
    max_tokens: int
    weight: float = 1.0


@dataclass(frozen=True, slots=True)
class PromptLine:
    """One prompt read from a JSONL file; ``max_tokens`` overrides the run's when given."""

    prompt: str
    max_tokens: int | None = None


@dataclass(frozen=True, slots=True)
class BenchConfig:
    """Everything that decides what a run sends and when. The API key is never written anywhere."""

    base_url: str
    endpoint: Endpoint = Endpoint.completions
    model: str | None = None
    api_key: str | None = field(default=None, repr=False)
    concurrency: int | None = None
    request_rate_per_s: float | None = None
    arrival: Arrival = Arrival.poisson
    seed: int = 0
    requests: int | None = None
    duration_s: float | None = None
    warmup_requests: int = 0
    warmup_s: float = 0.0
    classes: tuple[RequestClass, ...] = (RequestClass("default", 1000, 64),)
    prompts: tuple[PromptLine, ...] = ()
    prompts_file: str | None = None
    ignore_eos: bool = False
    timeout_s: float = 300.0
    workers: int = 1
    worker_choice: WorkerChoice | None = None  # how ``workers`` was chosen, when the CLI chose it
    label: str = "bench"
    run_id: str = ""
    metrics_url: str | None = None
    scrape_interval_s: float | None = None
    slo_ttft_ms: float = 2000.0
    slo_tpot_ms: float = 100.0

    @property
    def closed_loop(self) -> bool:
        """True when the run keeps ``concurrency`` requests in flight instead of following a rate."""
        return self.request_rate_per_s is None

    @property
    def api_url(self) -> str:
        """Where requests go."""
        return self.base_url + self.endpoint.path


@dataclass(frozen=True, slots=True)
class PlannedRequest:
    """One request ready to send: its index in the run, its class, and the JSON body as bytes."""

    index: int
    request_id: str
    class_name: str
    warmup: bool
    prompt_chars: int
    max_tokens: int
    body: bytes


@dataclass(frozen=True, slots=True)
class RequestRecord:
    """What one request did. A failed request is a record with ``error_kind`` set, never an exception.

    Times are seconds from the run's origin; ``None`` when the moment never came (no first token, ...).
    ``itl_ms`` holds every gap between two token-carrying events as the client saw them.
    """

    index: int
    request_id: str
    class_name: str
    warmup: bool
    prompt_chars: int
    max_tokens: int
    scheduled_s: float
    sent_s: float
    first_byte_s: float | None = None
    first_token_s: float | None = None
    end_s: float | None = None
    itl_ms: tuple[float, ...] = ()
    output_tokens_client: int = 0
    output_tokens_server: int | None = None
    prompt_tokens_server: int | None = None
    finish_reason: str | None = None
    status: int | None = None
    error_kind: str | None = None
    error: str | None = None

    @property
    def ok(self) -> bool:
        """The request completed: a full stream with at least one token."""
        return self.error_kind is None

    @property
    def output_tokens(self) -> int:
        """Output tokens: the server's usage figure when it sent one, else the client's count of token events."""
        return self.output_tokens_server if self.output_tokens_server is not None else self.output_tokens_client

    @property
    def queue_ms(self) -> float:
        """Client queue time: scheduled send to actual send."""
        return (self.sent_s - self.scheduled_s) * 1000.0

    @property
    def first_byte_ms(self) -> float | None:
        """Send to the response's first byte (its headers)."""
        return None if self.first_byte_s is None else (self.first_byte_s - self.sent_s) * 1000.0

    @property
    def ttft_ms(self) -> float | None:
        """Send to the first token of any kind (content, reasoning or tool call)."""
        return None if self.first_token_s is None else (self.first_token_s - self.sent_s) * 1000.0

    @property
    def e2e_ms(self) -> float | None:
        """Send to the end of the response."""
        return None if self.end_s is None else (self.end_s - self.sent_s) * 1000.0

    @property
    def tpot_ms(self) -> float | None:
        """(E2E − TTFT) / (output tokens − 1); None below two tokens."""
        ttft, e2e, tokens = self.ttft_ms, self.e2e_ms, self.output_tokens
        if ttft is None or e2e is None or tokens < 2:
            return None
        return (e2e - ttft) / (tokens - 1)

    @property
    def arrived_in_one_piece(self) -> bool:
        """Every token event came in one read: the response was buffered somewhere, TTFT is its whole time."""
        return self.ok and self.output_tokens_client >= ONE_PIECE_MIN_EVENTS and not any(self.itl_ms)


ONE_PIECE_MIN_EVENTS = 4
"""Fewer token events than this can share a read by chance; more, all at once, means the stream was held."""

INTERRUPTED = "interrupted"
"""The ``error_kind`` of a request cut short by Ctrl-C or SIGTERM: not the server's fault, kept apart from errors."""


@dataclass(frozen=True, slots=True)
class WorkerReport:
    """What one worker (an event loop in one process) brought back."""

    worker: int
    records: tuple[RequestRecord, ...]
    loop_lag_ms: tuple[float, ...]
    cpu_s: float
    wall_s: float
    error: str | None = None


@dataclass(frozen=True, slots=True)
class RawScrape:
    """One /metrics body (or why there is none) and its wall-clock time."""

    timestamp_s: float
    text: str | None
    error: str | None = None


@dataclass(frozen=True, slots=True)
class RunOutcome:
    """A finished (or interrupted) run: every record, the workers' health, the server's scrapes."""

    config: BenchConfig
    records: tuple[RequestRecord, ...]
    workers: tuple[WorkerReport, ...]
    scrapes: tuple[RawScrape, ...]
    perf_origin_s: float
    started_at_s: float
    finished_at_s: float
    interrupted: bool
    notes: tuple[str, ...] = ()
    coordinator_cpu_s: float = 0.0
    """CPU time of the parent process during a run spread over worker processes (0 when run in one)."""
