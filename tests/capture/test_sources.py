"""Each source, replaying real recorded outputs through the runner seam; failures recorded, never fatal."""

from __future__ import annotations

import json
import threading
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from llmtriage.capture import CapturePlan, Container, GpuMode, JournalUnit, LogFile, StopSignal, capture
from llmtriage.capture.manifest import SourceRow, Status
from llmtriage.capture.nvml import Nvml
from llmtriage.capture.runner import CommandResult, Recording, ReplayRunner
from llmtriage.capture.session import CaptureResult
from llmtriage.capture.sources import COLLECTORS
from llmtriage.capture.sources.gpu import _older_name
from llmtriage.capture.sources.kernel import KernelMessages
from llmtriage.diagnose.engine import diagnose
from llmtriage.evidence.bundle import read_evidence
from llmtriage.parse import nvidia_smi

from .conftest import DMESG, NVIDIA_SMI, VLLM_LOGS, LoopbackServer, fixture_output, recorded

FAULT_B = VLLM_LOGS / "fault-b-kv-cache-too-small.log"


def run(tmp_path: Path, recordings: Mapping[tuple[str, ...], Recording], **plan: Any) -> CaptureResult:
    """A one-moment capture (duration 0) with replayed commands; nvidia-smi mode unless the plan says."""
    plan.setdefault("gpu", GpuMode.nvidia_smi)
    return capture(
        CapturePlan(out_dir=tmp_path / "out", duration_s=plan.pop("duration_s", 0.0), interval_s=0.2, **plan),
        runner=ReplayRunner(recordings),
    )


def source(result: CaptureResult, name: str) -> SourceRow:
    return next(r for r in result.manifest.sources if r.name == name)


def manifest_on_disk(result: CaptureResult) -> dict[str, Any]:
    data: dict[str, Any] = json.loads((result.path / "manifest.json").read_text())
    return data


DMESG_FILES = sorted(DMESG.glob("*.txt"))


@pytest.mark.parametrize("path", DMESG_FILES, ids=[p.name for p in DMESG_FILES])
def test_kernel_messages_replayed_read_back(tmp_path: Path, path: Path) -> None:
    output = fixture_output(path)
    result = run(tmp_path, {("dmesg", "-T"): output})
    kernel = source(result, "kernel")
    assert kernel.status is Status.ok and [c.argv for c in kernel.commands] == [["dmesg", "-T"]]
    assert (result.path / "kernel" / "dmesg.txt").read_bytes() == output.stdout
    assert read_evidence(result.path).kernel is not None
    assert read_evidence(result.path).kernel.events  # type: ignore[union-attr]


def test_dmesg_denied_falls_back_to_the_journal(tmp_path: Path) -> None:
    journal = fixture_output(DMESG / "dmesg-xid-1.txt")  # syslog-form kernel lines, as journalctl -k prints them
    result = run(tmp_path, {("dmesg", "-T"): recorded("dmesg-T-unprivileged"), ("journalctl", "-k", "*"): journal})
    kernel = source(result, "kernel")
    assert kernel.status is Status.ok
    assert kernel.reason == "dmesg -T: exit code 1: dmesg: read kernel buffer failed: Operation not permitted"
    assert [c.status for c in kernel.commands] == [Status.failed, Status.ok]
    assert (result.path / "kernel" / "dmesg.txt").read_bytes() == journal.stdout


def test_unreadable_kernel_log_is_recorded_and_the_rest_goes_on(tmp_path: Path) -> None:
    result = run(
        tmp_path,
        {
            ("dmesg", "-T"): recorded("dmesg-T-unprivileged"),
            ("journalctl", "-k", "*"): recorded("journalctl-k-no-journal"),
        },
        target=LogFile(FAULT_B),
    )
    kernel = source(result, "kernel")
    assert kernel.status is Status.failed
    assert kernel.reason == (
        "dmesg -T: exit code 1: dmesg: read kernel buffer failed: Operation not permitted; "
        "journalctl -k: no messages (No journal files were found.)"
    )
    assert source(result, "logs.file").status is Status.ok
    evidence = read_evidence(result.path)
    assert any(p.source == "kernel" and "Operation not permitted" in p.message for p in evidence.problems)
    diagnosis = diagnose(evidence)
    assert diagnosis.symptom_class == "startup_oom"
    assert diagnosis.causes[0].id == "kv_cache_too_small_for_max_model_len"


