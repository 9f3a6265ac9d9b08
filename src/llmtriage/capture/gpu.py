"""GPU samples as ``nvidia-smi --query-gpu`` rows, whichever way they were read (NVML, the telemetry JSON of
docs/gpu-telemetry.md), so ``gpu/samples.csv`` and ``gpu/processes.csv`` read back with the one CSV parser.
Column names come from catalog/nvidia_smi.yaml (the first alias of each column); unknown is ``[N/A]``.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from llmtriage import catalog
from llmtriage.capture.nvml import Nvml, Reading

_MIB = float(1 << 20)
_NOT_KNOWN = "[N/A]"


@dataclass(frozen=True, slots=True)
class GpuRow:
    """One GPU at one moment. None is unknown (written ``[N/A]``), never 0."""

    timestamp_s: float
    index: int | None
    name: str | None
    memory_used_mib: float | None
    """Framebuffer memory in use, MiB (``memory.used``)."""
    memory_total_mib: float | None
    """Framebuffer memory, MiB (``memory.total``)."""
    utilization_gpu_pct: float | None
    """Share of the last sample period a kernel ran, % (``utilization.gpu``)."""
    power_draw_w: float | None
    """Board power draw, W (``power.draw``)."""
    power_limit_w: float | None
    """Enforced power limit, W (``enforced.power.limit``)."""
    temperature_c: float | None
    """GPU core temperature, °C (``temperature.gpu``)."""
    sm_clock_mhz: float | None
    """Current SM clock, MHz (``clocks.current.sm``)."""
    sm_clock_max_mhz: float | None
    """Maximum SM clock, MHz (``clocks.max.sm``)."""
    pstate: str | None
    """Performance state, P0 (fastest) to P12 (``pstate``)."""
    clocks_event_reasons_mask: int | None
    """NVML's clocks event (throttle) reasons bitmask (``clocks_event_reasons.active``)."""


@dataclass(frozen=True, slots=True)
class GpuProcessRow:
    """A process with a CUDA context on a GPU (``--query-compute-apps``)."""

    pid: int | None
    name: str
    used_memory_mib: float | None
    gpu_uuid: str | None


# Field -> (unit in the header, how nvidia-smi prints a value) for the --query-gpu columns we write.
_FORMATS: dict[str, tuple[str, Callable[[Any], str]]] = {
    "timestamp": ("", lambda s: time.strftime("%Y/%m/%d %H:%M:%S", time.localtime(s)) + f".{int(s * 1000) % 1000:03d}"),
    "index": ("", str),
    "name": ("", str),
    "memory_used_mib": ("MiB", lambda v: f"{v:.0f} MiB"),
    "memory_total_mib": ("MiB", lambda v: f"{v:.0f} MiB"),
    "utilization_gpu_pct": ("%", lambda v: f"{v:.0f} %"),
    "power_draw_w": ("W", lambda v: f"{v:.2f} W"),
    "power_limit_w": ("W", lambda v: f"{v:.2f} W"),
    "temperature_c": ("", lambda v: f"{v:.0f}"),
    "sm_clock_mhz": ("MHz", lambda v: f"{v:.0f} MHz"),
    "sm_clock_max_mhz": ("MHz", lambda v: f"{v:.0f} MHz"),
    "pstate": ("", str),
    "clocks_event_reasons_mask": ("", lambda v: f"0x{v:016x}"),
}


def query_gpu_fields() -> list[str]:
    """The ``--query-gpu=`` field names, in column order (the catalog's first alias of each column)."""
    columns = catalog.nvidia_smi_fields().query_gpu_columns
    return [columns[key][0] for key in _FORMATS]


def query_compute_apps_fields() -> list[str]:
    """The ``--query-compute-apps=`` field names: pid, process name, used memory, GPU UUID."""
    columns = catalog.nvidia_smi_fields().query_compute_apps_columns
    return [columns[key][0] for key in ("pid", "name", "used_memory_mib", "gpu")]


