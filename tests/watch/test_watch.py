"""`watch` against real simulators on 127.0.0.1: a stall caught as it starts (diagnosed, captured once, recorded),
a stall without traffic caught by the probe, a server that vanishes and comes back with its counters reset,
scrapes whose buckets change or that are not metrics at all. Every loop is bounded."""

from __future__ import annotations

import asyncio
import dataclasses
import sqlite3
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from aiohttp import web

from llmtriage import catalog
from llmtriage.evidence.bundle import read_evidence
from llmtriage.watch.breach import STALL
from llmtriage.watch.watcher import Target, WatchConfig, Watcher, WatchState

from ..conftest import FIXTURES
from ..sim.conftest import RunningSim, free_port
from .conftest import Load, fast_thresholds

SMALL = ("--speed", "20", "--model", "meta-llama/Llama-3.2-1B-Instruct", "--gpu", "L4", "--max-model-len", "4096")


def watch(config: WatchConfig, until: Callable[[WatchState], bool] | None = None) -> WatchState:
    """Run a watcher for at most ``config.duration_s``, ending early once ``until`` holds."""

    async def main() -> WatchState:
        stop = asyncio.Event()

        def check(state: WatchState) -> None:
            if until is not None and until(state):
                stop.set()

        return await Watcher(config, on_update=check).run(stop)

    return asyncio.run(main())


def test_a_stall_is_caught_diagnosed_captured_once_and_recorded(
    start_sim: Callable[..., RunningSim], tmp_path: Path
) -> None:
    sim = start_sim(*SMALL, "--fault", "stall@60s")  # the engine stops stepping 3 s in, requests in flight
    assert sim.wait_ready()
    bundles = tmp_path / "bundles"
    config = WatchConfig(
        targets=(Target(sim.url + "/metrics", sim.url + "/llmtriage/gpu"),),
        thresholds=fast_thresholds(3.0),
        interval_s=0.5,
        window_s=4.0,
        capture_dir=bundles,
        capture_duration_s=1.0,
        db_path=tmp_path / "watch.db",
        duration_s=25.0,
    )
    captured_at: list[float] = []

    def settled(state: WatchState) -> bool:
        if any(i.bundle for i in state.incidents) and not captured_at:
            captured_at.append(time.monotonic())
        return bool(captured_at) and time.monotonic() - captured_at[0] > 3  # breaching on: still one capture

    with Load(sim.url, 8, 100, 2000):
        state = watch(config, settled)
    sim.proc.kill()  # its hung requests would hold a graceful shutdown for a minute
    assert len(state.incidents) == 1, state.incidents
    incident = state.incidents[0]
    assert incident.kinds[0] == STALL
    assert incident.diagnosis is not None and incident.diagnosis.symptom_class == STALL
    assert incident.diagnosis.causes[0].id == "engine_stalled"
    assert [p.name for p in bundles.iterdir()] == [incident.bundle.name if incident.bundle else None]
    assert incident.bundle is not None and read_evidence(incident.bundle).metrics is not None
    frame = state.frames[sim.url + "/metrics"]
    assert frame.health_ok is True and frame.tokens_still_s is not None and frame.tokens_still_s >= 3
    assert frame.gpus and frame.gpus[0].memory_total_mib
    db = sqlite3.connect(tmp_path / "watch.db")
    assert db.execute("SELECT count(*) FROM samples").fetchone()[0] >= 10
    assert db.execute("SELECT count(*) FROM gpu_samples").fetchone()[0] >= 10
    kinds = [k for (k,) in db.execute("SELECT kind FROM events ORDER BY t_s")]
    assert kinds[:3] == ["breach", "diagnosis", "capture"], kinds


def test_the_probe_finds_a_stall_that_idle_metrics_hide(start_sim: Callable[..., RunningSim]) -> None:
    sim = start_sim(*SMALL, "--fault", "stall")  # stalled from the start, no traffic: the gauges say idle
    assert sim.wait_ready()
    base = WatchConfig(
        targets=(Target(sim.url + "/metrics"),), thresholds=fast_thresholds(2.0), interval_s=0.5, duration_s=12.0
    )

    async def both() -> tuple[WatchState, WatchState]:
        stop = asyncio.Event()

        def check(state: WatchState) -> None:
            if state.incidents:
                stop.set()

        probed = Watcher(dataclasses.replace(base, probe=True), on_update=check).run(stop)
        plain = Watcher(base).run(stop)
        return await asyncio.gather(probed, plain)

    probed, plain = asyncio.run(both())
    sim.proc.kill()  # the probe's hung request would hold a graceful shutdown for a minute
    assert [i.kinds for i in probed.incidents] == [[STALL]]
    assert "the probe has waited" in probed.incidents[0].messages[STALL]
    assert plain.incidents == []  # without a probe, a stalled idle server looks idle


def test_a_server_that_vanishes_and_restarts(start_sim: Callable[..., RunningSim], tmp_path: Path) -> None:
    first = start_sim(*SMALL)
    assert first.wait_ready()
    port = first.port
    config = WatchConfig(
        targets=(Target(first.url + "/metrics"),), thresholds=catalog.thresholds(), interval_s=0.3, window_s=3.0,
        duration_s=30.0,
    )  # fmt: skip
    result: list[WatchState] = []
    stop_watching = threading.Event()
    thread = threading.Thread(
        target=lambda: result.append(watch(config, lambda s: stop_watching.is_set())), daemon=True
    )
    thread.start()
    with Load(first.url, 4, 100, 50):
        time.sleep(2.0)
    first.stop()
    time.sleep(1.0)
    second = start_sim(*SMALL, "--port", str(port))  # the same port: a restart (the last --port wins)
    second.port, second.url = port, first.url
    assert second.wait_ready()
    time.sleep(1.5)
    stop_watching.set()
    thread.join(timeout=20)
    state = result[0]
    kinds = [e.kind for e in state.events]
    assert "down" in kinds and "up" in kinds[kinds.index("down") :], kinds
    assert "reset" in kinds[kinds.index("down") :], kinds
    frame = state.frames[first.url + "/metrics"]
    assert frame.up and (frame.generation_tokens_per_s or 0.0) >= 0


