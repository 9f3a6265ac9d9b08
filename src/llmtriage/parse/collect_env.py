"""Snapshots of the software stack: ``python -m torch.utils.collect_env`` / ``vllm collect-env`` text, and the
``config/environment.json`` that ``capture`` writes. Pure: text in, :class:`~llmtriage.facts.StackFacts` out, with
what could not be read as problems; never raises on bad input.

collect_env's "CUDA runtime version" is the toolkit ``nvcc`` on the PATH, not the CUDA torch runs: the runtime is
"CUDA used to build PyTorch" (``torch.version.cuda``). "Is CUDA available" is not read: capture runs collect_env with
``CUDA_VISIBLE_DEVICES=""`` so that it never touches a serving GPU.
"""

from __future__ import annotations

import json
import re
from typing import Any

from llmtriage import catalog
from llmtriage.facts import Citation, Problem, StackFacts, StackGpu

ENVIRONMENT_SCHEMA_VERSION = 1
"""``schema_version`` of ``config/environment.json`` (src/llmtriage/schemas/environment.schema.json)."""

# "Key: value" (torch's layout) or "Key        : value" (vLLM's sectioned layout since 0.9).
_KEY_VALUE = re.compile(r"^(?P<key>[A-Za-z][A-Za-z0-9 ._/()-]*?)\s*:\s?(?P<value>.*)$")
_GPU_LINE = re.compile(r"^GPU (?P<index>\d+): (?P<name>.+?)\s*$")
_PIP_LINE = re.compile(r"^\[pip\d?\]\s+(?P<name>[A-Za-z0-9][A-Za-z0-9._-]*)==(?P<version>\S+)")
_PLATFORM_RELEASE = re.compile(r"^Linux-(?P<release>.+?)-(?:x86_64|aarch64|arm64|ppc64le|s390x)(?:-|$)")
_UNKNOWN = frozenset({"", "n/a", "none", "no cuda", "could not collect", "not set"})
# The keys read, to the StackFacts field each fills.
_FIELDS = {
    "pytorch version": "torch_version",
    "cuda used to build pytorch": "cuda_runtime_version",
    "nvidia driver version": "driver_version",
    "nccl version": "nccl_version",
    "python version": "python_version",
    "python platform": "kernel_release",
    "vllm version": "engine_version",
}


def normalize_distribution(name: str) -> str:
    """A distribution name as PEP 503 compares them: lower case, runs of ``-_.`` as one ``-``."""
    return re.sub(r"[-_.]+", "-", name).lower()


def _known(value: str) -> str | None:
    value = value.strip()
    return None if value.lower() in _UNKNOWN else value


def _field_value(field_name: str, value: str) -> str | None:
    if field_name == "python_version":
        return value.split()[0]
    if field_name == "kernel_release":
        m = _PLATFORM_RELEASE.match(value)
        return m.group("release") if m else None
    if field_name == "engine_version":
        return value.split()[0]
    return value


def parse_collect_env(text: str, source: str) -> StackFacts:
    """The stack as collect_env printed it (torch's or vLLM's layout, whole or cut short)."""
    stack = StackFacts(sources=[source])
    in_gpus = False
    seen_torch_line = False
    for line_no, raw in enumerate(text.splitlines(), start=1):
        line = raw.rstrip()
        cite = Citation(source=source, line=line_no, excerpt=line.strip())
        gpu = _GPU_LINE.match(line.strip())
        if in_gpus and gpu is not None:
            _add_gpu(stack, int(gpu.group("index")), gpu.group("name"), cite)
            continue
        in_gpus = False
        pip = _PIP_LINE.match(line.strip())
        if pip is not None:
            stack.packages.setdefault(normalize_distribution(pip.group("name")), pip.group("version"))
            continue
        m = _KEY_VALUE.match(line.strip())
        if m is None:
            continue
        key = m.group("key").strip().lower()
        value = m.group("value")
        if key == "gpu models and configuration":
            in_gpus = True
            inline = _GPU_LINE.match(value.strip())
            if inline is not None:
                _add_gpu(stack, int(inline.group("index")), inline.group("name"), cite)
            continue
        field_name = _FIELDS.get(key)
        if field_name is None:
            continue
        seen_torch_line = seen_torch_line or key == "pytorch version"
        known = _known(value)
        if known is None or getattr(stack, field_name) is not None:
            continue
        parsed = _field_value(field_name, known)
        if parsed is None:
            continue
        setattr(stack, field_name, parsed)
        stack.citations[field_name] = cite
        if field_name == "engine_version":
            stack.engine = "vllm"
            stack.citations["engine"] = cite
    _engine_from_packages(stack, source)
    if not seen_torch_line:
        why = _failure(text)
        stack.problems.append(Problem(source, why or "not the output of collect_env (no 'PyTorch version' line)"))
    return stack


