"""The watch loop: every interval, scrape each server (and its GPU), compute the window, check the SLOs and
the token flow, diagnose a breach, capture a bundle once per incident, and record everything in SQLite.

Each server has its own task, so a slow or vanished one never delays the others; a publisher task writes the
database and hands the state to the display once per interval. Nothing here prints.
"""

from __future__ import annotations

import asyncio
import contextlib
import sqlite3
import time
import urllib.parse
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import aiohttp

from llmtriage.capture import CapturePlan, GpuMode, StopSignal, capture
from llmtriage.capture.nvml import Nvml
from llmtriage.capture.plan import safe_name
from llmtriage.catalog import Thresholds
from llmtriage.diagnose.engine import diagnose
from llmtriage.diagnose.model import Diagnosis
from llmtriage.errors import LlmtriageError
from llmtriage.evidence.live import server_url
from llmtriage.facts import Evidence, MetricsFacts
from llmtriage.parse.prom import ScrapeReader
from llmtriage.watch import gpu, http
from llmtriage.watch.breach import STALL, Breach, Incident, IncidentTracker, breaches, stall_seconds
from llmtriage.watch.endpoint import EndpointState, Event, Frame
from llmtriage.watch.store import Store

MIN_SCRAPE_TIMEOUT_S = 5.0
HEALTH_TIMEOUT_S = 3.0
PROBE_INTERVAL_S = 15.0
PROBE_TIMEOUT_S = 60.0
INCIDENT_QUIET_S = 60.0
EVENTS_KEPT = 200


@dataclass(frozen=True, slots=True)
class Target:
    """One server to watch: its /metrics URL, and where its GPU is read (None, ``nvml`` or a telemetry URL)."""

    metrics_url: str
    gpu_source: str | None = None


@dataclass(frozen=True, slots=True)
class WatchConfig:
    """What to watch, against which objectives, and what to keep."""

    targets: tuple[Target, ...]
    thresholds: Thresholds
    interval_s: float = 1.0
    window_s: float = 30.0
    probe: bool = False
    capture_dir: Path | None = None
    capture_duration_s: float = 10.0
    db_path: Path | None = None
    duration_s: float | None = None
    incident_quiet_s: float = INCIDENT_QUIET_S


@dataclass(slots=True)
class WatchState:
    """What the display shows: the latest frame of each server, open and closed incidents, recent events."""

    frames: dict[str, Frame] = field(default_factory=dict)
    breached: dict[str, frozenset[str]] = field(default_factory=dict)  # the kinds of breach in each latest frame
    open_incidents: dict[str, Incident] = field(default_factory=dict)
    closed_incidents: list[Incident] = field(default_factory=list)
    events: deque[Event] = field(default_factory=lambda: deque(maxlen=EVENTS_KEPT))
    answered: set[str] = field(default_factory=set)  # the servers that answered at least once
    db_error: str | None = None

    @property
    def incidents(self) -> list[Incident]:
        """Every incident so far, oldest first."""
        return sorted([*self.closed_incidents, *self.open_incidents.values()], key=lambda i: i.started_s)


@dataclass(slots=True)
class _Watched:
    target: Target
    endpoint: EndpointState
    tracker: IncidentTracker
    gpu_readings: deque[gpu.GpuReading]
    problem: str | None = None  # what was wrong with the last scrape, said once until it changes
    model: str | None = None


