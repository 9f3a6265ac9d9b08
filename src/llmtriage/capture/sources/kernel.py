"""Kernel messages (NVRM Xid, fallen off the bus, OOM killer): ``dmesg -T``, else ``journalctl -k``.

Reading the kernel ring buffer needs privileges on most hosts (``kernel.dmesg_restrict``): a refusal is
recorded with the command's own words, and the journal is tried next.
"""

from __future__ import annotations

from typing import ClassVar

from llmtriage.capture.collector import NO_JOURNAL_ENTRIES, Collector, Context, Failed, Skip, decode
from llmtriage.capture.manifest import SourceRow
from llmtriage.capture.plan import CapturePlan
from llmtriage.capture.runner import Limits

JOURNAL_KERNEL_LINES = 20_000


class KernelMessages(Collector):
    """The kernel log, from the first command that can read it."""

    name = "kernel"
    limits: ClassVar[Limits] = Limits(timeout_s=15.0, max_bytes=16 << 20)

    def skip(self, plan: CapturePlan) -> Skip | None:
        """Always applies: GPU faults show here whatever the server."""
        return None

    def collect(self, ctx: Context, row: SourceRow) -> None:
        """Try each command in turn; write the first that gives lines; fail with every reason otherwise."""
        attempts = (
            ["dmesg", "-T"],
            ["journalctl", "-k", "--no-pager", "-o", "short-iso", "-n", str(JOURNAL_KERNEL_LINES)],
        )
        reasons: list[str] = []
        for argv in attempts:
            result = ctx.run(row, argv, self.limits)
            text = decode(result.stdout)
            if not result.usable:
                reasons.append(f"{' '.join(argv[:2])}: {result.why()}")
            elif text.strip() in ("", NO_JOURNAL_ENTRIES):
                detail = decode(result.stderr).strip()
                reasons.append(f"{' '.join(argv[:2])}: no messages" + (f" ({detail})" if detail else ""))
            else:
                if reasons:
                    row.note("; ".join(reasons))
                ctx.write(row, "kernel/dmesg.txt", text)
                return
            if ctx.stop.is_set():
                break
        raise Failed("; ".join(reasons))
