"""The stack checks: the driver against the CUDA runtime, the GPU against the build's arch list, the dtype against
the GPU. Pure functions of the stack facts and catalog/cuda_drivers.yaml; each finding quotes the measured value
next to the threshold and the table it comes from.

The stack is merged from every source that knows part of it, first wins: a snapshot (capture's environment.json,
collect_env text), the version lines of the server's log, the nvidia-smi table; a GPU whose compute capability no
source gave takes it from the GPU catalog.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, replace

from llmtriage import catalog
from llmtriage.capacity.gpu import find_gpu
from llmtriage.catalog import CudaStack, version_tuple
from llmtriage.diagnose.model import StackSummary
from llmtriage.facts import Citation, GpuFacts, LaunchConfig, ModelConfig, StackFacts, StackGpu

# sm_XY (kernels), compute_XY (PTX); "a" kernels run on that exact architecture only, "f" on its family.
_ARCH = re.compile(r"(?P<kind>sm|compute)_(?P<major>\d+?)(?P<minor>\d)(?P<suffix>[af]?)")
BF16_NAMES = frozenset({"bfloat16", "bf16"})
AUTO_DTYPES = frozenset({"auto"})


@dataclass(frozen=True, slots=True)
class StackFinding:
    """A way the stack cannot (``blocking``) or may not fully run this server, and its evidence."""

    cause: str
    blocking: bool
    note: str
    citation: Citation


def merged_stack(snapshot: StackFacts | None, from_log: StackFacts, gpu: GpuFacts) -> StackFacts:
    """One view of the stack: the snapshot, then the log's version lines, then the nvidia-smi table."""
    stack = StackFacts()
    if snapshot is not None:
        stack.fill(snapshot)
    stack.fill(from_log)
    stack.fill(_from_nvidia_smi(gpu))
    stack.gpus = [_with_capability(g) for g in stack.gpus]
    return stack


def _from_nvidia_smi(gpu: GpuFacts) -> StackFacts:
    facts = StackFacts(driver_version=gpu.driver_version, driver_cuda_version=gpu.cuda_version)
    source = gpu.sources[0] if gpu.sources else "nvidia-smi"
    for name in ("driver_version", "driver_cuda_version"):
        value = getattr(facts, name)
        if value is not None:
            label = "Driver Version" if name == "driver_version" else "CUDA Version"
            facts.citations[name] = Citation(source=source, excerpt=f"{label}: {value}")
    seen: set[tuple[int | None, str | None]] = set()
    for sample in [*gpu.snapshot, *gpu.samples]:
        if sample.name and (sample.index, sample.name) not in seen:
            seen.add((sample.index, sample.name))
            facts.gpus.append(
                StackGpu(
                    index=sample.index,
                    name=sample.name,
                    memory_total_mib=sample.memory_total_mib,
                    citation=sample.citation or Citation(source=source, excerpt=sample.name),
                )
            )
    return facts


def _with_capability(gpu: StackGpu) -> StackGpu:
    if gpu.compute_capability is not None or not gpu.name:
        return gpu
    info = find_gpu(gpu.name)
    if info is None or not re.fullmatch(r"\d+\.\d+", info.compute_capability):
        return gpu
    return replace(gpu, compute_capability=info.compute_capability)


def check(stack: StackFacts, launch: LaunchConfig | None, model: ModelConfig | None) -> list[StackFinding]:
    """Every finding of the three checks."""
    table = catalog.cuda_stack()
    return [*driver_findings(stack, table), *arch_findings(stack), *dtype_findings(stack, launch, model, table)]


# ---------------------------------------------------------------- the driver against the CUDA runtime


def _runtime_text(stack: StackFacts) -> str:
    cite = stack.citations.get("cuda_runtime_version")
    built = f"torch {stack.torch_version} is built with" if stack.torch_version else "the runtime is"
    where = f" ({cite.render()})" if cite is not None else ""
    return f"{built} CUDA {stack.cuda_runtime_version}{where}"


