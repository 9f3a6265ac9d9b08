"""Run a lab scenario end to end: start the servers, drive load with bench while capture records, diagnose the
bundle, write what was expected against what was observed, then stop what was started. Record first, restart
after: every folder keeps the bundle (with the bench results inside), the diagnosis, the report and a summary.
"""

from __future__ import annotations

import asyncio
import dataclasses
import shutil
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from llmtriage import aio, catalog, strict_json
from llmtriage.bench import result as bench_result
from llmtriage.bench import runner as bench_runner
from llmtriage.bench.model import BenchConfig
from llmtriage.capture import session as capture_session
from llmtriage.capture.plan import CapturePlan, GpuMode, LogFile
from llmtriage.diagnose.engine import diagnose
from llmtriage.diagnose.model import Diagnosis
from llmtriage.errors import UsageError
from llmtriage.evidence.bundle import read_evidence
from llmtriage.lab.scenarios import Plan, Scenario
from llmtriage.lab.targets import (
    DockerTarget,
    LlamaCppCpuTarget,
    Server,
    ServerSettings,
    SimServer,
    SimTarget,
    Target,
    UrlTarget,
    VllmCpuTarget,
)
from llmtriage.report import html as html_report
from llmtriage.report.bench import read_bundle_bench
from llmtriage.slo import parse_slo
from llmtriage.urls import check_url

SCHEMA_VERSION = 1
CAPTURE_INTERVAL_S = 0.5
# Capture keeps sampling until the load ends; this only bounds a load that never does.
CAPTURE_CEILING_S = 1800.0
HOLDER_SETTLE_S = 0.5


@dataclass(frozen=True, slots=True)
class Outcome:
    """What one scenario produced, and whether it matched the expectation."""

    scenario: str
    target: str
    status: str  # matched | mismatched | skipped
    folder: Path | None
    expected_class: str | None = None
    expected_causes: tuple[str, ...] = ()
    observed_class: str | None = None
    observed_cause: str | None = None
    confidence: float | None = None
    reason: str = ""
    seconds: float = 0.0

    def to_dict(self) -> dict[str, Any]:
        """summary.json."""
        return {
            "schema_version": SCHEMA_VERSION,
            "scenario": self.scenario,
            "target": self.target,
            "status": self.status,
            "expected": {"symptom_class": self.expected_class, "causes": list(self.expected_causes)},
            "observed": {
                "symptom_class": self.observed_class,
                "cause": self.observed_cause,
                "confidence": None if self.confidence is None else round(self.confidence, 3),
            },
            "reason": self.reason,
            "seconds": round(self.seconds, 1),
        }


def run_scenario(
    scenario: Scenario, target: Target, out: Path, progress: Callable[[str], None] = lambda _: None
) -> Outcome:
    """Run ``scenario`` on ``target`` into ``out/<scenario>/``."""
    started = time.monotonic()
    plan = scenario.plan_for(target.name)
    if plan is None:
        reason = scenario.cannot_show.get(target.name, f"{scenario.name} has no plan for {target.name}")
        return Outcome(scenario.name, target.name, "skipped", None, reason=reason)
    if isinstance(target, UrlTarget) and len(plan.servers) != 1:
        reason = target.can_start() or ""
        return Outcome(scenario.name, target.name, "skipped", None, reason=reason)
    folder = out / scenario.name
    _fresh_folder(folder)
    servers: list[Server] = []
    try:
        bundle = _record(scenario, plan, target, folder, servers, progress)
    finally:
        for server in reversed(servers):
            server.stop()
    thresholds = catalog.thresholds()
    if plan.slo:
        thresholds = dataclasses.replace(thresholds, slo=parse_slo(plan.slo, thresholds.slo))
    evidence = read_evidence(bundle)
    result = diagnose(evidence, thresholds)
    (folder / "diagnosis.json").write_text(strict_json.dumps(result.to_dict()))
    (folder / "report.html").write_text(html_report.build(result, evidence, read_bundle_bench(bundle), thresholds))
    outcome = _judge(scenario, target, plan, folder, result, time.monotonic() - started)
    (folder / "summary.json").write_text(strict_json.dumps(outcome.to_dict()))
    (folder / "summary.md").write_text(summary_markdown(scenario, outcome, result))
    return outcome


def _fresh_folder(folder: Path) -> None:
    """Empty ``folder`` (a scenario's own, from an earlier run) or make it; UsageError when that cannot be done
    without touching something else: a link, a file, a parent that is a file."""
    if folder.is_symlink() or (folder.exists() and not folder.is_dir()):
        raise UsageError(f"{folder} exists and is not a directory", "give --out a directory, or move it aside")
    try:
        if folder.exists():
            shutil.rmtree(folder)
        folder.mkdir(parents=True)
    except OSError as e:
        raise UsageError(f"cannot write {folder}: {e.strerror or e}", "give --out a directory you can write") from e


