"""The software stack, checked against the driver table and the GPU's compute capability (diagnose/stack.py): a
driver older than the CUDA runtime, a GPU the build has no kernels for, bfloat16 on a GPU without it.

A finding that stops the server from starting weighs about as much as the error line that says so; the two agree
on one cause and together rank it first. A finding the server can live with (minor-version compatibility, a dtype
the engine may fall back from) weighs less. A finding whose citation is already an error line naming the same cause
adds nothing.
"""

from __future__ import annotations

from collections.abc import Iterator

from llmtriage.diagnose.rules import Signal, rule, signal
from llmtriage.diagnose.scene import Scene

BLOCKING_WEIGHT = 0.8
LIMITING_WEIGHT = 0.3


@rule("startup_failure", "request_failure")
def stack_checks(scene: Scene) -> Iterator[Signal]:
    """Each finding of the stack checks, as a signal for its cause."""
    named = {(e.source, e.line, cause) for e in scene.log.events if e.role == "error" for cause in e.causes}
    for finding in scene.stack_findings:
        cite = finding.citation
        if (cite.source, cite.line, finding.cause) in named:
            continue
        yield signal(finding.cause, BLOCKING_WEIGHT if finding.blocking else LIMITING_WEIGHT, cite, finding.note)
