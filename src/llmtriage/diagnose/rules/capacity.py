"""The capacity arithmetic inside the diagnosis: vLLM's startup budget, and the decode roofline.

A startup OOM is ranked by the numbers when the evidence names the model (launch line or config.json)
and the memory (the server's log or nvidia-smi): weights alone over memory, a KV cache too small for one
request (with the largest max-model-len that fits), or free memory short because others hold it. Slow
generation is compared with the decode roofline: near it, decode is memory-bandwidth bound; far below it
with clocks held down, the GPU is throttled.
"""

from __future__ import annotations

from collections.abc import Iterator

from llmtriage import catalog
from llmtriage.capacity.fit import GIB, FitRequest, FitResult, LaunchSettings, fit, kv_layout
from llmtriage.capacity.gpu import GpuSpec, find_gpu, resolve_gpu
from llmtriage.capacity.model import ModelSpec, spec_from_config
from llmtriage.capacity.resolve import find_model
from llmtriage.capacity.version import default_version, parse_version
from llmtriage.capacity.weights import weights_bytes
from llmtriage.diagnose.rules import Signal, rule, signal
from llmtriage.diagnose.scene import Measure, Scene
from llmtriage.errors import UsageError
from llmtriage.facts import Citation

_DERIVED = Citation(source="llmtriage fit (derived)")


def _model(scene: Scene) -> ModelSpec | None:
    launch = scene.launch
    if launch is not None and launch.model:
        found = find_model(launch.model)
        if found is not None:
            return found
    config = scene.evidence.model
    if config is None or config.num_hidden_layers is None or config.hidden_size is None:
        return None
    fields = {
        "architectures": [config.architecture] if config.architecture else [],
        "num_hidden_layers": config.num_hidden_layers,
        "hidden_size": config.hidden_size,
        "num_attention_heads": config.num_attention_heads,
        "num_key_value_heads": config.num_key_value_heads,
        "head_dim": config.head_dim,
        "vocab_size": config.vocab_size,
        "max_position_embeddings": config.max_position_embeddings,
        "torch_dtype": config.torch_dtype,
        "sliding_window": config.sliding_window,
        "kv_lora_rank": config.kv_lora_rank,
        "qk_rope_head_dim": config.qk_rope_head_dim,
    }
    try:
        return spec_from_config(fields, config.source or "config.json", config.source)
    except UsageError:
        return None


def _gpu(scene: Scene) -> GpuSpec | None:
    names = [s.name for s in scene.gpu_samples if s.name]
    info = find_gpu(names[0]) if names else None
    spec = resolve_gpu(info.name) if info is not None else None
    total = scene.memory.total_memory_gib
    if total is None:
        totals = [s.memory_total_mib for s in scene.gpu_samples if s.memory_total_mib]
        total = totals[0] / 1024 if totals else None
    if total is None:
        return spec
    if spec is None:
        return GpuSpec(scene.memory.device or "GPU", total, None, None)
    return spec.with_reported_total(total)


def _request(scene: Scene, model: ModelSpec, gpu: GpuSpec) -> FitRequest | None:
    launch = scene.launch
    mem = scene.memory
    util = scene.utilization
    try:
        settings = LaunchSettings(
            max_model_len=launch.max_model_len if launch else None,
            gpu_memory_utilization=util.value if util is not None else 0.9,
            tensor_parallel_size=(launch.tensor_parallel_size or 1) if launch else 1,
            pipeline_parallel_size=(launch.pipeline_parallel_size or 1) if launch else 1,
            max_num_seqs=launch.max_num_seqs if launch else None,
            max_num_batched_tokens=launch.max_num_batched_tokens if launch else None,
            kv_cache_dtype=(launch.kv_cache_dtype or "auto") if launch else "auto",
            quantization=launch.quantization if launch else None,
            dtype=(launch.dtype or "auto") if launch else "auto",
            enforce_eager=bool(launch.enforce_eager) if launch else False,
        )
        settings.validate()
        version = scene.log.meta.engine_version
        return FitRequest(
            model=model,
            gpu=gpu,
            launch=settings,
            version=parse_version(version) if version else default_version(),
            free_memory_gib=mem.free_memory_gib if mem.requested_memory_gib is None else None,
            available_kv_gib=mem.available_kv_gib,
        )
    except UsageError:
        return None


def _startup_fit(scene: Scene) -> tuple[FitRequest, FitResult] | None:
    model, gpu = _model(scene), _gpu(scene)
    if model is None or gpu is None:
        return None
    request = _request(scene, model, gpu)
    if request is None:
        return None
    try:
        return request, fit(request)
    except UsageError:
        return None


def _gib(value: float) -> str:
    return f"{value:.2f} GiB"