def _record(
    scenario: Scenario,
    plan: Plan,
    target: Target,
    folder: Path,
    servers: list[Server],
    progress: Callable[[str], None],
) -> Path:
    """Start the servers, load and capture; the bundle's path."""
    *holders, last = plan.servers
    for index, settings in enumerate(holders):
        progress(f"{scenario.name}: starting the memory holder")
        holder = target.start(settings, folder / f"server-{index}.log")
        servers.append(holder)
        if not holder.wait(600):
            raise RuntimeError(f"{scenario.name}: the holder did not start; see {holder.log_path}")
    if plan.holder_memory and isinstance(servers[0], SimServer):
        last = _told_of_holder(last, servers[0])
    if isinstance(target, UrlTarget):
        server: Server = target.existing(progress)
    else:
        progress(f"{scenario.name}: starting the server under test")
        server = target.start(last, folder / "server.log")
    servers.append(server)
    up = server.wait(600)
    gpu_url = _telemetry_url(servers)
    if not up or plan.load is None:
        progress(f"{scenario.name}: {'server failed to start' if not up else 'server up'}; capturing")
        return _capture(server, folder, gpu_url, metrics=up, window=None)
    stop = capture_session.StopSignal()
    captured: dict[str, Path] = {}
    thread = threading.Thread(
        target=lambda: captured.update(bundle=_capture(server, folder, gpu_url, metrics=True, window=stop)),
        daemon=True,
    )
    thread.start()
    progress(f"{scenario.name}: driving load ({plan.load.concurrency} concurrent, {plan.load.requests} requests)")
    bench_dir = folder / "bench"
    done = _bench(server.url, plan, scenario.name)
    bench_result.write(bench_dir, done)
    stop.finish()
    thread.join()
    bundle = captured["bundle"]
    shutil.copytree(bench_dir, bundle / "bench")
    return bundle


def _told_of_holder(settings: ServerSettings, holder: SimServer) -> ServerSettings:
    """The next simulator is told what the holder holds (simulated processes share no GPU)."""
    time.sleep(HOLDER_SETTLE_S)
    gpus = holder.telemetry().get("gpus")
    used = sum(int(g["memory_used_bytes"]) for g in gpus if isinstance(g, dict)) if isinstance(gpus, list) else 0
    fault = f"other-process:memory_gib={used / 2**30:.2f}"
    return dataclasses.replace(settings, sim_flags=(*settings.sim_flags, "--fault", fault))


def _telemetry_url(servers: list[Server]) -> str | None:
    """The simulator's NVML stand-in (the first server's: a memory holder shows the GPU the victim saw)."""
    for server in servers:
        if isinstance(server, SimServer):
            return server.url + "/llmtriage/gpu"
    return None


def _capture(
    server: Server, folder: Path, gpu_url: str | None, metrics: bool, window: capture_session.StopSignal | None
) -> Path:
    plan = CapturePlan(
        out_dir=folder,
        target=LogFile(server.log_path) if server.log_path is not None else None,
        metrics_url=server.url + "/metrics" if metrics else None,
        gpu=GpuMode.url if gpu_url else GpuMode.auto,
        gpu_url=gpu_url,
        duration_s=CAPTURE_CEILING_S if window is not None else 0.0,
        interval_s=CAPTURE_INTERVAL_S,
        label="bundle",
    )
    return capture_session.capture(plan, stop=window).path


def _bench(url: str, plan: Plan, label: str) -> bench_result.BenchResult:
    assert plan.load is not None
    thresholds = catalog.thresholds()
    slo = parse_slo(plan.slo, thresholds.slo) if plan.slo else thresholds.slo
    config = BenchConfig(
        base_url=url,
        concurrency=plan.load.concurrency,
        requests=plan.load.requests,
        classes=plan.load.classes,
        ignore_eos=plan.load.ignore_eos,
        label=label,
        metrics_url=url + "/metrics",
        slo_ttft_ms=slo.ttft_p95_s * 1000.0,
        slo_tpot_ms=slo.itl_p95_s * 1000.0,
    )
    outcome = aio.run(bench_runner.run(config, asyncio.Event()))
    return bench_result.build(outcome)


def _judge(scenario: Scenario, target: Target, plan: Plan, folder: Path, result: Diagnosis, seconds: float) -> Outcome:
    expected = plan.expected
    first = result.causes[0] if result.causes else None
    matched = result.symptom_class == expected.symptom_class and (first is not None and first.id in expected.causes)
    return Outcome(
        scenario=scenario.name,
        target=target.name,
        status="matched" if matched else "mismatched",
        folder=folder,
        expected_class=expected.symptom_class,
        expected_causes=expected.causes,
        observed_class=result.symptom_class,
        observed_cause=first.id if first else None,
        confidence=first.confidence if first else None,
        reason=expected.note,
        seconds=seconds,
    )


def summary_markdown(scenario: Scenario, outcome: Outcome, result: Diagnosis) -> str:
    """summary.md: expected against observed, and the evidence behind the first cause."""
    lines = [
        f"# {scenario.title}",
        "",
        f"- target: {outcome.target}",
        f"- expected: {outcome.expected_class} / {' or '.join(outcome.expected_causes)}",
        f"- observed: {outcome.observed_class} / {outcome.observed_cause or '-'}"
        + (f" (confidence {outcome.confidence:.2f})" if outcome.confidence is not None else ""),
        f"- verdict: **{outcome.status}**",
    ]
    if outcome.reason:
        lines.append(f"- note: {outcome.reason}")
    if result.causes:
        lines += ["", "## Evidence for the first cause", ""]
        lines += [f"- {e.citation.render()}" + (f" — {e.note}" if e.note else "") for e in result.causes[0].evidence]
    lines += ["", "Files: `bundle-*/` (the captured scene, with `bench/`), `diagnosis.json`, `report.html`.", ""]
    return "\n".join(lines)


def make_target(name: str, cache: Path, speed: float, model: str) -> Target:
    """A target by its --target value: sim, vllm-cpu, llamacpp-cpu, docker, or the URL of a server already up."""
    if name == "sim":
        return SimTarget(speed=speed)
    if name == "vllm-cpu":
        return VllmCpuTarget(cache=cache)
    if name == "llamacpp-cpu":
        return LlamaCppCpuTarget(cache=cache)
    if name == "docker":
        return DockerTarget(model=model)
    if "://" not in name:
        raise UsageError(
            f"--target {name!r}: unknown", "sim, vllm-cpu, llamacpp-cpu, docker, or the URL of a running server"
        )
    return UrlTarget(base_url=check_url(name.strip(), "--target").rstrip("/"))
