"""Why a server would not start: the memory arithmetic it printed, and what else was on the GPU."""

from __future__ import annotations

from collections.abc import Iterator

from llmtriage.diagnose.rules import Signal, rule, signal
from llmtriage.diagnose.scene import Scene
from llmtriage.facts import Citation

_WEIGHT_OOM_PHASES = frozenset({"weights_load"})
# OOM messages that say nothing about where they struck: PyTorch's allocator and the CUDA runtime.
_GENERIC_OOM_ENGINES = frozenset({"pytorch", "cuda"})


def _gib(value: float) -> str:
    return f"{value:.2f} GiB"


@rule("startup_oom")
def memory_budget(scene: Scene) -> Iterator[Signal]:
    """Weights (+ activations) against the budget; a KV budget at or below zero."""
    mem = scene.memory
    if scene.kv_budget_exhausted is not None:
        if mem.available_kv_gib is not None and mem.available_kv_gib <= 0:
            yield signal(
                "weights_kv_exceed_memory",
                0.6,
                mem.cite("available_kv_gib"),
                f"memory left for the KV cache: {_gib(mem.available_kv_gib)}",
            )
        if mem.num_gpu_blocks == 0:
            yield signal("weights_kv_exceed_memory", 0.4, mem.cite("num_gpu_blocks"), "zero KV cache blocks")
    if mem.weights_gib is not None and mem.budget_gib is not None:
        used = mem.weights_gib + (mem.activation_peak_gib or 0.0) + (mem.non_torch_gib or 0.0)
        if used >= mem.budget_gib:
            yield signal(
                "weights_kv_exceed_memory",
                0.3,
                mem.cite("budget_gib"),
                f"weights {_gib(mem.weights_gib)} + activations {_gib(mem.activation_peak_gib or 0)}"
                f" + other {_gib(mem.non_torch_gib or 0)} >= budget {_gib(mem.budget_gib)}",
            )
    total = mem.total_memory_gib
    if mem.weights_gib is not None and total and mem.weights_gib / total >= scene.t.weights_share_high:
        yield signal(
            "weights_kv_exceed_memory",
            0.4,
            mem.cite("weights_gib"),
            f"the weights alone take {_gib(mem.weights_gib)} of {_gib(total)}",
        )
    tight = scene.weights_left_too_little
    if tight is not None:
        yield signal(
            "weights_kv_exceed_memory",
            0.5,
            tight.citation,
            f"the weights took {tight.value:.0%} of GPU memory and the start died before a KV cache was allocated",
        )
    needed, free = mem.required_memory_gib, mem.free_memory_gib
    if needed is not None and free is not None and needed > free:
        yield signal(
            "weights_kv_exceed_memory",
            0.6,
            mem.cite("required_memory_gib"),
            f"needs {_gib(needed)}, {_gib(free)} available",
        )


@rule("startup_oom")
def oom_phase(scene: Scene) -> Iterator[Signal]:
    """A generic OOM (torch, CUDA) is explained by the phase it struck in."""
    root = scene.root
    if root is None or root.family != "oom" or root.engine not in _GENERIC_OOM_ENGINES:
        return
    phase = scene.effective_phase(root)
    note = f"out of memory during {phase}"
    if phase in _WEIGHT_OOM_PHASES:
        yield signal("weights_kv_exceed_memory", 0.7, root.cite(), note + ": the weights do not fit")
    elif phase == "cuda_graph_capture":
        yield signal("cuda_graph_capture_memory", 0.8, root.cite(), note)
    elif phase == "profile_run":
        yield signal("activation_peak", 0.6, root.cite(), note + ": the profiling batch does not fit")
    elif phase == "kv_alloc":
        yield signal("weights_kv_exceed_memory", 0.6, root.cite(), note)
    else:
        yield signal("weights_kv_exceed_memory", 0.5, root.cite(), note + " before the server came up")


@rule("startup_oom")
def kv_capacity(scene: Scene) -> Iterator[Signal]:
    """The KV cache holds fewer tokens than one max-model-len request."""
    mem = scene.memory
    if scene.kv_budget_exhausted is not None:
        return
    capacity = scene.kv_capacity_tokens
    limit = scene.max_model_len
    if capacity is not None and limit is not None and capacity.value < limit.value:
        yield signal(
            "kv_cache_too_small_for_max_model_len",
            0.6,
            capacity.citation,
            f"KV cache holds {capacity.value:,.0f} tokens < max-model-len {limit.value:,.0f}",
        )
    if mem.estimated_max_model_len is not None:
        yield signal(
            "kv_cache_too_small_for_max_model_len",
            0.3,
            mem.cite("estimated_max_model_len"),
            f"largest max-model-len that fits: {mem.estimated_max_model_len:,.0f}",
        )


@rule("startup_oom", "runtime_oom")
def utilization_headroom(scene: Scene) -> Iterator[Signal]:
    """A budget at 0.95+ of memory leaves nothing for what lives outside it."""
    util = scene.utilization
    root = scene.root
    if util is None or util.value < scene.t.util_high:
        return
    outside = root is not None and scene.effective_phase(root) in ("profile_run", "cuda_graph_capture", "forward")
    weight = 0.5 if outside else 0.3
    yield signal(
        "gpu_mem_util_too_high",
        weight,
        util.citation,
        f"gpu-memory-utilization {util.value:g} >= {scene.t.util_high:g}",
    )


