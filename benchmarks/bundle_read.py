"""Reading a 30-minute bundle (1,800 scrapes) for `report`/`diagnose`, against watch reading the same scrapes.

Builds a bundle of --scrapes scrapes, one a second: the real vLLM 0.32 /metrics recorded in
tests/fixtures/vllm-cpu/metrics/after-load.txt (~55 KB, ~460 samples), every value grown a little each second so
no two are alike. Then, in this process (one CPU priority for both), --repeats times, alternating:
  baseline: what `llmtriage watch` does with them: the scrape texts, already in memory, through its reader
  bundle:   evidence.bundle.read_evidence(BUNDLE), what `report` and `diagnose` run: list, read and redact the
            files, parse every scrape
and prints the medians and their ratio. Target: bundle < 2x baseline.
"""

from __future__ import annotations

import argparse
import re
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

from llmtriage import catalog
from llmtriage.evidence.bundle import read_evidence
from llmtriage.parse.prom import ScrapeReader

ROOT = Path(__file__).resolve().parent.parent
SCRAPE = ROOT / "tests" / "fixtures" / "vllm-cpu" / "metrics" / "after-load.txt"
_VALUE = re.compile(r"^([^#\s][^ ]*(?:\{[^}]*\})?) ([0-9.eE+-]+)$", re.MULTILINE)
FIRST_EPOCH_S = 1764590000


def build_bundle(root: Path, scrapes: int) -> list[tuple[str, str, float]]:
    """Write the bundle's metrics/; return each scrape as (name, text, time)."""
    text = SCRAPE.read_text()
    (root / "metrics").mkdir(parents=True)
    written = []
    for i in range(scrapes):
        factor = 1 + i / scrapes
        grown = _VALUE.sub(lambda m, f=factor: f"{m.group(1)} {float(m.group(2)) * f!r}", text)
        name = f"metrics-{FIRST_EPOCH_S + i}.prom"
        (root / "metrics" / name).write_text(grown)
        written.append((name, grown, float(FIRST_EPOCH_S + i)))
    return written


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--scrapes", type=int, default=1800)
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    workdir = Path(tempfile.mkdtemp(prefix="llmtriage-bundle-"))
    try:
        scrapes = build_bundle(workdir, args.scrapes)
        catalog.metric_map()  # loaded once per process by either
        print(f"input: {args.scrapes} scrapes of {SCRAPE.relative_to(ROOT)} (values grown each second), one bundle")
        print("baseline: watch's reader (parse.prom.ScrapeReader) over the same texts in memory; same process")
        watch_s: list[float] = []
        bundle_s: list[float] = []
        for _ in range(args.repeats):
            start = time.perf_counter()
            reader = ScrapeReader()
            for name, text, at_s in scrapes:
                reader.read(text, name, at_s)
            watch_s.append(time.perf_counter() - start)
            start = time.perf_counter()
            evidence = read_evidence(workdir)
            bundle_s.append(time.perf_counter() - start)
            assert evidence.metrics is not None and len(evidence.metrics.snapshots) == args.scrapes
        watch, bundle = statistics.median(watch_s), statistics.median(bundle_s)
        print(f"method: {args.repeats} repeats, alternating, medians")
        print(f"baseline (watch's reader):        {watch:6.2f} s")
        print(f"read_evidence (report, diagnose): {bundle:6.2f} s")
        print(f"ratio bundle/watch: {bundle / watch:.2f}  (target < 2.00)")
        return 0
    finally:
        shutil.rmtree(workdir, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
