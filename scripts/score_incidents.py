"""Score `diagnose` on the real incidents of tests/fixtures/incidents, half by half.

    .venv/bin/python scripts/score_incidents.py            # both halves, a line per miss
    .venv/bin/python scripts/score_incidents.py --all      # a line per case
    .venv/bin/python scripts/score_incidents.py --half B   # one half
    .venv/bin/python scripts/score_incidents.py --extra    # the extra set (tests/fixtures/incidents-extra)
    .venv/bin/python scripts/score_incidents.py --extra --only 5   # only the files whose name starts with 5

Half A is the one rules are written against, half B is held out (tests/incidents.py says how they are split).
Only names, classes and cause ids are printed, never a case's evidence, so checking B does not show its lines.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from tests.incidents import EXTRA_INCIDENTS, INCIDENTS, half, rates, score_all


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--half", choices=("A", "B"), help="score one half only")
    parser.add_argument("--all", action="store_true", help="print every case, not only the misses")
    parser.add_argument("--extra", action="store_true", help="score tests/fixtures/incidents-extra instead")
    parser.add_argument("--only", metavar="PREFIX", help="score only the files whose name starts with PREFIX")
    args = parser.parse_args()
    paths = [p for p in (EXTRA_INCIDENTS if args.extra else INCIDENTS) if args.half is None or half(p) == args.half]
    paths = [p for p in paths if args.only is None or p.name.startswith(args.only)]
    scores = score_all(paths)
    for s in scores:
        miss = not s.class_ok or (s.cause_scored and not s.first_ok)
        if args.all or miss:
            mark = "ok  " if not miss else "MISS"
            print(
                f"{mark} {s.half} {s.name[:60]:60} want {s.expected_class}/{s.expected_cause}"
                f"  got {s.got_class}/{','.join(s.got_causes[:3]) or '-'}"
            )
    for label in ("A", "B", None):
        part = [s for s in scores if label is None or s.half == label]
        if not part:
            continue
        r = rates(part)
        name = f"half {label}" if label else "all"
        print(
            f"{name:7} {r.cases:3} cases  class {r.class_rate:6.1%}  first cause {r.first_rate:6.1%}"
            f"  top 3 {r.top3_rate:6.1%}"
        )


if __name__ == "__main__":
    main()
