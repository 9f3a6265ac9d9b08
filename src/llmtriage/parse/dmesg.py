"""Kernel log (``dmesg``, ``dmesg -T``, ``journalctl -k``) -> NVRM events: Xid codes with PCI id, pid and
process, GPUs that fell off the bus (with or without an Xid number), ECC and GSP messages, and the host
OOM killer. Pure: text in, facts out; meanings come from catalog/xid.yaml at diagnosis time.
"""

from __future__ import annotations

import re

from llmtriage.facts import KernelEvent, KernelFacts, Problem

MAX_EVENTS = 2000

_TIMESTAMP = re.compile(
    r"^\s*(?:\[\s*(?P<mono>\d+\.\d+)\]|\[(?P<human>\w{3} \w{3}\s+\d+ [\d:]+ \d{4})\]"
    r"|(?P<iso>\d{4}-\d{2}-\d{2}T[\d:.]+\S*)\s+\S+\s+kernel:|(?P<syslog>\w{3}\s+\d+ [\d:]+)\s+(?:\S+\s+)?kernel:)"
)
_XID = re.compile(r"NVRM: Xid \((?:PCI:)?(?P<pci>[0-9a-fA-F:.]+)\): (?P<xid>\d+),?\s*(?P<rest>.*)")
_PID = re.compile(r"\bpid=(?P<pid>\d+)")
_NAME = re.compile(r"\bname=(?P<name>[^,\s]+)")
_FALLEN = re.compile(r"fallen off the bus", re.IGNORECASE)
_PCI_NEARBY = re.compile(r"GPU (?:at PCI:)?(?P<pci>[0-9a-fA-F]{4}:[0-9a-fA-F]{2}:[0-9a-fA-F]{2}(?:\.\d)?)")
_ECC = re.compile(r"NVRM:.*\b(?:uncorrectable|double[- ]bit|DBE)\b.*\b(?:ECC|error)", re.IGNORECASE)
_GSP = re.compile(r"NVRM:.*(?:GSP.*(?:timeout|error|fail)|RmInitAdapter failed)", re.IGNORECASE)
_OOM_KILL = re.compile(r"Out of memory: Killed process (?P<pid>\d+) \((?P<name>[^)]+)\)")


def _timestamp(line: str) -> str | None:
    m = _TIMESTAMP.match(line)
    if m is None:
        return None
    return next((v for v in m.groupdict().values() if v), None)


def parse_dmesg(text: str, source: str) -> KernelFacts:
    """Read the NVRM and OOM-killer events of a kernel log."""
    facts = KernelFacts(sources=[source])
    lines = text.splitlines()
    for index, line in enumerate(lines):
        line_no = index + 1
        event: KernelEvent | None = None
        if (x := _XID.search(line)) is not None:
            rest = x.group("rest")
            pid = _PID.search(rest)
            name = _NAME.search(rest)
            event = KernelEvent(
                kind="xid",
                source=source,
                line=line_no,
                text=line.strip()[:400],
                xid=int(x.group("xid")),
                pci=x.group("pci"),
                pid=int(pid.group("pid")) if pid else None,
                process=name.group("name") if name else None,
                timestamp=_timestamp(line),
            )
        elif _FALLEN.search(line) and "NVRM" in "".join(lines[max(0, index - 2) : index + 1]):
            pci = None
            for back in range(index, max(-1, index - 3), -1):
                if (p := _PCI_NEARBY.search(lines[back])) is not None:
                    pci = p.group("pci")
                    break
            event = KernelEvent(
                kind="fallen_off_bus",
                source=source,
                line=line_no,
                text=line.strip()[:400],
                pci=pci,
                timestamp=_timestamp(lines[max(0, index - 2)]) or _timestamp(line),
            )
        elif _ECC.search(line):
            event = KernelEvent(
                kind="ecc", source=source, line=line_no, text=line.strip()[:400], timestamp=_timestamp(line)
            )
        elif _GSP.search(line):
            event = KernelEvent(
                kind="gsp", source=source, line=line_no, text=line.strip()[:400], timestamp=_timestamp(line)
            )
        elif (o := _OOM_KILL.search(line)) is not None:
            event = KernelEvent(
                kind="oom_kill",
                source=source,
                line=line_no,
                text=line.strip()[:400],
                pid=int(o.group("pid")),
                process=o.group("name"),
                timestamp=_timestamp(line),
            )
        if event is None:
            continue
        if len(facts.events) >= MAX_EVENTS:
            facts.problems.append(Problem(source, f"more than {MAX_EVENTS} kernel GPU events; the rest were skipped"))
            break
        facts.events.append(event)
    return facts
