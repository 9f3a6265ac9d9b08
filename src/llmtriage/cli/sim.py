"""``llmtriage sim``: a vLLM-like server with fault injection, or a llama.cpp ``llama-server``-like one."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from llmtriage import aio
from llmtriage.capacity import resolve_gpu, resolve_model
from llmtriage.cli.app import app
from llmtriage.errors import UsageError
from llmtriage.sim.faults import parse_fault
from llmtriage.sim.llamacpp import DEFAULT_CTX_SIZE, DEFAULT_PARALLEL, N_BATCH
from llmtriage.sim.memory import EngineArgs
from llmtriage.sim.server import SimConfig, SimServer

DEFAULT_MODEL = "meta-llama/Llama-3.1-8B-Instruct"
ENGINES = ("vllm", "llama_cpp")


@app.command()
def sim(
    model: Annotated[
        str, typer.Option(help="Catalog model id (catalog/models.yaml), a config.json or a model directory.")
    ] = DEFAULT_MODEL,
    gpu: Annotated[
        str, typer.Option(help="GPU name or nvidia-smi alias from catalog/gpus.yaml, e.g. 'H100 SXM', L4, 'A100 80GB'.")
    ] = "H100 SXM",
    max_model_len: Annotated[
        int | None, typer.Option(help="vLLM --max-model-len (default: the model's context).")
    ] = None,
    gpu_memory_utilization: Annotated[float, typer.Option(help="vLLM --gpu-memory-utilization.")] = 0.9,
    max_num_seqs: Annotated[int | None, typer.Option(help="vLLM --max-num-seqs (default: vLLM's for the GPU).")] = None,
    max_num_batched_tokens: Annotated[
        int | None, typer.Option(help="vLLM --max-num-batched-tokens (default: vLLM's for the GPU).")
    ] = None,
    enable_prefix_caching: Annotated[bool, typer.Option("--enable-prefix-caching/--no-enable-prefix-caching")] = True,
    enable_chunked_prefill: Annotated[
        bool, typer.Option("--enable-chunked-prefill/--no-enable-chunked-prefill")
    ] = True,
    enforce_eager: Annotated[bool, typer.Option("--enforce-eager", help="No CUDA graphs: slower steps.")] = False,
    kv_cache_dtype: Annotated[str, typer.Option(help="auto or fp8.")] = "auto",
    served_model_name: Annotated[str | None, typer.Option(help="Name in /v1/models (default: the model id).")] = None,
    host: Annotated[str, typer.Option(help="Address to listen on.")] = "127.0.0.1",
    port: Annotated[int, typer.Option(help="Port to listen on.")] = 8000,
    speed: Annotated[
        float, typer.Option(help="Simulated seconds per wall second (metrics and logs report simulated time).")
    ] = 1.0,
    fault: Annotated[
        list[str] | None,
        typer.Option(
            help="Inject a fault (repeatable): other-process:memory_gib=G | runtime-oom[:running=N,batch_tokens=T] | "
            "throttle:kind=power|thermal[,clock=0.6] | contention[:memory_gib=G,share=0.5] | stall; append @ONSET (e.g. @30s)."
        ),
    ] = None,
    seed: Annotated[int, typer.Option(help="Seed for generated text and EOS draws.")] = 0,
    eos_probability: Annotated[
        float, typer.Option(help="Chance per token of an early EOS (0: run to max_tokens).")
    ] = 0.0,
    log_file: Annotated[Path | None, typer.Option(help="Also write the vLLM-format log to this file.")] = None,
    quiet: Annotated[bool, typer.Option("--quiet", help="Do not echo the log on stdout.")] = False,
    startup_seconds: Annotated[float, typer.Option(help="Simulated time the engine takes to start.")] = 20.0,
    engine: Annotated[
        str, typer.Option(help="vllm, or llama_cpp: llama-server's /metrics, /health, /slots, errors and log lines.")
    ] = "vllm",
    ctx_size: Annotated[
        int,
        typer.Option("--ctx-size", "-c", help=f"llama_cpp: -c, the KV cache in tokens (default {DEFAULT_CTX_SIZE})."),
    ] = DEFAULT_CTX_SIZE,
    parallel: Annotated[
        int | None,
        typer.Option(
            help=f"llama_cpp: --parallel, the slots; each holds -c / N (default {DEFAULT_PARALLEL} slots sharing all "
            "of -c, llama-server's unified KV cache)."
        ),
    ] = None,
) -> None:
    """Serve an OpenAI-compatible API that behaves like vLLM's V1 engine on the given model and GPU.

    Continuous batching, paged KV cache (block 16), chunked prefill, prefix caching, preemption, a roofline
    step time; /metrics with vLLM's names, /health, /version, /v1/models, and /llmtriage/gpu (NVML-like).
    With --engine llama_cpp it answers as llama.cpp's llama-server does: --parallel slots of --ctx-size, /metrics
    with the llamacpp: series, /health, /slots, the 400 of a prompt over a slot's context, and llama.cpp's log
    lines (the vLLM options other than --model and --gpu, and --fault, are vLLM's only).
    Exits 1 when vLLM would fail to start (the log says why), or after the engine dies.
    """
    if speed <= 0:
        raise UsageError("--speed must be positive")
    if engine not in ENGINES:
        raise UsageError(f"--engine {engine!r}: unknown", "vllm or llama_cpp")
    if engine == "llama_cpp" and fault:
        raise UsageError("--fault is for the vLLM personality", "leave out --fault with --engine llama_cpp")
    slots = parallel if parallel is not None else DEFAULT_PARALLEL
    if ctx_size < 1 or slots < 1 or ctx_size < slots:
        raise UsageError("--ctx-size and --parallel must be positive, with at least one token per slot")
    if not 0 <= eos_probability <= 1:
        raise UsageError("--eos-probability must be in [0, 1]")
    model_spec = resolve_model(model)
    kv_unified = parallel is None
    if engine == "llama_cpp":
        # A slot is a running request; a prompt is processed N_BATCH tokens per decode.
        max_model_len = ctx_size if kv_unified else ctx_size // slots
        max_num_seqs, max_num_batched_tokens, enable_chunked_prefill = slots, N_BATCH, True
    args = EngineArgs(
        max_model_len=max_model_len,
        gpu_memory_utilization=gpu_memory_utilization,
        max_num_seqs=max_num_seqs,
        max_num_batched_tokens=max_num_batched_tokens,
        enable_prefix_caching=enable_prefix_caching,
        enable_chunked_prefill=enable_chunked_prefill,
        enforce_eager=enforce_eager,
        kv_cache_dtype=kv_cache_dtype,
    )
    name = served_model_name or model_spec.name
    defaults = EngineArgs()
    non_default: dict[str, object] = {"host": host, "port": port, "model": model_spec.name}
    for key in (
        "max_model_len",
        "gpu_memory_utilization",
        "max_num_seqs",
        "max_num_batched_tokens",
        "enforce_eager",
        "kv_cache_dtype",
        "enable_prefix_caching",
        "enable_chunked_prefill",
    ):
        if getattr(args, key) != getattr(defaults, key):
            non_default[key] = getattr(args, key)
    if served_model_name:
        non_default["served_model_name"] = [served_model_name]
    config = SimConfig(
        model=model_spec,
        gpu=resolve_gpu(gpu),
        args=args,
        served_model_name=name,
        host=host,
        port=port,
        speed=speed,
        faults=[parse_fault(f) for f in fault or []],
        seed=seed,
        eos_probability=eos_probability,
        log_file=log_file,
        echo=not quiet,
        startup_seconds=startup_seconds,
        non_default_args=non_default,
        engine=engine,
        ctx_size=ctx_size,
        parallel=slots,
        kv_unified=kv_unified,
    )
    code = aio.run(SimServer(config).serve())
    raise typer.Exit(code)
