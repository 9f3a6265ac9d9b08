"""The triage catalogs: log signatures, the diagnostic tree, engines, Xids, nvidia-smi fields, metric names, launch
flags, thresholds and the CUDA stack tables."""

from __future__ import annotations

import re
from dataclasses import dataclass
from functools import cache
from typing import Any
from urllib.parse import quote_plus

from llmtriage.catalog import (
    CPU_BACKEND,
    FACT_TARGETS,
    FAMILIES,
    ROLES,
    SIGNATURE_GROUPS,
    CatalogError,
    load_yaml,
)


@dataclass(frozen=True, slots=True)
class Signature:
    """One known log line: what it means and which causes it points to."""

    id: str
    engine: str
    phase: str
    role: str
    family: str
    causes: tuple[str, ...]
    pattern: str
    target: str | None
    marks: str | None
    example: str
    meaning: str
    first_check: str
    source: str
    fallback: bool = False
    serving_only: bool = False

    @property
    def regex(self) -> re.Pattern[str]:
        """The compiled pattern."""
        try:
            return _compiled(self.pattern)
        except re.error as e:
            raise CatalogError(f"signature {self.id}: bad pattern: {e}") from e


@cache
def _compiled(pattern: str) -> re.Pattern[str]:
    return re.compile(pattern)


@cache
def _signatures_file() -> Any:
    return load_yaml("signatures.yaml")


SIGNATURE_FILES = ("signatures.yaml", *(f"signatures/{engine}.yaml" for engine in SIGNATURE_GROUPS))


@cache
def signatures() -> tuple[Signature, ...]:
    """All log signatures: the common file (markers, facts, stats, access lines, the fallback), then one file per
    engine or layer of the stack, each in catalog order."""
    result = []
    seen: set[str] = set()
    for name in SIGNATURE_FILES:
        data = _signatures_file() if name == "signatures.yaml" else load_yaml(name)
        for raw in data["signatures"] or ():
            sig = _signature(raw, name)
            if sig.id in seen:
                raise CatalogError(f"duplicate signature id {sig.id}")
            seen.add(sig.id)
            result.append(sig)
    return tuple(result)


def _signature(raw: dict[str, Any], file: str) -> Signature:
    sig = Signature(
        id=raw["id"],
        engine=raw.get("engine", "any"),
        phase=raw.get("phase", "serving"),
        role=raw["role"],
        family=raw.get("family", ""),
        causes=tuple(raw.get("causes", ())),
        pattern=raw["pattern"],
        target=raw.get("target"),
        marks=raw.get("marks"),
        example=raw.get("example", ""),
        meaning=raw.get("meaning", ""),
        first_check=raw.get("first_check", ""),
        source=raw.get("source", ""),
        fallback=bool(raw.get("fallback", False)),
        serving_only=bool(raw.get("serving_only", False)),
    )
    if sig.role not in ROLES:
        raise CatalogError(f"{file}: {sig.id}: unknown role {sig.role}")
    if sig.role == "fact" and sig.target not in FACT_TARGETS:
        raise CatalogError(f"{file}: {sig.id}: fact without a known target")
    if sig.role in ("error", "wrapper") and sig.family not in FAMILIES:
        raise CatalogError(f"{file}: {sig.id}: unknown family {sig.family!r}")
    # Patterns compile on first use: compiling all ~580 would cost every `diagnose` ~70 ms, for the few a log matches.
    # tests/unit/test_signatures.py compiles each one.
    return sig


@dataclass(frozen=True, slots=True)
class FramePhase:
    """A lifecycle phase and the traceback function names that place an error in it."""

    phase: str
    pattern: re.Pattern[str]


@cache
def frame_phases() -> tuple[FramePhase, ...]:
    """Phases by traceback frame function names (signatures.yaml `frame_phases`)."""
    return tuple(
        FramePhase(phase=raw["phase"], pattern=re.compile(raw["pattern"]))
        for raw in _signatures_file().get("frame_phases", ())
    )


# ---------------------------------------------------------------- the tree


@dataclass(frozen=True, slots=True)
class Branch:
    """One answer of a question: it leads to another question or ends in a class."""

    answer: str
    next: str | None
    symptom_class: str | None


