"""The predicates that answer the tree's questions (catalog/tree.yaml), one per question id.

Each takes the scene and returns the answer (one of the question's branch labels) with the evidence
that decided it. They are registered by question id; the walker in ``engine.py`` calls them.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from llmtriage import catalog
from llmtriage.diagnose.model import Evidence
from llmtriage.diagnose.scene import STARTUP_PHASES, Scene
from llmtriage.facts import Citation, KernelEvent, LogEvent
from llmtriage.parse import prom
from llmtriage.watch.signals import error_counters


@dataclass(frozen=True, slots=True)
class Answer:
    """An answer to a question and what supports it."""

    answer: str
    evidence: tuple[Evidence, ...] = ()


Predicate = Callable[[Scene], Answer]
PREDICATES: dict[str, Predicate] = {}


def answers(question_id: str) -> Callable[[Predicate], Predicate]:
    """Register the predicate of ``question_id``."""

    def register(fn: Predicate) -> Predicate:
        PREDICATES[question_id] = fn
        return fn

    return register


def _ev(citation: Citation | None, note: str = "") -> tuple[Evidence, ...]:
    return () if citation is None else (Evidence(citation, note),)


# ---------------------------------------------------------------- hardware


def kernel_faults(scene: Scene) -> list[tuple[KernelEvent, str]]:
    """Kernel events that make a GPU or its kernels suspect, with a note on each."""
    table = catalog.xids()
    found: list[tuple[KernelEvent, str]] = []
    for event in scene.kernel.events:
        if event.kind == "xid" and event.xid is not None:
            info = table.get(event.xid)
            if info is None:
                found.append((event, f"Xid {event.xid} (not in the catalog)"))
            elif info.hardware_severe:
                found.append((event, f"Xid {event.xid} {info.mnemonic}: {info.description}; {info.immediate_action}"))
            elif info.cause_categories and info.cause_categories[0].startswith("user_application"):
                found.append((event, f"Xid {event.xid}: {info.description} (usually the application's own kernel)"))
        elif event.kind in ("fallen_off_bus", "ecc", "gsp"):
            found.append(
                (
                    event,
                    {"fallen_off_bus": "GPU fell off the bus", "ecc": "ECC error", "gsp": "GSP firmware error"}[
                        event.kind
                    ],
                )
            )
    return found


def hardware_log_errors(scene: Scene) -> list[LogEvent]:
    """Hardware and kernel-fault errors in the server log and in nvidia-smi's output."""
    from_log = [
        e
        for e in scene.log.events
        if e.role == "error" and e.family in ("hardware", "kernel") and e.stage != "shutdown"
    ]
    from_smi = [e for e in scene.gpu.errors if e.family in ("hardware", "kernel")]
    return [*from_log, *from_smi]


@answers("hardware_fault")
def hardware_fault(scene: Scene) -> Answer:
    """Xid, ECC, GPU lost, illegal memory access: anywhere in the evidence."""
    evidence = [Evidence(e.cite(), note) for e, note in kernel_faults(scene)]
    evidence += [Evidence(e.cite(), e.signature) for e in hardware_log_errors(scene)]
    return Answer("yes", tuple(evidence[:6])) if evidence else Answer("no")


# ---------------------------------------------------------------- up or not


@answers("server_up")
def server_up(scene: Scene) -> Answer:
    """Down: a startup phase failed, the log ends mid-startup or in a fatal error with nothing served.
    Up: a line or probe shows it serving. Unknown: neither (never a guess)."""
    root = scene.root
    if root is not None and root.phase == "server_bind":
        return Answer("no", _ev(root.cite(), "the HTTP server could not bind its port"))
    failed_start = [w for w in scene.startup_wrappers if not scene.served_after(w)]
    if failed_start:
        wrapper = failed_start[0]
        cites = _ev(root.cite(), "root cause") if root is not None else ()
        return Answer("no", (*cites, Evidence(wrapper.cite(), "the engine failed to start")))
    if root is not None and scene.effective_phase(root) in STARTUP_PHASES and not scene.served_after(root):
        # Ready lines of a front (Ollama's listener, TGI's router) can precede the model's own start.
        return Answer("no", _ev(root.cite(), f"failed during {scene.effective_phase(root)}"))
    if scene.ready is None:
        exhausted = scene.kv_budget_exhausted
        if exhausted is not None:
            return Answer("no", _ev(exhausted, "no memory left for the KV cache"))
        last = scene.last_lifecycle_marker
        if scene.serving_seen is None and last is not None and last.stage == "cuda_graph_capture":
            return Answer("no", _ev(last.cite(), "the log ends during CUDA graph capture without the server starting"))
        if (waiting := scene.peers_waiting_at_end) is not None:
            return Answer("no", _ev(waiting.cite(), "the start ends with its GPU processes waiting for each other"))
    if scene.serving_seen is not None:
        return Answer("yes", _ev(scene.serving_seen, "the server served"))
    if scene.engine_loaded is not None:
        return Answer("yes", _ev(scene.engine_loaded, "the engine loaded and allocated its KV cache; nothing failed"))
    if root is not None:
        return Answer("no", _ev(root.cite(), "a fatal error, and nothing shows the server serving"))
    blocker = next((f for f in scene.stack_findings if f.blocking), None)
    if blocker is not None:
        return Answer("no", _ev(blocker.citation, f"the software stack cannot run this server: {blocker.note}"))
    return Answer("unknown", _ev(scene.nothing_decisive, "no line or probe shows it serving, none shows it failing"))


