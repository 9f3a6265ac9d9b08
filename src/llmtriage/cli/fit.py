"""``llmtriage fit``: will vLLM start with this model on this GPU, and how fast can it decode."""

import os
from typing import Annotated

import typer

from llmtriage.capacity import (
    FitRequest,
    FitResult,
    LaunchSettings,
    Roofline,
    decode_roofline,
    fit,
    resolve_gpu,
    resolve_model,
    suggest,
)
from llmtriage.capacity.gpu import GpuSpec, local_gpu
from llmtriage.capacity.version import default_version, parse_version
from llmtriage.cli.app import OutputFormat, app, fail, print_json
from llmtriage.errors import ExitCode, UsageError


def _gpu(name: str | None, memory_gib: float | None) -> GpuSpec:
    if memory_gib is not None and memory_gib <= 0:
        raise UsageError(f"--gpu-memory-gib {memory_gib:g}: must be positive", "the total nvidia-smi shows, in GiB")
    if name is None:
        if memory_gib is None:
            raise UsageError(
                "no GPU given",
                "give --gpu NAME (e.g. 'H100 SXM', 'A100 80GB', 'NVIDIA L4'), --gpu auto or --gpu-memory-gib X",
            )
        return GpuSpec("GPU", memory_gib, None, None)
    spec = local_gpu() if name.strip().lower() == "auto" else resolve_gpu(name)
    if memory_gib is None:
        return spec
    # The total the GPU reports wins over the catalog's.
    return spec.with_reported_total(memory_gib)


def _memory_rows(result: FitResult) -> list[tuple[str, float]]:
    quant = f", {result.quantization}" if result.quantization else ""
    where = "inside" if result.cuda_graph_in_budget else "outside"
    return [
        ("total memory", result.gpu_total_gib),
        ("budget (total x utilization)", result.budget_gib),
        (f"weights ({result.weights_source}{quant})", result.weights_gib),
        (f"activation peak ({result.max_num_batched_tokens:,} tokens)", result.activation_gib),
        ("non-torch (CUDA context, NCCL)", result.non_torch_gib),
        (f"CUDA graphs ({where} the budget)", result.cuda_graph_gib),
        (f"KV cache ({result.available_kv_source})", result.available_kv_gib),
    ]


def _text(result: FitResult, roofline: Roofline | None) -> None:
    # Plain aligned text and click's styling, not rich: rich's table costs `fit` ~20 ms of start-up, a fifth of it.
    lines = []
    if result.model_note:
        lines.append(f"model: {result.model_note}")
    lines.append(f"{result.model} on {result.gpu} (vLLM {result.engine_version}, {result.engine.upper()})")
    rows = _memory_rows(result)
    width = max(len(label) for label, _ in rows)
    lines.append(f"  {'per GPU':<{width}}  {'GiB':>7}")
    lines += [f"  {label:<{width}}  {gib:>7.2f}" for label, gib in rows]
    lines.append(
        f"KV cache: {result.kv_bytes_per_token:,} bytes/token, {result.block_size}-token blocks,"
        f" {result.num_gpu_blocks:,} blocks = {result.kv_tokens:,} tokens;"
        f" {result.max_concurrency:.2f}x concurrency at {result.max_model_len:,} tokens per request"
    )
    if result.starts:
        lines.append(
            f"{typer.style('starts', fg='green', bold=True)}: one {result.max_model_len:,}-token request needs"
            f" {result.kv_needed_gib:.2f} GiB of KV cache"
        )
    else:
        lines.append(f"{typer.style('does not start', fg='red', bold=True)} ({result.error}): {result.detail}")
    lines += [f"  change: {tip}" for tip in result.suggestions]
    lines += [typer.style(f"note: {note}", dim=True) for note in result.warnings]
    if roofline is not None:
        lines.append(
            f"roofline (batch {roofline.batch}, {roofline.context_tokens:,} tokens of context):"
            f" decode reads {roofline.weights_read_gib:.2f} GiB of weights + {roofline.kv_read_gib:.2f} GiB of KV"
            f" per step at {roofline.bandwidth_gbs:g} GB/s -> TPOT >= {roofline.tpot_floor_ms:.2f} ms,"
            f" <= {roofline.tokens_per_s_per_sequence:,.0f} tokens/s per sequence,"
            f" <= {roofline.tokens_per_s:,.0f} tokens/s in all; prefill of {roofline.context_tokens:,} tokens"
            f" >= {roofline.prefill_ms:,.1f} ms ({roofline.prefill_tflop:.1f} TFLOP at {roofline.bf16_tflops:g} TFLOPS)"
        )
    # click strips the styles into a pipe; NO_COLOR (https://no-color.org, which rich honoured) strips them everywhere.
    typer.echo("\n".join(lines), color=False if os.environ.get("NO_COLOR") else None)


