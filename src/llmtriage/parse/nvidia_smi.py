"""nvidia-smi outputs -> GPU facts: the default table (old and new layouts), ``-q`` sections
(``Clocks Throttle Reasons`` and ``Clocks Event Reasons``), and ``--query-gpu`` / ``--query-compute-apps``
CSV. ``[N/A]`` is unknown, never 0. Pure: text in, facts out.
"""

from __future__ import annotations

import csv
import io
import re
from dataclasses import dataclass, field

from llmtriage import catalog
from llmtriage.facts import Citation, GpuProcess, GpuSample, Problem

_VERSIONS = re.compile(
    r"NVIDIA-SMI\s+(?P<smi>[\d.]+)\s+Driver Version:\s+(?P<driver>[\d.]+)(?:\s+CUDA Version:\s+(?P<cuda>[\d.]+|N/A))?"
)
_GPU_ROW = re.compile(
    r"^\|\s+(?P<idx>\d+)\s+(?P<name>.+?)\s+(?P<persist>On|Off)\s+\|"
    r"\s+(?P<busid>[0-9A-Fa-f]{4,8}:[0-9A-Fa-f]{2}:[0-9A-Fa-f]{2}\.\d)\s+(?P<disp>On|Off)\s+\|"
)
_STATS_ROW = re.compile(
    r"^\|\s*(?P<fan>\S+)\s+(?P<temp>\S+?)C?\s+(?P<perf>P\d+|N/A|ERR!)\s+(?P<pw>\S+?)W?\s*/\s*(?P<cap>\S+?)W?\s+\|"
    r"\s+(?P<used>\d+)MiB\s*/\s*(?P<total>\d+)MiB\s+\|\s+(?P<util>\S+?)%?\s+(?P<mode>[\w. ]+?)\s+\|"
)
_PROCESS_ROW = re.compile(
    r"^\|\s+(?P<gpu>\d+)\s+(?:(?P<gi>N/A|\d+)\s+(?P<ci>N/A|\d+)\s+)?(?P<pid>\d+)\s+(?P<type>C\+G|M\+C|C|G|M)\s+"
    r"(?P<name>.+?)\s+(?P<mem>\d+MiB|N/A)\s*\|"
)


@dataclass(slots=True)
class TableFacts:
    """What one default nvidia-smi table says."""

    driver_version: str | None = None
    cuda_version: str | None = None
    gpus: list[GpuSample] = field(default_factory=list)
    processes: list[GpuProcess] = field(default_factory=list)
    processes_seen: bool = False
    problems: list[Problem] = field(default_factory=list)


def _unknown(value: str) -> bool:
    return value.strip() in catalog.nvidia_smi_fields().unknown_values


def _num(value: str) -> float | None:
    value = value.strip()
    if _unknown(value):
        return None
    value = re.sub(r"\s*(MiB|W|%|MHz|C)$", "", value)
    try:
        return float(value)
    except ValueError:
        return None


def parse_table(text: str, source: str) -> TableFacts:
    """Parse the default ``nvidia-smi`` table."""
    facts = TableFacts()
    pending: GpuSample | None = None
    for line_no, line in enumerate(text.splitlines(), start=1):
        if (m := _VERSIONS.search(line)) is not None:
            facts.driver_version = m.group("driver")
            cuda = m.group("cuda")
            facts.cuda_version = None if cuda in (None, "N/A") else cuda
            continue
        if "Processes:" in line:
            facts.processes_seen = True
            pending = None
            continue
        if facts.processes_seen:
            if (p := _PROCESS_ROW.match(line)) is not None:
                mem = p.group("mem")
                facts.processes.append(
                    GpuProcess(
                        gpu_index=int(p.group("gpu")),
                        pid=int(p.group("pid")),
                        name=p.group("name").strip(),
                        used_memory_mib=None if mem == "N/A" else float(mem[:-3]),
                        process_type=p.group("type"),
                    )
                )
            continue
        if (g := _GPU_ROW.match(line)) is not None:
            pending = GpuSample(
                index=int(g.group("idx")),
                name=g.group("name").strip(),
                citation=Citation(source=source, line=line_no, excerpt=line.strip()),
            )
            facts.gpus.append(pending)
            continue
        if pending is not None and (s := _STATS_ROW.match(line)) is not None:
            pending.temperature_c = _num(s.group("temp"))
            pending.pstate = None if _unknown(s.group("perf")) else s.group("perf")
            pending.power_draw_w = _num(s.group("pw"))
            pending.power_limit_w = _num(s.group("cap"))
            pending.memory_used_mib = float(s.group("used"))
            pending.memory_total_mib = float(s.group("total"))
            pending.utilization_gpu_pct = _num(s.group("util"))
            pending.citation = Citation(source=source, line=line_no, excerpt=line.strip())
            pending = None
    if not facts.gpus and text.strip():
        facts.problems.append(Problem(source, "no GPU rows found in the nvidia-smi table"))
    return facts


