"""Re-record tests/fixtures/llamacpp-cpu from a real llama-server (built from llama-cpp-python's sdist).

Usage: .venv/bin/python scripts/record_llamacpp_cpu.py [--out tests/fixtures/llamacpp-cpu] [--only NAME ...]

Starts one real llama-server per scenario (the tiny generated GGUF, loopback ports, one at a time), drives it
and writes the logs, the /metrics scrapes and the HTTP replies the tests replay. Paths in the logs are
normalised to /srv/llama-lab; nothing else is edited. Takes ~1 minute once llama-server is built (the first
run builds it: ~6 minutes on 2 cores).
"""

from __future__ import annotations

import argparse
import json
import socket
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path

from prometheus_client.parser import text_string_to_metric_families

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from tests.conftest import drive  # noqa: E402 - test support, shared with the tests that replay these recordings
from tests.realllamacpp import cases  # noqa: E402

from llmtriage.lab.llamacpp_cpu import LlamaServer, ensure_llama_server, ensure_tiny_gguf  # noqa: E402

CACHE = ROOT / ".cache"


def normalise(text: str) -> str:
    for path, alias in ((str(ROOT), "/srv/llama-lab"), (str(Path.home()), "/srv/llama-lab/home")):
        text = text.replace(path, alias)
    return text


