"""CPU cost of `llmtriage capture` sampling /metrics and the GPU every second, as a share of one core, beside a
named baseline measured in the same run.

  baseline: `curl` loop, a shell that fetches the same two URLs every second (`curl -s -o /dev/null` each,
            then `sleep 1`): what the plainest sampler built from standard tools costs;
  capture:  llmtriage capture --metrics-url URL --gpu URL --duration D --interval 1s --no-diagnose

Both read a local server (this script in a child process, on 127.0.0.1) that answers the recorded vLLM /metrics
(tests/fixtures/vllm-cpu/metrics/after-load.txt, 55 KB) and the telemetry document of docs/gpu-telemetry.md
(tests/fixtures/capture/gpu-telemetry.json), so the server's own CPU is not counted. On a host without a GPU the telemetry URL stands in for NVML.

The capture's share is given twice: in steady state (its CPU time from /proc/PID/stat, from 3 s after the first
scrape to 1.5 s before the end), which is what sampling every second costs, and over the whole run (getrusage of
the child and the commands it ran: interpreter start, imports, the one-shot sources included).
Target: steady state < 2% of one core. The two runs go one after the other, so they do not compete for a core.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import tempfile
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
METRICS = ROOT / "tests" / "fixtures" / "vllm-cpu" / "metrics" / "after-load.txt"
TARGET_SHARE = 0.02
TELEMETRY = ROOT / "tests" / "fixtures" / "capture" / "gpu-telemetry.json"


def serve() -> None:
    """The local server (run in a child): /metrics and /llmtriage/gpu; prints its port, then serves."""
    metrics = METRICS.read_bytes()
    telemetry = json.loads(TELEMETRY.read_text())

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            if self.path == "/metrics":
                body, kind = metrics, "text/plain"
            elif self.path == "/llmtriage/gpu":
                body, kind = json.dumps({**telemetry, "timestamp_s": time.time()}).encode(), "application/json"
            else:
                self.send_error(404)
                return
            self.send_response(200)
            self.send_header("Content-Type", kind)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, format: str, *args: object) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    print(server.server_address[1], flush=True)
    server.serve_forever()


def children_cpu_s() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def process_cpu_s(pid: int) -> float:
    """User + system CPU of one live process (its threads included), from /proc/PID/stat."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def baseline(metrics_url: str, gpu_url: str, duration_s: int) -> tuple[float, float]:
    """CPU seconds and wall seconds of the curl loop."""
    loop = (
        f"i=0; while [ $i -le {duration_s} ]; do curl -s -o /dev/null {metrics_url}; "
        f"curl -s -o /dev/null {gpu_url}; sleep 1; i=$((i+1)); done"
    )
    cpu0, wall0 = children_cpu_s(), time.monotonic()
    subprocess.run(["sh", "-c", loop], check=True)
    return children_cpu_s() - cpu0, time.monotonic() - wall0


def capture(metrics_url: str, gpu_url: str, duration_s: int, out: Path) -> tuple[float, float, float, float]:
    """(steady-state CPU s, steady-state wall s, whole-run CPU s, whole-run wall s) of one capture."""
    argv = [sys.executable, "-m", "llmtriage", "capture", "--metrics-url", metrics_url, "--gpu", gpu_url]
    argv += ["--duration", f"{duration_s}s", "--interval", "1s", "--out", str(out), "--no-diagnose"]
    cpu0, wall0 = children_cpu_s(), time.monotonic()
    proc = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    while not list(out.glob(".*.partial-*/metrics/scrape-*.prom")):
        if proc.poll() is not None or time.monotonic() - wall0 > 60:
            raise SystemExit("the capture wrote no scrape")
        time.sleep(0.05)
    sampling_started = time.monotonic()
    time.sleep(3.0)
    steady_cpu0, steady_wall0 = process_cpu_s(proc.pid), time.monotonic()
    time.sleep(max(sampling_started + duration_s - 1.5 - time.monotonic(), 1.0))
    steady_cpu, steady_wall = process_cpu_s(proc.pid) - steady_cpu0, time.monotonic() - steady_wall0
    if proc.wait(timeout=duration_s + 60) != 0:
        raise SystemExit(f"the capture failed with exit code {proc.returncode}")
    return steady_cpu, steady_wall, children_cpu_s() - cpu0, time.monotonic() - wall0


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--duration-s", type=int, default=30, help="sampling time of each run (default 30)")
    parser.add_argument("--serve", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.serve:
        serve()
        return 0
    if args.duration_s < 8:
        parser.error("--duration-s must be at least 8 (3 s settle + a steady window)")
    server = subprocess.Popen([sys.executable, __file__, "--serve"], stdout=subprocess.PIPE, text=True)
    try:
        assert server.stdout is not None
        port = int(server.stdout.readline())
        metrics_url = f"http://127.0.0.1:{port}/metrics"
        gpu_url = f"http://127.0.0.1:{port}/llmtriage/gpu"
        base_cpu, base_wall = baseline(metrics_url, gpu_url, args.duration_s)
        with tempfile.TemporaryDirectory(prefix="capture-overhead-") as tmp:
            steady_cpu, steady_wall, run_cpu, run_wall = capture(metrics_url, gpu_url, args.duration_s, Path(tmp))
    finally:
        server.terminate()
        server.wait(timeout=10)
    base_share = base_cpu / base_wall
    steady_share = steady_cpu / steady_wall
    run_share = run_cpu / run_wall
    rows = [
        ("baseline  curl loop (sh, 2 x curl, sleep 1)", base_share, f"{base_cpu:.2f} s CPU in {base_wall:.1f} s"),
        (
            "capture   steady state",
            steady_share,
            f"{steady_cpu:.2f} s CPU in {steady_wall:.1f} s; {steady_share / base_share:.2f} x baseline",
        ),
        ("capture   whole run, startup included", run_share, f"{run_cpu:.2f} s CPU in {run_wall:.1f} s"),
    ]
    print(f"capture overhead: /metrics (55 KB) + GPU telemetry every 1 s for {args.duration_s} s, on 127.0.0.1")
    print(f"baseline: sh loop of 2 x curl + sleep 1 on the same URLs; both at nice {os.nice(0)}")
    for label, share, detail in rows:
        print(f"  {label:<44} {share:6.2%} of one core  ({detail})")
    verdict = "PASS" if steady_share < TARGET_SHARE else "FAIL"
    print(f"target: steady state < {TARGET_SHARE:.0%} of one core: {verdict}")
    return 0 if verdict == "PASS" else 1


if __name__ == "__main__":
    sys.exit(main())