@answers("startup_oom")
def startup_oom(scene: Scene) -> Answer:
    """An OOM-family root cause, a KV budget at or below zero, or a start that dies in graph capture."""
    root = scene.root
    if root is not None and root.family == "oom":
        return Answer("yes", _ev(root.cite(), root.signature))
    mem = scene.memory
    exhausted = scene.kv_budget_exhausted
    if exhausted is not None:
        return Answer("yes", _ev(exhausted, "no memory left for the KV cache"))
    if (
        mem.required_memory_gib is not None
        and mem.free_memory_gib is not None
        and mem.required_memory_gib > mem.free_memory_gib
    ):
        return Answer("yes", _ev(mem.cite("required_memory_gib"), "the model needs more memory than is available"))
    last = scene.last_lifecycle_marker
    if root is None and last is not None and last.stage == "cuda_graph_capture":
        return Answer("yes", _ev(last.cite(), "the start died during CUDA graph capture"))
    capacity, limit = scene.kv_capacity_tokens, scene.max_model_len
    if capacity is not None and limit is not None and capacity.value < limit.value and (root is None or root.fallback):
        return Answer(
            "yes",
            _ev(
                capacity.citation, f"the KV cache holds {capacity.value:,.0f} tokens < max-model-len {limit.value:,.0f}"
            ),
        )
    tight = scene.weights_left_too_little
    if tight is not None and (root is None or root.fallback):
        return Answer(
            "yes", _ev(tight.citation, f"the weights took {tight.value:.0%} of GPU memory; it died before the KV cache")
        )
    return Answer("no", _ev(root.cite(), root.signature) if root is not None else ())


# ---------------------------------------------------------------- serving


def engine_died_silently(scene: Scene) -> bool:
    """The engine died while serving and the evidence does not hold the error that killed it."""
    return scene.root is None and bool(scene.engine_dead or scene.http_posts[2] > scene.http_refused)


def huge_last_prefill(scene: Scene) -> Citation | None:
    """The log's last stats line is a single prefill batch far above the context length: it died there."""
    if not scene.log.stats:
        return None
    last = scene.log.stats[-1]
    if last.prefill_tokens is None:
        return None
    limit = scene.t.huge_prefill_tokens
    if scene.max_model_len is not None:
        limit = max(limit, 2 * scene.max_model_len.value)
    if last.prefill_tokens < limit:
        return None
    if any(e.line > last.line and e.source == last.source for e in scene.events if e.marks in ("ready", "shutdown")):
        return None
    return last.cite()


@answers("runtime_oom")
def runtime_oom(scene: Scene) -> Answer:
    """An OOM after the server came up; or a silent engine death with no headroom left."""
    for event in scene.fatal_errors:
        if event.family == "oom" and scene.effective_phase(event) not in STARTUP_PHASES:
            return Answer("yes", _ev(event.cite(), event.signature))
    if scene.root is not None and scene.root.family == "killed":
        kills = [k for k in scene.kernel.events if k.kind == "oom_kill"]
        if kills:
            return Answer("yes", (*_ev(scene.root.cite()), Evidence(kills[0].cite(), "the kernel's OOM killer")))
    util = scene.utilization
    if engine_died_silently(scene) and util is not None and util.value >= scene.t.util_high:
        died = (
            scene.engine_dead[0].cite() if scene.engine_dead else next(iter(scene.log.http_status_citations.values()))
        )
        return Answer(
            "yes",
            (
                Evidence(died, "the engine died while serving; no other error is in the evidence"),
                Evidence(util.citation, f"gpu-memory-utilization {util.value:g} leaves almost no headroom"),
            ),
        )
    prefill = huge_last_prefill(scene)
    if prefill is not None:
        return Answer("yes", _ev(prefill, "the log stops right after one huge prefill batch"))
    return Answer("no")