def test_docker_without_an_engine(tmp_path: Path) -> None:
    recordings: dict[tuple[str, ...], Recording] = {
        ("docker", "inspect", "*"): recorded("docker-inspect-no-daemon"),
        ("docker", "logs", "*"): recorded("docker-logs-no-daemon"),
    }
    result = run(tmp_path, recordings, target=Container("vllm"))
    daemon = "Cannot connect to the Docker daemon at unix:///var/run/docker.sock. Is the docker daemon running?"
    assert source(result, "launch.docker").reason == f"exit code 1: {daemon}"
    assert source(result, "logs.docker").reason == f"exit code 1: {daemon}"
    assert source(result, "model.config").status is Status.skipped
    assert not (result.path / "logs").exists()
    assert manifest_on_disk(result)["partial"] is False


def test_journal_without_entries(tmp_path: Path) -> None:
    result = run(tmp_path, {("journalctl", "-u", "*"): recorded("journalctl-u-no-journal")}, target=JournalUnit("vllm"))
    journal = source(result, "logs.journal")
    assert journal.status is Status.failed
    assert journal.reason == "no journal entries for vllm (No journal files were found.)"


def test_journal_log_is_diagnosed(tmp_path: Path) -> None:
    log = Recording(stdout=(VLLM_LOGS / "fault-d-port-in-use.log").read_bytes())
    result = run(tmp_path, {("journalctl", "-u", "*"): log}, target=JournalUnit("vllm.service"))
    assert (result.path / "logs" / "journal-vllm.service.log").read_bytes() == log.stdout
    diagnosis = diagnose(read_evidence(result.path))
    assert (diagnosis.symptom_class, diagnosis.causes[0].id) == ("startup_failure", "port_in_use")


@pytest.mark.parametrize(
    ("table", "performance"),
    [
        ("nvidia-smi-table-1.txt", "nvidia-smi-q-performance-1.txt"),
        ("nvidia-smi-table-4.txt", "nvidia-smi-q-performance-3.txt"),
    ],
)
def test_nvidia_smi_outputs_are_kept_and_read_back(tmp_path: Path, table: str, performance: str) -> None:
    recordings = {
        ("nvidia-smi",): fixture_output(NVIDIA_SMI / table),
        ("nvidia-smi", "-q", "-d", "PERFORMANCE"): fixture_output(NVIDIA_SMI / performance),
    }
    result = run(tmp_path, recordings)
    assert source(result, "gpu.table").status is Status.ok
    assert source(result, "gpu.performance").status is Status.ok
    # No real --query-gpu output was recorded (no GPU here): the replay has none, so that source fails.
    assert source(result, "gpu.samples").reason == "nvidia-smi: command not found"
    gpu = read_evidence(result.path).gpu
    assert gpu is not None and gpu.snapshot and gpu.driver_version
    assert gpu.active_reasons


def test_an_older_driver_gets_the_older_field_name() -> None:
    # nvidia-smi's answer to a field it does not know (drivers before the clocks_event_reasons rename).
    refused = CommandResult(
        ("nvidia-smi",), 2, b'Field "clocks_event_reasons.active" is not a valid field to query.\n', b"", 0.0
    )
    fields = ["timestamp", "clocks_event_reasons.active"]
    assert _older_name(refused, fields) == ["timestamp", "clocks_throttle_reasons.active"]
    assert _older_name(CommandResult(("nvidia-smi",), 0, b"ok", b"", 0.0), fields) is None