@pytest.fixture
def scripted_server() -> Iterator[tuple[str, list[str]]]:
    """An HTTP server on 127.0.0.1 answering /metrics with the next text of a script (the last one repeats)."""
    script: list[str] = []
    served = [0]

    async def metrics(request: web.Request) -> web.Response:
        text = script[min(served[0], len(script) - 1)]
        served[0] += 1
        return web.Response(text=text, content_type="text/plain")

    port = free_port()
    loop = asyncio.new_event_loop()
    ready = threading.Event()

    async def serve() -> web.AppRunner:
        app = web.Application()
        app.router.add_get("/metrics", metrics)
        runner = web.AppRunner(app)
        await runner.setup()
        await web.TCPSite(runner, "127.0.0.1", port).start()
        ready.set()
        return runner

    runner = loop.run_until_complete(serve())
    thread = threading.Thread(target=loop.run_forever, daemon=True)
    thread.start()
    ready.wait(5)
    yield f"http://127.0.0.1:{port}/metrics", script
    asyncio.run_coroutine_threadsafe(runner.cleanup(), loop).result(10)
    loop.call_soon_threadsafe(loop.stop)
    thread.join(timeout=5)


def test_changed_buckets_and_garbage_are_shown_not_fatal(scripted_server: tuple[str, list[str]]) -> None:
    url, script = scripted_server
    real = (FIXTURES / "vllm-cpu" / "metrics" / "after-load.txt").read_text()
    broken = real.replace(
        'vllm:num_requests_running{engine="0",model_name="tiny-llama"} 0.0', "vllm:num_requests_running{"
    )
    script += [real, real, real.replace('le="2.5"', 'le="3.0"'), "<html>not metrics</html>", "", real, broken]
    state = watch(
        WatchConfig(targets=(Target(url),), thresholds=catalog.thresholds(), interval_s=0.2, duration_s=10.0),
        lambda s: "problem" in [e.kind for e in s.events],
    )
    kinds = [e.kind for e in state.events]
    assert kinds[:3] == ["buckets_changed", "down", "up"], kinds
    assert "not an inference server's metrics" in next(e.message for e in state.events if e.kind == "down")
    assert next(e.message for e in state.events if e.kind == "problem") == "1 malformed sample line skipped"
    assert state.frames[url].up


def test_the_cli_watches_and_exits(start_sim: Callable[..., RunningSim], tmp_path: Path) -> None:
    sim = start_sim(*SMALL)
    assert sim.wait_ready()
    db = tmp_path / "w.db"
    with Load(sim.url, 2, 50, 20):
        result = subprocess.run(
            [sys.executable, "-m", "llmtriage", "watch", "--metrics-url", sim.url + "/metrics", "--gpu",
             sim.url + "/llmtriage/gpu", "--duration", "3s", "--interval", "0.5s", "--window", "2s", "--db", str(db),
             "--slo", "ttft_p95=30s,tpot_p95=5s,error_rate=50%,queue=100"],
            capture_output=True, text=True, timeout=60,
        )  # fmt: skip
    assert result.returncode == 0, result.stderr
    assert "TTFT p95" in result.stderr and sim.url.removeprefix("http://") in result.stderr
    assert sqlite3.connect(db).execute("SELECT count(*) FROM samples WHERE up = 1").fetchone()[0] >= 4
    nothing = subprocess.run(
        [sys.executable, "-m", "llmtriage", "watch", "--metrics-url", f"http://127.0.0.1:{free_port()}/metrics",
         "--duration", "1s"],
        capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert nothing.returncode == 4 and "no server could be read" in nothing.stderr
    bad = subprocess.run(
        [sys.executable, "-m", "llmtriage", "watch", "--metrics-url", "127.0.0.1:8000", "--duration", "1s"],
        capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert bad.returncode == 2 and "not an http(s) URL" in bad.stderr


def test_gpu_from_nvml_and_into_the_diagnosis_facts(start_sim: Callable[..., RunningSim]) -> None:
    from llmtriage.capture.nvml import Nvml
    from llmtriage.watch import gpu

    from ..capture.test_sources import StubNvmlLibrary

    sim = start_sim(*SMALL)
    assert sim.wait_ready()
    config = WatchConfig(
        targets=(Target(sim.url + "/metrics", gpu.NVML),),
        thresholds=catalog.thresholds(),
        interval_s=0.3,
        duration_s=1.0,
    )

    async def main() -> WatchState:
        return await Watcher(config, nvml=Nvml(StubNvmlLibrary())).run()

    frame = asyncio.run(main()).frames[sim.url + "/metrics"]
    assert frame.gpu_error is None and len(frame.gpus) == 1  # the GRID K520 of a recorded nvidia-smi table
    row = frame.gpus[0]
    assert (row.name, row.memory_used_mib, row.memory_total_mib, row.power_draw_w) == ("GRID K520", 46, 4037, 17)
    facts = gpu.facts([gpu.GpuReading(rows=(dataclasses.replace(row, clocks_event_reasons_mask=0x4),))], "nvml")
    assert facts is not None and facts.samples[0].clocks_event_reasons == catalog.nvidia_smi_fields().reasons_in_mask(4)
    assert facts.samples[0].memory_total_mib == 4037
