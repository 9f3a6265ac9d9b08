"""Typed facts: what the parsers read out of raw evidence, each with a pointer back to its bytes.

Every parser returns one of these records plus a list of problems; nothing here touches the OS.
A value that could not be read is ``None`` (unknown), never 0.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field, fields


@dataclass(frozen=True, slots=True)
class Citation:
    """Where a fact came from: a file and line with an excerpt, or a metric with its value."""

    source: str
    line: int | None = None
    excerpt: str = ""
    metric: str | None = None
    value: float | None = None
    threshold: str | None = None

    def render(self) -> str:
        """One line for a terminal: ``file:line: excerpt`` or ``metric = value (threshold)``."""
        if self.metric is not None:
            shown = "unknown" if self.value is None else f"{self.value:g}"
            text = f"{self.metric} = {shown}"
            if self.threshold:
                text += f" ({self.threshold})"
            return f"{self.source}: {text}" if self.source else text
        where = self.source if self.line is None else f"{self.source}:{self.line}"
        return f"{where}: {self.excerpt}" if self.excerpt else where


@dataclass(frozen=True, slots=True)
class Problem:
    """A source that could not be read, or was read only in part."""

    source: str
    message: str


# ---------------------------------------------------------------- the software stack


@dataclass(frozen=True, slots=True)
class StackGpu:
    """A GPU as the stack sees it: its name, memory and CUDA compute capability (``"8.0"``), each None when unknown."""

    index: int | None
    name: str | None
    memory_total_mib: float | None = None
    """Framebuffer memory, MiB (``memory.total``)."""
    compute_capability: str | None = None
    """CUDA compute capability, ``major.minor`` (``nvmlDeviceGetCudaComputeCapability``, ``compute_cap``)."""
    citation: Citation | None = None


STACK_TEXT_FIELDS = (
    "driver_version",
    "driver_cuda_version",
    "cuda_runtime_version",
    "torch_version",
    "nccl_version",
    "engine",
    "engine_version",
    "engine_dtype",
    "python_version",
    "kernel_release",
    "container_image",
)


@dataclass(slots=True)
class StackFacts:
    """The software under a server: driver, CUDA runtime, torch and its kernels, the engine, the GPUs.

    ``driver_cuda_version`` is the newest CUDA the driver supports (nvidia-smi's "CUDA Version", NVML's
    ``nvmlSystemGetCudaDriverVersion``); ``cuda_runtime_version`` the CUDA torch was built with (``torch.version.cuda``,
    collect_env's "CUDA used to build PyTorch"), not the toolkit on the PATH. ``arch_list`` is
    ``torch.cuda.get_arch_list()`` (``sm_XY`` kernels, ``compute_XY`` PTX). ``engine_dtype`` is the weights' dtype the
    engine resolved (vLLM's engine config line). ``packages`` maps normalized distribution names to versions.
    """

    driver_version: str | None = None
    driver_cuda_version: str | None = None
    cuda_runtime_version: str | None = None
    torch_version: str | None = None
    arch_list: tuple[str, ...] | None = None
    nccl_version: str | None = None
    engine: str | None = None
    engine_version: str | None = None
    engine_dtype: str | None = None
    python_version: str | None = None
    kernel_release: str | None = None
    container_image: str | None = None
    gpus: list[StackGpu] = field(default_factory=list)
    packages: dict[str, str] = field(default_factory=dict)
    citations: dict[str, Citation] = field(default_factory=dict)
    sources: list[str] = field(default_factory=list)
    problems: list[Problem] = field(default_factory=list)

    def known(self) -> bool:
        """True when anything at all is known."""
        return bool(self.gpus or self.packages or self.arch_list is not None) or any(
            getattr(self, name) is not None for name in STACK_TEXT_FIELDS
        )

    def fill(self, other: StackFacts) -> None:
        """Take from ``other`` what this one does not know (with its citations); GPUs only when none are known."""
        for name in (*STACK_TEXT_FIELDS, "arch_list"):
            if getattr(self, name) is None and getattr(other, name) is not None:
                setattr(self, name, getattr(other, name))
                if name in other.citations:
                    self.citations[name] = other.citations[name]
        if not self.gpus:
            self.gpus = list(other.gpus)
        for name, version in other.packages.items():
            self.packages.setdefault(name, version)
        self.sources.extend(s for s in other.sources if s not in self.sources)


# ---------------------------------------------------------------- logs


@dataclass(frozen=True, slots=True)
class LogEvent:
    """One log line that matched a catalog signature."""

    signature: str
    engine: str
    phase: str
    role: str
    family: str
    causes: tuple[str, ...]
    source: str
    line: int
    text: str
    stage: str
    values: tuple[tuple[str, str], ...] = ()
    marks: str | None = None
    fallback: bool = False

    def value(self, name: str) -> str | None:
        """The named group ``name`` of the match, if it matched."""
        for key, val in self.values:
            if key == name:
                return val
        return None

    def cite(self) -> Citation:
        """A citation of this line."""
        return Citation(source=self.source, line=self.line, excerpt=self.text)


@dataclass(slots=True)
class MemoryReport:
    """Memory numbers the server printed (vLLM, TGI, SGLang, Ollama, PyTorch OOM text). All GiB."""

    weights_gib: float | None = None
    total_memory_gib: float | None = None
    gpu_memory_utilization: float | None = None
    budget_gib: float | None = None
    non_torch_gib: float | None = None
    activation_peak_gib: float | None = None
    available_kv_gib: float | None = None
    kv_needed_gib: float | None = None
    kv_cache_tokens: float | None = None
    num_gpu_blocks: float | None = None
    max_concurrency: float | None = None
    concurrency_context_tokens: float | None = None
    cuda_graph_gib: float | None = None
    estimated_max_model_len: float | None = None
    max_seq_len: float | None = None
    free_memory_gib: float | None = None
    requested_memory_gib: float | None = None
    required_memory_gib: float | None = None
    reserved_unallocated_gib: float | None = None
    tried_alloc_gib: float | None = None
    allocated_gib: float | None = None
    free_after_weights_gib: float | None = None
    device: str | None = None
    citations: dict[str, Citation] = field(default_factory=dict)

    def cite(self, name: str) -> Citation | None:
        """The line that gave field ``name``."""
        return self.citations.get(name)


@dataclass(slots=True)
class OffloadReport:
    """How many layers a llama.cpp-family server put on the GPU."""

    offloaded_layers: float | None = None
    total_layers: float | None = None
    citations: dict[str, Citation] = field(default_factory=dict)


@dataclass(slots=True)
class BenchFigures:
    """Load-test figures: from a bench result, a pasted `vllm bench serve` block, or prose in a report."""

    ttft_mean_ms: float | None = None
    ttft_p50_ms: float | None = None
    ttft_p95_ms: float | None = None
    ttft_p99_ms: float | None = None
    tpot_mean_ms: float | None = None
    tpot_p50_ms: float | None = None
    tpot_p95_ms: float | None = None
    tpot_p99_ms: float | None = None
    request_throughput: float | None = None
    requested_rate: float | None = None
    completed: float | None = None
    long_prompt_ktokens: float | None = None
    decode_tokens_per_s: float | None = None
    citations: dict[str, Citation] = field(default_factory=dict)

    def quantiles(self, metric: str) -> list[tuple[str, float, Citation | None]]:
        """The known quantiles of ``metric`` (ttft or tpot, ms) in the order they answer a p95 objective: the p95
        itself, the median (above an objective, the p95 is too), the p99 (a tail). ``(label, ms, citation)``."""
        found = []
        for quantile in ("p95", "p50", "p99"):
            value = getattr(self, f"{metric}_{quantile}_ms")
            cite = self.citations.get(f"{metric}_{quantile}_ms")
            if value is not None:
                found.append((quantile, value, cite))
        return found


@dataclass(slots=True)
class MetaFacts:
    """What the log says about the engine itself."""

    engine_version: str | None = None
    server_pid: float | None = None
    citations: dict[str, Citation] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class StatsPoint:
    """One periodic engine stats line (vLLM 'Avg prompt throughput ...', SGLang 'Decode batch')."""

    source: str
    line: int
    text: str
    signature: str = ""
    prompt_tps: float | None = None
    generation_tps: float | None = None
    running: float | None = None
    waiting: float | None = None
    swapped: float | None = None
    preemptions: float | None = None
    kv_usage_ratio: float | None = None
    prefix_hit_ratio: float | None = None
    kv_tokens_used: float | None = None
    prefill_tokens: float | None = None
    new_seqs: float | None = None
    cached_tokens: float | None = None
    requests_done: float | None = None
    requests_total: float | None = None

    @property
    def busy(self) -> float:
        """Requests running, waiting or not yet done at this point."""
        pending = 0.0
        if self.requests_total is not None and self.requests_done is not None:
            pending = self.requests_total - self.requests_done
        return (self.running or 0) + (self.waiting or 0) + pending

    @property
    def idle_throughput(self) -> bool:
        """The line reports throughput, and it is zero."""
        return self.generation_tps is not None and not self.generation_tps and not self.prompt_tps

    def cite(self) -> Citation:
        """A citation of this line."""
        return Citation(source=self.source, line=self.line, excerpt=self.text)


STATS_FIELDS = frozenset(f.name for f in fields(StatsPoint)) - {"source", "line", "text", "signature"}


@dataclass(slots=True)
class LogFacts:
    """Everything read from the server logs."""

    sources: list[str] = field(default_factory=list)
    events: list[LogEvent] = field(default_factory=list)
    event_counts: Counter[str] = field(default_factory=Counter)
    memory: MemoryReport = field(default_factory=MemoryReport)
    offload: OffloadReport = field(default_factory=OffloadReport)
    bench: BenchFigures = field(default_factory=BenchFigures)
    meta: MetaFacts = field(default_factory=MetaFacts)
    launch_hints: dict[str, str] = field(default_factory=dict)
    launch_hint_citations: dict[str, Citation] = field(default_factory=dict)
    stats: list[StatsPoint] = field(default_factory=list)
    stack: StackFacts = field(default_factory=StackFacts)
    http_status: Counter[tuple[str, str, int]] = field(default_factory=Counter)
    http_status_citations: dict[int, Citation] = field(default_factory=dict)
    engine_votes: Counter[str] = field(default_factory=Counter)
    # Per source: the last line that shows the server serving (ready, an access or stats line, a request's error),
    # and how many lines the source had.
    last_serving_line: dict[str, int] = field(default_factory=dict)
    line_counts: dict[str, int] = field(default_factory=dict)
    lines_scanned: int = 0
    bytes_scanned: int = 0
    problems: list[Problem] = field(default_factory=list)

    @property
    def engine(self) -> str | None:
        """The engine most signatures point at, if any."""
        if not self.engine_votes:
            return None
        return self.engine_votes.most_common(1)[0][0]


# ---------------------------------------------------------------- GPU


@dataclass(frozen=True, slots=True)
class GpuProcess:
    """A process using a GPU."""

    gpu_index: int | None
    pid: int | None
    name: str
    used_memory_mib: float | None
    process_type: str | None = None


@dataclass(slots=True)
class GpuSample:
    """One GPU at one moment (nvidia-smi table, --query-gpu CSV row, NVML or the sim's telemetry)."""

    index: int | None = None
    name: str | None = None
    timestamp: str | None = None
    memory_used_mib: float | None = None
    memory_total_mib: float | None = None
    utilization_gpu_pct: float | None = None
    power_draw_w: float | None = None
    power_limit_w: float | None = None
    temperature_c: float | None = None
    sm_clock_mhz: float | None = None
    sm_clock_max_mhz: float | None = None
    pstate: str | None = None
    clocks_event_reasons: tuple[str, ...] | None = None
    citation: Citation | None = None


@dataclass(slots=True)
class GpuFacts:
    """GPU telemetry read from nvidia-smi / NVML outputs."""

    sources: list[str] = field(default_factory=list)
    driver_version: str | None = None
    cuda_version: str | None = None
    snapshot: list[GpuSample] = field(default_factory=list)
    samples: list[GpuSample] = field(default_factory=list)
    processes: list[GpuProcess] = field(default_factory=list)
    processes_citation: Citation | None = None
    active_reasons: dict[int, tuple[str, ...]] = field(default_factory=dict)
    reasons_citation: Citation | None = None
    errors: list[LogEvent] = field(default_factory=list)
    problems: list[Problem] = field(default_factory=list)


# ---------------------------------------------------------------- kernel


@dataclass(frozen=True, slots=True)
class KernelEvent:
    """An NVRM kernel message: an Xid, a GPU that fell off the bus, ECC, GSP, or the host OOM killer."""

    kind: str  # xid | fallen_off_bus | ecc | gsp | oom_kill
    source: str
    line: int
    text: str
    xid: int | None = None
    pci: str | None = None
    pid: int | None = None
    process: str | None = None
    timestamp: str | None = None

    def cite(self) -> Citation:
        """A citation of this line."""
        return Citation(source=self.source, line=self.line, excerpt=self.text)


@dataclass(slots=True)
class KernelFacts:
    """What the kernel log says."""

    sources: list[str] = field(default_factory=list)
    events: list[KernelEvent] = field(default_factory=list)
    problems: list[Problem] = field(default_factory=list)


# ---------------------------------------------------------------- launch and model


@dataclass(slots=True)
class LaunchConfig:
    """Engine arguments read from a command line, an environment, or the server's own log."""

    engine: str | None = None
    model: str | None = None
    max_model_len: int | None = None
    gpu_memory_utilization: float | None = None
    max_num_seqs: int | None = None
    max_num_batched_tokens: int | None = None
    tensor_parallel_size: int | None = None
    pipeline_parallel_size: int | None = None
    enable_prefix_caching: bool | None = None
    enable_chunked_prefill: bool | None = None
    kv_cache_dtype: str | None = None
    quantization: str | None = None
    dtype: str | None = None
    enforce_eager: bool | None = None
    port: int | None = None
    n_gpu_layers: int | None = None
    threads: int | None = None
    cpu_kv_cache_space_gib: float | None = None
    env: dict[str, str] = field(default_factory=dict)
    unknown_args: list[str] = field(default_factory=list)
    source: str = ""
    citations: dict[str, Citation] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class ModelConfig:
    """The architecture facts of a Hugging Face config.json that memory and speed depend on."""

    architecture: str | None
    num_hidden_layers: int | None
    hidden_size: int | None
    num_attention_heads: int | None
    num_key_value_heads: int | None
    head_dim: int | None
    vocab_size: int | None
    max_position_embeddings: int | None
    torch_dtype: str | None
    sliding_window: int | None = None
    kv_lora_rank: int | None = None
    qk_rope_head_dim: int | None = None
    quantization: str | None = None
    source: str = ""


# ---------------------------------------------------------------- metrics


@dataclass(frozen=True, slots=True)
class Histogram:
    """A cumulative histogram: (upper bound, cumulative count) pairs ending at +Inf, plus sum and count."""

    buckets: tuple[tuple[float, float], ...]
    total: float
    count: float


@dataclass(slots=True)
class MetricSnapshot:
    """One scrape, normalised to engine-independent names (catalog/metrics.yaml)."""

    source: str
    timestamp_s: float | None
    engine: str | None
    gauges: dict[str, float] = field(default_factory=dict)
    counters: dict[str, float] = field(default_factory=dict)
    histograms: dict[str, Histogram] = field(default_factory=dict)
    labels: dict[str, dict[str, str]] = field(default_factory=dict)
    raw_names: dict[str, str] = field(default_factory=dict)
    sample_count: int = 0


@dataclass(slots=True)
class MetricsFacts:
    """All scrapes of one server, oldest first."""

    snapshots: list[MetricSnapshot] = field(default_factory=list)
    problems: list[Problem] = field(default_factory=list)

    @property
    def latest(self) -> MetricSnapshot | None:
        """The newest snapshot."""
        return self.snapshots[-1] if self.snapshots else None


# ---------------------------------------------------------------- the whole scene


@dataclass(slots=True)
class Evidence:
    """Everything read for one diagnosis: a bundle, loose files, or a live server."""

    origin: str
    logs: LogFacts | None = None
    gpu: GpuFacts | None = None
    kernel: KernelFacts | None = None
    metrics: MetricsFacts | None = None
    launch: LaunchConfig | None = None
    model: ModelConfig | None = None
    bench: BenchFigures | None = None
    stack: StackFacts | None = None
    health_ok: bool | None = None
    read: list[str] = field(default_factory=list)
    problems: list[Problem] = field(default_factory=list)

    def any_readable(self) -> bool:
        """True when at least one source gave something."""
        return bool(self.read)
