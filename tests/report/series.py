"""Bundles with time series, built from real recordings: a 1 s capture of a vLLM server through a load surge.

Every scrape is the real vLLM 0.32.0 scrape ``tests/fixtures/vllm-cpu/metrics/after-load.txt`` (all 54 families,
their labels and bucket bounds as recorded) with its counters and histograms advanced over time and its load
gauges set: a calm stretch, a surge above capacity (queue growing, KV cache full, preemptions, TTFT climbing,
GPU at its power cap) and a recovery. Latency histograms get the observations of a log-normal latency whose
median follows the load; the other counters and histograms grow with the requests served. The server log is
the real one recorded under KV pressure (``logs/fault-c-kv-pressure.log``); the GPU samples are written the way
``nvidia-smi --query-gpu=... --format=csv`` prints them, one row per GPU per second.

``planted`` puts HTML (a script and an image with an event handler) into a log line the diagnosis cites, the
launch command line, a metric label the report shows, and the GPU's name: the report must show it as text.

Used by tests/report/ and benchmarks/report_size.py.
"""

from __future__ import annotations

import bisect
import csv
import io
import math
import random
from dataclasses import dataclass
from pathlib import Path

FIXTURES = Path(__file__).resolve().parent.parent / "fixtures" / "vllm-cpu"
TEMPLATE_SCRAPE = FIXTURES / "metrics" / "after-load.txt"
REAL_LOG = FIXTURES / "logs" / "fault-c-kv-pressure.log"
START_EPOCH_S = 1795961300.0
PLANTED = "<script>document.title='pwned'</script><img src=x onerror=\"document.title='pwned'\"><b>bold</b>"
# Without quotes, to survive a Prometheus label value and a shell word in single quotes.
PLANTED_BARE = "<script>alert(4)</script><img src=x onerror=alert(5)>"
LAUNCH = (
    "vllm serve models/tiny-llama --max-model-len 1024 --max-num-seqs 32 --gpu-memory-utilization 0.92 --port 18003"
)
GPU_HEADER = (
    "timestamp, index, name, memory.used [MiB], memory.total [MiB], utilization.gpu [%], power.draw [W], "
    "power.limit [W], temperature.gpu, clocks.sm [MHz], clocks.max.sm [MHz], pstate, clocks_event_reasons.active"
)
GPU_NAME = "NVIDIA H100 80GB HBM3"
GPU_TOTAL_MIB = 81559
POWER_LIMIT_W = 700.0
CLOCK_MAX_MHZ = 1980.0

# Latency families driven by the load: name -> (median seconds calm, at full surge, observations per request).
LATENCIES = {
    "vllm:time_to_first_token_seconds": (0.06, 9.0, 1),
    "vllm:request_queue_time_seconds": (0.002, 8.5, 1),
    "vllm:e2e_request_latency_seconds": (1.7, 12.0, 1),
    "vllm:request_time_per_output_token_seconds": (0.025, 0.045, 1),
    "vllm:inter_token_latency_seconds": (0.025, 0.045, 63),
}
SIGMA = 0.35


@dataclass(frozen=True, slots=True)
class Load:
    """The server's state in one second of the capture."""

    served: int
    running: float
    waiting: float
    kv_usage: float
    surge: float  # 0 calm .. 1 full surge
    preempted: int


def load_profile(seconds: int, seed: int) -> list[Load]:
    """Arrivals of 4/s, 9/s through the middle third; service of 6/s at most; the queue and the KV follow."""
    rng = random.Random(seed)
    out = []
    waiting = 0.0
    for t in range(seconds):
        surging = seconds * 0.4 <= t < seconds * 0.6
        arrivals = rng.choice((3, 4, 4, 5)) + (5 if surging else 0)
        capacity = 6
        queue = waiting + arrivals
        served = min(capacity, int(queue))
        waiting = queue - served
        surge = min(1.0, waiting / 60.0)
        running = min(32.0, 10.0 + 22.0 * surge + rng.uniform(-1, 1))
        kv = min(1.0, 0.35 + 0.65 * surge + rng.uniform(-0.03, 0.03))
        preempted = rng.choice((0, 1, 2)) if kv >= 0.97 else 0
        out.append(Load(served, max(0.0, running), waiting, max(0.0, kv), surge, preempted))
    return out


# ---------------------------------------------------------------- the scrape template


