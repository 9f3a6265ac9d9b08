"""The model's ``config.json``, when the model the server loads is a directory this host can read."""

from __future__ import annotations

import io
import shlex
from typing import ClassVar

from llmtriage.capture.collector import Collector, Context, Failed, ModelLocator, Skip, Skipped, decode
from llmtriage.capture.manifest import SourceRow
from llmtriage.capture.plan import CapturePlan
from llmtriage.capture.runner import Limits
from llmtriage.facts import LogFacts
from llmtriage.parse import launch, logs


class ModelConfigJson(Collector):
    """Finds the model in the launch command (or vLLM's ``non-default args`` log line) and copies its config."""

    name = "model.config"
    limits: ClassVar[Limits] = Limits(timeout_s=5.0, max_bytes=4 << 20)

    def skip(self, plan: CapturePlan) -> Skip | None:
        """Applies when a server was given."""
        return (
            None
            if plan.target is not None
            else Skip("no server given (--container, --log-file, --journal-unit, --pid)")
        )

    def collect(self, ctx: Context, row: SourceRow) -> None:
        """Read ``<model>/config.json`` through the scene's locator."""
        model = _model(ctx)
        if model is None:
            raise Skipped("neither the launch command nor the log names the model")
        local = (ctx.scene.locator or ModelLocator()).local(model)
        try:
            reachable = local is not None and local.is_dir()
        except OSError as e:
            raise Failed(f"cannot reach the model directory {model!r}: {e.strerror or e}") from e
        if local is None or not reachable:
            raise Skipped(
                f"model {model!r} is not a directory this host can reach "
                "(a hub repo id, or a path relative to a working directory that is not known)"
            )
        try:
            with (local / "config.json").open("rb") as f:
                data = f.read(self.limits.max_bytes + 1)
        except FileNotFoundError:
            raise Skipped(f"no config.json in the model directory {model!r}") from None
        except OSError as e:
            raise Failed(f"cannot read the config.json of {model!r}: {e.strerror or e}") from e
        if len(data) > self.limits.max_bytes:
            raise Failed(f"the config.json of {model!r} is larger than {self.limits.max_bytes} bytes")
        ctx.write(row, "config/config.json", decode(data))
        row.note(f"model {model!r}")


def _model(ctx: Context) -> str | None:
    """The model as the server named it: from the launch command, else from the args line of its log."""
    config = launch.parse_launch(shlex.join(ctx.scene.launch_argv or []), "launch")
    if config.model is None and ctx.scene.log_text:
        facts = LogFacts()
        logs.read_log(io.BytesIO(ctx.scene.log_text.encode("utf-8")), "log", facts)
        launch.fold_log_hints(config, facts)
    return config.model
