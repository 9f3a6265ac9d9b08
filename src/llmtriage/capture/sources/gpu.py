"""GPU evidence: a time series of samples and the compute processes (NVML, else ``nvidia-smi --query-gpu -lms``,
or a telemetry endpoint), plus the ``nvidia-smi`` table and ``nvidia-smi -q -d PERFORMANCE`` once.
"""

from __future__ import annotations

import re
from typing import ClassVar

from llmtriage import catalog
from llmtriage.capture import gpu
from llmtriage.capture.collector import Collector, Context, Failed, Skip, decode
from llmtriage.capture.manifest import SourceRow
from llmtriage.capture.plan import CapturePlan, GpuMode
from llmtriage.capture.runner import CommandResult, Limits

_SMI_LIMITS = Limits(timeout_s=20.0, max_bytes=4 << 20)
_INVALID_FIELD = re.compile(r'Field "(?P<field>[^"]+)" is not a valid field to query')


class _NvidiaSmiOnce(Collector):
    """One ``nvidia-smi`` command whose output is kept as a text file."""

    argv: ClassVar[tuple[str, ...]]
    path: ClassVar[str]
    limits: ClassVar[Limits] = _SMI_LIMITS

    def skip(self, plan: CapturePlan) -> Skip | None:
        """Applies unless the GPU is read from a telemetry endpoint."""
        return Skip("GPU read from the telemetry endpoint") if plan.gpu is GpuMode.url else None

    def collect(self, ctx: Context, row: SourceRow) -> None:
        """Run it; keep the output."""
        result = ctx.run(row, self.argv, self.limits)
        if not result.usable:
            raise Failed(result.why())
        ctx.write(row, self.path, decode(result.stdout))


class NvidiaSmiTable(_NvidiaSmiOnce):
    """The default ``nvidia-smi`` table: versions, memory, utilization, power, processes."""

    name = "gpu.table"
    argv = ("nvidia-smi",)
    path = "gpu/nvidia-smi.txt"


class NvidiaSmiPerformance(_NvidiaSmiOnce):
    """``nvidia-smi -q -d PERFORMANCE``: the clocks event (throttle) reasons."""

    name = "gpu.performance"
    argv = ("nvidia-smi", "-q", "-d", "PERFORMANCE")
    path = "gpu/performance.txt"


