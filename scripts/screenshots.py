"""Screenshots of a demo report for the docs: docs/screenshots/report-1280.png and report-390.png.

    .venv/bin/python scripts/screenshots.py [--out docs/screenshots]

Runs ``llmtriage demo`` (the simulator on 127.0.0.1, about 15 s) into a temporary folder and photographs the
prefill-jam page's first screen in Debian's headless ``chromium`` at 1280 and 390 CSS pixels wide (a laptop and a
phone). When ``pngquant`` is on PATH (``apt-get install pngquant``) each PNG is reduced to a 256-colour palette;
every file must end under 300 KB, or the script says which did not and exits 1. Not run by ``make test``.
"""

from __future__ import annotations

import argparse
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
SCENARIO = "prefill-jam"
SHOTS = (("report-1280.png", 1280, 1500), ("report-390.png", 390, 1700))
MAX_BYTES = 300_000
CHROMIUM_FLAGS = ("--headless", "--no-sandbox", "--disable-gpu", "--hide-scrollbars", "--no-first-run")


def _run(argv: list[str], cwd: Path | None = None) -> None:
    proc = subprocess.run(argv, cwd=cwd, capture_output=True, text=True, timeout=300)
    if proc.returncode != 0:
        sys.exit(f"screenshots: {' '.join(argv[:3])} ... failed ({proc.returncode}):\n{proc.stdout}{proc.stderr}")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=REPO / "docs" / "screenshots")
    args = parser.parse_args()
    chromium = shutil.which("chromium")
    if chromium is None:
        sys.exit("screenshots: chromium is not installed (make dev installs it)")
    pngquant = shutil.which("pngquant")
    args.out.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="llmtriage-shots-") as tmp:
        work = Path(tmp)
        # A relative --out keeps the temporary folder's name out of the page ("evidence: llmtriage-demo/...").
        _run([sys.executable, "-m", "llmtriage", "demo", "--out", "llmtriage-demo"], cwd=work)
        page = (work / "llmtriage-demo" / SCENARIO / "report.html").resolve().as_uri()
        too_big = []
        for name, width, height in SHOTS:
            target = args.out / name
            profile = work / f"profile-{width}"
            _run(
                [
                    chromium,
                    *CHROMIUM_FLAGS,
                    f"--user-data-dir={profile}",
                    f"--window-size={width},{height}",
                    f"--screenshot={target}",
                    page,
                ]
            )
            if pngquant is not None:
                _run([pngquant, "--force", "--skip-if-larger", "--strip", "--output", str(target), "256", str(target)])
            size = target.stat().st_size
            print(
                f"{target.relative_to(REPO) if target.is_relative_to(REPO) else target}: {width}x{height}, {size:,} B"
            )
            if size > MAX_BYTES:
                too_big.append(f"{target} ({size:,} B)")
    if too_big:
        print(f"screenshots: over {MAX_BYTES:,} B: {', '.join(too_big)}; install pngquant", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
