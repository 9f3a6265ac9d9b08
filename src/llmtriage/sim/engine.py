"""A vLLM V1-like engine in simulated time: continuous batching, a paged KV cache with prefix caching,
chunked prefill, preemption by recompute, and step times from a roofline of the GPU.

Simulated time is wall time multiplied by ``speed``; every latency the engine reports (metrics, logs)
is in simulated seconds, so a run at speed 50 reports what the GPU would have taken.
"""

from __future__ import annotations

import asyncio
import math
import time
from collections import OrderedDict, deque
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Protocol

from llmtriage.capacity import GpuSpec, ModelSpec
from llmtriage.capacity.weights import active_params
from llmtriage.sim.faults import Fault
from llmtriage.sim.memory import GIB, VLLM_SITE, VLLM_VERSION, EngineArgs, MemoryPlan
from llmtriage.sim.metrics import SimMetrics, observe_many
from llmtriage.sim.vlog import VllmLog

# Achievable shares of the datasheet peaks, and the fixed cost of one step.
MODEL_FLOPS_UTILIZATION = 0.55
MEMORY_BANDWIDTH_UTILIZATION = 0.85
STEP_OVERHEAD_GRAPHS_S = 0.0015
STEP_OVERHEAD_EAGER_S = 0.004
PER_SEQUENCE_OVERHEAD_S = 0.00002
STATS_INTERVAL_S = 10.0
# NVML's utilization.gpu: the share of this many simulated seconds the engine spent stepping.
UTILIZATION_WINDOW_S = 1.0
DEFAULT_OOM_RUNNING = 32
# Below this a wall-clock sleep is not worth a timer.
MIN_SLEEP_S = 0.0005
# When the catalog lacks a figure for a GPU: an A100-class part.
DEFAULT_TFLOPS = 312.0
DEFAULT_BANDWIDTH_GBS = 2000.0
# Behind the simulated clock, the engine still hands out tokens and lets handlers run after this much of its CPU time.
YIELD_EVERY_S = 0.01


class TokenStream:
    """Where the engine puts a request's progress for its HTTP handler.

    ``event`` is set once the request finished or failed. A streaming handler sets ``on_tokens`` instead of waking per
    token: the engine calls it for every running request each time it lets the event loop run (after each step when
    on time, every ``YIELD_EVERY_S`` of CPU time when behind), so all the tokens since the last call go out in one
    write.
    """

    __slots__ = ("error", "event", "finish_reason", "on_tokens", "produced")

    def __init__(self) -> None:
        self.produced = 0
        self.finish_reason: str | None = None
        self.error: str | None = None
        self.event = asyncio.Event()
        self.on_tokens: Callable[[], None] | None = None

    def push(self, produced: int, finish_reason: str) -> None:
        """The request finished with ``produced`` tokens, for ``finish_reason``."""
        self.produced = produced
        self.finish_reason = finish_reason
        self.event.set()

    def fail(self, error: str) -> None:
        """The engine died under this request."""
        self.error = error
        self.event.set()


@dataclass(slots=True, eq=False)
class SimRequest:
    """One request inside the engine."""

    request_id: str
    prompt_tokens: int
    block_hashes: tuple[int, ...]
    max_tokens: int
    stop_after: int | None
    stream: TokenStream
    arrival_s: float = 0.0
    computed: int = 0
    output: int = 0
    blocks: list[int] = field(default_factory=list)
    cached_tokens: int = 0
    counted_prompt: bool = False
    scheduled_s: float | None = None
    first_token_s: float | None = None
    last_token_s: float | None = None
    preemptions: int = 0
    finish_reason: str | None = None

    @property
    def known_tokens(self) -> int:
        """Tokens whose KV is needed before the next token: the prompt and what was generated."""
        return self.prompt_tokens + self.output


