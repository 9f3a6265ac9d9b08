"""Start-up time of `llmtriage --help` and one `llmtriage fit`, against `python -c "import yaml"`.

In the same run, hyperfine (Debian package `hyperfine`) times, with no shell in between:
  baseline:  PYTHON -c "import yaml"            (the same interpreter; the cheapest thing a Python CLI can do)
  help:      llmtriage --help
  fit:       llmtriage fit --model Qwen/Qwen3-8B --gpu "H100 80GB"
  fit, cold: the same with an empty cache (the catalogs parsed and stored again; not part of the target)
The three warm commands are timed in --rounds rounds, each round all three one after the other, so a neighbour's
load on the CPUs falls on all of them alike; the ratio of each round's medians is taken and the median of those
printed. All run as children of hyperfine at this process's CPU priority. Target: each ratio <= 3.
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
import shutil
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

FIT_ARGS = ["fit", "--model", "Qwen/Qwen3-8B", "--gpu", "H100 80GB"]


def hyperfine(commands: dict[str, list[str]], runs: int, workdir: Path, prepare: str | None = None) -> dict[str, float]:
    """Median wall seconds of each command (name -> argv), timed by hyperfine."""
    out = workdir / "hyperfine.json"
    cmd = ["hyperfine", "-N", "--style", "none", "--warmup", "2", "--runs", str(runs), "--export-json", str(out)]
    if prepare:
        cmd += ["--prepare", prepare]
    for name, argv in commands.items():
        cmd += ["--command-name", name, shlex.join(argv)]
    subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    results = json.loads(out.read_text())["results"]
    return {r["command"]: float(r["median"]) for r in results}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--runs", type=int, default=10, help="runs of each command per round")
    args = parser.parse_args()
    if shutil.which("hyperfine") is None:
        print("hyperfine not found: sh scripts/ensure-debian-packages.sh hyperfine", file=sys.stderr)
        return 2
    llmtriage = Path(sys.executable).with_name("llmtriage")
    commands = {
        "baseline": [sys.executable, "-c", "import yaml"],
        "help": [str(llmtriage), "--help"],
        "fit": [str(llmtriage), *FIT_ARGS],
    }
    print(f"baseline: {shlex.join(commands['baseline'])}  (same interpreter, priority nice {os.nice(0)} for all)")
    print(f"input: `llmtriage --help`; `llmtriage {shlex.join(FIT_ARGS)}`")
    print(f"method: hyperfine -N, {args.rounds} rounds x {args.runs} runs (+2 warm-up) of each, medians")
    workdir = Path(tempfile.mkdtemp(prefix="llmtriage-startup-"))
    try:
        rounds = [hyperfine(commands, args.runs, workdir) for _ in range(args.rounds)]
        cold_cache = workdir / "cold-cache"
        os.environ["LLMTRIAGE_CACHE_DIR"] = str(cold_cache)
        cold = hyperfine(
            {"fit, cold cache": commands["fit"]}, args.runs, workdir, prepare=f"rm -rf {shlex.quote(str(cold_cache))}"
        )
    finally:
        shutil.rmtree(workdir, ignore_errors=True)
    base = statistics.median(r["baseline"] for r in rounds)
    print(f"{'command':<24}{'median ms':>10}{'ratio':>8}")
    print(f"{'python -c import yaml':<24}{base * 1000:>10.1f}{1.0:>8.2f}")
    for name in ("help", "fit"):
        ms = statistics.median(r[name] for r in rounds) * 1000
        ratio = statistics.median(r[name] / r["baseline"] for r in rounds)
        print(f"{'llmtriage ' + name:<24}{ms:>10.1f}{ratio:>8.2f}  (target <= 3.00)")
    cold_ms = cold["fit, cold cache"] * 1000
    print(f"{'llmtriage fit, no cache':<24}{cold_ms:>10.1f}{cold_ms / (base * 1000):>8.2f}  (first run only)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
