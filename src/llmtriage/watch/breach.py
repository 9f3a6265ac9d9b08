"""SLO breaches of one frame, and incidents: a run of breaches on one endpoint, closed after a quiet spell.

A stalled engine (``/health`` answers, no token flows while requests run or wait) is the most severe finding
and comes first; the SLOs follow in the order users feel them.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from llmtriage.catalog import Thresholds
from llmtriage.diagnose.model import Diagnosis
from llmtriage.watch.endpoint import Frame

STALL = "engine_stalled"


@dataclass(frozen=True, slots=True)
class Breach:
    """One objective not met: the measured value against its limit."""

    kind: str  # engine_stalled | ttft_p95 | tpot_p95 | error_rate | queue
    value: float
    limit: float
    message: str


def breaches(frame: Frame, thresholds: Thresholds) -> list[Breach]:
    """What ``frame`` breaches, most severe first. A stall needs ``/health`` to have answered 200."""
    found: list[Breach] = []
    if not frame.up:
        return found
    stall = stall_seconds(frame.tokens_still_s, frame.probe_waiting_s, thresholds.stall_seconds)
    if stall is not None and frame.health_ok:
        found.append(Breach(STALL, stall, thresholds.stall_seconds, _stall_message(frame, stall)))
    slo = thresholds.slo
    tpot_name = "TPOT (ITL)" if frame.tpot_from_itl else "TPOT"
    for kind, name, value, limit in (
        ("ttft_p95", "TTFT", frame.ttft_p95_s, slo.ttft_p95_s),
        ("tpot_p95", tpot_name, frame.tpot_p95_s, slo.itl_p95_s),
    ):
        if value is not None and value > limit:
            found.append(Breach(kind, value, limit, f"{name} p95 {duration_text(value)} > SLO {duration_text(limit)}"))
    if frame.error_ratio is not None and frame.error_ratio > slo.error_rate:
        found.append(
            Breach(
                "error_rate",
                frame.error_ratio,
                slo.error_rate,
                f"error rate {frame.error_ratio:.1%} > SLO {slo.error_rate:.1%}",
            )
        )
    if frame.waiting is not None and frame.waiting > slo.queue:
        found.append(Breach("queue", frame.waiting, slo.queue, f"{frame.waiting:g} waiting > SLO {slo.queue:g}"))
    return found


def stall_seconds(tokens_still_s: float | None, probe_waiting_s: float | None, limit_s: float) -> float | None:
    """How long tokens have not flowed, when that is a stall: busy with a still token counter, or a probe that
    has waited for its first token, for at least ``limit_s``."""
    candidates = [s for s in (tokens_still_s, probe_waiting_s) if s is not None and s >= limit_s]
    return max(candidates) if candidates else None


def _stall_message(frame: Frame, stall_s: float) -> str:
    busy = (frame.running or 0.0) + (frame.waiting or 0.0)
    parts = []
    if frame.tokens_still_s is not None and frame.tokens_still_s >= stall_s - 1e-9:
        parts.append(f"{busy:g} requests running or waiting, no token generated for {frame.tokens_still_s:.0f} s")
    if frame.probe_waiting_s is not None and frame.probe_waiting_s >= stall_s - 1e-9:
        parts.append(f"the probe has waited {frame.probe_waiting_s:.0f} s for its first token")
    return "; ".join(parts) + "; /health answers 200"


def duration_text(value_s: float) -> str:
    """``250 ms`` below a second, ``1.50 s`` from one."""
    return f"{value_s * 1000:.0f} ms" if value_s < 1 else f"{value_s:.2f} s"


@dataclass(slots=True)
class Incident:
    """A run of breaches on one endpoint: what breached, the diagnosis, and the bundle captured for it."""

    url: str
    started_s: float
    last_breach_s: float
    kinds: list[str] = field(default_factory=list)
    messages: dict[str, str] = field(default_factory=dict)
    diagnosis: Diagnosis | None = None
    bundle: Path | None = None
    capture_note: str | None = None
    ended_s: float | None = None


@dataclass(frozen=True, slots=True)
class Change:
    """What one frame did to an endpoint's incident."""

    incident: Incident | None
    opened: bool = False
    new_kinds: tuple[str, ...] = ()  # kinds of breach not seen before in this incident
    closed: Incident | None = None


@dataclass(slots=True)
class IncidentTracker:
    """Opens an incident at the first breach, adds to it while breaches go on, closes it after ``quiet_s``
    without one. So one incident gets one capture, however many ticks it breaches."""

    url: str
    quiet_s: float
    current: Incident | None = None

    def update(self, found: list[Breach], now_s: float) -> Change:
        """Account for the breaches of one frame."""
        incident = self.current
        if not found:
            if incident is not None and now_s - incident.last_breach_s >= self.quiet_s:
                incident.ended_s = now_s
                self.current = None
                return Change(None, closed=incident)
            return Change(incident)
        opened = incident is None
        if incident is None:
            incident = self.current = Incident(self.url, now_s, now_s)
        incident.last_breach_s = now_s
        new_kinds = [b.kind for b in found if b.kind not in incident.kinds]
        incident.kinds.extend(new_kinds)
        for b in found:
            incident.messages[b.kind] = b.message
        return Change(incident, opened=opened, new_kinds=tuple(new_kinds))