def driver_findings(stack: StackFacts, table: CudaStack) -> list[StackFinding]:
    """The driver is older than the CUDA runtime needs: below the major's minimum it cannot run at all; between that
    and the toolkit's own driver it runs under minor-version compatibility, without the newer features."""
    runtime = version_tuple(stack.cuda_runtime_version or "")[:2]
    if len(runtime) < 2:
        return []
    cause = "driver_cuda_mismatch"
    floor = table.minor_version_min_driver.get(runtime[0]) if runtime[0] >= 11 else None
    row = table.toolkit_driver(stack.cuda_runtime_version or "")
    built = _runtime_text(stack)
    if stack.driver_version is not None:
        driver = version_tuple(stack.driver_version)
        cite = stack.citations.get("driver_version") or Citation(source="stack", excerpt=stack.driver_version)
        if floor is not None and driver < version_tuple(floor):
            note = (
                f"driver {stack.driver_version} < {floor}, the oldest driver a CUDA {runtime[0]}.x runtime runs on; "
                f"{built} (NVIDIA CUDA Toolkit release notes, {table.minor_version_notes[runtime[0]]})"
            )
            return [StackFinding(cause, True, note, cite)]
        if row is not None and driver < version_tuple(row.linux_driver):
            if floor is None:
                note = (
                    f"driver {stack.driver_version} < {row.linux_driver}, the driver of {row.toolkit}; {built}, and "
                    "before CUDA 11 a runtime needs its toolkit's driver (release notes, Table 3)"
                )
                return [StackFinding(cause, True, note, cite)]
            note = (
                f"driver {stack.driver_version} < {row.linux_driver}, the driver of {row.toolkit} (release notes, "
                f"Table 3); {built}: it runs under minor-version compatibility (>= {floor}), but not what needs the "
                "newer driver (PTX built by a newer toolkit, newer driver APIs)"
            )
            return [StackFinding(cause, False, note, cite)]
        return []
    if stack.driver_cuda_version is None:
        return []
    supported = version_tuple(stack.driver_cuda_version)[:2]
    cite = stack.citations.get("driver_cuda_version") or Citation(source="stack", excerpt=stack.driver_cuda_version)
    if len(supported) < 2 or runtime <= supported:
        return []
    said = f"the driver supports CUDA {stack.driver_cuda_version} at most; {built}"
    if runtime[0] > supported[0] or floor is None:
        return [StackFinding(cause, True, f"{said}: a newer CUDA major needs a newer driver", cite)]
    return [
        StackFinding(
            cause,
            False,
            f"{said}: it runs under minor-version compatibility only if the driver is >= {floor} (release notes, "
            "Table 2), without what needs the newer driver",
            cite,
        )
    ]


# ---------------------------------------------------------------- the GPU against the build's arch list


def runs_on(capability: str, arch_list: tuple[str, ...]) -> bool:
    """Whether a build with ``arch_list`` (``torch.cuda.get_arch_list()``) has code for compute capability
    ``capability``: kernels of the same major and an older or equal minor (binary compatibility), kernels built for
    exactly this architecture (``sm_90a``), or PTX of an older or equal capability that the driver can JIT."""
    cc = version_tuple(capability)[:2]
    for entry in arch_list:
        m = _ARCH.fullmatch(entry.strip())
        if m is None:
            continue
        built = (int(m.group("major")), int(m.group("minor")))
        suffix = m.group("suffix")
        if suffix == "a":
            if cc == built:
                return True
        elif m.group("kind") == "compute":
            if cc >= built:
                return True
        elif cc[0] == built[0] and cc[1] >= built[1]:
            return True
    return False


def _sm(capability: str) -> str:
    return "sm_" + capability.replace(".", "")