@dataclass(slots=True)
class _Line:
    name: str
    labels: str  # "{...}" or ""
    value: float
    family: str
    kind: str  # counter | gauge | histogram | summary | untyped
    le: float | None = None


def _template() -> tuple[list[str | _Line], float]:
    """The real scrape as comment lines and sample lines, and the requests it had served."""
    types: dict[str, str] = {}
    lines: list[str | _Line] = []
    for raw in TEMPLATE_SCRAPE.read_text().splitlines():
        if raw.startswith("#") or not raw.strip():
            if raw.startswith("# TYPE "):
                _, _, family, kind = raw.split(" ", 3)
                types[family] = kind
            lines.append(raw)
            continue
        head, value = raw.rsplit(" ", 1)
        name, labels = (head[: head.index("{")], head[head.index("{") :]) if "{" in head else (head, "")
        family = name
        for suffix in ("_bucket", "_count", "_sum", "_total", "_created"):
            if name.endswith(suffix) and name[: -len(suffix)] in types:
                family = name[: -len(suffix)]
                break
        le = None
        if name.endswith("_bucket"):
            bound = labels.split('le="', 1)[1].split('"', 1)[0]
            le = math.inf if bound == "+Inf" else float(bound)
        lines.append(_Line(name, labels, float(value), family, types.get(family, "untyped"), le))
    served = sum(line.value for line in lines if isinstance(line, _Line) and line.name == "vllm:request_success_total")
    return lines, served


def _lognormal_cdf(x: float, median: float) -> float:
    if x <= 0:
        return 0.0
    if math.isinf(x):
        return 1.0
    return 0.5 * (1.0 + math.erf(math.log(x / median) / (SIGMA * math.sqrt(2.0))))


class _Histograms:
    """Cumulative observations added to the latency families, per bucket bound."""

    def __init__(self, bounds: dict[str, list[float]]) -> None:
        self.bounds = bounds
        self.counts = {family: [0] * len(b) for family, b in bounds.items()}
        self.sums = dict.fromkeys(bounds, 0.0)

    def observe(self, family: str, n: int, median: float) -> None:
        """``n`` observations of a log-normal latency with ``median``, spread over the buckets by its CDF."""
        if n <= 0:
            return
        counts = self.counts[family]
        placed = 0
        for i, bound in enumerate(self.bounds[family]):
            cumulative = round(n * _lognormal_cdf(bound, median))
            counts[i] += cumulative
            placed = cumulative
        assert placed == n
        self.sums[family] += n * median * math.exp(SIGMA**2 / 2)


def _format(value: float) -> str:
    return repr(float(value)) if value == value and not math.isinf(value) else str(value)


def scrapes(seconds: int, seed: int = 0, planted: bool = False) -> list[tuple[float, str]]:
    """``(epoch seconds, Prometheus text)`` per second of the capture."""
    template, served0 = _template()
    bounds: dict[str, list[float]] = {f: [] for f in LATENCIES}
    for line in template:
        if isinstance(line, _Line) and line.family in LATENCIES and line.le is not None:
            bounds[line.family].append(line.le)
    hist = _Histograms({f: sorted(set(b)) for f, b in bounds.items()})
    out = []
    served = 0.0
    preemptions = 0.0
    for t, load in enumerate(load_profile(seconds, seed)):
        served += load.served
        preemptions += load.preempted
        for family, (calm, surge, per_request) in LATENCIES.items():
            median = calm * (surge / calm) ** load.surge
            hist.observe(family, load.served * per_request, median)
        growth = 1.0 + served / served0
        gauges = {
            "vllm:num_requests_running": load.running,
            "vllm:num_requests_waiting": load.waiting,
            "vllm:kv_cache_usage_perc": load.kv_usage,
        }
        text = []
        for line in template:
            if isinstance(line, str):
                text.append(line)
                continue
            value = line.value
            if line.name in gauges:
                value = gauges[line.name]
            elif line.name == "vllm:num_requests_waiting_by_reason" and 'reason="capacity"' in line.labels:
                value = load.waiting
            elif line.name == "vllm:num_preemptions_total":
                value = line.value + preemptions
            elif line.family in LATENCIES and line.kind == "histogram":
                value = _advance_latency(line, hist)
            elif line.kind in ("counter", "histogram", "summary") and not line.name.endswith("_created"):
                value = line.value * growth
                value = value if line.name.endswith("_sum") else float(round(value))
            labels = line.labels
            if planted and line.name == "vllm:cache_config_info":
                labels = labels.replace(',cache_dtype="auto"', f',cache_dtype="{PLANTED_BARE}"')
            text.append(f"{line.name}{labels} {_format(value)}")
        out.append((START_EPOCH_S + t, "\n".join(text) + "\n"))
    return out


