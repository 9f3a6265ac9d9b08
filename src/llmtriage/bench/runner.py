"""Run a benchmark: closed or open loop, in one event loop or spread over worker processes.

One Python event loop saturates long before a fast server does (each streamed read costs tens of
microseconds), so a run can split its load over ``workers`` processes that share one time origin
(``perf_counter`` is the system's monotonic clock, the same in every process): worker ``k`` sends requests
``k, k + workers, ...`` and holds its share of the concurrency. Each worker watches its own event-loop lag
and CPU time, so a saturated client shows in the result instead of hiding in the numbers.

The parent lists the model, scrapes /metrics before, during and after, reports progress, and on ``stop``
(Ctrl-C, SIGTERM) asks every worker to cut its requests short and return what it has.

``duration_s`` is a deadline, not only the end of sending: requests still open when it passes get as long as the
slowest completed request took, then end as timeouts, so a stalled server can't hold the run for ``timeout_s``.
"""

from __future__ import annotations

import asyncio
import contextlib
import gc
import itertools
import json
import multiprocessing
import secrets
import signal
import time
from collections.abc import Callable, Coroutine
from dataclasses import dataclass, replace
from multiprocessing.connection import Connection
from multiprocessing.process import BaseProcess
from time import perf_counter
from typing import Any

import aiohttp

from llmtriage import aio
from llmtriage.bench.client import error_message, send, wire_trace
from llmtriage.bench.model import (
    INTERRUPTED,
    BenchConfig,
    PlannedRequest,
    RawScrape,
    RequestRecord,
    RunOutcome,
    WorkerReport,
)
from llmtriage.bench.plan import RequestFactory, arrival_offsets_s, share
from llmtriage.errors import UnavailableError
from llmtriage.urls import public_url

LAG_PROBE_S = 0.05
PROGRESS_EVERY_S = 0.25
WORKER_START_TIMEOUT_S = 60.0
WORKER_STOP_TIMEOUT_S = 10.0
SCRAPE_TIMEOUT_S = 5.0
_START_MARGIN_S = 0.05


@dataclass(slots=True)
class Counts:
    """Running totals for a progress display."""

    sent: int = 0
    done: int = 0
    failed: int = 0
    output_tokens: int = 0

    def add(self, other: Counts) -> None:
        """Add ``other``'s totals to these."""
        self.sent += other.sent
        self.done += other.done
        self.failed += other.failed
        self.output_tokens += other.output_tokens


ProgressFn = Callable[[Counts], None]


def request_headers(config: BenchConfig) -> dict[str, str]:
    """Headers of every API request (the key as a bearer token when given)."""
    headers = {"Content-Type": "application/json", "Accept": "text/event-stream"}
    if config.api_key:
        headers["Authorization"] = f"Bearer {config.api_key}"
    return headers


async def run(config: BenchConfig, stop: asyncio.Event, on_progress: ProgressFn | None = None) -> RunOutcome:
    """Run the benchmark ``config`` describes until its requests or duration are done, or ``stop`` is set."""
    started_at = time.time()
    notes: list[str] = []
    if not config.run_id:
        config = replace(config, run_id=secrets.token_hex(4))
    scrapes: list[RawScrape] = []
    timeout = aiohttp.ClientTimeout(total=SCRAPE_TIMEOUT_S)
    async with aiohttp.ClientSession(timeout=timeout) as session:
        if config.model is None:
            model, note = await first_model(session, config)
            config = replace(config, model=model)
            if note:
                notes.append(note)
        if config.metrics_url:
            scrapes.append(await scrape(session, config.metrics_url))
        counts = [Counts() for _ in range(config.workers)]
        side = [asyncio.create_task(_report_progress(counts, on_progress))]
        if config.metrics_url and config.scrape_interval_s:
            side.append(
                asyncio.create_task(_scrape_every(session, config.metrics_url, config.scrape_interval_s, scrapes))
            )
        cpu_before = time.process_time()
        try:
            if config.workers == 1:
                origin = perf_counter()
                reports = [await drive(config, 0, 1, origin, stop, counts[0])]
            else:
                origin, reports = await _run_workers(config, stop, counts)
        finally:
            for task in side:
                task.cancel()
            await asyncio.wait(side)
        coordinator_cpu_s = time.process_time() - cpu_before
        if on_progress is not None:
            on_progress(_total(counts))
        if config.metrics_url:
            scrapes.append(await scrape(session, config.metrics_url))
    records = sorted((r for report in reports for r in report.records), key=lambda r: r.index)
    notes.extend(f"worker {r.worker}: {r.error}" for r in reports if r.error)
    return RunOutcome(
        config=config,
        records=tuple(records),
        workers=tuple(reports),
        scrapes=tuple(scrapes),
        perf_origin_s=origin,
        started_at_s=started_at,
        finished_at_s=time.time(),
        interrupted=stop.is_set(),
        notes=tuple(notes),
        coordinator_cpu_s=0.0 if config.workers == 1 else coordinator_cpu_s,
    )


