"""The scene: facts derived once from the evidence, for the tree's questions and the cause rules.

It picks the log's last lifecycle (a restart starts a new one), its root-cause error (never a wrapper),
and turns metrics, stats lines and GPU samples into measured values with their citations.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from functools import cache, cached_property

from llmtriage import catalog
from llmtriage.catalog import FATAL_FAMILIES, SERVING_FAMILIES, Thresholds
from llmtriage.diagnose.stack import StackFinding, check, merged_stack
from llmtriage.facts import (
    BenchFigures,
    Citation,
    Evidence,
    GpuFacts,
    GpuSample,
    KernelFacts,
    LaunchConfig,
    LogEvent,
    LogFacts,
    MemoryReport,
    MetricSnapshot,
    StackFacts,
    StatsPoint,
)
from llmtriage.parse import prom
from llmtriage.parse.logs import LIFECYCLE_PHASES
from llmtriage.parse.units import size_to_gib

STARTUP_PHASES = frozenset(
    {
        "weights_load",
        "kv_alloc",
        "profile_run",
        "cuda_graph_capture",
        "startup_config",
        "distributed_init",
        "driver",
        "server_bind",
    }
)
_PID_IN_LINE = re.compile(r"\bpid[=:]\s?(\d+)")
_PROCESS_HOLDS = re.compile(r"Process (?P<pid>\d+) has (?P<size>[\d.]+ [KMG]iB) memory in use")

# Phases of errors only a server with requests in its scheduler prints (a decode batch, a retraction).
SERVING_ONLY_PHASES = frozenset({"scheduling"})
# Lines a process prints while it waits for its peers (vllm/distributed/device_communicators/shm_broadcast.py).
PEER_WAIT_SIGNATURES = ("vllm_shm_broadcast_wait",)
# HTTP statuses a live server answers when it is too busy to take a request.
REFUSED_STATUSES = frozenset({429, 503})


@cache
def _serving_only_signatures() -> frozenset[str]:
    return frozenset(s.id for s in catalog.signatures() if s.serving_only)


@dataclass(frozen=True, slots=True)
class GpuHolder:
    """A process other than the server that holds GPU memory, and where that was read."""

    pid: int
    gib: float
    citation: Citation


@dataclass(frozen=True, slots=True)
class Measure:
    """A measured value and where it was read."""

    value: float
    citation: Citation


def _metric(name: str, value: float, source: str, threshold: str | None = None) -> Citation:
    return Citation(source=source, metric=name, value=round(value, 6), threshold=threshold)


class Scene:
    """Derived facts over one piece of evidence."""

    def __init__(self, evidence: Evidence, thresholds: Thresholds) -> None:
        self.evidence = evidence
        self.t = thresholds
        self.log: LogFacts = evidence.logs or LogFacts()
        self.gpu: GpuFacts = evidence.gpu or GpuFacts()
        self.kernel: KernelFacts = evidence.kernel or KernelFacts()
        self.launch: LaunchConfig | None = evidence.launch
        self.memory: MemoryReport = self.log.memory
        self.bench: BenchFigures = evidence.bench or self.log.bench
        self.snapshots: list[MetricSnapshot] = evidence.metrics.snapshots if evidence.metrics else []
        self.window = prom.window(self.snapshots)

    # ------------------------------------------------------------ the software stack

    @cached_property
    def stack(self) -> StackFacts:
        """The stack from every source that knows part of it (diagnose/stack.py)."""
        return merged_stack(self.evidence.stack, self.log.stack, self.gpu)

    @cached_property
    def stack_findings(self) -> list[StackFinding]:
        """What the stack checks found: driver against runtime, GPU against arch list, dtype against GPU."""
        return check(self.stack, self.launch, self.evidence.model)

    # ------------------------------------------------------------ the log's last lifecycle

    @cached_property
    def events(self) -> list[LogEvent]:
        """Events of the last lifecycle: a new startup after a ready server, a stop or a crash starts anew."""
        epoch: list[LogEvent] = []
        ended = False
        for event in self.log.events:
            if event.role == "marker" and event.phase == "weights_load" and ended:
                epoch, ended = [], False
            epoch.append(event)
            if event.marks in ("ready", "shutdown") or (event.role == "error" and event.family in FATAL_FAMILIES):
                ended = True
        return epoch

    def served_after(self, event: LogEvent) -> bool:
        """The server showed it was serving later in the same log (so the error did not bring it down)."""
        return self.log.last_serving_line.get(event.source, 0) > event.line

    @cached_property
    def fatal_errors(self) -> list[LogEvent]:
        """Errors that can stop a server, in order; those printed while shutting down are artefacts, and an
        uncatalogued exception the server kept serving after was handled. nvidia-smi failing to reach the driver
        counts too, after the log's own errors, when the log shows nothing served."""
        from_log = [
            e
            for e in self.events
            if e.role == "error"
            and e.family in FATAL_FAMILIES
            and (e.stage != "shutdown" or e.family == "hardware")
            and not (e.fallback and self.served_after(e))
        ]
        if self.log.last_serving_line:
            return from_log
        return from_log + [e for e in self.gpu.errors if e.family in FATAL_FAMILIES - {"hardware", "kernel"}]

    @cached_property
    def root(self) -> LogEvent | None:
        """The root-cause line: the first catalogued fatal error (a worker exit after another error is its
        consequence), except that CUDA failing to start (driver phase) comes before everything it breaks,
        whatever order the processes printed in; only when no catalogued family explains anything, the first
        uncatalogued fatal line."""
        catalogued = [e for e in self.fatal_errors if not e.fallback]
        if catalogued:
            return next((e for e in catalogued if e.phase == "driver"), catalogued[0])
        return self.fatal_errors[0] if self.fatal_errors else None

    def effective_phase(self, event: LogEvent) -> str:
        """Where in the lifecycle an error struck: its catalog phase, else the stage the log had reached, else
        the traceback's frames. A collective that timed out after thousands of others timed out serving."""
        if self.collectives_before(event) >= self.t.serving_collectives:
            return "forward"
        if event.phase in STARTUP_PHASES:
            return event.phase
        if event.stage in LIFECYCLE_PHASES:
            return event.stage
        if event.stage == "serving":
            return "forward"
        if (raised_in := event.value("frame_phase")) is not None:
            return raised_in
        if self.startup_wrappers:
            return self.startup_wrappers[0].phase
        return event.phase

    @staticmethod
    def collectives_before(event: LogEvent) -> int:
        """How many collectives completed before this one (an NCCL watchdog's SeqNum), 0 when not said."""
        seq = event.value("seq_num")
        return int(seq) if seq is not None and seq.isdigit() else 0

    @cached_property
    def startup_wrappers(self) -> list[LogEvent]:
        """Wrapper lines that say the startup failed (EngineCore failed to start, Shard failed ...), and any
        wrapper printed while the server was still starting (a scheduler exception during weight loading)."""
        return [
            e for e in self.events if e.role == "wrapper" and (e.phase in STARTUP_PHASES or e.stage in LIFECYCLE_PHASES)
        ]

    @cached_property
    def engine_dead(self) -> list[LogEvent]:
        """Wrapper lines that say the engine died while serving (not while being stopped or started)."""
        return [
            e
            for e in self.events
            if e.role == "wrapper"
            and e.family == "engine_dead"
            and e.stage != "shutdown"
            and e not in self.startup_wrappers
        ]

    @cached_property
    def ready(self) -> LogEvent | None:
        """The marker that says the HTTP server started."""
        return next((e for e in self.events if e.marks == "ready"), None)

    @cached_property
    def last_lifecycle_marker(self) -> LogEvent | None:
        """The last lifecycle marker, when the log ends during a startup phase."""
        markers = [e for e in self.events if e.role == "marker"]
        return markers[-1] if markers else None

    def by_family(self, *families: str) -> list[LogEvent]:
        """Error events of the given families."""
        return [e for e in self.events if e.role == "error" and e.family in families]

    def by_signature(self, *ids: str) -> list[LogEvent]:
        """Events of the given signatures."""
        return [e for e in self.events if e.signature in ids]

    @cached_property
    def serving_seen(self) -> Citation | None:
        """Evidence that the server served: a ready line, access or stats lines, an answer to a request (a
        rejection too), a line only a serving engine prints, a load test's figures, /metrics or /health answering."""
        if self.ready is not None:
            return self.ready.cite()
        if self.log.http_status_citations:
            return next(iter(self.log.http_status_citations.values()))
        if self.log.stats:
            return self.log.stats[0].cite()
        serving_only = _serving_only_signatures()
        answered = next(
            (
                e
                for e in self.events
                if (e.role == "error" and (e.family in SERVING_FAMILIES or e.phase in SERVING_ONLY_PHASES))
                or e.signature in serving_only
            ),
            None,
        )
        if answered is not None:
            return answered.cite()
        busy = next(
            (
                e
                for e in self.events
                if self.collectives_before(e) >= self.t.serving_collectives or e.value("frame_phase") == "forward"
            ),
            None,
        )
        if busy is not None:
            return busy.cite()
        if self.bench.citations:
            return next(iter(self.bench.citations.values()))
        if self.snapshots and self.snapshots[-1].sample_count:
            return Citation(source=self.snapshots[-1].source, excerpt="/metrics answered")
        if self.evidence.health_ok:
            return Citation(source="health check", excerpt="GET /health answered 200")
        return None

    @cached_property
    def engine_loaded(self) -> Citation | None:
        """The engine loaded and allocated its KV cache (the last memory step of every engine's start), nothing
        failed, and the log does not end inside a later startup phase: it came up, though nothing shows it serving."""
        if self.root is not None or self.startup_wrappers:
            return None
        last = self.last_lifecycle_marker
        if last is not None and last.marks == "phase" and last.phase == "kv_alloc":
            return last.cite()
        # llama.cpp's load summary ("offloaded N/M layers to GPU") ends the weight load, before any later phase.
        offload = self.log.offload.citations.get("offloaded_layers")
        if offload is not None and (
            last is None or (last.phase == "weights_load" and (last.line or 0) < (offload.line or 0))
        ):
            return offload
        return None

    @cached_property
    def peers_waiting_at_end(self) -> LogEvent | None:
        """A start of several GPU processes (tensor or pipeline parallel) whose log ends with one of them waiting for
        its peers (vLLM's shm_broadcast wait, printed after 60 s without an answer): no marker, error or ready
        line after it, nothing served. The start hangs in a collective, not in progress."""
        launch = self.launch
        if launch is None or (launch.tensor_parallel_size or 1) * (launch.pipeline_parallel_size or 1) < 2:
            return None
        if self.root is not None or self.startup_wrappers or self.serving_seen is not None:
            return None
        waits = self.by_signature(*PEER_WAIT_SIGNATURES)
        if not waits:
            return None
        last = waits[-1]
        later = [
            e for e in self.events if e.source == last.source and e.line > last.line and e.role in ("marker", "error")
        ]
        return None if later else last

    @property
    def nothing_decisive(self) -> Citation:
        """What was read, when none of it decides whether the server is up."""
        read = ", ".join(self.evidence.read[:4]) or "no evidence"
        return Citation(source=read, excerpt="no ready line, request, stats line or probe; no fatal error")

    @cached_property
    def kv_budget_exhausted(self) -> Citation | None:
        """The memory left for the KV cache was zero or less (not the rounded figure of a failed size check)."""
        mem = self.memory
        if self.root is not None and "kv_cache_too_small_for_max_model_len" in self.root.causes:
            return None
        if mem.available_kv_gib is not None and mem.available_kv_gib <= 0:
            return mem.cite("available_kv_gib") or Citation(source="server log")
        if mem.num_gpu_blocks is not None and mem.num_gpu_blocks == 0:
            return mem.cite("num_gpu_blocks") or Citation(source="server log")
        return None

    # ------------------------------------------------------------ processes

    @cached_property
    def server_pids(self) -> frozenset[int]:
        """The server's own process ids, as its log prints them (uvicorn's banner, vLLM's `(EngineCore pid=N)`)."""
        pids = {int(m.group(1)) for e in self.log.events for m in _PID_IN_LINE.finditer(e.text)}
        if self.log.meta.server_pid is not None:
            pids.add(int(self.log.meta.server_pid))
        return frozenset(pids)

    @cached_property
    def other_process(self) -> GpuHolder | None:
        """The biggest process an OOM message names as holding GPU memory that is not the server itself (on the
        OOM line, or on a line of its own where the message was wrapped)."""
        ooms = [e for e in self.fatal_errors if e.family == "oom"]
        if not ooms:
            return None
        best: GpuHolder | None = None
        for event in ooms + self.by_signature("torch_oom_process_memory"):
            for m in _PROCESS_HOLDS.finditer(event.text):
                pid, gib = int(m.group("pid")), size_to_gib(m.group("size")) or 0.0
                if pid in self.server_pids or self._holds_all_used_memory(gib):
                    continue
                if best is None or gib > best.gib:
                    best = GpuHolder(pid, gib, event.cite())
        return best

    def _holds_all_used_memory(self, gib: float) -> bool:
        """A process holding all the memory in use is the only one on the GPU: the server itself, whatever its PID
        (in a container NVML reports host PIDs, which the server's own log never prints)."""
        mem = self.memory
        if mem.total_memory_gib is None or mem.free_memory_gib is None:
            return False
        used = mem.total_memory_gib - mem.free_memory_gib
        return abs(used - gib) <= self.t.cuda_context_gib

    @cached_property
    def on_cpu(self) -> bool:
        """The server runs on the CPU (vLLM's CPU backend): its memory is host RAM, its fixes are CPU knobs."""
        if (self.memory.device or "").lower() == "cpu":
            return True
        if self.launch is not None and self.launch.cpu_kv_cache_space_gib is not None:
            return True
        return any("CPU KV cache usage" in p.text and "GPU KV cache" not in p.text for p in self.log.stats[:1])

    @cached_property
    def weights_left_too_little(self) -> Measure | None:
        """The start died after weights that fill the GPU, before any KV cache existed: the share they took."""
        mem = self.memory
        if self.ready is not None or mem.weights_gib is None or self.kv_capacity_tokens is not None:
            return None
        if any(e.marks == "phase" and e.phase in ("kv_alloc", "cuda_graph_capture") for e in self.events):
            return None
        total = mem.total_memory_gib
        if total is None and mem.free_after_weights_gib is not None:
            total = mem.weights_gib + mem.free_after_weights_gib
        if not total or mem.weights_gib / total < self.t.weights_share_tight:
            return None
        return Measure(mem.weights_gib / total, mem.cite("weights_gib") or Citation(source="server log"))

    # ------------------------------------------------------------ configuration

    @cached_property
    def utilization(self) -> Measure | None:
        """--gpu-memory-utilization: what the engine printed, else the launch flags, else cache_config_info."""
        if self.memory.gpu_memory_utilization is not None:
            cite = self.memory.cite("gpu_memory_utilization") or Citation(source="server log")
            return Measure(self.memory.gpu_memory_utilization, cite)
        if self.launch is not None and self.launch.gpu_memory_utilization is not None:
            cite = self.launch.citations.get("gpu_memory_utilization") or Citation(source=self.launch.source)
            return Measure(self.launch.gpu_memory_utilization, cite)
        value = self.cache_config_number("gpu_memory_utilization")
        return value

    def cache_config_number(self, label: str) -> Measure | None:
        """A number from vllm:cache_config_info's labels in the latest scrape."""
        for snap in reversed(self.snapshots):
            raw = snap.labels.get("cache_config", {}).get(label)
            if raw is None:
                continue
            try:
                value = float(raw)
            except ValueError:
                return None
            return Measure(value, _metric(f"vllm:cache_config_info{{{label}}}", value, snap.source))
        return None

    def cache_config_flag(self, label: str) -> bool | None:
        """A boolean label of vllm:cache_config_info."""
        for snap in reversed(self.snapshots):
            raw = snap.labels.get("cache_config", {}).get(label)
            if raw is not None:
                return raw.lower() == "true"
        return None

    @cached_property
    def max_model_len(self) -> Measure | None:
        """The context limit the server ran with."""
        if self.launch is not None and self.launch.max_model_len is not None:
            cite = self.launch.citations.get("max_model_len") or Citation(source=self.launch.source)
            return Measure(float(self.launch.max_model_len), cite)
        for name in ("max_seq_len", "concurrency_context_tokens"):
            value = getattr(self.memory, name)
            if value is not None:
                return Measure(value, self.memory.cite(name) or Citation(source="server log"))
        return None

    @cached_property
    def kv_capacity_tokens(self) -> Measure | None:
        """How many tokens the KV cache holds (vLLM V0 prints blocks: tokens are blocks x the block size)."""
        if self.memory.kv_cache_tokens is not None:
            return Measure(self.memory.kv_cache_tokens, self.memory.cite("kv_cache_tokens") or Citation("server log"))
        blocks = self.memory.num_gpu_blocks
        if blocks:
            return Measure(
                blocks * self.t.kv_block_tokens, self.memory.cite("num_gpu_blocks") or Citation("server log")
            )
        return self.cache_config_number("kv_cache_size_tokens")

    @cached_property
    def kv_max_concurrency(self) -> Measure | None:
        """How many max-model-len requests the KV cache holds at once."""
        if self.memory.max_concurrency is not None:
            return Measure(self.memory.max_concurrency, self.memory.cite("max_concurrency") or Citation("server log"))
        return self.cache_config_number("kv_cache_max_concurrency")

    # ------------------------------------------------------------ metrics

    def histogram_quantile(self, name: str, q: float) -> Measure | None:
        """Quantile of a latency histogram over the window (two scrapes or more), else since start."""
        if self.window is not None:
            hist = self.window.histogram(name)
            scope = f"window of {self.window.seconds:.0f} s" if self.window.seconds else "between scrapes"
            source = f"{self.window.first.source} .. {self.window.last.source}"
        elif self.snapshots:
            hist = self.snapshots[-1].histograms.get(name)
            scope = "since server start"
            source = self.snapshots[-1].source
        else:
            return None
        value = prom.quantile(hist, q)
        if value is None or hist is None:
            return None
        raw = self.snapshots[-1].raw_names.get(name, name)
        label = f"p{round(q * 100)} {raw} ({scope}, {hist.count:.0f} obs)"
        return Measure(value, _metric(label, value, source))

    def histogram_mean(self, name: str) -> Measure | None:
        """Mean of a histogram over the window, else since start."""
        if self.window is not None:
            hist = self.window.histogram(name)
            source = f"{self.window.first.source} .. {self.window.last.source}"
        elif self.snapshots:
            hist = self.snapshots[-1].histograms.get(name)
            source = self.snapshots[-1].source
        else:
            return None
        value = prom.mean(hist)
        if value is None:
            return None
        raw = self.snapshots[-1].raw_names.get(name, name)
        return Measure(value, _metric(f"mean {raw}", value, source))

    def gauge_peak(self, name: str) -> Measure | None:
        """The highest value of a gauge over the scrapes."""
        best: Measure | None = None
        for snap in self.snapshots:
            value = snap.gauges.get(name)
            if value is not None and (best is None or value > best.value):
                best = Measure(value, _metric(snap.raw_names.get(name, name), value, snap.source))
        return best

    def counter_increase(self, name: str, *, appeared_from_zero: bool = False) -> Measure | None:
        """How much a counter grew over the window; with one scrape, its value since start. With
        ``appeared_from_zero``, a counter first scraped inside the window started there (prom.Window.delta)."""
        if self.window is not None:
            delta = self.window.delta(name, appeared_from_zero=appeared_from_zero)
            if delta is None:
                return None
            raw = self.window.last.raw_names.get(name, name)
            source = f"{self.window.first.source} .. {self.window.last.source}"
            return Measure(delta, _metric(f"increase of {raw}", delta, source))
        if self.snapshots:
            value = self.snapshots[-1].counters.get(name)
            if value is None:
                return None
            raw = self.snapshots[-1].raw_names.get(name, name)
            return Measure(value, _metric(f"{raw} (since start)", value, self.snapshots[-1].source))
        return None

    # ------------------------------------------------------------ stats lines

    def by_stats_signature(self, signature: str) -> list[StatsPoint]:
        """Stats points of one signature, in order."""
        return [p for p in self.log.stats if p.signature == signature]

    def stats_peak(self, field_name: str) -> Measure | None:
        """The highest value of a stats-line field."""
        best: tuple[float, StatsPoint] | None = None
        for point in self.log.stats:
            value = getattr(point, field_name)
            if value is not None and (best is None or value > best[0]):
                best = (value, point)
        if best is None:
            return None
        return Measure(best[0], best[1].cite())

    @cached_property
    def peak_waiting(self) -> Measure | None:
        """The longest queue seen, in metrics or stats lines."""
        candidates = [m for m in (self.gauge_peak("waiting"), self.stats_peak("waiting")) if m is not None]
        return max(candidates, key=lambda m: m.value) if candidates else None

    @cached_property
    def peak_kv_usage(self) -> Measure | None:
        """The highest KV cache usage seen."""
        candidates = [
            m for m in (self.gauge_peak("kv_usage_ratio"), self.stats_peak("kv_usage_ratio")) if m is not None
        ]
        return max(candidates, key=lambda m: m.value) if candidates else None

    # ------------------------------------------------------------ GPU

    @cached_property
    def gpu_samples(self) -> list[GpuSample]:
        """Every GPU reading: snapshot tables, -q sections and CSV series."""
        return [*self.gpu.snapshot, *self.gpu.samples]

    @cached_property
    def clock_reasons(self) -> dict[int, tuple[tuple[str, ...], Citation]]:
        """Per GPU, the clocks event reasons seen active while it worked, with where they were read."""
        found: dict[int, tuple[set[str], Citation]] = {}
        for index, active in self.gpu.active_reasons.items():
            if active:
                found[index] = (set(active), self.gpu.reasons_citation or Citation(source="gpu"))
        for sample in self.gpu_samples:
            sampled = sample.clocks_event_reasons
            busy = sample.utilization_gpu_pct is None or sample.utilization_gpu_pct >= self.t.busy_utilization_pct
            if not sampled or not busy:
                continue
            index = sample.index or 0
            seen, cite = found.get(index, (set(), sample.citation or Citation(source="gpu")))
            found[index] = (seen | set(sampled), cite)
        return {index: (tuple(sorted(seen)), cite) for index, (seen, cite) in found.items()}

    @cached_property
    def http_posts(self) -> tuple[int, int, int]:
        """(POST requests, rejected 400/413/422, failed 5xx) from access-log lines (every engine's POSTs are
        its inference requests: /v1/..., /generate, /api/generate, /completion)."""
        total = rejected = failed = 0
        for (method, _, status), count in self.log.http_status.items():
            if method != "POST":
                continue
            total += count
            if status in (400, 413, 422):
                rejected += count
            elif status >= 500:
                failed += count
        return total, rejected, failed

    @cached_property
    def http_refused(self) -> int:
        """POSTs refused for load (429 Too Many Requests, 503 busy): the server is alive and full, not dead."""
        return sum(
            count
            for (method, _, status), count in self.log.http_status.items()
            if method == "POST" and status in REFUSED_STATUSES
        )