@pytest.mark.skipif(Nvml().start() is None, reason="this host has a working NVML")
def test_nvml_unavailable_here_is_recorded(tmp_path: Path) -> None:
    nvml_only = run(tmp_path / "a", {}, gpu=GpuMode.nvml)
    reason = source(nvml_only, "gpu.samples").reason or ""
    assert reason == "NVML init failed: NVMLError_LibraryNotFound: NVML Shared Library Not Found"
    auto = run(tmp_path / "b", {}, gpu=GpuMode.auto)
    assert source(auto, "gpu.samples").reason == f"nvidia-smi: command not found; tried NVML first: {reason}"


@dataclass
class _Memory:
    used: int
    total: int


@dataclass
class _Utilization:
    gpu: int


@dataclass
class _Process:
    pid: int
    usedGpuMemory: int | None  # NVML's own name


class StubNvmlLibrary:
    """nvidia-ml-py's API answering with the values of the real table tests/fixtures/nvidia-smi/nvidia-smi-table-1.txt
    (GRID K520, driver 418.87.00: 46 MiB of 4037 MiB, 0 %, 17 W of 125 W, 30 C, P8, one process of 35 MiB);
    what that table does not show (clocks, UUID, clocks event reasons) answers "Not Supported"."""

    class NVMLError(Exception):
        pass

    NVML_TEMPERATURE_GPU = 0
    NVML_CLOCK_SM = 1
    NVML_PSTATE_UNKNOWN = 32

    def _not_supported(self, *_: object) -> None:
        raise self.NVMLError("Not Supported")

    nvmlDeviceGetClockInfo = nvmlDeviceGetMaxClockInfo = nvmlDeviceGetUUID = _not_supported
    nvmlDeviceGetCurrentClocksEventReasons = nvmlDeviceGetCurrentClocksThrottleReasons = _not_supported

    def nvmlInit(self) -> None: ...
    def nvmlShutdown(self) -> None: ...
    def nvmlDeviceGetCount(self) -> int:
        return 1

    def nvmlDeviceGetHandleByIndex(self, index: int) -> str:
        return f"handle-{index}"

    def nvmlDeviceGetName(self, _: str) -> str:
        return "GRID K520"

    def nvmlDeviceGetMemoryInfo(self, _: str) -> _Memory:
        return _Memory(46 << 20, 4037 << 20)

    def nvmlDeviceGetUtilizationRates(self, _: str) -> _Utilization:
        return _Utilization(0)

    def nvmlDeviceGetPowerUsage(self, _: str) -> int:
        return 17_000

    def nvmlDeviceGetEnforcedPowerLimit(self, _: str) -> int:
        return 125_000

    def nvmlDeviceGetTemperature(self, _: str, sensor: int) -> int:
        return 30

    def nvmlDeviceGetPerformanceState(self, _: str) -> int:
        return 8

    def nvmlDeviceGetComputeRunningProcesses(self, _: str) -> list[_Process]:
        return [_Process(8351, 35 << 20)]

    def nvmlSystemGetProcessName(self, pid: int) -> str:
        return "/usr/bin/python3.6"

    def nvmlSystemGetDriverVersion(self) -> str:
        return "418.87.00"

    def nvmlSystemGetCudaDriverVersion(self) -> int:
        return 10010


def test_nvml_readings_are_written_as_query_gpu_csv(tmp_path: Path) -> None:
    plan = CapturePlan(out_dir=tmp_path, gpu=GpuMode.nvml, duration_s=0.3, interval_s=0.1)
    result = capture(plan, runner=ReplayRunner({}), nvml=Nvml(StubNvmlLibrary()))
    row = source(result, "gpu.samples")
    assert row.status is Status.ok and row.samples is not None and 2 <= row.samples <= 4
    assert "NVML: driver 418.87.00, CUDA 10.1" in (row.reason or "")
    assert "clocks.current.sm: nvmlDeviceGetClockInfo: NVMLError: Not Supported" in (row.reason or "")
    parsed = nvidia_smi.parse_csv((result.path / "gpu" / "samples.csv").read_text(), "samples.csv")
    assert not parsed.problems and len(parsed.samples) == row.samples
    first = parsed.samples[0]
    assert (first.name, first.memory_used_mib, first.memory_total_mib, first.utilization_gpu_pct) == (
        "GRID K520",
        46,
        4037,
        0,
    )
    assert (first.power_draw_w, first.power_limit_w, first.temperature_c, first.pstate) == (17, 125, 30, "P8")
    assert first.sm_clock_mhz is None and first.clocks_event_reasons is None
    processes = nvidia_smi.parse_csv((result.path / "gpu" / "processes.csv").read_text(), "processes.csv").processes
    assert [(p.pid, p.name, p.used_memory_mib) for p in processes] == [(8351, "/usr/bin/python3.6", 35)]


