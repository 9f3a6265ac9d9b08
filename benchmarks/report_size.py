"""Size and render time of the HTML incident report for a 30-minute capture sampled every second.

Builds the bundle of tests/report/series.py (1,800 scrapes generated from the real vLLM scrape in
tests/fixtures/vllm-cpu/metrics, counters and histograms advanced through a load surge, and 1,800 GPU samples
per GPU in ``nvidia-smi --query-gpu`` CSV form), reads and diagnoses it, then in the same run measures:
  llmtriage:        the page ``llmtriage report`` writes (plots downsampled to min/max per pixel bucket)
  baseline (naive): the same page with every chart drawn from every point (lines only, no axes: a lower bound)
  baseline (raw):   the bundle on disk
and prints the sizes, their ratios, and the render time beside the time to read the bundle (target: < 2 MB).
"""

from __future__ import annotations

import argparse
import math
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from tests.report import series  # noqa: E402

from llmtriage import catalog  # noqa: E402
from llmtriage.diagnose.engine import diagnose  # noqa: E402
from llmtriage.evidence.bundle import read_evidence  # noqa: E402
from llmtriage.report import html, svg, timeseries  # noqa: E402

TARGET_BYTES = 2_000_000


def naive_svg(chart: timeseries.Chart) -> str:
    """The chart as a naive renderer draws it: one path vertex per point, the same coordinates and formatting."""
    xs = [x for s in chart.series for x, y in s.points if y is not None] or [0.0, 1.0]
    ys = [y for s in chart.series for _, y in s.points if y is not None] or [0.0, 1.0]
    x_lo, x_hi = min(xs), max(xs)
    x_hi = x_hi if x_hi > x_lo else x_lo + 1.0
    y_hi = max(max(ys), chart.y_max or 0.0, 1.0)

    def point(x: float, y: float) -> str:
        px = svg.LEFT + (x - x_lo) / (x_hi - x_lo) * svg.PLOT_W
        py = svg.TOP + (1.0 - y / y_hi) * svg.PLOT_H
        return f"{px:.1f} {py:.1f}"

    paths = []
    for s in chart.series:
        drawn = [point(x, y) for x, y in s.points if y is not None and math.isfinite(y)]
        if drawn:
            paths.append(f'<path class="line" d="M{"L".join(drawn)}"/>')
    return f'<svg class="chart" viewBox="0 0 {svg.WIDTH} {svg.HEIGHT}">{"".join(paths)}</svg>'


def bundle_bytes(root: Path) -> int:
    return sum(p.stat().st_size for p in root.rglob("*") if p.is_file())


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=int, default=1800, help="capture length, one scrape and sample a second")
    parser.add_argument("--gpus", type=int, default=1)
    parser.add_argument("--repeat", type=int, default=5, help="renders to time (the best is reported)")
    args = parser.parse_args()

    with tempfile.TemporaryDirectory(prefix="llmtriage-report-size-") as tmp:
        root = series.write_bundle(Path(tmp) / "bundle", args.seconds, gpus=args.gpus)
        raw = bundle_bytes(root)
        start = time.perf_counter()
        evidence = read_evidence(root)
        read_s = time.perf_counter() - start
        diagnosis = diagnose(evidence)
        renders = []
        for _ in range(args.repeat):
            start = time.perf_counter()
            page = html.build(diagnosis, evidence)
            renders.append(time.perf_counter() - start)
        render_s = min(renders)

    plotted = timeseries.over_time(evidence.gpu, evidence.metrics, evidence.logs, catalog.thresholds())
    charts = plotted.charts
    drawn = sum(len(svg.line_chart(c, plotted.timeline)) for c in charts)
    naive = len(page.encode()) - drawn + sum(len(naive_svg(c)) for c in charts)
    size = len(page.encode())
    points = sum(1 for c in charts for s in c.series for _, y in s.points if y is not None)

    print(
        f"capture: {args.seconds} s at 1 s, {args.gpus} GPU(s): {len(evidence.metrics.snapshots) if evidence.metrics else 0:,} "
        f"scrapes, {len(evidence.gpu.samples) if evidence.gpu else 0:,} GPU samples; {len(charts)} charts, {points:,} points"
    )
    print(
        f"llmtriage page:           {size / 1e6:8.3f} MB   (target < {TARGET_BYTES / 1e6:.0f} MB: {'ok' if size < TARGET_BYTES else 'OVER'})"
    )
    print(
        f"baseline, naive page:     {naive / 1e6:8.3f} MB   every point drawn; ratio naive/llmtriage {naive / size:.1f}x"
    )
    print(f"baseline, raw bundle:     {raw / 1e6:8.3f} MB   on disk; ratio raw/llmtriage {raw / size:.0f}x")
    print(f"render (build):           {render_s * 1000:8.1f} ms   best of {args.repeat}")
    print(
        f"baseline, read bundle:    {read_s * 1000:8.1f} ms   read_evidence; ratio read/render {read_s / render_s:.0f}x"
    )
    if size >= TARGET_BYTES:
        sys.exit(1)


if __name__ == "__main__":
    main()