def arch_findings(stack: StackFacts) -> list[StackFinding]:
    """A GPU whose compute capability the build has neither kernels nor PTX for (CUDA builds only)."""
    arch = stack.arch_list
    if not arch or stack.cuda_runtime_version is None:
        return []
    cite = stack.citations.get("arch_list") or Citation(source="stack", excerpt=" ".join(arch))
    has_ptx = any(a.startswith("compute_") for a in arch)
    found: list[StackFinding] = []
    for capability, name in sorted(
        {(g.compute_capability, g.name or "GPU") for g in stack.gpus if g.compute_capability}
    ):
        if runs_on(capability, arch):
            continue
        built = f"torch {stack.torch_version}" if stack.torch_version else "the build"
        ptx = "its PTX is newer than the GPU" if has_ptx else "no PTX (compute_XY) a driver could JIT from"
        note = (
            f"{name} is compute capability {capability} ({_sm(capability)}); {built} has kernels for "
            f"{' '.join(arch)} and {ptx}: 'no kernel image is available for execution on the device'"
        )
        found.append(StackFinding("gpu_arch_not_supported_by_build", True, note, cite))
    return found


# ---------------------------------------------------------------- the dtype against the GPU


def dtype_findings(
    stack: StackFacts, launch: LaunchConfig | None, model: ModelConfig | None, table: CudaStack
) -> list[StackFinding]:
    """bfloat16 asked for (``--dtype bfloat16``, or resolved so by the engine) on a GPU without it; ``--dtype auto``
    with a bfloat16 model config is weaker (recent vLLM falls back to float16 with a warning)."""
    bf16 = table.features["bf16"]
    lacking = sorted({(g.compute_capability, g.name or "GPU") for g in stack.gpus if g.compute_capability})
    lacking = [(cc, name) for cc, name in lacking if not bf16.supported(cc)]
    if not lacking:
        return []
    cc, name = lacking[0]
    gpu = f"{name} is compute capability {cc} < {bf16.min_cc}, the least that has bfloat16 ({bf16.source})"
    requested = (launch.dtype or "").lower() if launch is not None else ""
    if requested in BF16_NAMES:
        assert launch is not None
        cite = launch.citations.get("dtype") or Citation(source=launch.source, excerpt=f"--dtype {launch.dtype}")
        return [StackFinding("dtype_unsupported_by_gpu", True, f"--dtype {launch.dtype}, but {gpu}", cite)]
    if (stack.engine_dtype or "").lower() in BF16_NAMES:
        cite = stack.citations.get("engine_dtype") or Citation(source="stack", excerpt=f"dtype={stack.engine_dtype}")
        return [StackFinding("dtype_unsupported_by_gpu", True, f"the engine chose bfloat16 weights, but {gpu}", cite)]
    if requested in ("", *AUTO_DTYPES) and model is not None and (model.torch_dtype or "").lower() in BF16_NAMES:
        note = (
            f"--dtype {requested or 'auto (default)'} and config.json's torch_dtype {model.torch_dtype}, but {gpu}; "
            "recent vLLM falls back to float16 with a warning, older releases and other engines refuse to start"
        )
        cite = Citation(source=model.source or "config.json", excerpt=f'"torch_dtype": "{model.torch_dtype}"')
        return [StackFinding("dtype_unsupported_by_gpu", False, note, cite)]
    return []


def summary(stack: StackFacts) -> StackSummary | None:
    """The report's stack block, when anything of the stack is known."""
    if not stack.known():
        return None
    engine = f"{stack.engine} {stack.engine_version or ''}".strip() if stack.engine else None
    features = catalog.cuda_stack().features.values()
    gpus: list[str] = []
    for capability, name in dict.fromkeys((g.compute_capability, g.name or "GPU") for g in stack.gpus):
        count = sum(1 for g in stack.gpus if (g.compute_capability, g.name or "GPU") == (capability, name))
        text = f"{count} x {name}" if count > 1 else name
        if capability is not None:
            lacking = [f.title for f in features if not f.supported(capability)]
            text += f": compute capability {capability}" + (f" (no {', '.join(lacking)})" if lacking else "")
        gpus.append(text)
    return StackSummary(
        driver_version=stack.driver_version,
        driver_cuda=stack.driver_cuda_version,
        cuda_runtime=stack.cuda_runtime_version,
        torch=stack.torch_version,
        engine=engine,
        gpus=tuple(gpus),
    )
