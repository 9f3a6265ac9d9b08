"""Capacity: will a model start on a GPU under vLLM's own memory accounting, and how fast can it decode.

``resolve_model`` and ``resolve_gpu`` turn names, directories and config files into typed specs;
``fit`` reproduces what vLLM decides at startup (weights, activations, CUDA graphs, the KV budget, the
KV token count and concurrency, and the error it would raise); ``decode_roofline`` gives the
memory-bandwidth ceiling of decoding. Nothing here prints.
"""

from llmtriage.capacity.fit import FitRequest, FitResult, LaunchSettings, fit, suggest
from llmtriage.capacity.gpu import GpuSpec, resolve_gpu
from llmtriage.capacity.model import ModelSpec
from llmtriage.capacity.resolve import resolve_model
from llmtriage.capacity.roofline import Roofline, decode_roofline
from llmtriage.capacity.version import EngineVersion, parse_version

__all__ = [
    "EngineVersion",
    "FitRequest",
    "FitResult",
    "GpuSpec",
    "LaunchSettings",
    "ModelSpec",
    "Roofline",
    "decode_roofline",
    "fit",
    "parse_version",
    "resolve_gpu",
    "resolve_model",
    "suggest",
]
