"""GPU readings for ``watch``: the telemetry endpoint of docs/gpu-telemetry.md or NVML, read with capture's code
(:mod:`llmtriage.capture.gpu`), and turned into the GPU facts a diagnosis reads.
"""

from __future__ import annotations

import time
from collections.abc import Iterable
from dataclasses import dataclass

import aiohttp

from llmtriage import catalog
from llmtriage.capture import gpu as capture_gpu
from llmtriage.capture.gpu import GpuProcessRow, GpuRow
from llmtriage.capture.nvml import Nvml
from llmtriage.errors import UsageError
from llmtriage.facts import Citation, GpuFacts, GpuProcess, GpuSample
from llmtriage.urls import check_url
from llmtriage.watch import http

NVML = "nvml"
TELEMETRY_TIMEOUT_S = 3.0


@dataclass(frozen=True, slots=True)
class GpuReading:
    """Every GPU of one source at one moment, or why they could not be read."""

    rows: tuple[GpuRow, ...] = ()
    processes: tuple[GpuProcessRow, ...] = ()
    driver_version: str | None = None
    error: str | None = None


def check_source(value: str) -> str:
    """``nvml`` or an http(s) telemetry URL."""
    if value == NVML:
        return value
    if value.startswith(("http://", "https://")):
        return check_url(value, "--gpu", "e.g. --gpu http://127.0.0.1:8000/llmtriage/gpu")
    raise UsageError(
        f"--gpu {value}: unknown", "give nvml, or a telemetry URL like http://127.0.0.1:8000/llmtriage/gpu"
    )


async def read(session: aiohttp.ClientSession, source: str, nvml: Nvml) -> GpuReading:
    """Read ``source`` once."""
    now_s = time.time()
    if source == NVML:
        why = nvml.start()
        if why is not None:
            return GpuReading(error=why)
        sample = capture_gpu.read_nvml(nvml, now_s)
        error = "; ".join(f"{k}: {v}" for k, v in sample.reasons.items()) if not sample.rows else None
        return GpuReading(tuple(sample.rows), tuple(sample.processes), None, error)
    answer = await http.get(session, source, TELEMETRY_TIMEOUT_S)
    if not answer.ok:
        return GpuReading(error=answer.error or f"HTTP {answer.status}")
    try:
        telemetry = capture_gpu.parse_telemetry(answer.body, now_s)
    except ValueError as e:
        return GpuReading(error=str(e))
    return GpuReading(tuple(telemetry.rows), tuple(telemetry.processes), telemetry.driver_version)


def facts(readings: Iterable[GpuReading], source: str) -> GpuFacts | None:
    """The GPU facts of a diagnosis from the readings of a window (None when none was read)."""
    fields = catalog.nvidia_smi_fields()
    result = GpuFacts(sources=[source])
    for reading in readings:
        if reading.error is not None or not reading.rows:
            continue
        result.driver_version = reading.driver_version or result.driver_version
        for row in reading.rows:
            mask = row.clocks_event_reasons_mask
            result.samples.append(
                GpuSample(
                    index=row.index,
                    name=row.name,
                    timestamp=f"{row.timestamp_s:.3f}",
                    memory_used_mib=row.memory_used_mib,
                    memory_total_mib=row.memory_total_mib,
                    utilization_gpu_pct=row.utilization_gpu_pct,
                    power_draw_w=row.power_draw_w,
                    power_limit_w=row.power_limit_w,
                    temperature_c=row.temperature_c,
                    sm_clock_mhz=row.sm_clock_mhz,
                    sm_clock_max_mhz=row.sm_clock_max_mhz,
                    pstate=row.pstate,
                    clocks_event_reasons=fields.reasons_in_mask(mask) if mask is not None else None,
                    citation=Citation(source=source, excerpt=f"GPU {row.index} at {row.timestamp_s:.0f}"),
                )
            )
        result.processes = [
            GpuProcess(gpu_index=None, pid=p.pid, name=p.name, used_memory_mib=p.used_memory_mib)
            for p in reading.processes
        ]
        result.processes_citation = Citation(source=source, excerpt="compute processes")
    return result if result.samples else None
