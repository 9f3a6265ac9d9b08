"""One watched server: its recent scrapes, what they say over the window, and whether tokens still flow.

Pure: the watcher feeds it scrapes (or failures) and readings; it answers with :class:`Frame` s and
:class:`Event` s. The history never spans a counter reset or a change of histogram buckets: either one starts
the window again, so every delta in it is exact.
"""

from __future__ import annotations

import dataclasses
from collections import deque
from dataclasses import dataclass, field

from llmtriage.capture.gpu import GpuRow
from llmtriage.facts import MetricSnapshot
from llmtriage.parse import prom
from llmtriage.watch import signals
from llmtriage.watch.promql import LATENCY_QUANTILE


@dataclass(frozen=True, slots=True)
class Event:
    """Something that happened to an endpoint: down, up, reset, buckets_changed, breach, recovered, capture..."""

    url: str
    timestamp_s: float
    kind: str
    message: str


@dataclass(slots=True)
class ProbeState:
    """The synthetic request sent now and then (``--probe``)."""

    in_flight_since_s: float | None = None
    last_first_token_s: float | None = None  # seconds from send to the first token of the last answered probe
    last_error: str | None = None  # why the last probe got no token (None: it got one)

    def waiting_s(self, now_s: float) -> float | None:
        """How long the probe in flight has waited for its first token."""
        return None if self.in_flight_since_s is None else now_s - self.in_flight_since_s


@dataclass(frozen=True, slots=True)
class Frame:
    """One endpoint at one tick. Latencies are p95 over the window from histogram deltas; rates per second over
    the window; None is unknown (not scraped, no observation in the window), never 0."""

    url: str
    timestamp_s: float
    up: bool
    error: str | None = None
    engine: str | None = None
    window_s: float | None = None
    ttft_p95_s: float | None = None
    tpot_p95_s: float | None = None
    tpot_from_itl: bool = False  # no per-request TPOT observed in the window: the ITL one stands in
    itl_p95_s: float | None = None
    running: float | None = None
    waiting: float | None = None
    kv_usage_ratio: float | None = None
    preemptions_per_s: float | None = None
    prompt_tokens_per_s: float | None = None
    generation_tokens_per_s: float | None = None
    error_ratio: float | None = None
    tokens_still_s: float | None = None  # requests run or wait and no token has been generated for this long
    health_ok: bool | None = None
    probe_waiting_s: float | None = None
    probe_first_token_s: float | None = None
    probe_error: str | None = None
    gpus: tuple[GpuRow, ...] = ()
    gpu_error: str | None = None