@answers("requests_fail")
def requests_fail(scene: Scene) -> Answer:
    """5xx, a dead engine or an overloaded queue -> errors; 400-family rejections -> rejected."""
    total, rejected, failed = scene.http_posts
    t = scene.t
    if scene.engine_dead:
        return Answer("errors (5xx) or timeouts", _ev(scene.engine_dead[0].cite(), "the engine died"))
    if failed and failed >= max(1.0, t.slo.error_rate * total):
        return Answer(
            "errors (5xx) or timeouts",
            _ev(
                scene.log.http_status_citations.get(500) or _first_5xx(scene),
                f"{failed} of {total} requests failed with 5xx",
            ),
        )
    root = scene.root
    if root is not None and scene.effective_phase(root) == "forward" and root.family != "timeout":
        return Answer("errors (5xx) or timeouts", _ev(root.cite(), "the engine failed while serving"))
    overloaded = scene.by_family("overload")
    if overloaded:
        return Answer("errors (5xx) or timeouts", _ev(overloaded[0].cite(), "requests refused: overloaded"))
    engine = scene.snapshots[-1].engine if scene.snapshots else None
    bad_name, total_name = error_counters(engine)
    every = scene.counter_increase(total_name)
    bad = scene.counter_increase(bad_name, appeared_from_zero=every is not None)
    if bad is not None and every is not None and bad.value > t.slo.error_rate * max(every.value, 1):
        share = bad.value / max(every.value, 1)
        return Answer(
            "errors (5xx) or timeouts",
            _ev(bad.citation, f"{share:.1%} of requests failed >= SLO {t.slo.error_rate:.1%}"),
        )
    request_errors = scene.by_family("request")
    if request_errors and (total == 0 or max(rejected, len(request_errors)) >= t.rejected_fraction * total):
        return Answer("rejected (4xx)", _ev(request_errors[0].cite(), request_errors[0].signature))
    if total and rejected >= t.rejected_fraction * total:
        cite = scene.log.http_status_citations.get(400) or scene.log.http_status_citations.get(422)
        return Answer("rejected (4xx)", _ev(cite, f"{rejected} of {total} requests rejected"))
    return Answer("no")


def _first_5xx(scene: Scene) -> Citation | None:
    return next((c for s, c in sorted(scene.log.http_status_citations.items()) if s >= 500), None)


# Stats lines printed on progress (tqdm), not on a timer.
PROGRESS_BARS = frozenset({"stats_vllm_offline_progress"})


def stall_evidence(scene: Scene) -> list[Evidence]:
    """Requests running or waiting while no tokens are generated, long enough to matter."""
    t = scene.t
    found: list[Evidence] = []
    window = scene.window
    if window is not None and window.seconds is not None and window.seconds >= t.stall_seconds:
        generated = window.delta("generation_tokens")
        last = window.last
        busy = (last.gauges.get("running") or 0) + (last.gauges.get("waiting") or 0)
        if generated == 0 and busy > 0 and not window.delta("decode_steps"):
            found.append(
                Evidence(
                    Citation(
                        source=last.source,
                        metric="generation tokens over the window",
                        value=0.0,
                        threshold=f"{window.seconds:.0f} s",
                    ),
                    f"{busy:g} requests running or waiting, no token generated in {window.seconds:.0f} s",
                )
            )
    run: list[int] = []
    for i, point in enumerate(scene.log.stats):
        if point.busy > 0 and point.idle_throughput:
            run.append(i)
        else:
            run = []
    if len(run) >= t.stall_stats_points:
        first = scene.log.stats[run[0]]
        found.append(Evidence(first.cite(), f"{len(run)} stats lines in a row with requests but 0 tokens/s"))
    elif run and run[-1] == len(scene.log.stats) - 1 and scene.log.stats[-1].signature in PROGRESS_BARS:
        # A progress bar prints when progress changes: a last line at zero throughput is where the run stands.
        bar = scene.log.stats[-1]
        found.append(
            Evidence(
                bar.cite(), f"the log ends with {bar.busy:g} requests pending at 0 tokens/s, and no progress after"
            )
        )
    for event in scene.by_family("timeout"):
        if scene.effective_phase(event) == "forward":
            collectives = scene.collectives_before(event)
            done = f" after {collectives:,} collectives" if collectives else ""
            found.append(Evidence(event.cite(), f"it hung while serving{done}: {event.signature}"))
    return found


@answers("tokens_flow")
def tokens_flow(scene: Scene) -> Answer:
    """Stalled when requests run or wait but the token counters stand still."""
    evidence = stall_evidence(scene)
    return Answer("yes", tuple(evidence)) if evidence else Answer("no")


def over_p95_objective(
    quantiles: list[tuple[str, float, Citation | None]], objective_ms: float
) -> tuple[str, float, Citation | None] | None:
    """The load-test figure that shows a p95 objective missed: the p95 decides when known; else a median or a
    p99 over it (the p99 is a tail, and the evidence says which it was)."""
    if quantiles and quantiles[0][0] == "p95":
        return quantiles[0] if quantiles[0][1] >= objective_ms else None
    return next((q for q in quantiles if q[1] >= objective_ms), None)