@dataclass(frozen=True, slots=True)
class Question:
    """A node of the tree."""

    id: str
    text: str
    branches: tuple[Branch, ...]

    def branch(self, answer: str) -> Branch:
        """The branch for ``answer``."""
        for b in self.branches:
            if b.answer == answer:
                return b
        raise CatalogError(f"question {self.id} has no answer {answer!r}")


@dataclass(frozen=True, slots=True)
class CauseInfo:
    """A cause of the tree: what signals it and how to fix it."""

    id: str
    title: str
    kind: str
    classes: tuple[str, ...]
    signals: str
    fixes: tuple[str, ...]
    engine_fixes: dict[str, tuple[str, ...]]

    @property
    def is_hardware(self) -> bool:
        """Hardware causes rank above configuration causes."""
        return self.kind == "hardware"

    def fixes_for(self, engine: str | None) -> tuple[str, ...]:
        """The fixes in ``engine``'s own knobs; vLLM's (the default) when it has none of its own."""
        return self.engine_fixes.get(engine or "", self.fixes)


@dataclass(frozen=True, slots=True)
class EvidenceSource:
    """A kind of evidence, how to collect it, and the classes it matters for (all when empty)."""

    id: str
    what: str
    collect: str
    classes: tuple[str, ...]


@dataclass(frozen=True, slots=True)
class Tree:
    """The diagnostic flowchart."""

    root: str
    questions: dict[str, Question]
    classes: dict[str, str]
    causes: dict[str, CauseInfo]
    evidence_sources: tuple[EvidenceSource, ...]

    def cause(self, cause_id: str) -> CauseInfo:
        """The cause ``cause_id``; raises KeyError with the known ids when absent."""
        try:
            return self.causes[cause_id]
        except KeyError:
            raise KeyError(f"unknown cause {cause_id!r}; known: {', '.join(sorted(self.causes))}") from None


@cache
def tree() -> Tree:
    """The diagnostic tree of catalog/tree.yaml, checked for dangling references."""
    data = load_yaml("tree.yaml")
    questions = {
        q["id"]: Question(
            id=q["id"],
            text=q["text"],
            branches=tuple(
                Branch(answer=str(b["answer"]), next=b.get("next"), symptom_class=b.get("class")) for b in q["branches"]
            ),
        )
        for q in data["questions"]
    }
    classes = {c["id"]: c["title"] for c in data["classes"]}
    causes = {
        c["id"]: CauseInfo(
            id=c["id"],
            title=c["title"],
            kind=c["kind"],
            classes=tuple(c["classes"]),
            signals=c["signals"],
            fixes=tuple(c["fixes"]),
            engine_fixes={engine: tuple(fixes) for engine, fixes in (c.get("engine_fixes") or {}).items()},
        )
        for c in data["causes"]
    }
    for q in questions.values():
        for b in q.branches:
            if b.next is not None and b.next not in questions:
                raise CatalogError(f"question {q.id} leads to unknown question {b.next}")
            if b.symptom_class is not None and b.symptom_class not in classes:
                raise CatalogError(f"question {q.id} leads to unknown class {b.symptom_class}")
    for c in causes.values():
        for cls in c.classes:
            if cls not in classes:
                raise CatalogError(f"cause {c.id} names unknown class {cls}")
        for engine in c.engine_fixes:
            if engine not in engines() and engine != CPU_BACKEND:
                raise CatalogError(f"cause {c.id} has fixes for unknown engine {engine}")
    sources = tuple(
        EvidenceSource(id=e["id"], what=e["what"], collect=e["collect"], classes=tuple(e.get("classes", ())))
        for e in data["evidence_sources"]
    )
    return Tree(root=data["root"], questions=questions, classes=classes, causes=causes, evidence_sources=sources)


# ---------------------------------------------------------------- engines


@dataclass(frozen=True, slots=True)
class EngineInfo:
    """An inference engine: its name, the repository whose issues to search, and the Python distributions that
    install it (normalized names)."""

    id: str
    name: str
    issues_repo: str
    distributions: tuple[str, ...] = ()

    def issue_search_url(self, query: str) -> str:
        """The engine's issue tracker searched for ``query``."""
        return f"https://github.com/{self.issues_repo}/issues?q={quote_plus(query)}"