async def first_model(session: aiohttp.ClientSession, config: BenchConfig) -> tuple[str | None, str | None]:
    """The id of the first model ``GET /v1/models`` lists, or None and why not."""
    url = config.base_url + "/v1/models"
    shown = public_url(url)
    try:
        async with session.get(url, headers=request_headers(config)) as response:
            body = await response.read()
    except (aiohttp.ClientError, OSError, TimeoutError) as e:
        return None, f"could not list models at {shown}: {type(e).__name__}: {e}; requests carry no model name"
    if response.status != 200:
        reason = f"HTTP {response.status}: {error_message(body)}"
        return None, f"could not list models at {shown} ({reason}); requests carry no model name"
    try:
        data: Any = json.loads(body)
        model = data["data"][0]["id"]
    except (ValueError, KeyError, IndexError, TypeError):
        return None, f"{shown} listed no model; requests carry no model name"
    return (str(model), None) if model else (None, f"{shown} listed a model without an id")


async def scrape(session: aiohttp.ClientSession, url: str) -> RawScrape:
    """One /metrics body, or why there is none."""
    at = time.time()
    try:
        async with session.get(url, headers={"Accept": "text/plain"}) as response:
            body = await response.read()
    except (aiohttp.ClientError, OSError, TimeoutError) as e:
        return RawScrape(at, None, f"{type(e).__name__}: {e}")
    if response.status != 200:
        return RawScrape(at, None, f"HTTP {response.status}")
    return RawScrape(at, body.decode("utf-8", "replace"))


async def _scrape_every(session: aiohttp.ClientSession, url: str, every_s: float, into: list[RawScrape]) -> None:
    while True:
        await asyncio.sleep(every_s)
        into.append(await scrape(session, url))


def _total(counts: list[Counts]) -> Counts:
    total = Counts()
    for c in counts:
        total.add(c)
    return total


async def _report_progress(counts: list[Counts], on_progress: ProgressFn | None) -> None:
    if on_progress is None:
        return
    while True:
        on_progress(_total(counts))
        await asyncio.sleep(PROGRESS_EVERY_S)


# ---------------------------------------------------------------- one worker


