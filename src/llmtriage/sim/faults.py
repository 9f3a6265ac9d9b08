"""Fault injection: ``--fault NAME[:key=value,...][@ONSET]``, combinable; onsets in simulated seconds after start.

| fault | effect |
| --- | --- |
| ``other-process:memory_gib=G`` | another process holds G GiB: at onset 0 the free-memory check fails at startup; later it shares the GPU (memory, bandwidth) |
| ``runtime-oom[:running=N][,batch_tokens=T]`` | the engine dies with a CUDA OOM when N requests run (default 32) or a step schedules T tokens |
| ``throttle:kind=power|thermal[,clock=0.6]`` | SM clocks drop to `clock` of max, clocks event reasons set, steps slow down |
| ``contention[:memory_gib=G][,share=0.5]`` | another process on the GPU: memory used and a `share` of its bandwidth/compute left |
| ``stall`` | the engine stops stepping; /health still answers (a hung collective) |
"""

from __future__ import annotations

from dataclasses import dataclass, field

from llmtriage.errors import UsageError
from llmtriage.slo import parse_duration

KNOWN: dict[str, dict[str, type]] = {
    "other-process": {"memory_gib": float},
    "runtime-oom": {"running": int, "batch_tokens": int},
    "throttle": {"kind": str, "clock": float},
    "contention": {"memory_gib": float, "share": float},
    "stall": {},
}
_THROTTLE_KINDS = ("power", "thermal")


@dataclass(frozen=True, slots=True)
class Fault:
    """One injected fault."""

    name: str
    onset_s: float = 0.0
    params: dict[str, float | int | str] = field(default_factory=dict)

    def number(self, key: str, default: float) -> float:
        """A numeric parameter."""
        value = self.params.get(key, default)
        return float(value)


def parse_fault(spec: str) -> Fault:
    """Parse one ``--fault`` value."""
    body, _, onset = spec.partition("@")
    name, _, params_text = body.partition(":")
    name = name.strip()
    if name not in KNOWN:
        raise UsageError(f"unknown fault {name!r}", f"known faults: {', '.join(KNOWN)}")
    params: dict[str, float | int | str] = {}
    for part in filter(None, (p.strip() for p in params_text.split(","))):
        key, sep, raw = part.partition("=")
        kind = KNOWN[name].get(key)
        if not sep or kind is None:
            allowed = ", ".join(KNOWN[name]) or "none"
            raise UsageError(f"fault {name}: unknown parameter {part!r}", f"parameters of {name}: {allowed}")
        try:
            params[key] = kind(raw)
        except ValueError as e:
            raise UsageError(f"fault {name}: {key}={raw!r} is not a {kind.__name__}") from e
    if name == "throttle" and params.get("kind", "power") not in _THROTTLE_KINDS:
        raise UsageError(f"throttle kind must be one of {', '.join(_THROTTLE_KINDS)}")
    clock = params.get("clock")
    if isinstance(clock, float) and not 0.05 <= clock <= 1.0:
        raise UsageError("throttle clock is a share of the maximum clock, between 0.05 and 1")
    share = params.get("share")
    if isinstance(share, float) and not 0.05 <= share <= 1.0:
        raise UsageError("contention share is the share of the GPU left to the server, between 0.05 and 1")
    onset_s = parse_duration(onset) if onset else 0.0
    return Fault(name=name, onset_s=onset_s, params=params)
