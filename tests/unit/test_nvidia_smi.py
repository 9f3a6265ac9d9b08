"""nvidia-smi parsing on real outputs from public threads (tests/fixtures/nvidia-smi)."""

from __future__ import annotations

from llmtriage.parse.nvidia_smi import parse_csv, parse_query, parse_table

from ..conftest import FIXTURES

SMI = FIXTURES / "nvidia-smi"


def _table(n: int):  # type: ignore[no-untyped-def]
    path = SMI / f"nvidia-smi-table-{n}.txt"
    return parse_table(path.read_text(), path.name)


def test_old_layout_with_a_process_row() -> None:
    t = _table(1)
    assert t.driver_version == "418.87.00" and t.cuda_version == "10.1"
    (gpu,) = t.gpus
    assert (gpu.name, gpu.memory_used_mib, gpu.memory_total_mib, gpu.power_draw_w, gpu.power_limit_w) == (
        "GRID K520",
        46.0,
        4037.0,
        17.0,
        125.0,
    )
    assert gpu.temperature_c == 30.0 and gpu.pstate == "P8" and gpu.utilization_gpu_pct == 0.0
    (proc,) = t.processes
    assert (proc.gpu_index, proc.pid, proc.name, proc.used_memory_mib, proc.process_type) == (
        0,
        8351,
        "/usr/bin/python3.6",
        35.0,
        "C",
    )


def test_no_running_processes() -> None:
    t = _table(2)
    assert t.processes_seen and t.processes == []
    assert t.cuda_version is None
    assert t.gpus[0].utilization_gpu_pct == 100.0


def test_new_layout_two_gpus() -> None:
    t = _table(3)
    assert [g.name for g in t.gpus] == ["NVIDIA H100 80GB HBM3"] * 2
    assert [g.memory_total_mib for g in t.gpus] == [81559.0, 81559.0]
    assert t.gpus[1].temperature_c == 26.0
    assert t.cuda_version == "13.0"


def test_fan_percent_and_load() -> None:
    (gpu,) = _table(4).gpus
    assert (gpu.power_draw_w, gpu.power_limit_w, gpu.utilization_gpu_pct, gpu.memory_used_mib) == (
        512.0,
        575.0,
        99.0,
        17480.0,
    )


def test_error_text_is_not_a_table() -> None:
    t = parse_table("Unable to determine the device handle for GPU 0000:0B:00.0: Unknown Error\n", "smi.txt")
    assert t.gpus == [] and t.problems


def test_old_throttle_heading() -> None:
    q = parse_query((SMI / "nvidia-smi-q-performance-1.txt").read_text(), "q1")
    assert q.driver_version == "495.44"
    assert q.active_reasons() == {0: ("gpu_idle",)}
    assert q.gpus[0].get("Performance State") == "P0"


def test_new_event_reasons_heading_with_counters() -> None:
    q = parse_query((SMI / "nvidia-smi-q-performance-2.txt").read_text(), "q2")
    assert q.active_reasons() == {0: ()}
    assert q.gpus[0].get("Clocks Event Reasons Counters/SW Power Capping") == "1202176 us"


def test_grep_copy_without_gpu_header() -> None:
    q = parse_query((SMI / "nvidia-smi-q-performance-3.txt").read_text(), "q3")
    assert q.active_reasons() == {0: ("gpu_idle",)}


def test_query_gpu_csv_units_na_and_reason_mask() -> None:
    text = (
        "timestamp, index, name, memory.used [MiB], memory.total [MiB], utilization.gpu [%], power.draw [W],"
        " clocks.sm [MHz], clocks.max.sm [MHz], clocks_event_reasons.active\n"
        "2026/11/29 10:00:00.000, 0, NVIDIA H100 80GB HBM3, 70000 MiB, 81559 MiB, 98 %, [N/A], 1100 MHz, 1980 MHz,"
        " 0x0000000000000044\n"
    )
    (s,) = parse_csv(text, "samples.csv").samples
    assert s.power_draw_w is None
    assert (s.memory_used_mib, s.sm_clock_mhz, s.sm_clock_max_mhz) == (70000.0, 1100.0, 1980.0)
    assert s.clocks_event_reasons == ("sw_power_cap", "hw_thermal_slowdown")


def test_compute_apps_csv_and_ragged_rows() -> None:
    facts = parse_csv("pid, process_name, used_gpu_memory [MiB]\n123, VLLM::EngineCore, 70000 MiB\n", "p.csv")
    assert [(p.pid, p.name, p.used_memory_mib) for p in facts.processes] == [(123, "VLLM::EngineCore", 70000.0)]
    bad = parse_csv("index, memory.used [MiB]\n0, 1 MiB, extra\n", "bad.csv")
    assert bad.samples == [] and bad.problems
