"""Kernel log parsing on real dmesg/journalctl outputs from public threads."""

from __future__ import annotations

from llmtriage.parse.dmesg import parse_dmesg

from ..conftest import FIXTURES


def _parse(n: int):  # type: ignore[no-untyped-def]
    path = FIXTURES / "dmesg" / f"dmesg-xid-{n}.txt"
    # The first line of each fixture is its provenance note, not kernel output.
    text = path.read_text().split("\n", 1)[1]
    return parse_dmesg(text, path.name)


def test_xid_79_and_fallen_off_the_bus() -> None:
    events = _parse(1).events
    assert [(e.kind, e.xid, e.pci) for e in events] == [
        ("xid", 79, "0000:2b:00"),
        ("fallen_off_bus", None, "0000:2b:00.0"),
    ]
    assert events[0].timestamp == "May 18 19:02:39"


def test_xid_31_with_pid_and_process_then_62_and_45() -> None:
    events = _parse(2).events
    assert [e.xid for e in events][:3] == [31, 62, 45]
    assert (events[0].pid, events[0].process) == (13332, "cuda_plot_k32_v")
    assert events[0].timestamp == "14328.198504"
    assert events[1].pid is None


def test_fallen_off_the_bus_without_an_xid_number() -> None:
    (event,) = _parse(5).events
    assert event.kind == "fallen_off_bus" and event.pci == "0000:b3:00.0"


def test_journalctl_format() -> None:
    events = _parse(6).events
    assert [e.xid for e in events] == [31, 31]
    assert events[0].pid == 12890


def test_host_oom_killer_and_noise() -> None:
    text = "[ 10.0] random line\n[ 99.5] Out of memory: Killed process 4242 (python3) total-vm:100kB\n\x00\xff junk\n"
    (event,) = parse_dmesg(text, "k").events
    assert (event.kind, event.pid, event.process) == ("oom_kill", 4242, "python3")