@answers("slow_ttft")
def slow_ttft(scene: Scene) -> Answer:
    """TTFT p95 against the p95 objective (the server's histogram decides when it has one, as watch does), or a
    queue over the queue objective; a load test's figures only when the server gave none."""
    slo = scene.t.slo
    waiting = scene.peak_waiting
    if waiting is not None and waiting.value >= slo.queue:
        return Answer("yes", _ev(waiting.citation, f"{waiting.value:g} requests waiting >= queue SLO {slo.queue:g}"))
    ttft = scene.histogram_quantile("ttft_seconds", 0.95)
    if ttft is not None:
        if ttft.value >= slo.ttft_p95_s:
            return Answer("yes", _ev(ttft.citation, f"TTFT p95 {ttft.value:.2f} s >= SLO {slo.ttft_p95_s:g} s"))
        return Answer("no", _ev(ttft.citation, "TTFT p95 within the SLO"))
    over = over_p95_objective(scene.bench.quantiles("ttft"), slo.ttft_p95_s * 1000)
    if over is not None:
        label, ms, cite = over
        return Answer("yes", _ev(cite, f"TTFT {label} {ms / 1000:.2f} s >= SLO p95 {slo.ttft_p95_s:g} s"))
    if waiting is not None and waiting.value >= scene.t.waiting_queue:
        return Answer("yes", _ev(waiting.citation, f"{waiting.value:g} requests waiting"))
    return Answer("no")


def slow_generation_evidence(scene: Scene) -> list[Evidence]:
    """Signs that decoding is slow: TPOT p95 over the objective (TPOT, else ITL, as watch measures it),
    preemptions, offload to the CPU, hardware slowdown."""
    t = scene.t
    found: list[Evidence] = []
    name, tpot = next(
        ((n, m) for n in prom.PER_TOKEN_HISTOGRAMS if (m := scene.histogram_quantile(n, 0.95)) is not None),
        ("", None),
    )
    if tpot is not None and tpot.value >= t.slo.itl_p95_s:
        what = "TPOT" if name == "tpot_seconds" else "ITL"
        found.append(
            Evidence(tpot.citation, f"{what} p95 {tpot.value * 1000:.0f} ms >= SLO {t.slo.itl_p95_s * 1000:.0f} ms")
        )
    bench = scene.bench
    over = over_p95_objective(bench.quantiles("tpot"), t.slo.itl_p95_s * 1000) if tpot is None else None
    if over is not None:
        label, ms, cite = over
        found.append(
            Evidence(cite or Citation("bench"), f"TPOT {label} {ms:.0f} ms >= SLO p95 {t.slo.itl_p95_s * 1000:.0f} ms")
        )
    if bench.decode_tokens_per_s is not None and bench.decode_tokens_per_s < t.decode_slow_tokens_per_s:
        found.append(
            Evidence(bench.citations["decode_tokens_per_s"], f"decode at {bench.decode_tokens_per_s:g} tokens/s")
        )
    preemptions = scene.counter_increase("preemptions")
    if preemptions is not None and preemptions.value > 0:
        found.append(Evidence(preemptions.citation, f"{preemptions.value:g} preemptions"))
    for event in scene.by_family("capacity", "offload")[:2]:
        found.append(Evidence(event.cite(), event.signature))
    offload = scene.log.offload
    if (
        offload.offloaded_layers is not None
        and offload.total_layers
        and offload.offloaded_layers < offload.total_layers
    ):
        cite = offload.citations.get("offloaded_layers")
        found.append(Evidence(cite or Citation("server log"), "not all layers are on the GPU"))
    launch = scene.launch
    if launch is not None and launch.engine == "llama_cpp" and not launch.n_gpu_layers:
        found.append(
            Evidence(
                Citation(source=launch.source, excerpt="no -ngl / --n-gpu-layers"),
                "llama.cpp runs every layer on the CPU",
            )
        )
    for index, (reasons, cite) in scene.clock_reasons.items():
        severe = [r for r in reasons if r.startswith("hw_") or r == "sw_thermal_slowdown"]
        if severe:
            found.append(Evidence(cite, f"GPU {index}: {', '.join(severe)} active"))
    return found


@answers("slow_generation")
def slow_generation(scene: Scene) -> Answer:
    """Decoding slower than the SLO, or the known reasons decoding is slow."""
    evidence = slow_generation_evidence(scene)
    return Answer("yes", tuple(evidence[:6])) if evidence else Answer("no")


@answers("served")
def served(scene: Scene) -> Answer:
    """Healthy needs a line or probe that shows serving; an engine that only loaded is not enough."""
    if scene.serving_seen is not None:
        return Answer("yes", _ev(scene.serving_seen, "the server served, and nothing above found a problem"))
    return Answer("no", _ev(scene.engine_loaded, "it loaded, but nothing shows it serving"))
