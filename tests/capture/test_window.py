"""The sampling window: logs are read when it closes, and a planned early end leaves a complete bundle."""

from __future__ import annotations

import json
import threading
import time
from pathlib import Path

from llmtriage.capture import session
from llmtriage.capture.plan import CapturePlan, GpuMode, LogFile

from .conftest import VLLM_METRICS, LoopbackServer, telemetry_document


def test_logs_cover_the_window_and_finish_is_not_an_interruption(loopback: LoopbackServer, tmp_path: Path) -> None:
    loopback.scrapes[:] = [(VLLM_METRICS / "before-load.txt").read_text()]
    loopback.telemetry = telemetry_document()
    log = tmp_path / "server.log"
    log.write_text("INFO:     Application startup complete.\n")
    plan = CapturePlan(
        out_dir=tmp_path / "out",
        target=LogFile(log),
        metrics_url=loopback.base_url + "/metrics",
        gpu=GpuMode.url,
        gpu_url=loopback.base_url + "/llmtriage/gpu",
        duration_s=60,
        interval_s=0.2,
    )
    stop = session.StopSignal()

    def during_the_window() -> None:
        time.sleep(0.8)
        with log.open("a") as f:
            f.write("ERROR:    [Errno 98] error while attempting to bind on address ('0.0.0.0', 8000)\n")
        time.sleep(0.4)
        stop.finish()

    threading.Thread(target=during_the_window).start()
    started = time.monotonic()
    done = session.capture(plan, stop=stop)
    assert time.monotonic() - started < 20
    manifest = json.loads((done.path / "manifest.json").read_text())
    assert manifest["partial"] is False and manifest["interrupted_by"] is None
    (captured,) = (done.path / "logs").iterdir()
    assert "Errno 98" in captured.read_text()
    assert len(list((done.path / "metrics").glob("scrape-*.prom"))) >= 3
