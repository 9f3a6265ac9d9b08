"""What to capture: the server (one of four ways to point at it), the endpoints, the GPU source, how long."""

from __future__ import annotations

import re
from dataclasses import dataclass
from enum import StrEnum
from pathlib import Path

from llmtriage.errors import UsageError

DEFAULT_MAX_TOTAL_BYTES = 256 << 20
DEFAULT_LOG_TAIL_LINES = 20_000


@dataclass(frozen=True, slots=True)
class Container:
    """A Docker container, by name or id."""

    name: str


@dataclass(frozen=True, slots=True)
class LogFile:
    """A log file the server writes."""

    path: Path


@dataclass(frozen=True, slots=True)
class JournalUnit:
    """A systemd unit whose journal holds the server's log."""

    unit: str


@dataclass(frozen=True, slots=True)
class Process:
    """A running server process."""

    pid: int


Target = Container | LogFile | JournalUnit | Process


class GpuMode(StrEnum):
    """Where GPU telemetry comes from."""

    auto = "auto"  # NVML, else nvidia-smi
    nvml = "nvml"
    nvidia_smi = "nvidia-smi"
    url = "url"  # a telemetry endpoint (docs/gpu-telemetry.md)


@dataclass(frozen=True, slots=True)
class CapturePlan:
    """One capture. ``duration_s`` 0 takes a single sample of each series. ``python`` is the server's Python
    interpreter when it cannot be found from ``/proc/PID`` (a container, a log file): the stack is read with it."""

    out_dir: Path
    target: Target | None = None
    metrics_url: str | None = None
    gpu: GpuMode = GpuMode.auto
    gpu_url: str | None = None
    duration_s: float = 30.0
    interval_s: float = 1.0
    label: str | None = None
    max_total_bytes: int = DEFAULT_MAX_TOTAL_BYTES
    log_tail_lines: int = DEFAULT_LOG_TAIL_LINES
    python: Path | None = None

    def __post_init__(self) -> None:
        if self.duration_s < 0:
            raise UsageError("--duration must not be negative")
        if self.interval_s <= 0:
            raise UsageError("--interval must be more than 0", "e.g. --interval 1s or 500ms")
        if (self.gpu is GpuMode.url) != (self.gpu_url is not None):
            raise UsageError("a GPU telemetry URL goes with GPU mode 'url'")
        if self.max_total_bytes <= 0:
            raise UsageError("the size cap must be more than 0 bytes")

    def name(self) -> str:
        """The label of the bundle: --label, else what the target is called, else 'capture'."""
        if self.label:
            return safe_name(self.label)
        match self.target:
            case Container(name=name):
                return safe_name(name)
            case LogFile(path=path):
                return safe_name(path.stem)
            case JournalUnit(unit=unit):
                return safe_name(unit.removesuffix(".service"))
            case Process(pid=pid):
                return f"pid{pid}"
        return "capture"


def parse_gpu(value: str) -> tuple[GpuMode, str | None]:
    """``--gpu auto|nvml|nvidia-smi|URL`` -> the mode and the URL when it is one."""
    if value.startswith(("http://", "https://")):
        return GpuMode.url, value
    try:
        mode = GpuMode(value)
    except ValueError:
        raise UsageError(f"--gpu {value}: unknown", "use auto, nvml, nvidia-smi or an http:// telemetry URL") from None
    if mode is GpuMode.url:
        raise UsageError("--gpu url needs the URL itself", "e.g. --gpu http://127.0.0.1:8000/llmtriage/gpu")
    return mode, None


def safe_name(text: str) -> str:
    """``text`` as a file name: letters, digits, ``._-``; at most 64 characters."""
    cleaned = re.sub(r"[^A-Za-z0-9._-]+", "-", text).strip("-.")
    return cleaned[:64] or "capture"