@dataclass(slots=True)
class EndpointState:
    """The recent scrapes of one server and the stall bookkeeping."""

    url: str
    window_s: float
    retention_s: float
    history: deque[MetricSnapshot] = field(default_factory=deque)
    up: bool | None = None
    last_error: str | None = None
    last_token_move_s: float | None = None
    busy_since_s: float | None = None
    probe: ProbeState = field(default_factory=ProbeState)

    def observe(self, snap: MetricSnapshot) -> list[Event]:
        """Take a scrape; a reset or new bucket layout restarts the window."""
        now_s = snap.timestamp_s or 0.0
        events = []
        if self.up is not True:
            if self.up is False:
                events.append(Event(self.url, now_s, "up", "answering /metrics again"))
            self.up = True
            self.last_error = None
        previous = self.history[-1] if self.history else None
        if previous is not None:
            restarted = _restart_reason(previous, snap)
            if restarted is not None:
                kind, message = restarted
                events.append(Event(self.url, now_s, kind, message + "; the window starts again"))
                self.history.clear()
                previous = None
        self._track_tokens(previous, snap, now_s)
        self.history.append(snap)
        while len(self.history) > 2 and (self.history[1].timestamp_s or 0.0) <= now_s - self.retention_s:
            self.history.popleft()
        return events

    def observe_failure(self, error: str, now_s: float) -> list[Event]:
        """A scrape that failed: the endpoint is down (the history stays for when it comes back)."""
        events = []
        if self.up is not False:
            events.append(Event(self.url, now_s, "down", error))
        self.up = False
        self.last_error = error
        self.busy_since_s = None
        return events

    def _track_tokens(self, previous: MetricSnapshot | None, snap: MetricSnapshot, now_s: float) -> None:
        if previous is None or any(
            snap.counters.get(name) != previous.counters.get(name) for name in ("generation_tokens", "decode_steps")
        ):
            self.last_token_move_s = now_s
        busy = (snap.gauges.get("running") or 0.0) + (snap.gauges.get("waiting") or 0.0) > 0
        if not busy:
            self.busy_since_s = None
        elif self.busy_since_s is None:
            self.busy_since_s = now_s

    def tokens_still_s(self, now_s: float) -> float | None:
        """Seconds requests have run or waited without a token generated; None when idle or unknown."""
        if self.busy_since_s is None or self.last_token_move_s is None:
            return None
        if not self.history or "generation_tokens" not in self.history[-1].counters:
            return None
        return now_s - max(self.busy_since_s, self.last_token_move_s)

    def window(self) -> prom.Window | None:
        """The last ``window_s`` of scrapes (from the newest one at or before its start)."""
        if len(self.history) < 2:
            return None
        last = self.history[-1]
        start_s = (last.timestamp_s or 0.0) - self.window_s
        first = self.history[0]
        for snap in self.history:
            if (snap.timestamp_s or 0.0) <= start_s:
                first = snap
            else:
                break
        return prom.window([first, last])

    def stalled_snapshots(self) -> list[MetricSnapshot]:
        """The scrapes since tokens last moved (the evidence of a stall), else the window's."""
        if self.last_token_move_s is None:
            return list(self.history)
        since = [s for s in self.history if (s.timestamp_s or 0.0) >= self.last_token_move_s]
        return since if len(since) >= 2 else list(self.history)

    def window_snapshots(self) -> list[MetricSnapshot]:
        """The scrapes of the window, oldest first."""
        window = self.window()
        if window is None:
            return list(self.history)
        start = window.first.timestamp_s or 0.0
        return [s for s in self.history if (s.timestamp_s or 0.0) >= start]

    def frame(
        self,
        now_s: float,
        gpus: tuple[GpuRow, ...] = (),
        gpu_error: str | None = None,
        health_ok: bool | None = None,
    ) -> Frame:
        """What the endpoint looks like now."""
        probe = self.probe
        base = Frame(
            self.url,
            now_s,
            up=False,
            error=self.last_error,
            health_ok=health_ok,
            probe_waiting_s=probe.waiting_s(now_s),
            probe_first_token_s=probe.last_first_token_s,
            probe_error=probe.last_error,
            gpus=gpus,
            gpu_error=gpu_error,
        )
        if self.up is not True or not self.history:
            return base
        last = self.history[-1]
        window = self.window()
        w = _windowed(window) if window is not None else Windowed()
        return dataclasses.replace(
            base,
            up=True,
            engine=last.engine,
            window_s=window.seconds if window is not None else None,
            ttft_p95_s=w.ttft_p95_s,
            tpot_p95_s=w.tpot_p95_s,
            tpot_from_itl=w.tpot_from_itl,
            itl_p95_s=w.itl_p95_s,
            running=last.gauges.get("running"),
            waiting=last.gauges.get("waiting"),
            kv_usage_ratio=last.gauges.get("kv_usage_ratio"),
            preemptions_per_s=w.preemptions_per_s,
            prompt_tokens_per_s=w.prompt_tokens_per_s,
            generation_tokens_per_s=w.generation_tokens_per_s,
            error_ratio=w.error_ratio,
            tokens_still_s=self.tokens_still_s(now_s),
        )


@dataclass(frozen=True, slots=True)
class Windowed:
    """What a window of scrapes says: p95 latencies (s) and rates (per s)."""

    ttft_p95_s: float | None = None
    tpot_p95_s: float | None = None
    tpot_from_itl: bool = False
    itl_p95_s: float | None = None
    preemptions_per_s: float | None = None
    prompt_tokens_per_s: float | None = None
    generation_tokens_per_s: float | None = None
    error_ratio: float | None = None


def _windowed(window: prom.Window) -> Windowed:
    def p95(name: str) -> float | None:
        return prom.quantile(window.histogram(name), LATENCY_QUANTILE)

    tpot = next(((n, v) for n in prom.PER_TOKEN_HISTOGRAMS if (v := p95(n)) is not None), (None, None))
    bad, total = signals.error_counters(window.last.engine)
    total_delta = window.delta(total)
    bad_delta = window.delta(bad, appeared_from_zero=total_delta is not None)
    return Windowed(
        ttft_p95_s=p95("ttft_seconds"),
        tpot_p95_s=tpot[1],
        tpot_from_itl=tpot[0] == "itl_seconds",
        itl_p95_s=p95("itl_seconds"),
        preemptions_per_s=window.rate("preemptions"),
        prompt_tokens_per_s=window.rate("prompt_tokens"),
        generation_tokens_per_s=window.rate("generation_tokens"),
        error_ratio=(bad_delta or 0.0) / total_delta if total_delta else None,
    )


def _restart_reason(old: MetricSnapshot, new: MetricSnapshot) -> tuple[str, str] | None:
    """Why ``new`` cannot be subtracted from ``old``: counters fell (a restart), or histogram buckets changed."""
    for name, value in new.counters.items():
        before = old.counters.get(name)
        if before is not None and value < before:
            return "reset", f"{new.raw_names.get(name, name)} fell from {before:g} to {value:g} (server restarted?)"
    for name, hist in new.histograms.items():
        before_hist = old.histograms.get(name)
        if before_hist is None:
            continue
        if [b for b, _ in before_hist.buckets] != [b for b, _ in hist.buckets]:
            return "buckets_changed", f"the buckets of {new.raw_names.get(name, name)} changed"
        if hist.count < before_hist.count:
            return "reset", f"{new.raw_names.get(name, name)} count fell (server restarted?)"
    return None