def samples_csv(rows: Sequence[GpuRow]) -> str:
    """``rows`` as ``nvidia-smi --query-gpu=... --format=csv`` prints them, header first."""
    header = []
    for field_name, name in zip(_FORMATS, query_gpu_fields(), strict=True):
        unit = _FORMATS[field_name][0]
        header.append(f"{name} [{unit}]" if unit else name)
    lines = [", ".join(header)]
    for row in rows:
        cells = []
        for field_name, (_, show) in _FORMATS.items():
            value = row.timestamp_s if field_name == "timestamp" else getattr(row, field_name)
            cells.append(_NOT_KNOWN if value is None else _csv_cell(show(value)))
        lines.append(", ".join(cells))
    return "\n".join(lines) + "\n"


def processes_csv(processes: Sequence[GpuProcessRow]) -> str:
    """``processes`` as ``nvidia-smi --query-compute-apps=... --format=csv`` prints them."""
    pid, name, used, uuid = query_compute_apps_fields()
    lines = [f"{pid}, {name}, {used} [MiB], {uuid}"]
    for p in processes:
        memory = _NOT_KNOWN if p.used_memory_mib is None else f"{p.used_memory_mib:.0f} MiB"
        shown_pid = _NOT_KNOWN if p.pid is None else str(p.pid)
        lines.append(f"{shown_pid}, {_csv_cell(p.name)}, {memory}, {p.gpu_uuid or _NOT_KNOWN}")
    return "\n".join(lines) + "\n"


def _csv_cell(text: str) -> str:
    return f'"{text.replace(chr(34), chr(34) * 2)}"' if any(c in text for c in ',"\n') else text


# ---------------------------------------------------------------- the telemetry endpoint (docs/gpu-telemetry.md)


@dataclass(frozen=True, slots=True)
class Telemetry:
    """One answer of ``GET /llmtriage/gpu``."""

    rows: list[GpuRow]
    processes: list[GpuProcessRow]
    driver_version: str | None


def parse_telemetry(body: bytes, received_s: float) -> Telemetry:
    """Read the telemetry JSON; raises ValueError with the reason when it is not that document."""
    try:
        doc = json.loads(body)
    except (json.JSONDecodeError, UnicodeDecodeError) as e:
        raise ValueError(f"not JSON: {e}") from e
    if not isinstance(doc, dict) or not isinstance(doc.get("gpus"), list):
        raise ValueError("not a GPU telemetry document (no 'gpus' list)")
    stamp = _number(doc.get("timestamp_s"))
    timestamp_s = received_s if stamp is None else stamp
    rows: list[GpuRow] = []
    processes: list[GpuProcessRow] = []
    for gpu in doc["gpus"]:
        if not isinstance(gpu, dict):
            continue
        used = _number(gpu.get("memory_used_bytes"))
        total = _number(gpu.get("memory_total_bytes"))
        mask = gpu.get("clocks_event_reasons_mask")
        pstate = gpu.get("pstate")
        rows.append(
            GpuRow(
                timestamp_s=timestamp_s,
                index=_integer(gpu.get("index")),
                name=str(gpu["name"]) if gpu.get("name") is not None else None,
                memory_used_mib=None if used is None else used / _MIB,
                memory_total_mib=None if total is None else total / _MIB,
                utilization_gpu_pct=_number(gpu.get("utilization_gpu_pct")),
                power_draw_w=_number(gpu.get("power_draw_w")),
                power_limit_w=_number(gpu.get("power_limit_w")),
                temperature_c=_number(gpu.get("temperature_c")),
                sm_clock_mhz=_number(gpu.get("sm_clock_mhz")),
                sm_clock_max_mhz=_number(gpu.get("sm_clock_max_mhz")),
                pstate=str(pstate) if pstate is not None else None,
                clocks_event_reasons_mask=mask if isinstance(mask, int) and not isinstance(mask, bool) else None,
            )
        )
        for proc in gpu.get("processes") or []:
            if isinstance(proc, dict):
                memory = _number(proc.get("used_memory_bytes"))
                processes.append(
                    GpuProcessRow(
                        pid=_integer(proc.get("pid")),
                        name=str(proc.get("name") or ""),
                        used_memory_mib=None if memory is None else memory / _MIB,
                        gpu_uuid=str(gpu["uuid"]) if gpu.get("uuid") else None,
                    )
                )
    driver = doc.get("driver_version")
    return Telemetry(rows=rows, processes=processes, driver_version=str(driver) if driver is not None else None)


def _number(value: Any) -> float | None:
    return float(value) if isinstance(value, int | float) and not isinstance(value, bool) else None


