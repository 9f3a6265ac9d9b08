"""The software stack under the server: driver, CUDA, GPUs, kernel, container image, and the server's own Python
(torch, its CUDA and arch list, NCCL, the engine, kernel libraries, every installed distribution).

Writes ``config/environment.json`` (schema: src/llmtriage/schemas/environment.schema.json), a readable
``config/environment.txt``, and ``config/collect_env.txt`` (``python -m torch.utils.collect_env``). Every probe has a
time limit, is read-only, and records what it could not read and why. No probe starts CUDA work on a serving GPU:
NVML and nvidia-smi only query, and the server's Python runs with ``CUDA_VISIBLE_DEVICES=""`` (and
``PYTORCH_NVML_BASED_CUDA_CHECK=1``, so even collect_env's ``is_available()`` asks NVML, not the CUDA driver).

The server's Python is ``--python``, else found from ``/proc/PID``: ``/proc/PID/exe`` is the interpreter's real
binary, which for a virtual environment is the base Python without the server's packages, so the command line's
``argv[0]`` (or the venv whose site-packages the process has mapped) is taken when it is that same binary.
"""

from __future__ import annotations

import json
import os
import re
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path
from typing import Any, ClassVar

from llmtriage import catalog
from llmtriage.capture.collector import Collector, Context, Failed, Skip, decode
from llmtriage.capture.manifest import SourceRow
from llmtriage.capture.plan import CapturePlan, Container, GpuMode, Process
from llmtriage.capture.runner import Limits
from llmtriage.parse import nvidia_smi
from llmtriage.parse.collect_env import ENVIRONMENT_SCHEMA_VERSION, normalize_distribution

# What the server's Python runs with: CUDA hidden, NVML for any is_available(), no .pyc written into its packages.
PROBE_ENV = ("CUDA_VISIBLE_DEVICES=", "PYTORCH_NVML_BASED_CUDA_CHECK=1", "PYTHONDONTWRITEBYTECODE=1")
_SMI_LIMITS = Limits(timeout_s=20.0, max_bytes=1 << 20)
_QUERY_FIELDS = ("index", "name", "memory.total", "compute_cap", "mig.mode.current", "persistence_mode")
_INVALID_FIELD = re.compile(r'Field "(?P<field>[^"]+)" is not a valid field to query')
_SITE_PACKAGES = re.compile(r"\s(?P<prefix>/\S+?)/lib/python\d[\d.]*/(?:site|dist)-packages/")
_MIB = float(1 << 20)


@dataclass(slots=True)
class _Stack:
    """The environment document as it is filled; ``not_read`` says what could not be read and why."""

    driver: dict[str, Any] = field(default_factory=lambda: {"version": None, "cuda_version": None, "read_with": None})
    gpus: list[dict[str, Any]] = field(default_factory=list)
    topology: str | None = None
    kernel_release: str | None = None
    container: dict[str, Any] | None = None
    python: dict[str, Any] | None = None
    not_read: list[dict[str, str]] = field(default_factory=list)
    collect_env: str | None = None

    def missing(self, what: str, why: str) -> None:
        self.not_read.append({"what": what, "why": why})

    def document(self) -> dict[str, Any]:
        return {
            "schema_version": ENVIRONMENT_SCHEMA_VERSION,
            "driver": self.driver,
            "gpus": self.gpus,
            "topology": self.topology,
            "kernel_release": self.kernel_release,
            "container": self.container,
            "python": self.python,
            "not_read": self.not_read,
        }


