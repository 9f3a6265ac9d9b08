"""The sources of a capture, in the order they run (an explicit list on purpose).

Launch and environment come first, so the secrets they name are known before the logs are read; llama.cpp's
/slots and /health are read once as the capture starts (the scene as it was called); the sampled sources start
next and run for the duration; the remaining one-shot sources run when the window closes, so the logs they read
cover it. The software stack comes last: it does not change, and its probes (importing torch in the
server's Python) would otherwise compete with the sampling.
"""

from __future__ import annotations

from llmtriage.capture.collector import Collector
from llmtriage.capture.sources.environment import SoftwareStack
from llmtriage.capture.sources.gpu import GpuSamples, NvidiaSmiPerformance, NvidiaSmiTable
from llmtriage.capture.sources.kernel import KernelMessages
from llmtriage.capture.sources.launch import DockerInspect, ProcessCmdline, ProcessEnviron
from llmtriage.capture.sources.llamacpp import LlamaCppState
from llmtriage.capture.sources.logs import DockerLogs, JournalLogs, LogFileTail, ProcessOutputLog
from llmtriage.capture.sources.metrics import MetricsScrapes
from llmtriage.capture.sources.model import ModelConfigJson

COLLECTORS: tuple[type[Collector], ...] = (
    DockerInspect,
    ProcessCmdline,
    ProcessEnviron,
    LlamaCppState,
    MetricsScrapes,
    GpuSamples,
    DockerLogs,
    LogFileTail,
    JournalLogs,
    ProcessOutputLog,
    KernelMessages,
    NvidiaSmiTable,
    NvidiaSmiPerformance,
    ModelConfigJson,
    SoftwareStack,
)