@rule("startup_oom")
def startup_arithmetic(scene: Scene) -> Iterator[Signal]:
    """vLLM's startup arithmetic redone from the model, the GPU and the launch flags."""
    found = _startup_fit(scene)
    if found is None:
        return
    request, result = found
    mem = scene.memory
    measured = mem.available_kv_gib is not None
    weights = mem.weights_gib if mem.weights_gib is not None else result.weights_gib
    cite = mem.cite("weights_gib") or _DERIVED
    if weights >= request.gpu.total_memory_gib:
        yield signal(
            "weights_kv_exceed_memory",
            0.6,
            cite,
            f"the weights alone take {_gib(weights)} per GPU, the GPU has {_gib(request.gpu.total_memory_gib)}",
        )
    elif weights >= result.budget_gib:
        yield signal(
            "weights_kv_exceed_memory",
            0.4,
            cite,
            f"the weights alone ({_gib(weights)}) fill the {_gib(result.budget_gib)} budget",
        )
    if result.error == "kv_cache_too_small_for_max_model_len":
        yield signal(
            "kv_cache_too_small_for_max_model_len",
            0.45 if measured else 0.25,
            mem.cite("available_kv_gib") or _DERIVED,
            f"one {result.max_model_len:,}-token request needs {_gib(result.kv_needed_gib)} of KV cache,"
            f" {_gib(result.available_kv_gib)} is left; the largest max-model-len that fits is"
            f" {result.max_model_len_that_fits:,}",
        )
    processes = scene.gpu.processes
    if processes and mem.requested_memory_gib is None:
        held = sum(p.used_memory_mib or 0 for p in processes) / 1024
        free = request.gpu.total_memory_gib - held
        if free < result.budget_gib:
            yield signal(
                "other_process_holds_memory",
                0.35,
                scene.gpu.processes_citation,
                f"{len(processes)} process(es) hold {_gib(held)}: {_gib(free)} free <"
                f" {request.launch.gpu_memory_utilization:g} x {_gib(request.gpu.total_memory_gib)} requested",
            )


def _measured_tpot(scene: Scene) -> Measure | None:
    bench = scene.bench
    for name in ("tpot_mean_ms", "tpot_p95_ms", "tpot_p99_ms"):
        value = getattr(bench, name)
        if value is not None:
            return Measure(value / 1000, bench.citations.get(name) or Citation(source="bench"))
    return scene.histogram_mean("itl_seconds") or scene.histogram_quantile("itl_seconds", 0.5)


def _clocks_down(scene: Scene) -> bool:
    if any(scene.gpu.active_reasons.values()):
        return True
    return any(
        s.sm_clock_mhz is not None
        and s.sm_clock_max_mhz
        and s.sm_clock_mhz / s.sm_clock_max_mhz < scene.t.clock_ratio_low
        for s in scene.gpu_samples
    )


@rule("slow_generation")
def decode_roofline(scene: Scene) -> Iterator[Signal]:
    """Measured TPOT against the decode floor: weights (and KV) per step over memory bandwidth."""
    tpot = _measured_tpot(scene)
    model, gpu = _model(scene), _gpu(scene)
    if tpot is None or model is None or gpu is None or not gpu.bandwidth_gbs:
        return
    request = _request(scene, model, gpu)
    if request is None:
        return
    tp = request.launch.tensor_parallel_size
    mem = scene.memory
    launch = request.launch
    per_gpu = (
        mem.weights_gib * GIB
        if mem.weights_gib is not None
        else weights_bytes(model, launch.quantization, launch.dtype) / tp
    )
    running = scene.gauge_peak("running") or scene.stats_peak("running")
    prompt = scene.histogram_mean("prompt_tokens_per_request")
    batch = max(1, int(running.value)) if running is not None else 1
    context = int(prompt.value) if prompt is not None else 0
    kv_read = batch * context * kv_layout(request).bytes_per_token * request.launch.pipeline_parallel_size
    floor_s = (per_gpu + kv_read) / (gpu.bandwidth_gbs * 1e9)
    ratio = tpot.value / floor_s
    facts = catalog.capacity_facts()
    where = f"{gpu.name} at {gpu.bandwidth_gbs:g} GB/s, batch {batch}, {context:,} tokens of context"
    if ratio <= facts.roofline_near_ratio:
        yield signal(
            "memory_bandwidth_bound",
            0.6,
            tpot.citation,
            f"TPOT {tpot.value * 1000:.1f} ms is {ratio:.1f}x the roofline floor of {floor_s * 1000:.1f} ms ({where}):"
            " decode is at the memory-bandwidth ceiling; don't tune compute knobs",
        )
    elif ratio >= facts.roofline_far_ratio and _clocks_down(scene):
        yield signal(
            "power_thermal_throttling",
            0.4,
            tpot.citation,
            f"TPOT {tpot.value * 1000:.1f} ms is {ratio:.1f}x the roofline floor of {floor_s * 1000:.1f} ms ({where})"
            " while clocks are held down",
        )