def _advance_latency(line: _Line, hist: _Histograms) -> float:
    family = line.family
    if line.le is not None:
        index = bisect.bisect_left(hist.bounds[family], line.le)
        return line.value + hist.counts[family][index]
    if line.name.endswith("_count"):
        return line.value + hist.counts[family][-1]
    if line.name.endswith("_sum"):
        return line.value + hist.sums[family]
    return line.value


# ---------------------------------------------------------------- GPU samples, log, launch


def gpu_csv(seconds: int, gpus: int = 1, seed: int = 0, planted: bool = False) -> str:
    """``nvidia-smi --query-gpu=... --format=csv -l 1`` over the capture: at the power cap during the surge."""
    rng = random.Random(seed + 1)
    name = GPU_NAME + (f" {PLANTED}" if planted else "")
    rows = io.StringIO()
    writer = csv.writer(rows, lineterminator="\n")
    rows.write(GPU_HEADER + "\n")
    for t, load in enumerate(load_profile(seconds, seed)):
        # nvidia-smi prints the host's local clock; these bundles use 2026/11/29 14:08:20 as t = 0.
        hours, rest = divmod(8 * 60 + 20 + t, 3600)
        minutes, secs = divmod(rest, 60)
        stamp = f"2026/11/29 {14 + hours:02d}:{minutes:02d}:{secs:02d}.{rng.randrange(1000):03d}"
        for index in range(gpus):
            busy = 0.45 + 0.55 * max(load.surge, load.served / 6.0)
            power = min(POWER_LIMIT_W, 120.0 + 600.0 * busy + rng.uniform(-15, 15))
            capped = power >= POWER_LIMIT_W - 5 or load.surge > 0.6
            clock = CLOCK_MAX_MHZ - (rng.uniform(250, 420) if capped else rng.uniform(0, 30))
            memory = 74_200 + 2_600 * load.kv_usage + rng.uniform(-40, 40) + (5_500 if t == seconds // 3 else 0)
            mask = 0x4 if capped else (0x1 if load.served == 0 else 0x0)
            writer.writerow(
                [
                    stamp,
                    index,
                    name,
                    f"{memory:.0f} MiB",
                    f"{GPU_TOTAL_MIB} MiB",
                    f"{min(100.0, 100.0 * busy):.0f} %",
                    f"{power:.2f} W",
                    f"{POWER_LIMIT_W:.2f} W",
                    f"{45 + 33 * busy + rng.uniform(-1, 1):.0f}",
                    f"{clock:.0f} MHz",
                    f"{CLOCK_MAX_MHZ:.0f} MHz",
                    "P0",
                    f"0x{mask:016x}",
                ]
            )
    return rows.getvalue()


def server_log(planted: bool = False) -> str:
    """The real log of the vLLM server under KV pressure; ``planted`` appends HTML to the line the path cites."""
    text = REAL_LOG.read_text()
    if planted:
        text = text.replace(
            "Starting vLLM server on http://127.0.0.1:18003",
            f"Starting vLLM server on http://127.0.0.1:18003 {PLANTED}",
        )
    return text


def launch(planted: bool = False) -> str:
    """The launch command line (with ``planted``: HTML as the served model name)."""
    return LAUNCH + (f" --served-model-name '{PLANTED_BARE}'" if planted else "")


def write_bundle(root: Path, seconds: int, gpus: int = 1, seed: int = 0, planted: bool = False) -> Path:
    """A capture bundle under ``root``: logs/, config/launch.txt, metrics/scrape-<epoch_ms>.prom, gpu/samples.csv."""
    (root / "logs").mkdir(parents=True, exist_ok=True)
    (root / "config").mkdir(exist_ok=True)
    (root / "metrics").mkdir(exist_ok=True)
    (root / "gpu").mkdir(exist_ok=True)
    (root / "logs" / "server.log").write_text(server_log(planted))
    (root / "config" / "launch.txt").write_text(launch(planted) + "\n")
    for epoch_s, text in scrapes(seconds, seed, planted):
        (root / "metrics" / f"scrape-{round(epoch_s * 1000)}.prom").write_text(text)
    (root / "gpu" / "samples.csv").write_text(gpu_csv(seconds, gpus, seed, planted))
    return root