def _failure(text: str) -> str | None:
    """Why collect_env printed no report: the last line of its error, if it failed."""
    errors = [ln.strip() for ln in text.splitlines() if re.search(r"Error\b|No module named", ln)]
    return f"collect_env did not run: {errors[-1][:300]}" if errors else None


def _add_gpu(stack: StackFacts, index: int, name: str, cite: Citation) -> None:
    if all(g.index != index for g in stack.gpus):
        stack.gpus.append(StackGpu(index=index, name=name, citation=cite))


def _engine_from_packages(stack: StackFacts, source: str) -> None:
    """The engine whose distribution is installed (engines.yaml), when no line named it."""
    if stack.engine is not None:
        return
    for engine in catalog.engines().values():
        for dist in engine.distributions:
            version = stack.packages.get(dist)
            if version is not None:
                stack.engine, stack.engine_version = engine.id, version
                stack.citations["engine"] = stack.citations["engine_version"] = Citation(
                    source=source, excerpt=f"{dist}=={version}"
                )
                return


# ---------------------------------------------------------------- capture's environment.json


def parse_environment_json(text: str, source: str) -> StackFacts:
    """The stack of a ``config/environment.json`` (schema_version 1); what it says it could not read is a problem."""
    stack = StackFacts(sources=[source])
    try:
        doc = json.loads(text)
    except json.JSONDecodeError as e:
        stack.problems.append(Problem(source, f"not JSON: {e.msg}"))
        return stack
    if not isinstance(doc, dict) or doc.get("schema_version") != ENVIRONMENT_SCHEMA_VERSION:
        stack.problems.append(
            Problem(source, f"not an environment document of schema_version {ENVIRONMENT_SCHEMA_VERSION}")
        )
        return stack

    def put(field_name: str, value: Any, where: str) -> None:
        if isinstance(value, str) and value:
            setattr(stack, field_name, value)
            stack.citations[field_name] = Citation(source=source, excerpt=f"{where}: {value}")

    driver = _dict(doc.get("driver"))
    put("driver_version", driver.get("version"), "driver.version")
    put("driver_cuda_version", driver.get("cuda_version"), "driver.cuda_version")
    put("kernel_release", doc.get("kernel_release"), "kernel_release")
    put("container_image", _dict(doc.get("container")).get("image"), "container.image")
    for gpu in doc.get("gpus") or []:
        if isinstance(gpu, dict):
            index = gpu.get("index")
            memory = gpu.get("memory_total_mib")
            stack.gpus.append(
                StackGpu(
                    index=index if isinstance(index, int) and not isinstance(index, bool) else None,
                    name=gpu.get("name") if isinstance(gpu.get("name"), str) else None,
                    memory_total_mib=float(memory) if isinstance(memory, int | float) else None,
                    compute_capability=gpu.get("compute_capability")
                    if isinstance(gpu.get("compute_capability"), str)
                    else None,
                    citation=Citation(source=source, excerpt=f"gpus[{index}]: {gpu.get('name')}"),
                )
            )
    python = _dict(doc.get("python"))
    put("python_version", python.get("python_version"), "python.python_version")
    put("torch_version", python.get("torch_version"), "python.torch_version")
    put("cuda_runtime_version", python.get("torch_cuda"), "python.torch_cuda")
    put("nccl_version", python.get("nccl_version"), "python.nccl_version")
    put("engine", python.get("engine"), "python.engine")
    put("engine_version", python.get("engine_version"), "python.engine_version")
    arch = python.get("arch_list")
    if isinstance(arch, list) and all(isinstance(a, str) for a in arch):
        stack.arch_list = tuple(arch)
        stack.citations["arch_list"] = Citation(source=source, excerpt=f"python.arch_list: {' '.join(arch) or '[]'}")
    for item in python.get("packages") or []:
        if isinstance(item, str) and "==" in item:
            name, _, version = item.partition("==")
            stack.packages.setdefault(normalize_distribution(name), version)
    for entry in doc.get("not_read") or []:
        if isinstance(entry, dict):
            stack.problems.append(Problem(source, f"not read: {entry.get('what')}: {entry.get('why')}"))
    return stack


def _dict(value: Any) -> dict[str, Any]:
    return value if isinstance(value, dict) else {}


def parse_snapshot(text: str, source: str) -> StackFacts:
    """Either snapshot: capture's environment.json (a JSON object) or collect_env's text."""
    return parse_environment_json(text, source) if text.lstrip().startswith("{") else parse_collect_env(text, source)