class Watcher:
    """Watches the targets of a :class:`WatchConfig` until stopped or its duration has passed."""

    def __init__(
        self,
        config: WatchConfig,
        on_update: Callable[[WatchState], None] | None = None,
        nvml: Nvml | None = None,
    ) -> None:
        self.config = config
        self.on_update = on_update or (lambda _: None)
        self.nvml = nvml or Nvml()
        self.reader = ScrapeReader()
        self.state = WatchState()
        retention_s = max(config.window_s, config.thresholds.stall_seconds) + 2 * config.interval_s
        keep = max(int(config.window_s / config.interval_s) + 2, 2)
        self.watched = [
            _Watched(
                target=t,
                endpoint=EndpointState(t.metrics_url, config.window_s, retention_s),
                tracker=IncidentTracker(t.metrics_url, config.incident_quiet_s),
                gpu_readings=deque(maxlen=keep),
            )
            for t in config.targets
        ]
        self._pending_frames: list[Frame] = []
        self._pending_events: list[Event] = []
        self._captures: list[tuple[StopSignal, asyncio.Task[None]]] = []

    async def run(self, stop: asyncio.Event | None = None) -> WatchState:
        """Watch until ``stop`` is set or the configured duration has passed; returns the final state."""
        stop = stop or asyncio.Event()
        store = Store(self.config.db_path) if self.config.db_path is not None else None
        try:
            async with http.session(len(self.watched)) as session:
                tasks = [asyncio.create_task(self._watch(session, w, stop)) for w in self.watched]
                if self.config.probe:
                    tasks += [asyncio.create_task(self._probe(session, w, stop)) for w in self.watched]
                tasks.append(asyncio.create_task(self._publish(store, stop)))
                if self.config.duration_s is not None:
                    tasks.append(asyncio.create_task(_stop_after(stop, self.config.duration_s)))
                stopped = asyncio.create_task(stop.wait())
                try:
                    # every task runs until stop is set: one that ends before has failed, and ends the watch
                    await asyncio.wait([*tasks, stopped], return_when=asyncio.FIRST_COMPLETED)
                finally:
                    stop.set()
                    outcomes = await asyncio.gather(*tasks, stopped, return_exceptions=True)
                    await self._finish_captures()
                    self._flush(store)
                for outcome in outcomes:
                    if isinstance(outcome, Exception):
                        raise outcome
        finally:
            if store is not None:
                store.close()
            self.nvml.stop()
        return self.state

    # ------------------------------------------------------------ one server

    async def _watch(self, session: aiohttp.ClientSession, watched: _Watched, stop: asyncio.Event) -> None:
        interval = self.config.interval_s
        due = time.monotonic()
        while not stop.is_set():
            await self._tick(session, watched, stop)
            due += interval
            delay = due - time.monotonic()
            if delay < 0:  # a slow scrape: skip the ticks it missed
                due = time.monotonic()
                delay = 0.0
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(stop.wait(), delay)

    async def _tick(self, session: aiohttp.ClientSession, watched: _Watched, stop: asyncio.Event) -> None:
        config = self.config
        endpoint = watched.endpoint
        url = watched.target.metrics_url
        timeout_s = max(MIN_SCRAPE_TIMEOUT_S, config.interval_s)
        now_s = time.time()
        source = watched.target.gpu_source
        if source is not None:
            answer, reading = await asyncio.gather(
                http.get(session, url, timeout_s), gpu.read(session, source, self.nvml)
            )
            watched.gpu_readings.append(reading)
        else:
            answer, reading = await http.get(session, url, timeout_s), None
        if answer.ok:
            snap, problems = self.reader.read(answer.body.decode("utf-8", "replace"), url, now_s)
            if snap.raw_names or snap.engine is not None:
                events = endpoint.observe(snap)
                self.state.answered.add(url)
                problem = "; ".join(p.message for p in problems) or None
                if problem is not None and problem != watched.problem:
                    events.append(Event(url, now_s, "problem", problem))
                watched.problem = problem
            else:
                why = "; ".join(p.message for p in problems) or "an empty answer"
                events = endpoint.observe_failure(f"not an inference server's metrics: {why}", now_s)
        else:
            events = endpoint.observe_failure(answer.error or f"HTTP {answer.status}", now_s)
        health = await self._health_if_stalled(session, watched, now_s)
        if stop.is_set():  # stopped while reading: the probe is gone, this frame would not say what was seen
            return
        frame = endpoint.frame(
            now_s,
            reading.rows if reading is not None else (),
            reading.error if reading is not None else None,
            health,
        )
        found = breaches(frame, config.thresholds)
        events += self._account(watched, frame, found)
        self.state.frames[url] = frame
        self.state.breached[url] = frozenset(b.kind for b in found)
        self._pending_frames.append(frame)
        self._pending_events.extend(events)
        self.state.events.extend(events)

    async def _health_if_stalled(self, session: aiohttp.ClientSession, watched: _Watched, now_s: float) -> bool | None:
        """GET /health only when tokens seem not to flow (a stall needs the API to answer)."""
        endpoint = watched.endpoint
        if endpoint.up is not True:
            return None
        limit = self.config.thresholds.stall_seconds
        if stall_seconds(endpoint.tokens_still_s(now_s), endpoint.probe.waiting_s(now_s), limit) is None:
            return None
        answer = await http.get(session, server_url(watched.target.metrics_url) + "/health", HEALTH_TIMEOUT_S)
        return answer.ok

    def _account(self, watched: _Watched, frame: Frame, found: list[Breach]) -> list[Event]:
        """Open, grow or close the incident; diagnose what is new; capture once per incident."""
        url = watched.target.metrics_url
        change = watched.tracker.update(found, frame.timestamp_s)
        events: list[Event] = []
        if change.closed is not None:
            self.state.open_incidents.pop(url, None)
            self.state.closed_incidents.append(change.closed)
            events.append(Event(url, frame.timestamp_s, "recovered", "no breach for the quiet period"))
        incident = change.incident
        if incident is None or not change.new_kinds:
            return events
        self.state.open_incidents[url] = incident
        new = [b.message for b in found if b.kind in change.new_kinds]
        events.append(Event(url, frame.timestamp_s, "breach", "; ".join(new)))
        incident.diagnosis = self._diagnose(watched, frame, stalled=STALL in incident.kinds)
        found_now = incident.diagnosis
        if found_now is not None:
            top = f": {found_now.causes[0].id} ({found_now.causes[0].confidence:.0%})" if found_now.causes else ""
            events.append(Event(url, frame.timestamp_s, "diagnosis", f"{found_now.symptom_class}{top}"))
        if change.opened and self.config.capture_dir is not None:
            self._start_capture(watched, incident)
        return events

    def _diagnose(self, watched: _Watched, frame: Frame, stalled: bool) -> Diagnosis | None:
        endpoint = watched.endpoint
        snapshots = endpoint.stalled_snapshots() if stalled else endpoint.window_snapshots()
        if not snapshots:
            return None
        source = watched.target.gpu_source
        evidence = Evidence(
            origin=watched.target.metrics_url,
            metrics=MetricsFacts(snapshots=snapshots),
            gpu=gpu.facts(watched.gpu_readings, source) if source is not None else None,
            health_ok=frame.health_ok,
            read=[f"{len(snapshots)} scrapes of {watched.target.metrics_url}"],
        )
        return diagnose(evidence, self.config.thresholds)

    # ------------------------------------------------------------ capture

    def _start_capture(self, watched: _Watched, incident: Incident) -> None:
        config = self.config
        assert config.capture_dir is not None
        source = watched.target.gpu_source
        if source is None:
            mode, gpu_url = GpuMode.auto, None
        elif source == gpu.NVML:
            mode, gpu_url = GpuMode.nvml, None
        else:
            mode, gpu_url = GpuMode.url, source
        netloc = urllib.parse.urlsplit(watched.target.metrics_url).netloc
        plan = CapturePlan(
            out_dir=config.capture_dir,
            metrics_url=watched.target.metrics_url,
            gpu=mode,
            gpu_url=gpu_url,
            duration_s=config.capture_duration_s,
            interval_s=config.interval_s,
            label=safe_name(f"watch-{netloc}"),
        )
        signal = StopSignal()
        incident.capture_note = "capturing"
        task = asyncio.create_task(self._capture(plan, signal, incident))
        self._captures.append((signal, task))

    async def _capture(self, plan: CapturePlan, signal: StopSignal, incident: Incident) -> None:
        url = incident.url
        try:
            result = await asyncio.to_thread(capture, plan, stop=signal)
        except LlmtriageError as e:
            incident.capture_note = f"capture failed: {e.message}"
            self._note(Event(url, time.time(), "capture_failed", e.message))
            return
        incident.bundle = result.path
        incident.capture_note = "partial (watch stopped)" if result.manifest.partial else None
        self._note(Event(url, time.time(), "capture", str(result.path)))

    async def _finish_captures(self) -> None:
        for signal, _ in self._captures:
            signal.set("watch stopped")
        await asyncio.gather(*(task for _, task in self._captures), return_exceptions=True)

    # ------------------------------------------------------------ probe

    async def _probe(self, session: aiohttp.ClientSession, watched: _Watched, stop: asyncio.Event) -> None:
        """A one-token completion every PROBE_INTERVAL_S while the server answers /metrics; one in flight."""
        base = server_url(watched.target.metrics_url)
        while not stop.is_set():
            wait_s = self.config.interval_s
            if watched.endpoint.up:
                if watched.model is None:
                    watched.model = await http.served_model(session, base, HEALTH_TIMEOUT_S)
                sending = asyncio.create_task(
                    http.probe(session, base, watched.model, watched.endpoint.probe, PROBE_TIMEOUT_S)
                )
                stopping = asyncio.create_task(stop.wait())
                await asyncio.wait({sending, stopping}, return_when=asyncio.FIRST_COMPLETED)
                for task in (sending, stopping):
                    task.cancel()
                wait_s = PROBE_INTERVAL_S
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(stop.wait(), wait_s)

    # ------------------------------------------------------------ publishing

    def _note(self, event: Event) -> None:
        self._pending_events.append(event)
        self.state.events.append(event)

    async def _publish(self, store: Store | None, stop: asyncio.Event) -> None:
        while not stop.is_set():
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(stop.wait(), self.config.interval_s)
            self._flush(store)
            self.on_update(self.state)

    def _flush(self, store: Store | None) -> None:
        frames, events = self._pending_frames, self._pending_events
        self._pending_frames, self._pending_events = [], []
        if store is None or self.state.db_error is not None:
            return
        try:
            store.record(frames, events)
        except sqlite3.Error as e:
            self.state.db_error = f"{store.path}: {e}; recording stopped"


async def _stop_after(stop: asyncio.Event, duration_s: float) -> None:
    with contextlib.suppress(TimeoutError):
        await asyncio.wait_for(stop.wait(), duration_s)
    stop.set()