class SoftwareStack(Collector):
    """Versions of everything between the GPU and the engine (read after the window: the stack does not change)."""

    name = "environment"
    limits: ClassVar[Limits] = Limits(timeout_s=60.0, max_bytes=8 << 20)
    collect_env_limits: ClassVar[Limits] = Limits(timeout_s=120.0, max_bytes=4 << 20)

    def skip(self, plan: CapturePlan) -> Skip | None:
        """Always applies: the host's part needs no server."""
        return None

    def collect(self, ctx: Context, row: SourceRow) -> None:
        """Read every part; write the three files; fail only when nothing at all could be read."""
        stack = _Stack()
        if ctx.plan.gpu is GpuMode.url:
            stack.missing("driver and GPUs", "GPU read from the telemetry endpoint (no NVML or nvidia-smi query)")
        else:
            _driver_and_gpus(ctx, row, stack)
            topology = ctx.run(row, ["nvidia-smi", "topo", "-m"], _SMI_LIMITS)
            if topology.ok:
                stack.topology = decode(topology.stdout)
            else:
                stack.missing("topology", topology.why())
        stack.kernel_release = _kernel_release(ctx, stack)
        if ctx.scene.container_image is not None and isinstance(ctx.plan.target, Container):
            stack.container = {
                "name": ctx.plan.target.name,
                "image": ctx.scene.container_image,
                "image_id": ctx.scene.container_image_id,
            }
        python, found_by = _find_python(ctx)
        if python is None:
            stack.missing("python", found_by)
        else:
            self._python(ctx, row, stack, python, found_by)
        document = stack.document()
        read = [document[k] for k in ("gpus", "topology", "kernel_release", "container", "python")]
        if not any(read) and not (stack.driver["version"] or stack.driver["cuda_version"]):
            raise Failed("; ".join(f"{n['what']}: {n['why']}" for n in stack.not_read) or "nothing could be read")
        # One line: under the size cap the document is written whole or not at all, never cut into invalid JSON.
        ctx.write(row, "config/environment.json", json.dumps(document) + "\n")
        ctx.write(row, "config/environment.txt", render_text(document))
        if stack.collect_env is not None:
            ctx.write(row, "config/collect_env.txt", stack.collect_env)
        if stack.not_read:
            row.note("not read: " + "; ".join(f"{n['what']}: {n['why']}" for n in stack.not_read))

    def _python(self, ctx: Context, row: SourceRow, stack: _Stack, python: str, found_by: str) -> None:
        with resources.as_file(resources.files("llmtriage.capture.probes").joinpath("python_stack.py")) as script:
            result = ctx.run(row, ["env", *PROBE_ENV, python, str(script)], self.limits)
        if not result.ok:
            stack.missing("python", f"{python} ({found_by}): {result.why()}")
            return
        try:
            probe = json.loads(result.stdout)
        except (json.JSONDecodeError, UnicodeDecodeError) as e:
            stack.missing("python", f"{python} ({found_by}): the probe did not answer JSON: {e}")
            return
        stack.python = _python_section(probe if isinstance(probe, dict) else {}, python, found_by, stack)
        if stack.python["torch_version"] is None:
            stack.missing("collect_env", "not run: torch is not importable in that Python")
            return
        result = ctx.run(row, ["env", *PROBE_ENV, python, "-m", "torch.utils.collect_env"], self.collect_env_limits)
        if result.usable and result.stdout.strip():
            stack.collect_env = decode(result.stdout)
        else:
            stack.missing("collect_env", f"python -m torch.utils.collect_env: {result.why()}")


# ---------------------------------------------------------------- driver and GPUs


def _driver_and_gpus(ctx: Context, row: SourceRow, stack: _Stack) -> None:
    """NVML first (one chokepoint, read-only queries); nvidia-smi when NVML does not start."""
    why = ctx.nvml.start()
    if why is None:
        try:
            _nvml(ctx, stack)
        finally:
            ctx.nvml.stop()
        return
    stack.missing("NVML", why)
    _nvidia_smi(ctx, row, stack)


def _text(value: Any) -> str | None:
    if value is None:
        return None
    return value.decode("utf-8", "replace") if isinstance(value, bytes) else str(value)


def _cuda_from_int(value: Any) -> str | None:
    """NVML's CUDA driver version (12040) as ``12.4``."""
    return f"{value // 1000}.{value % 1000 // 10}" if isinstance(value, int) and value > 0 else None


