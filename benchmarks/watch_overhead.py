"""CPU that `llmtriage watch` uses to watch 50 servers every second, against a plain loop of HTTP GETs.

A helper process serves 50 endpoints on 127.0.0.1, each a real vLLM 0.32 scrape
(tests/fixtures/vllm-cpu/metrics/after-load.txt, ~55 KB, ~460 samples) whose counters and histograms grow on
every request, so no two scrapes are alike. In the same run, this process then spends --seconds on each of:
  baseline: GET the 50 /metrics URLs every second and read the bodies (the same aiohttp session `watch` uses)
  watch:    the full watch loop on the same 50 URLs: scrape, parse, windowed p95s and rates, SLO and stall
            checks, SQLite recording, and the display rendered every second (into a buffer)
and prints the CPU each used as a share of one core (user + system time over wall time), and their ratio.
Modules are imported and the catalogs loaded before either run is timed: a one-time cost of ~0.5 s that would
otherwise count as 2-3% of a core in a 20 s run. Both run on the event loop `llmtriage watch` uses (uvloop).
Target: watch < 10% of one core.
"""

from __future__ import annotations

import argparse
import asyncio
import io
import resource
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from rich.console import Console

from llmtriage import aio, catalog
from llmtriage.watch import http, signals, view
from llmtriage.watch.watcher import Target, WatchConfig, Watcher, WatchState

ROOT = Path(__file__).resolve().parent.parent
SCRAPE = ROOT / "tests" / "fixtures" / "vllm-cpu" / "metrics" / "after-load.txt"
GROWING = ("_total", "_bucket", "_count", "_sum")


def free_ports(count: int) -> list[int]:
    sockets = []
    for _ in range(count):
        s = socket.socket()
        s.bind(("127.0.0.1", 0))
        sockets.append(s)
    ports = [int(s.getsockname()[1]) for s in sockets]
    for s in sockets:
        s.close()
    return ports


def serve(ports: list[int]) -> None:
    """The helper process: every port answers /metrics with the recorded scrape, its counters grown per request."""
    from aiohttp import web

    lines = SCRAPE.read_text().splitlines()
    template: list[tuple[str, float | None]] = []
    for line in lines:
        if line.startswith("#") or not line.strip():
            template.append((line, None))
            continue
        head, _, value = line.rpartition(" ")
        name = head.split("{", 1)[0]
        template.append((head, float(value)) if name.endswith(GROWING) else (line, None))
    served = [0]

    async def metrics(request: web.Request) -> web.Response:
        served[0] += 1
        n = served[0]
        out = [head if value is None else f"{head} {value + n * (1 + value % 7)}" for head, value in template]
        return web.Response(text="\n".join(out) + "\n", content_type="text/plain")

    async def main() -> None:
        app = web.Application()
        app.router.add_get("/metrics", metrics)
        runner = web.AppRunner(app, access_log=None)
        await runner.setup()
        for port in ports:
            await web.TCPSite(runner, "127.0.0.1", port).start()
        print("ready", flush=True)
        await asyncio.Event().wait()

    asyncio.run(main())


def cpu_s() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


async def baseline(urls: list[str], seconds: float) -> None:
    """GET every URL once a second, concurrently, reading the whole body: the least any watcher must do."""
    async with http.session(len(urls)) as session:
        deadline = time.monotonic() + seconds
        due = time.monotonic()
        while time.monotonic() < deadline:
            await asyncio.gather(*(http.get(session, url, 5.0) for url in urls))
            due += 1.0
            await asyncio.sleep(max(0.0, due - time.monotonic()))


async def watch(urls: list[str], seconds: float, db: Path) -> int:
    """The full watch loop, its display rendered into a buffer each second; returns the frames seen."""
    thresholds = catalog.thresholds()
    console = Console(file=io.StringIO(), width=200)

    def draw(state: WatchState) -> None:
        console.print(view.build(state, thresholds))
        console.file = io.StringIO()

    config = WatchConfig(
        targets=tuple(Target(url) for url in urls),
        thresholds=thresholds,
        interval_s=1.0,
        window_s=30.0,
        db_path=db,
        duration_s=seconds,
    )
    state = await Watcher(config, on_update=draw).run()
    return sum(1 for f in state.frames.values() if f.up)


def measure(label: str, run: object) -> float:
    start_cpu, start_wall = cpu_s(), time.monotonic()
    result = aio.run(run)  # type: ignore[arg-type]  # the loop `llmtriage watch` runs on (uvloop)
    share = (cpu_s() - start_cpu) / (time.monotonic() - start_wall)
    print(f"{label:<9} {share:6.1%} of one core" + (f"  ({result} of the endpoints up at the end)" if result else ""))
    return share


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--endpoints", type=int, default=50)
    parser.add_argument("--seconds", type=float, default=20.0, help="how long each of the two runs lasts")
    parser.add_argument("--serve", nargs="*", type=int, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.serve is not None:
        serve(args.serve)
        return 0
    ports = free_ports(args.endpoints)
    server = subprocess.Popen(
        [sys.executable, __file__, "--serve", *map(str, ports)], stdout=subprocess.PIPE, text=True
    )
    try:
        assert server.stdout is not None and server.stdout.readline().strip() == "ready"
        urls = [f"http://127.0.0.1:{port}/metrics" for port in ports]
        catalog.metric_map(), catalog.thresholds(), signals.engines()
        print(f"{args.endpoints} endpoints, 1 s interval, {args.seconds:g} s each, scrape of {SCRAPE.stat().st_size} B")
        print("baseline: GET the same URLs every second (the same aiohttp session), in this process like watch")
        base = measure("baseline", baseline(urls, args.seconds))
        with tempfile.TemporaryDirectory() as tmp:
            watched = measure("watch", watch(urls, args.seconds, Path(tmp) / "watch.db"))
        print(f"ratio     {watched / base:.2f} x the baseline's CPU (watch target: < 10% of one core)")
        return 0 if watched < 0.10 else 1
    finally:
        server.terminate()
        server.wait(timeout=10)


if __name__ == "__main__":
    sys.exit(main())