class GpuSamples(Collector):
    """GPU samples every interval into ``gpu/samples.csv`` and the compute processes into ``gpu/processes.csv``."""

    name = "gpu.samples"
    limits: ClassVar[Limits] = _SMI_LIMITS
    sampled = True

    def skip(self, plan: CapturePlan) -> Skip | None:
        """Always applies."""
        return None

    def collect(self, ctx: Context, row: SourceRow) -> None:
        """By the plan's mode; ``auto`` is NVML when it starts, else nvidia-smi, with NVML's reason noted."""
        mode = ctx.plan.gpu
        if mode is GpuMode.url:
            self._telemetry(ctx, row)
            return
        if mode in (GpuMode.auto, GpuMode.nvml):
            why = ctx.nvml.start()
            if why is None:
                try:
                    self._nvml(ctx, row)
                finally:
                    ctx.nvml.stop()
                return
            if mode is GpuMode.nvml:
                raise Failed(why)
            row.note(f"tried NVML first: {why}")
        self._nvidia_smi(ctx, row)

    def _nvml(self, ctx: Context, row: SourceRow) -> None:
        rows: list[gpu.GpuRow] = []
        processes: list[gpu.GpuProcessRow] = []
        reasons: dict[str, str] = {}
        for now_s in ctx.ticks():
            sample = gpu.read_nvml(ctx.nvml, now_s)
            rows.extend(sample.rows)
            processes = sample.processes
            for label, reason in sample.reasons.items():
                reasons.setdefault(label, reason)
            row.samples = (row.samples or 0) + 1
            ctx.report_sample(self.name, row.samples)
        row.note(f"NVML: {gpu.nvml_versions(ctx.nvml)}")
        if reasons:
            row.note("not read: " + "; ".join(f"{k}: {v}" for k, v in reasons.items()))
        self._write(ctx, row, rows, processes)

    def _telemetry(self, ctx: Context, row: SourceRow) -> None:
        assert ctx.plan.gpu_url is not None
        rows: list[gpu.GpuRow] = []
        processes: list[gpu.GpuProcessRow] | None = None
        failures: list[str] = []
        driver: str | None = None
        for now_s in ctx.ticks():
            answer = ctx.fetcher.get(ctx.plan.gpu_url, self.limits.timeout_s, self.limits.max_bytes)
            try:
                if not answer.ok:
                    raise ValueError(answer.error or f"HTTP {answer.status}")
                telemetry = gpu.parse_telemetry(answer.body, now_s)
            except ValueError as e:
                failures.append(str(e))
                continue
            rows.extend(telemetry.rows)
            processes = telemetry.processes
            driver = telemetry.driver_version
            row.samples = (row.samples or 0) + 1
            ctx.report_sample(self.name, row.samples)
        if failures:
            row.note(f"{len(failures)} telemetry reads failed, first: {failures[0]}")
        if not rows:
            raise Failed(failures[0] if failures else "no telemetry read before the capture ended")
        row.note(f"telemetry: driver {driver or 'unknown'}")
        self._write(ctx, row, rows, processes or [])

    def _write(self, ctx: Context, row: SourceRow, rows: list[gpu.GpuRow], processes: list[gpu.GpuProcessRow]) -> None:
        ctx.write(row, "gpu/samples.csv", gpu.samples_csv(rows))
        ctx.write(row, "gpu/processes.csv", gpu.processes_csv(processes))

    def _nvidia_smi(self, ctx: Context, row: SourceRow) -> None:
        fields = gpu.query_gpu_fields()
        interval_ms = max(int(ctx.plan.interval_s * 1000), 1)
        loop = ["-lms", str(interval_ms)] if ctx.plan.duration_s > 0 else []
        limits = Limits(
            timeout_s=ctx.plan.duration_s + min(ctx.plan.interval_s / 2, 1.0) if loop else self.limits.timeout_s,
            max_bytes=self.limits.max_bytes,
        )
        while True:
            argv = ["nvidia-smi", f"--query-gpu={','.join(fields)}", "--format=csv", *loop]
            result = ctx.run(row, argv, limits, looping=bool(loop))
            replaced = _older_name(result, fields)
            if replaced is None:
                break
            fields = replaced
        ended_by_design = bool(loop) and (result.timed_out or result.interrupted)
        if not (result.usable or (ended_by_design and result.stdout)):
            raise Failed(result.why())
        samples = decode(result.stdout)
        row.samples = max(len(samples.splitlines()) - 1, 0)
        ctx.write(row, "gpu/samples.csv", samples)
        apps = ctx.run(
            row,
            ["nvidia-smi", f"--query-compute-apps={','.join(gpu.query_compute_apps_fields())}", "--format=csv"],
            self.limits,
        )
        if apps.ok:
            ctx.write(row, "gpu/processes.csv", decode(apps.stdout))
        else:
            row.note(f"compute processes not read: {apps.why()}")


def _older_name(result: CommandResult, fields: list[str]) -> list[str] | None:
    """When nvidia-smi rejects a field (an older driver), the fields with the catalog's next alias for it."""
    m = _INVALID_FIELD.search(decode(result.stdout + result.stderr))
    if m is None or result.ok:
        return None
    bad = m.group("field")
    for aliases in catalog.nvidia_smi_fields().query_gpu_columns.values():
        if bad in aliases and aliases.index(bad) + 1 < len(aliases):
            return [aliases[aliases.index(bad) + 1] if f == bad else f for f in fields]
    return None