def _enabled(value: Any) -> str | None:
    return None if not isinstance(value, int) else ("Enabled" if value else "Disabled")


def _nvml(ctx: Context, stack: _Stack) -> None:
    nvml = ctx.nvml

    def read(what: str, function: str, *args: Any) -> Any:
        reading = nvml.query(function, *args)
        if reading.reason is not None:
            stack.missing(what, reading.reason)
        return reading.value

    stack.driver = {
        "version": _text(read("driver version", "nvmlSystemGetDriverVersion")),
        "cuda_version": _cuda_from_int(read("CUDA driver version", "nvmlSystemGetCudaDriverVersion")),
        "read_with": "nvml",
    }
    for index in range(read("GPU count", "nvmlDeviceGetCount") or 0):
        handle = read(f"GPU {index}", "nvmlDeviceGetHandleByIndex", index)
        if handle is None:
            continue
        memory = read(f"GPU {index} memory", "nvmlDeviceGetMemoryInfo", handle)
        capability = read(f"GPU {index} compute capability", "nvmlDeviceGetCudaComputeCapability", handle)
        mig = read(f"GPU {index} MIG mode", "nvmlDeviceGetMigMode", handle)
        stack.gpus.append(
            {
                "index": index,
                "name": _text(read(f"GPU {index} name", "nvmlDeviceGetName", handle)),
                "memory_total_mib": None if memory is None else round(memory.total / _MIB),
                "compute_capability": f"{capability[0]}.{capability[1]}" if capability else None,
                "mig_mode": _enabled(mig[0]) if isinstance(mig, list | tuple) and mig else None,
                "persistence_mode": _enabled(
                    read(f"GPU {index} persistence mode", "nvmlDeviceGetPersistenceMode", handle)
                ),
            }
        )


def _nvidia_smi(ctx: Context, row: SourceRow, stack: _Stack) -> None:
    table = ctx.run(row, ["nvidia-smi"], _SMI_LIMITS)
    if not table.ok:
        stack.missing("driver", table.why())
        return
    parsed = nvidia_smi.parse_table(decode(table.stdout), "nvidia-smi")
    stack.driver = {"version": parsed.driver_version, "cuda_version": parsed.cuda_version, "read_with": "nvidia-smi"}
    fields = list(_QUERY_FIELDS)
    while True:
        result = ctx.run(
            row, ["nvidia-smi", f"--query-gpu={','.join(fields)}", "--format=csv,noheader,nounits"], _SMI_LIMITS
        )
        bad = _INVALID_FIELD.search(decode(result.stdout + result.stderr))
        if result.ok or bad is None or bad.group("field") not in fields:
            break
        stack.missing(bad.group("field"), "this nvidia-smi does not know the field")
        fields.remove(bad.group("field"))
    if not result.ok:
        stack.missing("GPUs", result.why())
        return
    for line in decode(result.stdout).splitlines():
        cells = dict(zip(fields, (c.strip() for c in line.split(",")), strict=False))
        if not cells.get("index", "").isdigit():
            continue
        memory = cells.get("memory.total", "")
        stack.gpus.append(
            {
                "index": int(cells["index"]),
                "name": _known(cells.get("name")),
                "memory_total_mib": float(memory) if re.fullmatch(r"\d+(?:\.\d+)?", memory) else None,
                "compute_capability": _known(cells.get("compute_cap")),
                "mig_mode": _known(cells.get("mig.mode.current")),
                "persistence_mode": _known(cells.get("persistence_mode")),
            }
        )


def _known(cell: str | None) -> str | None:
    return None if cell is None or cell in catalog.nvidia_smi_fields().unknown_values else cell


def _kernel_release(ctx: Context, stack: _Stack) -> str | None:
    path = ctx.proc_root / "sys" / "kernel" / "osrelease"
    try:
        return path.read_text(errors="replace").strip() or None
    except OSError as e:
        stack.missing("kernel release", f"cannot read {path}: {e.strerror or e}")
        return None


# ---------------------------------------------------------------- the server's Python