# ---------------------------------------------------------------- nvidia-smi -q


_Q_GPU = re.compile(r"^GPU\s+([0-9A-Fa-f]{4,8}:[0-9A-Fa-f]{2}:[0-9A-Fa-f]{2}\.\d)\s*$")
_Q_KV = re.compile(r"^(?P<indent>\s*)(?P<key>[^:]+?)\s*:\s*(?P<value>.*?)\s*$")
_REASON_SECTIONS = ("Clocks Throttle Reasons", "Clocks Event Reasons")


@dataclass(slots=True)
class QueryGpu:
    """One GPU section of ``nvidia-smi -q``: flat ``section/key`` -> value, with line numbers."""

    bus_id: str | None
    values: dict[str, str] = field(default_factory=dict)
    lines: dict[str, int] = field(default_factory=dict)

    def get(self, *keys: str) -> str | None:
        """The first of ``keys`` present (``Section/Key`` paths)."""
        for key in keys:
            if key in self.values:
                return self.values[key]
        return None


@dataclass(slots=True)
class QueryFacts:
    """What ``nvidia-smi -q [-d ...]`` says."""

    driver_version: str | None = None
    cuda_version: str | None = None
    gpus: list[QueryGpu] = field(default_factory=list)
    problems: list[Problem] = field(default_factory=list)

    def active_reasons(self) -> dict[int, tuple[str, ...]]:
        """Per GPU (by position), the clocks event reasons reported Active."""
        fields = catalog.nvidia_smi_fields()
        result: dict[int, tuple[str, ...]] = {}
        for i, gpu in enumerate(self.gpus):
            reported = False
            active = []
            for key, value in gpu.values.items():
                section, _, label = key.rpartition("/")
                if section.rpartition("/")[2] not in _REASON_SECTIONS:
                    continue
                reported = True
                reason = fields.reason_by_label(label)
                if reason is not None and value == "Active":
                    active.append(reason.field)
            if reported:
                result[i] = tuple(active)
        return result


def parse_query(text: str, source: str) -> QueryFacts:
    """Parse ``nvidia-smi -q`` output (any ``-d`` selection), including partial copies."""
    facts = QueryFacts()
    current: QueryGpu | None = None
    sections: list[tuple[int, str]] = []
    for line_no, raw in enumerate(text.splitlines(), start=1):
        line = raw.rstrip()
        if not line.strip() or line.lstrip().startswith("="):
            continue
        if (g := _Q_GPU.match(line)) is not None:
            current = QueryGpu(bus_id=g.group(1))
            facts.gpus.append(current)
            sections = []
            continue
        indent = len(line) - len(line.lstrip())
        kv = _Q_KV.match(line)
        if kv is None or not kv.group("value"):
            name = line.strip().rstrip(":")
            sections = [(i, s) for i, s in sections if i < indent] + [(indent, name)]
            continue
        key, value = kv.group("key").strip(), kv.group("value")
        if key == "Driver Version":
            facts.driver_version = value
        elif key == "CUDA Version":
            facts.cuda_version = None if value in ("N/A", "Not Found") else value
        sections = [(i, s) for i, s in sections if i < indent]
        if current is None:
            if any(s in _REASON_SECTIONS for _, s in sections):
                # `nvidia-smi -q | grep -A8 'Clocks Throttle'` copies have no GPU header.
                current = QueryGpu(bus_id=None)
                facts.gpus.append(current)
            else:
                continue
        path = "/".join([s for _, s in sections] + [key])
        current.values[path] = value
        current.lines[path] = line_no
    if not facts.gpus and text.strip():
        facts.problems.append(Problem(source, "no GPU sections found in the nvidia-smi -q output"))
    return facts


def query_samples(facts: QueryFacts, source: str) -> list[GpuSample]:
    """GPU samples from the memory, clock, power and temperature sections of a ``-q`` output."""
    samples = []
    active_reasons = facts.active_reasons()
    for index, gpu in enumerate(facts.gpus):
        used = gpu.get("FB Memory Usage/Used")
        total = gpu.get("FB Memory Usage/Total")
        sm = gpu.get("Clocks/SM")
        sm_max = gpu.get("Max Clocks/SM")
        power = gpu.get(
            "GPU Power Readings/Power Draw", "GPU Power Readings/Average Power Draw", "Power Readings/Power Draw"
        )
        limit = gpu.get("GPU Power Readings/Current Power Limit", "Power Readings/Power Limit")
        temp = gpu.get("Temperature/GPU Current Temp")
        reasons = active_reasons.get(index)
        line = min(gpu.lines.values()) if gpu.lines else None
        samples.append(
            GpuSample(
                index=index,
                name=gpu.get("Product Name"),
                memory_used_mib=_num(used) if used else None,
                memory_total_mib=_num(total) if total else None,
                sm_clock_mhz=_num(sm) if sm else None,
                sm_clock_max_mhz=_num(sm_max) if sm_max else None,
                power_draw_w=_num(power) if power else None,
                power_limit_w=_num(limit) if limit else None,
                temperature_c=_num(temp) if temp else None,
                pstate=gpu.get("Performance State"),
                clocks_event_reasons=reasons,
                citation=Citation(source=source, line=line, excerpt=f"GPU {gpu.bus_id or index}"),
            )
        )
    return samples