class KvCache:
    """Paged KV blocks of 16 tokens with hash-based prefix caching and LRU eviction of free cached blocks."""

    def __init__(self, num_blocks: int, block_size: int, prefix_caching: bool) -> None:
        self.num_blocks = num_blocks
        self.block_size = block_size
        self.prefix_caching = prefix_caching
        self._free: OrderedDict[int, None] = OrderedDict.fromkeys(range(num_blocks))
        self._refs = [0] * num_blocks
        self._hash_of: dict[int, int] = {}
        self._block_of: dict[int, int] = {}

    @property
    def free_blocks(self) -> int:
        """Blocks not held by any request (cached ones included: they can be evicted)."""
        return len(self._free)

    @property
    def usage(self) -> float:
        """Share of blocks held by requests (vllm:kv_cache_usage_perc)."""
        return 1.0 - len(self._free) / self.num_blocks if self.num_blocks else 0.0

    def cached_prefix(self, hashes: tuple[int, ...]) -> list[int]:
        """Blocks holding the longest cached prefix of ``hashes``."""
        if not self.prefix_caching:
            return []
        blocks = []
        for h in hashes:
            block = self._block_of.get(h)
            if block is None:
                break
            blocks.append(block)
        return blocks

    def take(self, blocks: list[int]) -> None:
        """Reference cached blocks for a request."""
        for block in blocks:
            if self._refs[block] == 0:
                del self._free[block]
            self._refs[block] += 1

    def allocate(self, count: int) -> list[int] | None:
        """``count`` fresh blocks (evicting cached ones, least recently used first), or None."""
        if count > len(self._free):
            return None
        taken = []
        for _ in range(count):
            block, _ = self._free.popitem(last=False)
            old = self._hash_of.pop(block, None)
            if old is not None:
                self._block_of.pop(old, None)
            self._refs[block] = 1
            taken.append(block)
        return taken

    def register(self, block: int, block_hash: int) -> None:
        """Remember that ``block`` holds the prefix ending in ``block_hash``."""
        if self.prefix_caching and block_hash not in self._block_of:
            self._block_of[block_hash] = block
            self._hash_of[block] = block_hash

    def release(self, blocks: list[int]) -> None:
        """Drop a request's references; the tail is evicted first."""
        for block in reversed(blocks):
            self._refs[block] -= 1
            if self._refs[block] == 0:
                self._free[block] = None


@dataclass(slots=True)
class GpuState:
    """What the GPU looks like from NVML right now."""

    clock_ratio: float = 1.0
    reasons_mask: int = 0
    throttle_kind: str | None = None
    contention_share: float = 1.0
    other_process_gib: float = 0.0


class Observer(Protocol):
    """What an engine personality hears (llama.cpp's slots, counters and log lines)."""

    def started(self, req: SimRequest, now: float) -> None:
        """``req`` was scheduled for the first time."""

    def finished(self, req: SimRequest, now: float) -> None:
        """``req`` ended (any reason)."""

    def stepped(self, busy_slots: int, running: int, waiting: int) -> None:
        """One step ran with ``busy_slots`` requests in it."""

    def queued(self, running: int, waiting: int) -> None:
        """The queue changed outside a step."""


