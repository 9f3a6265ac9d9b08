"""The classic faults the lab reproduces, per kind of target: the servers to start (vLLM's flags), the load to
drive, and the diagnosis expected. Data, not code: a new scenario is one more entry."""

from __future__ import annotations

from dataclasses import dataclass, field

from llmtriage.bench.model import RequestClass
from llmtriage.lab.targets import ServerSettings


@dataclass(frozen=True, slots=True)
class LoadShape:
    """What `llmtriage bench` sends (closed loop)."""

    concurrency: int
    requests: int
    classes: tuple[RequestClass, ...]
    ignore_eos: bool = True


@dataclass(frozen=True, slots=True)
class Expected:
    """The diagnosis the scenario should produce: the class, and any of these causes ranked first."""

    symptom_class: str
    causes: tuple[str, ...]
    note: str = ""


@dataclass(frozen=True, slots=True)
class Plan:
    """A scenario on one kind of target.

    ``servers`` start in order; every one but the last must come up (a memory holder, say). With
    ``holder_memory``, the last one is told how much memory the first holds (the simulator's
    ``other-process`` fault: separate simulator processes share no GPU).
    """

    servers: tuple[ServerSettings, ...]
    expected: Expected
    load: LoadShape | None = None
    slo: str | None = None
    holder_memory: bool = False


@dataclass(frozen=True, slots=True)
class Scenario:
    """One classic fault."""

    name: str
    title: str
    plans: dict[str, Plan] = field(default_factory=dict)
    cannot_show: dict[str, str] = field(default_factory=dict)

    def plan_for(self, target: str) -> Plan | None:
        """The plan for a target kind ('sim', 'vllm-cpu', 'docker', 'url'); None when it cannot show it."""
        return self.plans.get(target) or (self.plans.get("gpu") if target in ("docker", "url") else None)


_8B_H100 = ("--model", "meta-llama/Llama-3.1-8B-Instruct", "--max-model-len", "8192")
_LONG_PROMPTS = (RequestClass("long", 12000, 64, 1.0),)
_OVER_CONTEXT = (RequestClass("long", 12000, 16, 1.0), RequestClass("short", 400, 16, 3.0))
# One slot holding the tiny GGUF's whole context; spare HTTP threads so /metrics answers while requests wait.
_LLAMACPP_ONE_SLOT = ("-c", "4096", "--parallel", "1", "--threads-http", "32")