@cache
def engines() -> dict[str, EngineInfo]:
    """The engines of catalog/engines.yaml by id."""
    data = load_yaml("engines.yaml")
    return {
        engine_id: EngineInfo(
            id=engine_id,
            name=raw["name"],
            issues_repo=raw["issues"],
            distributions=tuple(str(d) for d in raw.get("distributions", ())),
        )
        for engine_id, raw in data["engines"].items()
    }


# ---------------------------------------------------------------- Xids


@dataclass(frozen=True, slots=True)
class XidInfo:
    """An Xid of NVIDIA's catalog with its action buckets and cause categories."""

    xid: int
    mnemonic: str
    description: str
    immediate_action: str
    investigatory_action: str
    cause_categories: tuple[str, ...]

    @property
    def application_fault(self) -> bool:
        """NVIDIA attributes this Xid first to the application (its own kernel), not the GPU."""
        return bool(self.cause_categories) and self.cause_categories[0].startswith("user_")

    @property
    def hardware_severe(self) -> bool:
        """An Xid that makes the GPU itself suspect: reset, reboot, ECC, bus, NVLink, power."""
        if self.application_fault or self.immediate_action.startswith("IGNORE"):
            return False
        if any(token in self.immediate_action for token in _SEVERE_ACTIONS):
            return True
        return any(cat.split(" ")[0] in _HARDWARE_CATEGORIES for cat in self.cause_categories)


_SEVERE_ACTIONS = ("RESET_GPU", "RESTART_BM", "RESTART_VM", "CHECK_MECHANICALS", "WORKFLOW_XID_48", "NVLINK")
_HARDWARE_CATEGORIES = frozenset({"hardware", "memory_ecc", "pcie_bus", "nvlink", "power", "mechanical"})


def _xid_codes(spec: object) -> list[int]:
    """Expand a catalog key like ``70-72,75-77,85`` into its codes."""
    codes: list[int] = []
    for part in str(spec).split(","):
        low, _, high = part.strip().partition("-")
        codes.extend(range(int(low), int(high or low) + 1))
    return codes


@cache
def xids() -> dict[int, XidInfo]:
    """NVIDIA's Xid catalog (catalog/xid.yaml), one entry per code."""
    data = load_yaml("xid.yaml")
    table: dict[int, XidInfo] = {}
    for raw in data["xids"]:
        causes = raw.get("causes") or {}
        categories = tuple(str(c) for c in (causes.get("catalog") or causes.get("derived") or ()))
        for code in _xid_codes(raw["xid"]):
            table[code] = XidInfo(
                xid=code,
                mnemonic=str(raw.get("mnemonic", "")),
                description=str(raw.get("description", "")),
                immediate_action=str(raw.get("immediate_action") or ""),
                investigatory_action=str(raw.get("investigatory_action") or ""),
                cause_categories=categories,
            )
    return table


# ---------------------------------------------------------------- nvidia-smi fields


@dataclass(frozen=True, slots=True)
class ClocksReason:
    """A clocks event (throttle) reason."""

    label: str
    field: str
    bit: int
    throttle: bool


@dataclass(frozen=True, slots=True)
class NvidiaSmiFields:
    """How nvidia-smi names things (catalog/nvidia_smi.yaml)."""

    reasons: tuple[ClocksReason, ...]
    query_gpu_columns: dict[str, tuple[str, ...]]
    query_compute_apps_columns: dict[str, tuple[str, ...]]
    unknown_values: frozenset[str]

    def reason_by_label(self, label: str) -> ClocksReason | None:
        """The reason whose -q label is ``label``."""
        for r in self.reasons:
            if r.label.lower() == label.strip().lower():
                return r
        return None

    def reasons_in_mask(self, mask: int) -> tuple[str, ...]:
        """The reason fields set in an NVML bitmask."""
        return tuple(r.field for r in self.reasons if mask & r.bit)

    def is_throttle(self, field: str) -> bool:
        """True for reasons that hold clocks down under load (power or heat)."""
        return any(r.field == field and r.throttle for r in self.reasons)