@rule("startup_oom", "startup_failure")
def requested_above_memory(scene: Scene) -> Iterator[Signal]:
    """A KV space asked for beyond all memory is a setting, not a neighbour; so is a shortfall smaller than the
    server's own CUDA context (what it holds itself before the check)."""
    mem = scene.memory
    if mem.requested_memory_gib is None or mem.total_memory_gib is None:
        return
    cite = mem.cite("requested_memory_gib")
    if mem.requested_memory_gib > mem.total_memory_gib:
        yield signal(
            "gpu_mem_util_too_high",
            0.8,
            cite,
            f"asked for {_gib(mem.requested_memory_gib)}, the device has {_gib(mem.total_memory_gib)} in all",
        )
    elif mem.free_memory_gib is not None and mem.requested_memory_gib > mem.free_memory_gib:
        used = mem.total_memory_gib - mem.free_memory_gib
        shortfall = mem.requested_memory_gib - mem.free_memory_gib
        if shortfall < scene.t.cuda_context_gib or used < scene.t.cuda_context_gib:
            yield signal(
                "gpu_mem_util_too_high",
                0.8,
                cite,
                f"{_gib(shortfall)} short, {_gib(used)} in use before start: about one CUDA context, the server's"
                " own; the utilization asks for all the rest",
            )
        else:
            yield signal(
                "other_process_holds_memory",
                0.6,
                cite,
                f"{_gib(used)} of {_gib(mem.total_memory_gib)} already in use before start;"
                f" asked for {_gib(mem.requested_memory_gib)}",
            )


@rule("startup_oom", "runtime_oom")
def other_processes(scene: Scene) -> Iterator[Signal]:
    """Another process named in a torch OOM message (never the server's own), or listed by nvidia-smi."""
    holder = scene.other_process
    if holder is not None:
        total = scene.memory.total_memory_gib
        share = min(1.0, holder.gib / total) if total else 0.0
        yield signal(
            "other_process_holds_memory",
            0.5 + 0.4 * share,
            holder.citation,
            f"process {holder.pid} holds {_gib(holder.gib)} on the GPU"
            + (f" ({share:.0%} of {_gib(total)})" if total else ""),
        )
    listed = scene.gpu.processes
    processes = [p for p in listed if p.pid not in scene.server_pids]
    server_listed = len(processes) < len(listed)
    # Without the server's PID, two processes or more mean at least one other; with it, any other does.
    if (server_listed and processes) or len(processes) >= 2:
        held = sum(p.used_memory_mib or 0 for p in processes) / 1024
        names = ", ".join(f"{p.pid} {p.name}" for p in processes[:4])
        yield signal(
            "other_process_holds_memory",
            0.3,
            scene.gpu.processes_citation or Citation(source="gpu"),
            f"{len(processes)} processes hold {_gib(held)} on the GPU: {names}",
        )


@rule("startup_oom")
def stopped_in_graph_capture(scene: Scene) -> Iterator[Signal]:
    """A start that ends during CUDA graph capture, with no error printed, ran out of graph memory."""
    last = scene.last_lifecycle_marker
    if scene.root is not None or last is None or last.stage != "cuda_graph_capture":
        return
    yield signal("cuda_graph_capture_memory", 0.5, last.cite(), "the log ends during CUDA graph capture")
    util = scene.utilization
    if util is not None and util.value >= scene.t.util_elevated:
        yield signal(
            "cuda_graph_capture_memory",
            0.2,
            util.citation,
            f"gpu-memory-utilization {util.value:g}: graph memory has little room outside the budget",
        )


@rule("startup_failure")
def start_hangs_in_a_collective(scene: Scene) -> Iterator[Signal]:
    """A parallel start whose log ends with its processes waiting for each other: a collective that never returns
    (custom all-reduce or NCCL peer-to-peer on a topology that cannot do it)."""
    waiting = scene.peers_waiting_at_end
    if waiting is None:
        return
    launch = scene.launch
    assert launch is not None  # a wait between GPU processes needs a parallel launch
    size = (launch.tensor_parallel_size or 1) * (launch.pipeline_parallel_size or 1)
    yield signal(
        "nccl_or_distributed_init",
        0.5,
        waiting.cite(),
        f"{size} GPU processes started and the log ends with them waiting for each other, with no error",
    )


@rule("startup_failure", "startup_oom")
def context_beyond_model(scene: Scene) -> Iterator[Signal]:
    """--max-model-len above the model's max_position_embeddings."""
    model = scene.evidence.model
    launch = scene.launch
    if model is None or launch is None or launch.max_model_len is None or model.max_position_embeddings is None:
        return
    if launch.max_model_len > model.max_position_embeddings:
        yield signal(
            "max_model_len_exceeds_model",
            0.6,
            launch.citations.get("max_model_len"),
            f"--max-model-len {launch.max_model_len} > max_position_embeddings {model.max_position_embeddings}",
        )