def _find_python(ctx: Context) -> tuple[str | None, str]:
    """The interpreter to read the stack with and how it was found, or None and why not."""
    plan = ctx.plan
    if plan.python is not None:
        if not plan.python.is_file():
            return None, f"--python {plan.python}: no such file"
        return str(plan.python), "--python"
    match plan.target:
        case Process(pid=pid):
            return _process_python(ctx, pid)
        case Container(name=name):
            return None, (
                f"the server runs in container {name}: give --python with a path valid on this host, or run "
                f"`docker exec {name} python3 -m torch.utils.collect_env > collect_env.txt` and pass it to "
                "`llmtriage diagnose --collect-env`"
            )
    return None, "the server's process is not known: give --pid or --python"


def _process_python(ctx: Context, pid: int) -> tuple[str | None, str]:
    base = ctx.proc_root / str(pid)
    try:
        exe = os.readlink(base / "exe")
    except OSError as e:
        return None, f"cannot read {base / 'exe'}: {e.strerror or e} (run as the server's user, or root)"
    try:
        same_root = os.path.samefile(base / "root", "/")
    except OSError:
        same_root = True  # cannot tell: the paths below are checked one by one
    if not same_root:
        return None, (
            f"process {pid} runs in another mount namespace (a container): its Python cannot be run from here; "
            "give --python, or run `python -m torch.utils.collect_env` inside it and pass the file to "
            "`llmtriage diagnose --collect-env`"
        )
    real = os.path.realpath(exe)
    argv0 = _argv0(ctx, base)
    if argv0 is not None and os.path.realpath(argv0) == real:
        return argv0, f"argv[0] of process {pid}, the binary of /proc/{pid}/exe"
    venv = _mapped_venv(base, real)
    if venv is not None:
        return venv, f"the virtual environment whose packages process {pid} has loaded (/proc/{pid}/maps)"
    if Path(exe).is_file():
        return exe, f"/proc/{pid}/exe"
    return None, f"/proc/{pid}/exe is {exe!r}, which is not a file here (deleted, or in another filesystem)"


def _argv0(ctx: Context, base: Path) -> str | None:
    """The command line's first word as a path on this host: absolute, relative to the process's working
    directory, or looked up in its PATH."""
    argv = ctx.scene.launch_argv
    if not argv:
        return None
    first = argv[0]
    if "/" in first:
        if first.startswith("/"):
            return first if os.path.isfile(first) else None
        try:
            candidate = os.path.join(os.readlink(base / "cwd"), first)
        except OSError:
            return None
        return candidate if os.path.isfile(candidate) else None
    for directory in _process_path(base):
        candidate = os.path.join(directory, first)
        if os.path.isfile(candidate) and os.access(candidate, os.X_OK):
            return candidate
    return None


def _process_path(base: Path) -> list[str]:
    try:
        raw = (base / "environ").read_bytes()
    except OSError:
        return []
    for item in raw.split(b"\0"):
        if item.startswith(b"PATH="):
            return [p for p in item[5:].decode("utf-8", "replace").split(":") if p]
    return []


def _mapped_venv(base: Path, real_exe: str) -> str | None:
    """A virtual environment's python whose site-packages the process has mapped (torch's libraries)."""
    try:
        maps = (base / "maps").read_text(errors="replace")
    except OSError:
        return None
    for prefix in dict.fromkeys(m.group("prefix") for m in _SITE_PACKAGES.finditer(maps)):
        if not os.path.isfile(os.path.join(prefix, "pyvenv.cfg")):
            continue
        for name in ("python3", "python"):
            candidate = os.path.join(prefix, "bin", name)
            if os.path.isfile(candidate) and os.path.realpath(candidate) == real_exe:
                return candidate
    return None