class _Load:
    """One worker's share of the load: sends, records, and the tasks to cut short on stop."""

    def __init__(self, config: BenchConfig, worker: int, workers: int, origin: float, counts: Counts) -> None:
        self.config = config
        self.worker = worker
        self.workers = workers
        self.origin = origin
        self.counts = counts
        self.factory = RequestFactory(config)
        self.headers = request_headers(config)
        self.url = config.api_url
        self.records: list[RequestRecord] = []
        self.tasks: set[asyncio.Task[None]] = set()
        self.stopping = False
        end = None if config.duration_s is None else config.warmup_s + config.duration_s
        self.deadline = None if end is None else origin + end
        self.slowest_ok_s = 0.0
        self.out_of_time: str | None = None  # once the deadline's grace ran out: why requests cut short timed out

    def _spawn(self, coro: Coroutine[Any, Any, None]) -> None:
        task: asyncio.Task[None] = asyncio.create_task(coro)
        self.tasks.add(task)
        task.add_done_callback(self.tasks.discard)

    def _warmup(self, index: int, offset_s: float) -> bool:
        return index < self.config.warmup_requests or offset_s < self.config.warmup_s

    async def _send(self, session: aiohttp.ClientSession, planned: PlannedRequest, scheduled: float) -> None:
        self.counts.sent += 1
        record = await send(session, self.url, planned, self.headers, self.origin, scheduled)
        if record.error_kind == INTERRUPTED and self.out_of_time is not None:
            record = replace(record, error_kind="timeout", error=self.out_of_time)
        self.records.append(record)
        if record.ok:
            self.slowest_ok_s = max(self.slowest_ok_s, (record.e2e_ms or 0.0) / 1000.0)
            self.counts.done += 1
            self.counts.output_tokens += record.output_tokens
        elif record.error_kind != INTERRUPTED:
            self.counts.failed += 1

    async def closed(self, session: aiohttp.ClientSession) -> None:
        """Keep this worker's share of ``concurrency`` requests in flight."""
        config = self.config
        indices = itertools.count(self.worker, self.workers)
        left = None if config.requests is None else share(config.requests, self.worker, self.workers)

        async def slot() -> None:
            nonlocal left
            while not self.stopping:
                now = perf_counter()
                if self.deadline is not None and now >= self.deadline:
                    return
                index = next(indices)
                warmup = self._warmup(index, now - self.origin)
                if not warmup and left is not None:
                    if left <= 0:
                        return
                    left -= 1
                await self._send(session, self.factory.make(index, warmup), now)

        for _ in range(share(config.concurrency or 1, self.worker, self.workers)):
            self._spawn(slot())
        while self.tasks:
            await asyncio.wait(set(self.tasks))

    async def open(self, session: aiohttp.ClientSession) -> None:
        """Send at the arrival times of the run's schedule, capped by this worker's share of ``concurrency``."""
        config = self.config
        cap = None if config.concurrency is None else max(1, share(config.concurrency, self.worker, self.workers))
        slots = None if cap is None else asyncio.Semaphore(cap)
        total = None if config.requests is None else config.warmup_requests + config.requests

        async def one(planned: PlannedRequest, scheduled: float) -> None:
            async with slots or contextlib.nullcontext():
                await self._send(session, planned, scheduled)

        for index, offset in enumerate(arrival_offsets_s(config)):
            scheduled = self.origin + offset
            if (total is not None and index >= total) or (self.deadline is not None and scheduled >= self.deadline):
                break
            if index % self.workers != self.worker:
                continue
            planned = self.factory.make(index, self._warmup(index, offset))  # built ahead: sent on time
            await aio.sleep_until(scheduled)
            if self.stopping:
                return
            self._spawn(one(planned, scheduled))
        while self.tasks:
            await asyncio.wait(set(self.tasks))

    async def overrun(self) -> None:
        """Return when requests still open at the deadline have had as long as the slowest completed one took.

        A healthy server finishes what it was sent; a stalled one (nothing completed: no grace) is cut at the
        deadline. Those cut then become timeouts, not interruptions: the server did not answer in time.
        """
        assert self.deadline is not None
        await aio.sleep_until(self.deadline)
        grace_s = self.slowest_ok_s
        await aio.sleep_until(self.deadline + grace_s)
        duration = f"{self.config.duration_s:g} s"
        self.out_of_time = (
            f"still open {grace_s:.1f} s (the slowest completed request's time) after the end of --duration ({duration})"
            if grace_s
            else f"no answer by the end of --duration ({duration})"
        )

    async def cut_short(self, load: asyncio.Task[None]) -> None:
        """Stop sending and cancel what is in flight (each becomes an ``interrupted`` record, or a ``timeout``
        one past the deadline)."""
        self.stopping = True
        load.cancel()
        for task in list(self.tasks):
            task.cancel()
        await asyncio.wait({load, *self.tasks})


async def _watch_lag(samples: list[float]) -> None:
    """How late the event loop wakes a sleeper: the delay every callback in it suffers, in ms."""
    while True:
        before = perf_counter()
        await asyncio.sleep(LAG_PROBE_S)
        samples.append(max(0.0, perf_counter() - before - LAG_PROBE_S) * 1000.0)


async def drive(
    config: BenchConfig, worker: int, workers: int, origin: float, stop: asyncio.Event, counts: Counts
) -> WorkerReport:
    """Run worker ``worker`` of ``workers`` from ``origin`` (perf_counter seconds) until done or ``stop``."""
    load = _Load(config, worker, workers, origin, counts)
    lag: list[float] = []
    # What exists now (imports, the prompt pool) outlives the run: frozen, it is out of the collector's sight, so a
    # full collection during the run walks only the run's objects (the CLI process starts a run holding ~49,000:
    # walking them stalled a 512-stream run for 22 ms, every token waiting).
    gc.freeze()
    cpu_before, wall_before = time.process_time(), perf_counter()
    connector = aiohttp.TCPConnector(limit=0, ttl_dns_cache=300)
    timeout = aiohttp.ClientTimeout(total=config.timeout_s)
    try:
        async with aiohttp.ClientSession(connector=connector, timeout=timeout, trace_configs=[wire_trace()]) as session:
            await aio.sleep_until(origin)
            watcher = asyncio.create_task(_watch_lag(lag))
            task = asyncio.create_task(load.closed(session) if config.closed_loop else load.open(session))
            sides = {watcher, asyncio.create_task(stop.wait())}
            if load.deadline is not None:
                sides.add(asyncio.create_task(load.overrun()))
            await asyncio.wait({task, *sides}, return_when=asyncio.FIRST_COMPLETED)
            if not task.done():
                await load.cut_short(task)
            for side in sides:
                side.cancel()
            await asyncio.wait(sides)
    finally:
        gc.unfreeze()
    return WorkerReport(
        worker=worker,
        records=tuple(load.records),
        loop_lag_ms=tuple(lag),
        cpu_s=time.process_time() - cpu_before,
        wall_s=perf_counter() - wall_before,
    )