SCENARIOS: tuple[Scenario, ...] = (
    Scenario(
        name="startup-oom",
        title="Startup OOM: a second instance on a GPU another process already holds",
        plans={
            "sim": Plan(
                servers=(
                    ServerSettings(
                        flags=("--gpu-memory-utilization", "0.9"), sim_flags=(*_8B_H100, "--gpu", "H100 SXM")
                    ),
                    ServerSettings(
                        flags=("--gpu-memory-utilization", "0.9"), sim_flags=(*_8B_H100, "--gpu", "H100 SXM")
                    ),
                ),
                holder_memory=True,
                expected=Expected("startup_oom", ("other_process_holds_memory",)),
            ),
            "gpu": Plan(
                servers=(
                    ServerSettings(flags=("--gpu-memory-utilization", "0.9")),
                    ServerSettings(flags=("--gpu-memory-utilization", "0.9")),
                ),
                expected=Expected("startup_oom", ("other_process_holds_memory",)),
            ),
            "vllm-cpu": Plan(
                servers=(
                    ServerSettings(
                        vllm_cpu_flags=("--kv-cache-memory-bytes", "1M", "--enforce-eager"), kv_cache_space_gib=None
                    ),
                ),
                expected=Expected(
                    "startup_oom",
                    ("kv_cache_too_small_for_max_model_len",),
                    "a CPU backend shows the KV cache check, not a GPU memory holder",
                ),
            ),
        },
        cannot_show={
            "llamacpp-cpu": "llama-server on a CPU has no GPU memory for another process to hold, and no KV check at "
            "start: it allocates -c as asked (its failed starts are recorded in tests/fixtures/llamacpp-cpu)",
        },
    ),
    Scenario(
        name="runtime-oom",
        title="Runtime OOM: high max-num-seqs with long concurrent prompts",
        plans={
            "sim": Plan(
                servers=(
                    ServerSettings(
                        flags=("--gpu-memory-utilization", "0.97", "--max-num-seqs", "512"),
                        sim_flags=(*_8B_H100, "--gpu", "H100 SXM", "--fault", "runtime-oom:running=96"),
                    ),
                ),
                load=LoadShape(concurrency=128, requests=256, classes=_LONG_PROMPTS),
                expected=Expected(
                    "runtime_oom",
                    ("concurrency_exceeds_kv_pool", "gpu_mem_util_too_high"),
                    "the simulator's runtime-oom fault stands for the OOM real servers hit at 0.97 with many long requests",
                ),
            ),
            "gpu": Plan(
                servers=(ServerSettings(flags=("--gpu-memory-utilization", "0.97", "--max-num-seqs", "512")),),
                load=LoadShape(concurrency=128, requests=256, classes=_LONG_PROMPTS),
                expected=Expected("runtime_oom", ("concurrency_exceeds_kv_pool", "gpu_mem_util_too_high")),
            ),
            "vllm-cpu": Plan(
                servers=(
                    ServerSettings(
                        vllm_cpu_flags=(
                            "--kv-cache-memory-bytes",
                            "3145728",
                            "--max-model-len",
                            "1024",
                            "--enforce-eager",
                        ),
                        kv_cache_space_gib=None,
                    ),
                ),
                load=LoadShape(concurrency=32, requests=64, classes=(RequestClass("long", 1800, 400, 1.0),)),
                expected=Expected(
                    "slow_ttft",
                    ("kv_pressure_preemption",),
                    "the boundary: vLLM's scheduler queues and preempts instead of running out of memory",
                ),
            ),
            "llamacpp-cpu": Plan(
                # 4 slots sharing 256 KV cells: 4 requests of ~100 + 150 tokens at once cannot all fit.
                servers=(ServerSettings(llamacpp_cpu_flags=("-c", "256", "--parallel", "4", "--kv-unified")),),
                load=LoadShape(concurrency=4, requests=8, classes=(RequestClass("long", 100, 150, 1.0),)),
                expected=Expected(
                    "runtime_oom",
                    ("concurrency_exceeds_kv_pool",),
                    "llama-server does not crash: the shared KV cache runs out and the active requests get HTTP 500 "
                    "'Context size has been exceeded.'",
                ),
            ),
        },
    ),
    Scenario(
        name="prefill-jam",
        title="Prefill jam: long prompts mixed with short ones",
        plans={
            "sim": Plan(
                servers=(
                    ServerSettings(
                        flags=(
                            "--max-model-len",
                            "32768",
                            "--no-enable-chunked-prefill",
                            "--max-num-batched-tokens",
                            "32768",
                        ),
                        sim_flags=("--model", "meta-llama/Llama-3.1-8B-Instruct", "--gpu", "L40S"),
                    ),
                ),
                load=LoadShape(
                    concurrency=12,
                    requests=48,
                    classes=(RequestClass("long", 120000, 16, 1.0), RequestClass("short", 800, 32, 7.0)),
                ),
                expected=Expected("slow_ttft", ("prefill_congestion",)),
            ),
            "gpu": Plan(
                servers=(ServerSettings(flags=("--max-num-batched-tokens", "32768", "--no-enable-chunked-prefill")),),
                load=LoadShape(
                    concurrency=12,
                    requests=48,
                    classes=(RequestClass("long", 120000, 16, 1.0), RequestClass("short", 800, 32, 7.0)),
                ),
                expected=Expected("slow_ttft", ("prefill_congestion",)),
            ),
            "vllm-cpu": Plan(
                servers=(ServerSettings(vllm_cpu_flags=("--max-model-len", "2048", "--enforce-eager")),),
                load=LoadShape(
                    concurrency=8,
                    requests=48,
                    classes=(RequestClass("long", 7000, 16, 1.0), RequestClass("short", 200, 32, 3.0)),
                ),
                # On 2 cores a short prompt's TTFT is ~35 ms and a jammed one's 80-200 ms; vLLM's histogram puts
                # the p95 anywhere in that range. At 150 ms (and at 75 ms) 1 run in 3 to 5 came out healthy.
                slo="ttft_p95=50ms",
                expected=Expected("slow_ttft", ("prefill_congestion",), "the tiny model's TTFT SLO is scaled down"),
            ),
            "llamacpp-cpu": Plan(
                servers=(ServerSettings(llamacpp_cpu_flags=_LLAMACPP_ONE_SLOT),),
                load=LoadShape(
                    concurrency=8,
                    requests=96,
                    classes=(RequestClass("long", 3500, 16, 1.0), RequestClass("short", 100, 16, 3.0)),
                ),
                # Measured here with these flags: a short prompt alone 1.5 ms to the first token, 8 short ones
                # queued 22-40 ms at p95, a long one alone 177 ms; the mix 640-835 ms at p95 (short ones 430 ms
                # at the median). 250 ms is breached only when short prompts wait behind long prefills.
                slo="ttft_p95=250ms",
                expected=Expected(
                    "slow_ttft",
                    ("queueing_over_capacity",),
                    "llama.cpp's /metrics has no prompt-length histogram: with one slot the jam shows as short "
                    "requests deferred behind the long prefills (llamacpp:requests_deferred), fixed by more slots",
                ),
            ),
        },
    ),
    Scenario(
        name="context-overflow",
        title="Context overflow: prompts longer than the context the server holds",
        plans={
            "sim": Plan(
                servers=(
                    ServerSettings(
                        flags=("--max-model-len", "2048"),
                        sim_flags=("--model", "meta-llama/Llama-3.1-8B-Instruct", "--gpu", "L40S"),
                    ),
                ),
                load=LoadShape(
                    concurrency=4,
                    requests=48,
                    classes=(RequestClass("long", 12000, 16, 1.0), RequestClass("short", 400, 64, 3.0)),
                ),
                expected=Expected("request_rejected", ("prompt_exceeds_max_model_len",)),
            ),
            "vllm-cpu": Plan(
                servers=(ServerSettings(vllm_cpu_flags=("--max-model-len", "1024", "--enforce-eager")),),
                load=LoadShape(concurrency=4, requests=16, classes=_OVER_CONTEXT),
                expected=Expected("request_rejected", ("prompt_exceeds_max_model_len",)),
            ),
            "llamacpp-cpu": Plan(
                # One slot of 256 tokens: a 400-character prompt (~400 tokens) is refused with a 400.
                servers=(ServerSettings(llamacpp_cpu_flags=("-c", "256", "--parallel", "1")),),
                load=LoadShape(
                    concurrency=2,
                    requests=16,
                    classes=(RequestClass("long", 400, 8, 1.0), RequestClass("short", 100, 8, 3.0)),
                ),
                expected=Expected("request_rejected", ("prompt_exceeds_max_model_len",)),
            ),
        },
    ),
    Scenario(
        name="throttle",
        title="Thermal throttling: clocks held down while the GPU works",
        plans={
            "sim": Plan(
                servers=(
                    ServerSettings(
                        flags=("--max-model-len", "8192"),
                        sim_flags=(
                            "--model",
                            "Qwen/Qwen2.5-14B-Instruct",
                            "--gpu",
                            "L40S",
                            "--fault",
                            "throttle:kind=thermal,clock=0.5",
                        ),
                    ),
                ),
                load=LoadShape(concurrency=4, requests=12, classes=(RequestClass("chat", 400, 300, 1.0),)),
                expected=Expected("slow_generation", ("power_thermal_throttling",)),
            ),
        },
        cannot_show={
            "vllm-cpu": "a CPU has no GPU clocks or clocks event reasons to throttle",
            "llamacpp-cpu": "a CPU has no GPU clocks or clocks event reasons to throttle",
            "gpu": "throttling cannot be provoked from software; watch a real GPU under load instead",
        },
    ),
)


def scenario(name: str) -> Scenario:
    """The scenario called ``name``."""
    for s in SCENARIOS:
        if s.name == name:
            return s
    raise KeyError(name)