# ---------------------------------------------------------------- --query-gpu / --query-compute-apps CSV


@dataclass(slots=True)
class CsvFacts:
    """Rows of a ``--query-gpu`` or ``--query-compute-apps`` CSV."""

    samples: list[GpuSample] = field(default_factory=list)
    processes: list[GpuProcess] = field(default_factory=list)
    problems: list[Problem] = field(default_factory=list)


def _column_index(header: list[str], aliases: tuple[str, ...]) -> int | None:
    for alias in aliases:
        if alias in header:
            return header.index(alias)
    return None


def parse_csv(text: str, source: str) -> CsvFacts:
    """Parse nvidia-smi CSV with a header (units in brackets allowed, ``nounits`` too)."""
    facts = CsvFacts()
    try:
        rows = [r for r in csv.reader(io.StringIO(text), skipinitialspace=True) if r and any(c.strip() for c in r)]
    except csv.Error as e:
        facts.problems.append(Problem(source, f"not CSV: {e}"))
        return facts
    if not rows:
        return facts
    header = [re.sub(r"\s*\[.*?\]\s*$", "", c.strip()).lower() for c in rows[0]]
    fields = catalog.nvidia_smi_fields()
    if "pid" in header:
        columns = {k: _column_index(header, v) for k, v in fields.query_compute_apps_columns.items()}
        for row_no, row in enumerate(rows[1:], start=2):
            pid = _cell(row, columns["pid"])
            mem = _cell(row, columns["used_memory_mib"])
            try:
                facts.processes.append(
                    GpuProcess(
                        gpu_index=None,
                        pid=int(pid) if pid else None,
                        name=_cell(row, columns["name"]) or "",
                        used_memory_mib=_num(mem) if mem else None,
                    )
                )
            except ValueError:
                facts.problems.append(Problem(source, f"line {row_no}: unreadable process row"))
        return facts
    columns = {k: _column_index(header, v) for k, v in fields.query_gpu_columns.items()}
    if all(i is None for i in columns.values()):
        facts.problems.append(Problem(source, "no known --query-gpu columns in the CSV header"))
        return facts
    for row_no, row in enumerate(rows[1:], start=2):
        if len(row) != len(header):
            facts.problems.append(Problem(source, f"line {row_no}: {len(row)} fields, header has {len(header)}"))
            continue
        mask_text = _cell(row, columns["clocks_event_reasons_mask"])
        reasons: tuple[str, ...] | None = None
        if mask_text:
            try:
                reasons = fields.reasons_in_mask(int(mask_text, 16))
            except ValueError:
                reasons = None
        index = _cell(row, columns["index"])
        facts.samples.append(
            GpuSample(
                index=int(index) if index and index.isdigit() else None,
                name=_cell(row, columns["name"]),
                timestamp=_cell(row, columns["timestamp"]),
                memory_used_mib=_num_cell(row, columns["memory_used_mib"]),
                memory_total_mib=_num_cell(row, columns["memory_total_mib"]),
                utilization_gpu_pct=_num_cell(row, columns["utilization_gpu_pct"]),
                power_draw_w=_num_cell(row, columns["power_draw_w"]),
                power_limit_w=_num_cell(row, columns["power_limit_w"]),
                temperature_c=_num_cell(row, columns["temperature_c"]),
                sm_clock_mhz=_num_cell(row, columns["sm_clock_mhz"]),
                sm_clock_max_mhz=_num_cell(row, columns["sm_clock_max_mhz"]),
                pstate=_cell(row, columns["pstate"]),
                clocks_event_reasons=reasons,
                citation=Citation(source=source, line=row_no, excerpt=", ".join(row)),
            )
        )
    return facts


def _cell(row: list[str], index: int | None) -> str | None:
    if index is None or index >= len(row):
        return None
    value = row[index].strip()
    return None if _unknown(value) else value


def _num_cell(row: list[str], index: int | None) -> float | None:
    value = _cell(row, index)
    return None if value is None else _num(value)
