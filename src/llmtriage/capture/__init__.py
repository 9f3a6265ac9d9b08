"""``llmtriage capture``: keep the scene before anyone restarts.

Collects a server's logs, launch arguments and environment, /metrics time series, GPU samples and processes,
kernel messages, the model's config.json and the software stack (driver, CUDA, torch, engine) into one redacted
bundle (the layout ``evidence.bundle`` reads),
with a manifest of every source tried. Read-only on the server; safe to interrupt at any moment.
"""

from __future__ import annotations

from llmtriage.capture.plan import CapturePlan, Container, GpuMode, JournalUnit, LogFile, Process, Target, parse_gpu
from llmtriage.capture.session import CaptureResult, StopSignal, capture

__all__ = [
    "CapturePlan",
    "CaptureResult",
    "Container",
    "GpuMode",
    "JournalUnit",
    "LogFile",
    "Process",
    "StopSignal",
    "Target",
    "capture",
    "parse_gpu",
]