def _python_section(probe: dict[str, Any], python: str, found_by: str, stack: _Stack) -> dict[str, Any]:
    """environment.json's ``python`` object from the probe's answer; its errors become ``not_read`` entries."""
    for what, why in (probe.get("errors") or {}).items():
        stack.missing(str(what), str(why))
    torch: dict[str, Any] = probe["torch"] if isinstance(probe.get("torch"), dict) else {}
    versions: dict[str, str] = {}
    packages: list[str] = []
    for item in probe.get("distributions") or []:
        if isinstance(item, list) and len(item) == 2:
            name, version = str(item[0]), str(item[1])
            versions.setdefault(normalize_distribution(name), version)
            packages.append(f"{name}=={version}")
    engine, engine_version = None, None
    for info in catalog.engines().values():
        installed = next((versions[d] for d in info.distributions if d in versions), None)
        if installed is not None:
            engine, engine_version = info.id, installed
            break
    return {
        "executable": python,
        "found_by": found_by,
        "python_version": probe.get("python_version"),
        "torch_version": torch.get("version"),
        "torch_cuda": torch.get("cuda"),
        "torch_hip": torch.get("hip"),
        "arch_list": torch.get("arch_list"),
        "nccl_version": torch.get("nccl"),
        "notes": {str(k): str(v) for k, v in (probe.get("notes") or {}).items()},
        "engine": engine,
        "engine_version": engine_version,
        "kernel_libraries": {n: versions[n] for n in catalog.cuda_stack().kernel_libraries if n in versions},
        "packages": packages,
    }


# ---------------------------------------------------------------- the readable summary


def render_text(document: dict[str, Any]) -> str:
    """environment.txt: one line per fact, then the topology and the installed distributions."""
    lines: list[str] = []

    def put(label: str, text: str) -> None:
        lines.append(f"{label:<12}{text}")

    driver = document["driver"]
    if driver.get("version") or driver.get("cuda_version"):
        put("driver", f"{driver.get('version') or 'unknown'} (CUDA {driver.get('cuda_version') or 'unknown'}), "
            f"read with {driver.get('read_with')}")  # fmt: skip
    for gpu in document["gpus"]:
        parts = [str(gpu.get("name") or "unknown")]
        if gpu.get("memory_total_mib") is not None:
            parts.append(f"{gpu['memory_total_mib']:.0f} MiB")
        parts.append(f"compute capability {gpu.get('compute_capability') or 'unknown'}")
        if gpu.get("mig_mode"):
            parts.append(f"MIG {gpu['mig_mode']}")
        if gpu.get("persistence_mode"):
            parts.append(f"persistence {gpu['persistence_mode']}")
        put(f"GPU {gpu.get('index')}", ", ".join(parts))
    if document["kernel_release"]:
        put("kernel", document["kernel_release"])
    container = document["container"]
    if container:
        put("container", f"{container.get('name')}: {container.get('image')} ({container.get('image_id') or '?'})")
    python = document["python"]
    if python:
        put("python", f"{python['executable']} ({python['found_by']}), Python {python.get('python_version')}")
        if python.get("torch_version"):
            arch = python.get("arch_list")
            put(
                "torch",
                f"{python['torch_version']}, CUDA {python.get('torch_cuda') or 'none'}"
                + (f", HIP {python['torch_hip']}" if python.get("torch_hip") else "")
                + f", arch list: {' '.join(arch) if arch else '(none)'}"
                + (f" ({python['notes']['arch_list']})" if python.get("notes", {}).get("arch_list") else "")
                + f", NCCL {python.get('nccl_version') or 'none'}",
            )
        if python.get("engine"):
            put("engine", f"{python['engine']} {python.get('engine_version')}")
        if python.get("kernel_libraries"):
            put("kernels", ", ".join(f"{n} {v}" for n, v in python["kernel_libraries"].items()))
    for entry in document["not_read"]:
        put("not read", f"{entry['what']}: {entry['why']}")
    if document["topology"]:
        lines += ["", "topology (nvidia-smi topo -m)", document["topology"].rstrip()]
    if python and python.get("packages"):
        lines += ["", "installed distributions (importlib.metadata, as pip freeze lists them)", *python["packages"]]
    return "\n".join(lines) + "\n"