@cache
def nvidia_smi_fields() -> NvidiaSmiFields:
    """nvidia-smi field names and clocks event reasons."""
    data = load_yaml("nvidia_smi.yaml")
    return NvidiaSmiFields(
        reasons=tuple(
            ClocksReason(label=r["label"], field=r["field"], bit=int(r["bit"]), throttle=bool(r["throttle"]))
            for r in data["clocks_event_reasons"]
        ),
        query_gpu_columns={k: tuple(v) for k, v in data["query_gpu_columns"].items()},
        query_compute_apps_columns={k: tuple(v) for k, v in data["query_compute_apps_columns"].items()},
        unknown_values=frozenset(data["unknown_values"]),
    )


# ---------------------------------------------------------------- metric names


@dataclass(frozen=True, slots=True)
class MetricSpec:
    """How one engine-independent metric is read from a scrape."""

    canonical: str
    kind: str  # gauge | counter | histogram
    names: tuple[str, ...]
    labels: tuple[tuple[str, str], ...]
    aggregate: str


@dataclass(frozen=True, slots=True)
class MetricMap:
    """catalog/metrics.yaml."""

    engine_prefixes: dict[str, str]
    specs: tuple[MetricSpec, ...]
    info: dict[str, tuple[str, ...]]


@cache
def metric_map() -> MetricMap:
    """The engine-independent metric names and the series behind them."""
    data = load_yaml("metrics.yaml")
    specs = []
    for section, kind in (("gauges", "gauge"), ("counters", "counter"), ("histograms", "histogram")):
        for canonical, entry in data[section].items():
            for spec in entry if isinstance(entry, list) else [entry]:
                specs.append(
                    MetricSpec(
                        canonical=canonical,
                        kind=kind,
                        names=tuple(spec["names"]),
                        labels=tuple((k, str(v)) for k, v in (spec.get("labels") or {}).items()),
                        aggregate=spec.get("aggregate", "sum"),
                    )
                )
    return MetricMap(
        engine_prefixes=dict(data["engines"]),
        specs=tuple(specs),
        info={k: tuple(v) for k, v in data["info"].items()},
    )


# ---------------------------------------------------------------- launch flags


@dataclass(frozen=True, slots=True)
class LaunchOption:
    """One LaunchConfig field and the flags that set it."""

    field: str
    type: str
    flags: tuple[str, ...]
    negative_flags: tuple[str, ...]


@dataclass(frozen=True, slots=True)
class LaunchFlags:
    """catalog/launch_flags.yaml."""

    engines: dict[str, tuple[str, ...]]
    model_positional_after: tuple[str, ...]
    options: tuple[LaunchOption, ...]
    env: dict[str, tuple[str | None, str]]
    switches: frozenset[str]

    def option_for(self, flag: str) -> tuple[LaunchOption, bool] | None:
        """(option, value it sets for a switch) for a normalised flag, or None."""
        for opt in self.options:
            if flag in opt.flags:
                return opt, True
            if flag in opt.negative_flags:
                return opt, False
        return None


@cache
def launch_flags() -> LaunchFlags:
    """How launch command lines name engine arguments."""
    data = load_yaml("launch_flags.yaml")
    return LaunchFlags(
        engines={k: tuple(v) for k, v in data["engines"].items()},
        model_positional_after=tuple(data["model_positional_after"]),
        options=tuple(
            LaunchOption(
                field=name,
                type=spec["type"],
                flags=tuple(spec["flags"]),
                negative_flags=tuple(spec.get("negative_flags", ())),
            )
            for name, spec in data["options"].items()
        ),
        env={k: (v.get("field"), v.get("type", "str")) for k, v in data["env"].items()},
        switches=frozenset(data["switches"]),
    )


# ---------------------------------------------------------------- thresholds


@dataclass(frozen=True, slots=True)
class Slo:
    """Service-level objectives the latency questions compare against."""

    ttft_p95_s: float
    itl_p95_s: float
    error_rate: float
    queue: float


