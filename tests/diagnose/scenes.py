"""Small evidence for rule tests: a bundle laid out from a log, Prometheus text, a launch line, nvidia-smi text.

Scrapes are written in vLLM's metric names; each test states the numbers a rule compares, on both sides of its
threshold, so inverting a comparison in the rule fails a test.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from pathlib import Path

from llmtriage import catalog
from llmtriage.catalog import Thresholds
from llmtriage.diagnose.rules import Rule
from llmtriage.diagnose.scene import Scene
from llmtriage.evidence.bundle import read_evidence

INF = float("inf")


def prom(
    gauges: Mapping[str, float] | None = None,
    counters: Mapping[str, float] | None = None,
    histograms: Mapping[str, Mapping[float, float]] | None = None,
    info: Mapping[str, Mapping[str, str]] | None = None,
) -> str:
    """Prometheus text in vLLM's names: histograms as {upper bound: cumulative count} with +Inf last."""
    lines: list[str] = []
    for name, value in (gauges or {}).items():
        lines += [f"# TYPE {name} gauge", f'{name}{{model_name="m"}} {value}']
    for name, value in (counters or {}).items():
        lines += [f"# TYPE {name} counter", f'{name}{{model_name="m"}} {value}']
    for name, buckets in (histograms or {}).items():
        lines.append(f"# TYPE {name} histogram")
        for le, count in buckets.items():
            bound = "+Inf" if le == INF else f"{le}"
            lines.append(f'{name}_bucket{{le="{bound}",model_name="m"}} {count}')
        total = max(buckets.values())
        lines += [f'{name}_sum{{model_name="m"}} {total}', f'{name}_count{{model_name="m"}} {total}']
    for name, labels in (info or {}).items():
        rendered = ",".join(f'{k}="{v}"' for k, v in labels.items())
        lines += [f"# TYPE {name} gauge", f"{name}{{{rendered}}} 1.0"]
    return "\n".join(lines) + "\n"


def scene(
    root: Path,
    log: str = "",
    scrapes: Iterable[str] = (),
    launch: str | None = None,
    nvidia_smi: str | None = None,
    dmesg: str | None = None,
    thresholds: Thresholds | None = None,
) -> Scene:
    """Lay the pieces out as a bundle under ``root`` and read it into a scene."""
    files = {"logs/server.log": log, "config/launch.txt": launch, "gpu/nvidia-smi.txt": nvidia_smi}
    files["kernel/dmesg.txt"] = dmesg
    for i, text in enumerate(scrapes):
        files[f"metrics/scrape-{1_700_000_000 + 30 * i}.prom"] = text
    for rel, text in files.items():
        if text:
            path = root / rel
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(text)
    return Scene(read_evidence(root), thresholds or catalog.thresholds())


def signals(rule: Rule, found_in: Scene, cause: str | None = None) -> list[tuple[str, float, str]]:
    """(cause, weight, note) of every signal ``rule`` finds, only of ``cause`` when given."""
    return [(s.cause, s.weight, s.evidence.note) for s in rule(found_in) if cause is None or s.cause == cause]