@app.command(name="fit")
def fit_command(
    model: Annotated[
        str,
        typer.Option(
            "--model",
            help="A model directory or config.json; a Hugging Face id (the local HF cache, then the catalog; a"
            " quantized or re-published name like Qwen/Qwen3-32B-AWQ is priced as its base plus the quantization"
            " its name states).",
        ),
    ],
    gpu: Annotated[
        str | None,
        typer.Option(
            "--gpu",
            help="GPU name as nvidia-smi prints it or as people write it ('A100 80GB', 'H100 SXM', 'RTX 4090', 'L4');"
            " a name that fits several GPUs ('A100', 'H100') is an error that lists them. auto: this machine's GPU"
            " and total memory, read through NVML.",
        ),
    ] = None,
    gpu_memory_gib: Annotated[
        float | None, typer.Option("--gpu-memory-gib", help="Total GPU memory as reported; wins over --gpu's.")
    ] = None,
    tp: Annotated[int, typer.Option("--tp", "--tensor-parallel-size", help="Tensor parallel size.")] = 1,
    pp: Annotated[int, typer.Option("--pp", "--pipeline-parallel-size", help="Pipeline parallel size.")] = 1,
    max_model_len: Annotated[int | None, typer.Option("--max-model-len", help="Context limit.")] = None,
    gpu_memory_utilization: Annotated[float, typer.Option("--gpu-memory-utilization")] = 0.9,
    max_num_seqs: Annotated[int | None, typer.Option("--max-num-seqs")] = None,
    max_num_batched_tokens: Annotated[int | None, typer.Option("--max-num-batched-tokens")] = None,
    block_size: Annotated[int | None, typer.Option("--block-size")] = None,
    kv_cache_dtype: Annotated[str, typer.Option("--kv-cache-dtype", help="auto or fp8.")] = "auto",
    quantization: Annotated[
        str | None,
        typer.Option("--quantization", help="awq, gptq, fp8, ...; overrides the checkpoint's quantization_config."),
    ] = None,
    dtype: Annotated[str, typer.Option("--dtype")] = "auto",
    enforce_eager: Annotated[bool, typer.Option("--enforce-eager", help="No CUDA graphs.")] = False,
    engine_version: Annotated[str | None, typer.Option("--engine-version", help="vLLM version, 0.X.Y.")] = None,
    free_memory_gib: Annotated[
        float | None, typer.Option("--free-memory-gib", help="Free GPU memory before start (others hold the rest).")
    ] = None,
    available_kv_gib: Annotated[
        float | None, typer.Option("--available-kv-gib", help="What vLLM printed as 'Available KV cache memory'.")
    ] = None,
    online: Annotated[
        bool,
        typer.Option(
            "--online", help="Read an uncached model's config.json and safetensors sizes from the Hub (no weights)."
        ),
    ] = False,
    roofline: Annotated[bool, typer.Option("--roofline", help="Also print the decode roofline.")] = False,
    batch: Annotated[int, typer.Option("--batch", help="Roofline: sequences decoding together.")] = 1,
    context: Annotated[int, typer.Option("--context", help="Roofline: context tokens per sequence.")] = 4096,
    output: Annotated[OutputFormat, typer.Option("--format", help="text or json.")] = OutputFormat.text,
) -> None:
    """Predict whether vLLM starts (weights + activations + CUDA graphs + KV cache vs memory) and what to change.

    Exit codes: 0 it starts, 1 it does not, 2 usage error.
    """
    try:
        request = FitRequest(
            model=resolve_model(model, online=online),
            gpu=_gpu(gpu, gpu_memory_gib),
            launch=LaunchSettings(
                max_model_len=max_model_len,
                gpu_memory_utilization=gpu_memory_utilization,
                tensor_parallel_size=tp,
                pipeline_parallel_size=pp,
                max_num_seqs=max_num_seqs,
                max_num_batched_tokens=max_num_batched_tokens,
                block_size=block_size,
                kv_cache_dtype=kv_cache_dtype,
                quantization=quantization,
                dtype=dtype,
                enforce_eager=enforce_eager,
            ),
            version=parse_version(engine_version) if engine_version else default_version(),
            free_memory_gib=free_memory_gib,
            available_kv_gib=available_kv_gib,
        )
        result = suggest(request, fit(request))
        ceiling = decode_roofline(request, batch, context) if roofline else None
    except UsageError as e:
        fail(e)
    if output is OutputFormat.json:
        data = result.to_dict()
        if ceiling is not None:
            data["roofline"] = ceiling.to_dict()
        print_json(data)
    else:
        _text(result, ceiling)
    raise typer.Exit(int(ExitCode.OK if result.starts else ExitCode.PROBLEM_FOUND))
