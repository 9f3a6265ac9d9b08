"""A real llama.cpp ``llama-server`` on the CPU: built once from the llama.cpp tree that the PyPI sdist of
llama-cpp-python vendors, a tiny GGUF written locally, and servers started and stopped on loopback ports.

Traps handled here (recorded while building it): only the ``llama-server`` target is built (the whole tree
takes far longer on 2 cores); the web UI is neither built nor downloaded (``LLAMA_BUILD_UI`` /
``LLAMA_USE_PREBUILT_UI`` off: its download needs the network at configure time); ``GGML_NATIVE=OFF`` so a
cached binary runs on another x86-64 machine; a static build leaves one self-contained binary. Servers compute on
one thread (``-t 1``): with ggml's threads spinning on both cores of a busy 2-core machine, llama-server stopped
answering /metrics and streams for over a minute under load.
"""

from __future__ import annotations

import hashlib
import os
import re
import shutil
import sys
import tarfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import ClassVar

from llmtriage.errors import UnavailableError
from llmtriage.lab.process import LocalServer, run_logged
from llmtriage.lab.tiny_gguf import TINY_LLAMA, write_tiny_gguf

LLAMA_CPP_PYTHON_VERSION = "0.3.36"
CMAKE_OPTIONS = (
    "-DCMAKE_BUILD_TYPE=Release", "-DGGML_NATIVE=OFF", "-DBUILD_SHARED_LIBS=OFF", "-DGGML_OPENMP=OFF",
    "-DLLAMA_BUILD_TESTS=OFF", "-DLLAMA_BUILD_EXAMPLES=OFF", "-DLLAMA_BUILD_APP=OFF", "-DLLAMA_BUILD_UI=OFF",
    "-DLLAMA_USE_PREBUILT_UI=OFF", "-DLLAMA_CURL=OFF", "-DLLAMA_OPENSSL=OFF",
)  # fmt: skip
BUILD_JOBS = 2
DOWNLOAD_TIMEOUT_S = 600
BUILD_TIMEOUT_S = 1800
READY_TIMEOUT_S = 60
STOP_TIMEOUT_S = 10
SERVED_NAME = "tiny-llama"
_PERCENT = re.compile(rb"^\[ *(\d+)%\]", re.MULTILINE)


def build_status(log: Path, offset: int) -> str:
    """How far the cmake build is, from the last ``[ 42%]`` it wrote to the log after ``offset``."""
    with log.open("rb") as f:
        f.seek(offset)
        done = _PERCENT.findall(f.read())
    return f"{done[-1].decode()}% built" if done else "starting"


def _build_digest() -> str:
    return hashlib.sha256(" ".join((LLAMA_CPP_PYTHON_VERSION, *CMAKE_OPTIONS)).encode()).hexdigest()


def ensure_llama_server(cache: Path, progress: Callable[[str], None] = lambda _: None) -> Path:
    """The path of a ``llama-server`` built from llama-cpp-python's sdist; built once, then reused.

    Only the binary and the build log are kept; the sources and the build tree are removed afterwards.
    """
    root = cache / f"llama-server-{LLAMA_CPP_PYTHON_VERSION}"
    binary = root / "bin" / "llama-server"
    stamp = root / ".llmtriage-build-sha256"
    digest = _build_digest()
    if binary.exists() and stamp.exists() and stamp.read_text() == digest:
        return binary
    for stale in (root / "src", root / "build"):
        shutil.rmtree(stale, ignore_errors=True)
    root.mkdir(parents=True, exist_ok=True)
    log = root / "build.log"
    log.write_text("")
    progress(f"downloading the llama-cpp-python {LLAMA_CPP_PYTHON_VERSION} sdist (~75 MB; log: {log})")
    spec = f"llama-cpp-python=={LLAMA_CPP_PYTHON_VERSION}"
    run_logged([sys.executable, "-m", "pip", "download", "--quiet", "--no-deps", "--no-binary", ":all:", spec,
          "-d", str(root / "src")], DOWNLOAD_TIMEOUT_S, log, "downloading llama-cpp-python")  # fmt: skip
    sdist = next((root / "src").glob("llama_cpp_python-*.tar.gz"), None)
    if sdist is None:
        raise UnavailableError("the llama-cpp-python download holds no sdist", f"see {log}")
    with tarfile.open(sdist) as tar:
        tar.extractall(root / "src", filter="data")
    source = root / "src" / sdist.name.removesuffix(".tar.gz") / "vendor" / "llama.cpp"
    progress(f"building llama-server (CPU, {BUILD_JOBS} jobs; several minutes; log: {log})")
    run_logged(
        ["cmake", "-S", str(source), "-B", str(root / "build"), *CMAKE_OPTIONS], 600, log, "configuring llama.cpp"
    )
    run_logged(
        ["cmake", "--build", str(root / "build"), "--target", "llama-server", "-j", str(BUILD_JOBS)],
        BUILD_TIMEOUT_S,
        log,
        "building llama-server",
        progress,
        status=build_status,
    )
    binary.parent.mkdir(exist_ok=True)
    shutil.copy2(root / "build" / "bin" / "llama-server", binary)
    shutil.rmtree(root / "src")
    shutil.rmtree(root / "build")
    stamp.write_text(digest)
    return binary


def ensure_tiny_gguf(cache: Path) -> Path:
    """The tiny Llama GGUF (lab/tiny_gguf.py) under the cache; written once (its name changes with its shape)."""
    tag = hashlib.sha256(repr(TINY_LLAMA).encode()).hexdigest()[:10]
    path = cache / "models" / f"{SERVED_NAME}-{tag}.gguf"
    return path if path.exists() else write_tiny_gguf(path, TINY_LLAMA, name=SERVED_NAME)


@dataclass(kw_only=True)
class LlamaServer(LocalServer):
    """One real llama-server on 127.0.0.1 with /metrics and /slots on, its output kept in a log file."""

    NAME: ClassVar[str] = "llama-server"
    READY_TIMEOUT_S: ClassVar[float] = READY_TIMEOUT_S
    READY_POLL_S: ClassVar[float] = 0.1
    STOP_TIMEOUT_S: ClassVar[float] = STOP_TIMEOUT_S

    binary: Path
    model: Path
    threads: int = 1

    def command(self) -> list[str]:
        """The launch command line."""
        return [
            str(self.binary), "-m", str(self.model), "--alias", SERVED_NAME, "--host", "127.0.0.1",
            "--port", str(self.port), "--threads", str(self.threads), "--metrics", "--slots", *self.args,
        ]  # fmt: skip

    def environment(self) -> dict[str, str]:
        """The caller's environment without llama.cpp's LLAMA_ARG_* settings, which would override the flags."""
        return {k: v for k, v in os.environ.items() if not k.startswith("LLAMA_ARG_")}