@dataclass(frozen=True, slots=True)
class Thresholds:
    """catalog/thresholds.yaml."""

    slo: Slo
    cuda_context_gib: float
    util_high: float
    util_elevated: float
    kv_block_tokens: int
    kv_usage_high: float
    waiting_queue: float
    rejected_fraction: float
    stall_seconds: float
    stall_stats_points: int
    serving_collectives: int
    crash_running: float
    decode_slow_tokens_per_s: float
    long_prompt_tokens: float
    very_long_prompt_tokens: float
    long_prompt_context_share: float
    prompt_mix_ratio: float
    prefill_only_steps: int
    huge_prefill_tokens: float
    queue_share: float
    clock_ratio_low: float
    busy_utilization_pct: float
    overload_factor: float
    weights_share_high: float
    weights_share_tight: float
    fragmentation_gib: float
    fragmentation_share: float
    fragmentation_floor_gib: float


@cache
def thresholds() -> Thresholds:
    """The default thresholds."""
    data = dict(load_yaml("thresholds.yaml"))
    slo = Slo(**{k: float(v) for k, v in data.pop("slo").items()})
    return Thresholds(slo=slo, **data)


def version_tuple(text: str) -> tuple[int, ...]:
    """``"550.54.14"`` -> ``(550, 54, 14)``; the leading dotted digits only (``"12.4.131"``, ``"2.5.1+cu124"``)."""
    m = re.match(r"\d+(?:\.\d+)*", text.strip())
    return tuple(int(part) for part in m.group(0).split(".")) if m else ()


@dataclass(frozen=True, slots=True)
class ToolkitDriver:
    """A row of NVIDIA's Table 3: a CUDA toolkit release and the Linux driver it ships with."""

    toolkit: str
    cuda: str
    linux_driver: str


@dataclass(frozen=True, slots=True)
class GpuFeature:
    """A data type or kernel family and the compute capabilities that have it (``max_cc`` empty: no upper bound)."""

    id: str
    title: str
    min_cc: str
    max_cc: str
    source: str

    def supported(self, cc: str) -> bool:
        """True when compute capability ``cc`` (``"8.6"``) has this feature."""
        have = version_tuple(cc)
        return have >= version_tuple(self.min_cc) and (not self.max_cc or have <= version_tuple(self.max_cc))


@dataclass(frozen=True, slots=True)
class CudaStack:
    """What a CUDA runtime needs of the driver and what a compute capability gives (catalog/cuda_drivers.yaml)."""

    source: str
    minor_version_min_driver: dict[int, str]
    minor_version_notes: dict[int, str]
    toolkit_drivers: tuple[ToolkitDriver, ...]
    kernel_libraries: tuple[str, ...]
    features: dict[str, GpuFeature]

    def toolkit_driver(self, cuda: str) -> ToolkitDriver | None:
        """The GA row of CUDA ``major.minor`` (the lowest driver among that minor's releases), if the table has it."""
        want = version_tuple(cuda)[:2]
        rows = [r for r in self.toolkit_drivers if version_tuple(r.cuda)[:2] == want]
        # The table lists updates before their GA: reversed, a tie (12.1 GA and Update 1) names the GA.
        return min(reversed(rows), key=lambda r: version_tuple(r.linux_driver)) if rows else None


@cache
def cuda_stack() -> CudaStack:
    """The driver tables and GPU features of catalog/cuda_drivers.yaml."""
    data = load_yaml("cuda_drivers.yaml")
    return CudaStack(
        source=str(data["source"]),
        minor_version_min_driver={int(r["major"]): str(r["min_driver"]) for r in data["minor_version_compatibility"]},
        minor_version_notes={int(r["major"]): str(r["note"]) for r in data["minor_version_compatibility"]},
        toolkit_drivers=tuple(
            ToolkitDriver(toolkit=str(r["toolkit"]), cuda=str(r["cuda"]), linux_driver=str(r["linux"]))
            for r in data["toolkit_drivers"]
        ),
        kernel_libraries=tuple(str(name) for name in data["kernel_libraries"]),
        features={
            str(r["id"]): GpuFeature(
                id=str(r["id"]),
                title=str(r["title"]),
                min_cc=str(r["min_cc"]),
                max_cc=str(r.get("max_cc") or ""),
                source=str(r["source"]),
            )
            for r in data["features"]
        },
    )