class Recorder:
    def __init__(self, out: Path, binary: Path, model: Path) -> None:
        self.out, self.binary, self.model = out, binary, model
        for sub in ("logs", "metrics", "http"):
            (out / sub).mkdir(parents=True, exist_ok=True)

    def server(self, name: str, *args: str, model: Path | None = None, port: int | None = None) -> LlamaServer:
        server = LlamaServer(
            binary=self.binary,
            model=self.model if model is None else model,
            log_path=CACHE / "recordings" / f"llamacpp-{name}.log",
            args=args,
        )
        if port is not None:
            server.port = port
        return server.start()

    def keep(self, sub: str, name: str, text: str) -> None:
        (self.out / sub / name).write_text(normalise(text))

    def failed_start(self, name: str, *args: str, model: Path | None = None, port: int | None = None) -> None:
        server = self.server(name, *args, model=model, port=port)
        try:
            assert not server.wait(), f"{name}: llama-server started"
        finally:
            server.stop()
        self.keep("logs", f"{name}.log", server.log())

    # ------------------------------------------------------------ scenarios

    def startup_ok(self) -> None:
        server = self.server("startup-ok")
        try:
            assert server.wait()
            self.keep("http", "health.json", cases.get(server.url, "/health"))
            self.keep("metrics", "healthy-before.txt", cases.scrape(server.url)[0])
            statuses = drive(server.url, [cases.completion(i, 100, 64) for i in range(8)], 2)
            assert statuses == [200] * 8, statuses
            after = cases.scrape(server.url)[0]
            self.keep("metrics", "healthy-after.txt", after)
            self.keep("http", "slots-idle.json", cases.get(server.url, "/slots"))
            names = [f"{f.name} {f.type}" for f in text_string_to_metric_families(after)]
            self.keep("metrics", "metric-names-types.txt", "\n".join(names) + "\n")
        finally:
            server.stop()
        self.keep("logs", "startup-ok.log", server.log())

    def ctx_overflow(self) -> None:
        server = self.server("fault-a", *cases.CTX_OVERFLOW_ARGS)
        try:
            assert server.wait()
            status, body = cases.post(server.url, cases.completion(0, 400, 8, stream=False))
            assert status == 400, (status, body)
            self.keep("http", "fault-a-prompt-exceeds-ctx-size.http.txt", f"HTTP {status}\n{body}\n")
        finally:
            server.stop()
        self.keep("logs", "fault-a-prompt-exceeds-ctx-size.log", server.log())

    def queue(self) -> None:
        server = self.server("fault-b", *cases.QUEUE_ARGS)
        try:
            assert server.wait()
            before = cases.scrape(server.url)
            load = threading.Thread(
                target=drive,
                args=(server.url, [cases.completion(i, 100, 400) for i in range(cases.QUEUE_REQUESTS)], 64),
            )
            load.start()
            series = []
            while load.is_alive():
                series.append(cases.scrape(server.url))
                time.sleep(0.25)
            load.join()
            after = cases.scrape(server.url)
            peak = max(series, key=lambda s: cases.deferred(s[0]))
            for label, (text, _) in (("before", before), ("peak", peak), ("after", after)):
                self.keep("metrics", f"queue-{label}.txt", text)
            rows = ["unix_time,requests_processing,requests_deferred"]
            for text, when in series:
                processing = next(
                    line.split()[1] for line in text.splitlines() if line.startswith("llamacpp:requests_processing ")
                )
                rows.append(f"{when:.3f},{processing},{cases.deferred(text):g}")
            self.keep("metrics", "queue-timeseries.csv", "\n".join(rows) + "\n")
        finally:
            server.stop()
        self.keep("logs", "fault-b-queue-one-slot.log", server.log())

    def kv_unified_exhausted(self) -> None:
        server = self.server("fault-c", *cases.KV_UNIFIED_ARGS)
        replies: list[tuple[int, str]] = []
        try:
            assert server.wait()
            threads = [
                threading.Thread(target=lambda i=i: replies.append(cases.post(server.url, cases.completion(i, 100, 150, stream=False))))
                for i in range(cases.KV_UNIFIED_REQUESTS)
            ]  # fmt: skip
            for t in threads:
                t.start()
            for t in threads:
                t.join()
        finally:
            server.stop()
        failed = sorted(r for r in replies if r[0] != 200)
        assert failed, replies
        self.keep("http", "fault-c-kv-unified-exhausted.http.txt", "".join(f"HTTP {s}\n{b}\n" for s, b in replies))
        self.keep("logs", "fault-c-kv-unified-exhausted.log", server.log())

    def port_in_use(self) -> None:
        with socket.socket() as holder:
            holder.bind(("127.0.0.1", 0))
            holder.listen()
            self.failed_start("fault-d-port-in-use", port=holder.getsockname()[1])

    def model_missing(self) -> None:
        self.failed_start("fault-e-model-missing", model=CACHE / "models" / "does-not-exist.gguf")

    def gguf_truncated(self) -> None:
        truncated = CACHE / "recordings" / "truncated.gguf"
        truncated.write_bytes(self.model.read_bytes()[: self.model.stat().st_size // 2])
        self.failed_start("fault-e2-gguf-truncated", model=truncated)

    def not_gguf(self) -> None:
        other = CACHE / "recordings" / "not-a-model.gguf"
        other.write_text("<html>404 Not Found</html>\n" * 40)
        self.failed_start("fault-e3-not-gguf", model=other)


SCENARIOS: dict[str, Callable[[Recorder], None]] = {
    "startup_ok": Recorder.startup_ok,
    "ctx_overflow": Recorder.ctx_overflow,
    "queue": Recorder.queue,
    "kv_unified_exhausted": Recorder.kv_unified_exhausted,
    "port_in_use": Recorder.port_in_use,
    "model_missing": Recorder.model_missing,
    "gguf_truncated": Recorder.gguf_truncated,
    "not_gguf": Recorder.not_gguf,
}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=ROOT / "tests" / "fixtures" / "llamacpp-cpu")
    parser.add_argument("--only", nargs="*", choices=sorted(SCENARIOS), default=sorted(SCENARIOS))
    args = parser.parse_args()
    (CACHE / "recordings").mkdir(parents=True, exist_ok=True)
    recorder = Recorder(args.out, ensure_llama_server(CACHE, print), ensure_tiny_gguf(CACHE))
    for name in args.only:
        print(f"recording {name}", flush=True)
        SCENARIOS[name](recorder)
    print(json.dumps({"out": str(args.out), "recorded": args.only}))


if __name__ == "__main__":
    main()