# ---------------------------------------------------------------- worker processes


def _worker_process(conn: Connection, config: BenchConfig, worker: int, workers: int) -> None:
    """A worker process. Ctrl-C, and SIGTERM from ``timeout`` or CI, reach the whole process group: the parent
    alone acts on them, telling each worker to stop and return what it has."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    aio.run(_worker_main(conn, config, worker, workers))


async def _worker_main(conn: Connection, config: BenchConfig, worker: int, workers: int) -> None:
    loop = asyncio.get_running_loop()
    stop = asyncio.Event()
    go: asyncio.Future[float | None] = loop.create_future()

    def readable() -> None:
        try:
            while conn.poll():
                message = conn.recv()
                if message[0] == "go" and not go.done():
                    go.set_result(message[1])
                elif message[0] == "stop":
                    stop.set()
        except (EOFError, OSError):  # the parent is gone
            loop.remove_reader(conn.fileno())
            stop.set()
            if not go.done():
                go.set_result(None)

    aio.watch_connection(loop, conn, readable)
    conn.send(("ready",))
    origin = await go
    if origin is None:
        return
    counts = Counts()

    async def report_counts() -> None:
        while True:
            await asyncio.sleep(PROGRESS_EVERY_S)
            conn.send(("counts", counts))

    reporter = asyncio.create_task(report_counts())
    try:
        report = await drive(config, worker, workers, origin, stop, counts)
    except Exception as e:  # isolate one worker: its failure is reported, the others carry on
        report = _lost(worker, f"failed: {type(e).__name__}: {e}")
    reporter.cancel()
    await asyncio.wait({reporter})
    conn.send(("counts", counts))
    conn.send(("done", report))


@dataclass(slots=True)
class _Link:
    worker: int
    process: BaseProcess
    conn: Connection
    ready: asyncio.Future[None]
    done: asyncio.Future[WorkerReport]


async def _run_workers(
    config: BenchConfig, stop: asyncio.Event, counts: list[Counts]
) -> tuple[float, list[WorkerReport]]:
    loop = asyncio.get_running_loop()
    context = multiprocessing.get_context("spawn")
    links: list[_Link] = []

    def readable(link: _Link) -> None:
        try:
            while link.conn.poll():
                kind, *rest = link.conn.recv()
                if kind == "ready" and not link.ready.done():
                    link.ready.set_result(None)
                elif kind == "counts":
                    counts[link.worker] = rest[0]
                elif kind == "done" and not link.done.done():
                    link.done.set_result(rest[0])
        except (EOFError, OSError):
            loop.remove_reader(link.conn.fileno())
            if not link.done.done():
                link.done.set_result(_lost(link.worker, "exited without returning its results"))

    for worker in range(config.workers):
        parent_end, child_end = context.Pipe()
        process = context.Process(
            target=_worker_process,
            args=(child_end, config, worker, config.workers),
            name=f"llmtriage-bench-{worker}",
            daemon=True,
        )
        process.start()
        child_end.close()
        link = _Link(worker, process, parent_end, loop.create_future(), loop.create_future())
        aio.watch_connection(loop, parent_end, readable, link)
        links.append(link)
    try:
        try:
            await asyncio.wait_for(asyncio.gather(*(link.ready for link in links)), WORKER_START_TIMEOUT_S)
        except TimeoutError as e:
            raise UnavailableError(
                f"bench workers did not start within {WORKER_START_TIMEOUT_S:g} s", "try --workers 1"
            ) from e
        origin = perf_counter() + _START_MARGIN_S
        for link in links:
            link.conn.send(("go", origin))
        finished: asyncio.Future[list[WorkerReport]] = asyncio.gather(*(link.done for link in links))
        stopper = asyncio.create_task(stop.wait())
        either: set[asyncio.Future[Any]] = {finished, stopper}
        await asyncio.wait(either, return_when=asyncio.FIRST_COMPLETED)
        stopper.cancel()
        if not finished.done():
            for link in links:
                if not link.done.done():
                    link.conn.send(("stop",))
            await asyncio.wait({finished}, timeout=WORKER_STOP_TIMEOUT_S)
        reports = [
            link.done.result() if link.done.done() else _lost(link.worker, "did not answer the stop in time")
            for link in links
        ]
        return origin, reports
    finally:
        for link in links:
            loop.remove_reader(link.conn.fileno())
            link.conn.close()
        for link in links:
            await asyncio.to_thread(link.process.join, WORKER_STOP_TIMEOUT_S)
            if link.process.is_alive():
                link.process.kill()  # SIGTERM is ignored in a worker


def _lost(worker: int, why: str) -> WorkerReport:
    return WorkerReport(worker, (), (), 0.0, 0.0, error=why)