class Engine:
    """The scheduler loop."""

    def __init__(
        self,
        model: ModelSpec,
        gpu: GpuSpec,
        args: EngineArgs,
        memory: MemoryPlan,
        faults: list[Fault],
        metrics: SimMetrics,
        log: VllmLog,
        speed: float,
    ) -> None:
        self.model = model
        self.args = args
        self.memory = memory
        self.metrics = metrics
        self.log = log
        self.speed = speed
        self.kv = KvCache(memory.fit.num_gpu_blocks, memory.block_size, args.enable_prefix_caching)
        self.max_num_seqs = memory.fit.max_num_seqs
        self.max_num_batched_tokens = memory.fit.max_num_batched_tokens
        self.waiting: deque[SimRequest] = deque()
        self.running: list[SimRequest] = []
        self.gpu = GpuState(other_process_gib=memory.other_process_gib)
        self.pending_faults = sorted(
            (f for f in faults if not (f.name == "other-process" and f.onset_s == 0)), key=lambda f: f.onset_s
        )
        self.oom_fault = next((f for f in faults if f.name == "runtime-oom"), None)
        self.dead: str | None = None
        self.stalled = False
        self.on_death: list[asyncio.Event] = []
        self._wake = asyncio.Event()
        self._t0 = time.monotonic()
        self._stepping_since_cpu_s = time.thread_time()
        self._busy: deque[tuple[float, float]] = deque()
        self._weights_bytes = memory.fit.weights_gib * GIB
        self._intermediate = model.intermediate_size or 4 * model.hidden_size
        self._vocab = model.vocab_size or 32000
        self._active_params_by_batch: dict[int, float] = {}
        self._tflops = gpu.bf16_tflops or DEFAULT_TFLOPS
        self._bandwidth_gbs = gpu.bandwidth_gbs or DEFAULT_BANDWIDTH_GBS
        self.prompt_tokens_total = 0
        self.generation_tokens_total = 0
        self.prefix_queries_total = 0
        self.prefix_hits_total = 0
        self._step_prefix_queries = 0
        self._step_prefix_hits = 0
        self.observer: Observer | None = None

    # ------------------------------------------------------------ clock

    def now(self) -> float:
        """Simulated seconds since the engine started."""
        return (time.monotonic() - self._t0) * self.speed

    async def _sleep_until(self, sim_s: float) -> None:
        """Wait for the wall clock to reach ``sim_s``; when behind, keep stepping but let handlers run every 10 ms of
        CPU time."""
        wall = (sim_s - self.now()) / self.speed
        if wall > MIN_SLEEP_S:
            self._deliver()
            await asyncio.sleep(wall)
            self._stepping_since_cpu_s = time.thread_time()
        elif time.thread_time() - self._stepping_since_cpu_s > YIELD_EVERY_S:
            # Counted in this thread's CPU time: the steps between two hand-outs stay as many on a busy machine.
            self._deliver()
            await asyncio.sleep(0)
            self._stepping_since_cpu_s = time.thread_time()

    def _deliver(self) -> None:
        """Let each running request's handler write the tokens it has not sent yet."""
        for req in self.running:
            on_tokens = req.stream.on_tokens
            if on_tokens is not None:
                on_tokens()

    # ------------------------------------------------------------ requests

    def add(self, request: SimRequest) -> None:
        """Queue a request."""
        request.arrival_s = self.now()
        self.waiting.append(request)
        if self.observer is not None:
            self.observer.queued(len(self.running), len(self.waiting))
        self.metrics.request_params_n.observe(1)
        self.metrics.request_params_max_tokens.observe(request.max_tokens)
        self.metrics.request_max_tokens.observe(request.max_tokens)
        self._wake.set()

    def abort(self, request: SimRequest) -> None:
        """The client went away: free what the request holds."""
        if request.finish_reason is not None:
            return
        if request in self.waiting:
            self.waiting.remove(request)
        elif request in self.running:
            self.running.remove(request)
        self._finish(request, "abort", self.now())
        self._publish_gauges()
        if self.observer is not None:
            self.observer.queued(len(self.running), len(self.waiting))

    # ------------------------------------------------------------ scheduling

    def _schedule(self) -> list[tuple[SimRequest, int]]:
        budget = self.max_num_batched_tokens
        batch: list[tuple[SimRequest, int]] = []
        preempted = False
        running = self.running
        block_size = self.kv.block_size
        i = 0
        while i < len(running) and budget > 0:
            req = running[i]
            new = min(req.prompt_tokens + req.output - req.computed, budget)
            # Most steps of a running request fit in the blocks it holds: a new one every block_size tokens.
            if -(-(req.computed + new) // block_size) > len(req.blocks) and not self._grow(req, new):
                # Out of blocks: preempt the newest until this one fits, or is preempted itself.
                victim = running.pop()
                self._preempt(victim)
                preempted = True
                while victim is not req and not self._grow(req, new):
                    victim = running.pop()
                    self._preempt(victim)
                if victim is req:
                    continue
            batch.append((req, new))
            budget -= new
            i += 1
        if preempted:
            return batch
        while self.waiting and budget > 0 and len(self.running) < self.max_num_seqs:
            req = self.waiting[0]
            self._attach_prefix(req)
            new = req.known_tokens - req.computed
            if new > budget and not self.args.enable_chunked_prefill:
                self._detach(req)
                break
            new = min(new, budget)
            if not self._grow(req, new):
                self._detach(req)
                break
            if not req.counted_prompt and req.scheduled_s is None:
                req.cached_tokens = req.computed
                self._step_prefix_queries += req.prompt_tokens
                self._step_prefix_hits += req.computed
            self.waiting.popleft()
            if req.scheduled_s is None:
                req.scheduled_s = self.now()
                self.metrics.queue_time.observe(req.scheduled_s - req.arrival_s)
                if self.observer is not None:
                    self.observer.started(req, req.scheduled_s)
            self.running.append(req)
            batch.append((req, new))
            budget -= new
        return batch

    def _attach_prefix(self, req: SimRequest) -> None:
        """A waiting request starts from the longest cached prefix of its prompt (at least one token left to compute)."""
        blocks = self.kv.cached_prefix(req.block_hashes)
        usable = min(len(blocks) * self.kv.block_size, req.known_tokens - 1) // self.kv.block_size
        blocks = blocks[:usable]
        self.kv.take(blocks)
        req.blocks = blocks
        req.computed = len(blocks) * self.kv.block_size

    def _detach(self, req: SimRequest) -> None:
        """A request that could not be admitted holds nothing while it waits."""
        self.kv.release(req.blocks)
        req.blocks = []
        req.computed = 0

    def _grow(self, req: SimRequest, new: int) -> bool:
        needed = math.ceil((req.computed + new) / self.kv.block_size) - len(req.blocks)
        if needed <= 0:
            return True
        blocks = self.kv.allocate(needed)
        if blocks is None:
            return False
        req.blocks.extend(blocks)
        return True

    def _preempt(self, req: SimRequest) -> None:
        self._detach(req)
        req.preemptions += 1
        self.metrics.preemptions.inc()
        self.waiting.appendleft(req)

    # ------------------------------------------------------------ step time (roofline)

    def step_seconds(self, batch: list[tuple[SimRequest, int]]) -> float:
        """max(compute, memory) of the batch on this GPU, plus the per-step overhead."""
        model = self.model
        tokens = 0
        attention_flops = 0.0
        kv_read = 0
        for req, new in batch:
            tokens += new
            attention_flops += 4.0 * model.num_layers * model.hidden_size * new * (req.computed + new / 2)
            kv_read += req.computed + new
        flops = 2.0 * self._active_params(len(batch)) * tokens + attention_flops
        read_bytes = self._weights_bytes + kv_read * self.memory.fit.kv_bytes_per_token
        gpu = self.gpu
        compute_s = flops / (self._tflops * 1e12 * MODEL_FLOPS_UTILIZATION * gpu.clock_ratio)
        memory_s = read_bytes / (
            self._bandwidth_gbs * 1e9 * MEMORY_BANDWIDTH_UTILIZATION * (0.5 + 0.5 * gpu.clock_ratio)
        )
        overhead = STEP_OVERHEAD_EAGER_S if self.args.enforce_eager else STEP_OVERHEAD_GRAPHS_S
        self.metrics.flops.inc(flops)
        self.metrics.read_bytes.inc(read_bytes)
        self.metrics.write_bytes.inc(tokens * self.memory.fit.kv_bytes_per_token)
        return (max(compute_s, memory_s) + overhead + PER_SEQUENCE_OVERHEAD_S * len(batch)) / gpu.contention_share

    def _active_params(self, batch: int) -> float:
        """Parameters one step reads (MoE: the experts routed to); memoised per batch size."""
        value = self._active_params_by_batch.get(batch)
        if value is None:
            value = self._active_params_by_batch[batch] = active_params(self.model, batch)
        return value

    def step_activation_gib(self, batch: list[tuple[SimRequest, int]]) -> float:
        """Activation memory of one step: hidden states and MLP intermediates, plus fp32 logits per sequence."""
        tokens = sum(new for _, new in batch)
        per_token = (2 * self._intermediate + 4 * self.model.hidden_size) * 2 * 2
        return (tokens * per_token + len(batch) * self._vocab * 4) / GIB

    # ------------------------------------------------------------ the loop

    async def run(self) -> None:
        """Step until the engine dies or the task is cancelled."""
        while self.dead is None:
            self._apply_faults()
            if self.stalled or not (self.waiting or self.running):
                self._wake.clear()
                self._deliver()
                await self._wait_for_work()
                continue
            start = self.now()
            batch = self._schedule()
            if not batch:
                self._wake.clear()
                self._deliver()
                await self._wait_for_work()
                continue
            if self._oom_triggered(batch):
                self._die_of_oom(batch)
                return
            end = start + self.step_seconds(batch)
            await self._sleep_until(end)
            self._busy.append((start, end))
            self._forget_busy_before(end - UTILIZATION_WINDOW_S)
            self._complete(batch, end)
            self._publish_gauges()
            if self.observer is not None:
                self.observer.stepped(len(batch), len(self.running), len(self.waiting))

    async def _wait_for_work(self) -> None:
        timeout = None
        if self.pending_faults:
            timeout = max(0.0, (self.pending_faults[0].onset_s - self.now()) / self.speed)
        try:
            await asyncio.wait_for(self._wake.wait(), timeout)
        except TimeoutError:
            return

    def _complete(self, batch: list[tuple[SimRequest, int]], now: float) -> None:
        # Runs once per request of the step: field updates only, but at a request's first and last token; the
        # step's token counts and inter-token gaps go to the metrics once, after the loop.
        metrics = self.metrics
        prefix_caching = self.kv.prefix_caching
        finished = False
        tokens = 0
        generated = 0
        # Inter-token gaps by the time of the previous token: most of a step's requests share one.
        gaps: dict[float, int] = {}
        for req, new in batch:
            tokens += new
            before = req.computed
            req.computed = computed = before + new
            if before < req.prompt_tokens and prefix_caching:
                self._register_prompt_blocks(req, before)
            output = req.output
            if computed < req.prompt_tokens + output:
                continue
            if not req.counted_prompt:
                self._count_prompt(req)
            req.output = output = output + 1
            generated += 1
            last = req.last_token_s
            if last is None:
                req.first_token_s = now
                metrics.ttft.observe(now - req.arrival_s)
                metrics.prefill_time.observe(now - (req.scheduled_s or now))
            else:
                gaps[last] = gaps.get(last, 0) + 1
            req.last_token_s = now
            if output >= req.max_tokens:
                self._finish(req, "length", now)
                finished = True
            elif req.stop_after is not None and output >= req.stop_after:
                self._finish(req, "stop", now)
                finished = True
            else:
                req.stream.produced = output
        for last, count in gaps.items():
            observe_many(metrics.itl, now - last, count)
        metrics.iteration_tokens.observe(tokens)
        if generated:
            self.generation_tokens_total += generated
            metrics.generation_tokens.inc(generated)
        if finished:
            self.running = [r for r in self.running if r.finish_reason is None]
        if self._step_prefix_queries:
            metrics.prefix_queries.inc(self._step_prefix_queries)
            metrics.prefix_hits.inc(self._step_prefix_hits)
            self.prefix_queries_total += self._step_prefix_queries
            self.prefix_hits_total += self._step_prefix_hits
            self._step_prefix_queries = self._step_prefix_hits = 0

    def _register_prompt_blocks(self, req: SimRequest, before: int) -> None:
        """Prefix caching: the prompt blocks this step filled (from token ``before`` on) hold their hashes now."""
        block_size = self.kv.block_size
        for index in range(before // block_size, min(req.computed, req.prompt_tokens) // block_size):
            if index < len(req.block_hashes):
                self.kv.register(req.blocks[index], req.block_hashes[index])

    def _count_prompt(self, req: SimRequest) -> None:
        """The prompt is in the KV cache: count its tokens, computed and cached, once per request."""
        metrics = self.metrics
        req.counted_prompt = True
        computed = req.prompt_tokens - req.cached_tokens
        self.prompt_tokens_total += req.prompt_tokens
        metrics.prompt_tokens.inc(req.prompt_tokens)
        metrics.prompt_tokens_computed.inc(computed)
        metrics.prompt_tokens_cache_hit.inc(req.cached_tokens)
        metrics.prompt_tokens_cached.inc(req.cached_tokens)
        metrics.prompt_tokens_cached_device.inc(req.cached_tokens)
        metrics.prefill_kv_computed.observe(computed)

    def _finish(self, req: SimRequest, reason: str, now: float) -> None:
        req.finish_reason = reason
        self.kv.release(req.blocks)
        req.blocks = []
        metrics = self.metrics
        metrics.success[reason].inc()
        metrics.e2e.observe(now - req.arrival_s)
        if req.scheduled_s is not None:
            metrics.inference_time.observe(now - req.scheduled_s)
        if req.first_token_s is not None:
            decode = now - req.first_token_s
            metrics.decode_time.observe(decode)
            if req.output > 1:
                metrics.tpot.observe(decode / (req.output - 1))
        metrics.request_prompt_tokens.observe(req.prompt_tokens)
        metrics.request_generation_tokens.observe(req.output)
        metrics.request_preemptions.observe(req.preemptions)
        if self.observer is not None:
            self.observer.finished(req, now)
        req.stream.push(req.output, reason)

    def _publish_gauges(self) -> None:
        m = self.metrics
        m.running.set(len(self.running))
        m.waiting.set(len(self.waiting))
        m.waiting_capacity.set(len(self.waiting))
        m.kv_usage.set(self.kv.usage)

    # ------------------------------------------------------------ faults

    def _apply_faults(self) -> None:
        now = self.now()
        while self.pending_faults and self.pending_faults[0].onset_s <= now:
            fault = self.pending_faults.pop(0)
            gpu = self.gpu
            if fault.name == "throttle":
                kind = str(fault.params.get("kind", "power"))
                gpu.throttle_kind = kind
                gpu.clock_ratio = fault.number("clock", 0.6)
                gpu.reasons_mask = 0x4 if kind == "power" else 0x20 | 0x40 | 0x8
            elif fault.name == "contention":
                gpu.other_process_gib += fault.number("memory_gib", 8.0)
                gpu.contention_share = fault.number("share", 0.5)
            elif fault.name == "other-process":
                gpu.other_process_gib += fault.number("memory_gib", 8.0)
            elif fault.name == "stall":
                self.stalled = True

    def _oom_triggered(self, batch: list[tuple[SimRequest, int]]) -> bool:
        fault = self.oom_fault
        if fault is None or self.now() < fault.onset_s:
            return False
        running_limit = fault.params.get("running")
        tokens_limit = fault.params.get("batch_tokens")
        if running_limit is None and tokens_limit is None:
            running_limit = DEFAULT_OOM_RUNNING
        tokens = sum(new for _, new in batch)
        return (running_limit is not None and len(batch) >= int(running_limit)) or (
            tokens_limit is not None and tokens >= int(tokens_limit)
        )

    def _die_of_oom(self, batch: list[tuple[SimRequest, int]]) -> None:
        mem = self.memory
        budget = mem.fit.budget_gib
        tried = self.step_activation_gib(batch)
        free_mib = max(0.0, mem.fit.gpu_total_gib - budget - self.gpu.other_process_gib) * 1024 * 0.2
        reserved_mib = 20.0 + 0.02 * tried * 1024
        error = (
            f"torch.OutOfMemoryError: CUDA out of memory. Tried to allocate {tried:.2f} GiB. GPU 0 has a total "
            f"capacity of {mem.fit.gpu_total_gib:.2f} GiB of which {free_mib:.2f} MiB is free. Including non-PyTorch "
            f"memory, this process has {budget:.2f} GiB memory in use. Of the allocated memory "
            f"{budget - mem.fit.non_torch_gib:.2f} GiB is allocated by PyTorch, and {reserved_mib:.2f} MiB is "
            "reserved by PyTorch but unallocated. If reserved but unallocated memory is large try setting "
            "PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True to avoid fragmentation.  See documentation for Memory "
            "Management  (https://pytorch.org/docs/stable/notes/cuda.html#environment-variables)"
        )
        self.log.engine(
            f"Dumping input data for V1 LLM engine (v{VLLM_VERSION}) with config: model='{self.model.name}', "
            f"max_seq_len={mem.max_model_len}, enforce_eager={self.args.enforce_eager}",
            where="dump_input.py:72",
            level="ERROR",
        )
        self.log.engine(
            f"Dumping scheduler stats: SchedulerStats(num_running_reqs={len(self.running)}, "
            f"num_waiting_reqs={len(self.waiting)}, num_skipped_waiting_reqs=0, step_counter=0, current_wave=0, "
            f"kv_cache_usage={self.kv.usage}, iteration_details=None)",
            where="dump_input.py:81",
            level="ERROR",
        )
        self.log.engine("EngineCore encountered a fatal error.", where="core.py:1512", level="ERROR")
        self.log.traceback(
            "EngineCore",
            "core.py:1512",
            [
                (f"{VLLM_SITE}/v1/engine/core.py", 1503, "run_engine_core", "engine_core.run_busy_loop()"),
                (
                    f"{VLLM_SITE}/v1/engine/core.py",
                    1544,
                    "_process_engine_step",
                    "outputs, model_executed = self.step_fn()",
                ),
                (
                    f"{VLLM_SITE}/v1/worker/gpu_model_runner.py",
                    3120,
                    "execute_model",
                    "hidden_states = self.model(...)",
                ),
                (
                    f"{VLLM_SITE}/model_executor/layers/activation.py",
                    152,
                    "forward_cuda",
                    "out = torch.empty(output_shape, dtype=x.dtype, device=x.device)",
                ),
            ],
            error,
        )
        self.log.api("AsyncLLM output_handler failed.", where="async_llm.py:906", level="ERROR")
        self.log.traceback(
            "APIServer",
            "async_llm.py:906",
            [
                (
                    f"{VLLM_SITE}/v1/engine/async_llm.py",
                    849,
                    "output_handler",
                    "outputs = await engine_core.get_output_async()",
                )
            ],
            "vllm.v1.engine.exceptions.EngineDeadError: EngineCore encountered an issue. See stack trace (above) for "
            "the root cause.",
        )
        self.kill("EngineCore encountered an issue. See stack trace (above) for the root cause.")

    def kill(self, reason: str) -> None:
        """The engine is dead: every request in flight fails."""
        self.dead = reason
        for req in [*self.running, *self.waiting]:
            req.finish_reason = "error"
            req.stream.fail(reason)
        self.running.clear()
        self.waiting.clear()
        self._publish_gauges()
        for event in self.on_death:
            event.set()

    # ------------------------------------------------------------ periodic stats and telemetry

    def busy_ratio(self) -> float:
        """Share of the last simulated second spent stepping (NVML's utilization.gpu)."""
        now = self.now()
        horizon = now - UTILIZATION_WINDOW_S
        self._forget_busy_before(horizon)
        busy = sum(min(end, now) - max(start, horizon) for start, end in self._busy if end > horizon)
        return max(0.0, min(1.0, busy / UTILIZATION_WINDOW_S))

    def _forget_busy_before(self, horizon: float) -> None:
        """Drop steps that ended before ``horizon``: the record stays one window long, polled or not."""
        while self._busy and self._busy[0][1] < horizon:
            self._busy.popleft()

    async def log_stats(self) -> None:
        """vLLM's periodic stats line, every 10 simulated seconds while there is work or activity."""
        prompt_before = generation_before = 0
        while self.dead is None:
            await asyncio.sleep(STATS_INTERVAL_S / self.speed)
            prompt, generation = self.prompt_tokens_total, self.generation_tokens_total
            active = self.running or self.waiting or prompt != prompt_before or generation != generation_before
            if active and self.dead is None and self.log.enabled:
                queries = self.prefix_queries_total
                hit_rate = 100.0 * self.prefix_hits_total / queries if queries else 0.0
                self.log.api(
                    f"Engine 000: Avg prompt throughput: {(prompt - prompt_before) / STATS_INTERVAL_S:.1f} tokens/s, "
                    f"Avg generation throughput: {(generation - generation_before) / STATS_INTERVAL_S:.1f} tokens/s, "
                    f"Running: {len(self.running)} reqs, Waiting: {len(self.waiting)} reqs, "
                    f"GPU KV cache usage: {100.0 * self.kv.usage:.1f}%, Prefix cache hit rate: {hit_rate:.1f}%",
                    where="loggers.py:335",
                )
            prompt_before, generation_before = prompt, generation