def test_size_cap_cuts_at_a_line_and_says_so(tmp_path: Path) -> None:
    log = VLLM_LOGS / "fault-c-kv-pressure.log"
    result = run(tmp_path, {}, target=LogFile(log), max_total_bytes=10_000)
    written = (result.path / "logs" / log.name).read_bytes()
    assert 0 < len(written) <= 10_000 and written.endswith(b"\n") and log.read_bytes().startswith(written)
    manifest = manifest_on_disk(result)
    assert manifest["size_cap_reached"] is True and manifest["total_bytes"] == len(written)
    assert source(result, "logs.file").files[0].truncated
    assert read_evidence(result.path).logs is not None


def test_stop_mid_capture_leaves_a_partial_readable_bundle(tmp_path: Path, loopback: LoopbackServer) -> None:
    stop = StopSignal()
    plan = CapturePlan(
        out_dir=tmp_path,
        target=LogFile(FAULT_B),
        metrics_url=loopback.base_url + "/metrics",
        duration_s=30,
        interval_s=0.2,
    )
    threading.Timer(1.0, stop.set, args=("SIGTERM",)).start()
    result = capture(plan, runner=ReplayRunner({}), nvml=Nvml(StubNvmlLibrary()), stop=stop)
    manifest = manifest_on_disk(result)
    assert manifest["partial"] is True and manifest["interrupted_by"] == "SIGTERM"
    assert manifest["duration_s"] < 10
    assert [p.name for p in tmp_path.iterdir()] == [result.path.name]  # renamed: no temp directory left
    scrapes = sorted((result.path / "metrics").glob("scrape-*.prom"))
    assert 2 <= len(scrapes) == source(result, "metrics").samples
    assert (result.path / "gpu" / "samples.csv").is_file()
    evidence = read_evidence(result.path)
    assert evidence.metrics is not None and len(evidence.metrics.snapshots) == len(scrapes)


def test_a_crashing_collector_is_isolated(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    def crash(self: KernelMessages, *_: object) -> None:
        raise RuntimeError("planted bug")

    monkeypatch.setattr(KernelMessages, "collect", crash)
    result = run(tmp_path, {}, target=LogFile(FAULT_B))
    assert source(result, "kernel").reason == "internal error: RuntimeError: planted bug"
    assert source(result, "logs.file").status is Status.ok


def test_manifest_has_every_source_and_the_run(tmp_path: Path) -> None:
    result = run(
        tmp_path,
        {("dmesg", "-T"): fixture_output(DMESG / "dmesg-xid-2.txt")},
        target=LogFile(FAULT_B),
        label="incident 42",
    )
    manifest = manifest_on_disk(result)
    assert manifest["schema_version"] == 1 and manifest["tool"] == "llmtriage" and manifest["tool_version"]
    assert manifest["host"] and manifest["started_at"].endswith("Z") and manifest["ended_at"].endswith("Z")
    assert manifest["label"] == "incident-42" and result.path.name.startswith("incident-42-")
    assert [s["name"] for s in manifest["sources"]] == [c.name for c in COLLECTORS]
    for row in manifest["sources"]:
        assert row["status"] in ("ok", "failed", "skipped") and row["duration_s"] >= 0
        assert row["status"] == "ok" or row["reason"]
    assert manifest["plan"]["target"] == {"log_file": str(FAULT_B)}
    assert manifest["redactions"] == {}