def _integer(value: Any) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None


# ---------------------------------------------------------------- NVML


@dataclass(slots=True)
class NvmlSample:
    """One NVML pass over every GPU, with the reason of each field that could not be read."""

    rows: list[GpuRow]
    processes: list[GpuProcessRow]
    reasons: dict[str, str]


def read_nvml(nvml: Nvml, now_s: float) -> NvmlSample:
    """Read every GPU once through the chokepoint; what fails is None with its reason."""
    reasons: dict[str, str] = {}

    def value(label: str, reading: Reading[Any]) -> Any:
        if reading.reason is not None:
            reasons.setdefault(label, reading.reason)
        return reading.value

    count = value("device count", nvml.query("nvmlDeviceGetCount")) or 0
    rows: list[GpuRow] = []
    processes: list[GpuProcessRow] = []
    for index in range(count):
        handle = value(f"GPU {index}", nvml.query("nvmlDeviceGetHandleByIndex", index))
        if handle is None:
            continue
        memory = value("memory.used", nvml.query("nvmlDeviceGetMemoryInfo", handle))
        utilization = value("utilization.gpu", nvml.query("nvmlDeviceGetUtilizationRates", handle))
        power_mw = value("power.draw", nvml.query("nvmlDeviceGetPowerUsage", handle))
        limit_mw = value("enforced.power.limit", nvml.query("nvmlDeviceGetEnforcedPowerLimit", handle))
        pstate = value("pstate", nvml.query("nvmlDeviceGetPerformanceState", handle))
        mask = nvml.query("nvmlDeviceGetCurrentClocksEventReasons", handle)
        if mask.value is None:
            mask = nvml.query("nvmlDeviceGetCurrentClocksThrottleReasons", handle)
        rows.append(
            GpuRow(
                timestamp_s=now_s,
                index=index,
                name=value("name", nvml.query("nvmlDeviceGetName", handle)),
                memory_used_mib=None if memory is None else memory.used / _MIB,
                memory_total_mib=None if memory is None else memory.total / _MIB,
                utilization_gpu_pct=None if utilization is None else float(utilization.gpu),
                power_draw_w=None if power_mw is None else power_mw / 1000.0,
                power_limit_w=None if limit_mw is None else limit_mw / 1000.0,
                temperature_c=value(
                    "temperature.gpu",
                    nvml.query("nvmlDeviceGetTemperature", handle, nvml.constant("NVML_TEMPERATURE_GPU")),
                ),
                sm_clock_mhz=value(
                    "clocks.current.sm", nvml.query("nvmlDeviceGetClockInfo", handle, nvml.constant("NVML_CLOCK_SM"))
                ),
                sm_clock_max_mhz=value(
                    "clocks.max.sm", nvml.query("nvmlDeviceGetMaxClockInfo", handle, nvml.constant("NVML_CLOCK_SM"))
                ),
                pstate=None if pstate is None or pstate == nvml.constant("NVML_PSTATE_UNKNOWN") else f"P{pstate}",
                clocks_event_reasons_mask=value("clocks_event_reasons.active", mask),
            )
        )
        uuid = value("uuid", nvml.query("nvmlDeviceGetUUID", handle))
        for proc in value("compute processes", nvml.query("nvmlDeviceGetComputeRunningProcesses", handle)) or []:
            name = nvml.query("nvmlSystemGetProcessName", proc.pid).value
            used = proc.usedGpuMemory
            processes.append(
                GpuProcessRow(
                    pid=proc.pid,
                    name=str(name or ""),
                    used_memory_mib=None if used is None else used / _MIB,
                    gpu_uuid=uuid,
                )
            )
    return NvmlSample(rows=rows, processes=processes, reasons=reasons)


def nvml_versions(nvml: Nvml) -> str:
    """``driver X, CUDA Y`` as NVML reports them (unknown parts say so)."""
    driver = nvml.query("nvmlSystemGetDriverVersion").value
    cuda = nvml.query("nvmlSystemGetCudaDriverVersion").value
    cuda_text = f"{cuda // 1000}.{cuda % 1000 // 10}" if isinstance(cuda, int) else "unknown"
    return f"driver {driver or 'unknown'}, CUDA {cuda_text}"
