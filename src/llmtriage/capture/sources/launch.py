"""Launch arguments and environment: ``docker inspect``, or ``/proc/PID/cmdline`` and ``/proc/PID/environ``.

``config/launch.txt`` is the command line, shell-quoted; ``config/env.txt`` one ``NAME=value`` per line, shell
quoted and sorted, so the launch parser reads both. Both are redacted (secret flags, secret-named variables).
"""

from __future__ import annotations

import json
import shlex
from collections.abc import Mapping
from pathlib import Path, PurePosixPath
from typing import Any, ClassVar

from llmtriage.capture.collector import Collector, Context, Failed, ModelLocator, Skip
from llmtriage.capture.manifest import SourceRow
from llmtriage.capture.plan import CapturePlan, Container, Process
from llmtriage.capture.runner import Limits

_PROC_LIMITS = Limits(timeout_s=5.0, max_bytes=1 << 20)


def _write_launch(ctx: Context, row: SourceRow, argv: list[str]) -> None:
    ctx.scene.launch_argv = argv
    ctx.write(row, "config/launch.txt", shlex.join(ctx.writer.redactor.redact_argv(argv)) + "\n")


def _write_env(ctx: Context, row: SourceRow, env: Mapping[str, str]) -> None:
    clean = ctx.writer.redactor.redact_env(env)
    ctx.write(row, "config/env.txt", "".join(f"{k}={shlex.quote(v)}\n" for k, v in sorted(clean.items())))


class DockerInspect(Collector):
    """``docker inspect``: the container's command line, environment, mounts and state."""

    name = "launch.docker"
    limits: ClassVar[Limits] = Limits(timeout_s=15.0, max_bytes=8 << 20)

    def skip(self, plan: CapturePlan) -> Skip | None:
        """Applies to --container."""
        return None if isinstance(plan.target, Container) else Skip("no --container given")

    def collect(self, ctx: Context, row: SourceRow) -> None:
        """Write launch.txt, env.txt and the inspect document; note the container's state."""
        assert isinstance(ctx.plan.target, Container)
        argv = ["docker", "inspect", "--type", "container", ctx.plan.target.name]
        result = ctx.run(row, argv, self.limits)
        if not result.ok:
            raise Failed(result.why())
        try:
            docs = json.loads(result.stdout)
        except (json.JSONDecodeError, UnicodeDecodeError) as e:
            raise Failed(f"docker inspect did not answer JSON: {e}") from e
        if not isinstance(docs, list) or not docs or not isinstance(docs[0], dict):
            raise Failed("docker inspect answered no container")
        doc: dict[str, Any] = docs[0]
        config = doc.get("Config") or {}
        env = dict(item.partition("=")[::2] for item in config.get("Env") or [] if isinstance(item, str))
        _write_env(ctx, row, env)
        command = [str(doc.get("Path") or ""), *map(str, doc.get("Args") or [])]
        _write_launch(ctx, row, [c for c in command if c] or [str(config.get("Image") or "")])
        ctx.write(row, "config/docker-inspect.json", json.dumps([_redacted_inspect(ctx, doc)], indent=2) + "\n")
        ctx.scene.locator = ModelLocator(
            mounts=tuple(
                (PurePosixPath(m["Destination"]), Path(m["Source"]))
                for m in doc.get("Mounts") or []
                if isinstance(m, dict) and m.get("Destination") and m.get("Source")
            ),
            container_workdir=PurePosixPath(config.get("WorkingDir") or "/"),
        )
        ctx.scene.container_image = str(config.get("Image") or "") or None
        ctx.scene.container_image_id = str(doc.get("Image") or "") or None
        state = doc.get("State") or {}
        if state:
            row.note(
                f"image {config.get('Image')}; container {state.get('Status')}, exit code {state.get('ExitCode')}, "
                f"OOMKilled {state.get('OOMKilled')}, restarts {doc.get('RestartCount')}"
            )


class ProcessCmdline(Collector):
    """``/proc/PID/cmdline``: the process's command line."""

    name = "launch.process"
    limits: ClassVar[Limits] = _PROC_LIMITS

    def skip(self, plan: CapturePlan) -> Skip | None:
        """Applies to --pid."""
        return None if isinstance(plan.target, Process) else Skip("no --pid given")

    def collect(self, ctx: Context, row: SourceRow) -> None:
        """Write launch.txt; remember where the process's files are."""
        assert isinstance(ctx.plan.target, Process)
        base = ctx.proc_root / str(ctx.plan.target.pid)
        raw = _read_proc(base / "cmdline", self.limits.max_bytes)
        argv = [a.decode("utf-8", "replace") for a in raw.split(b"\0")]
        if argv and argv[-1] == "":
            argv.pop()
        if not argv:
            raise Failed(f"{base / 'cmdline'} is empty (a kernel thread, or a process that has exited)")
        _write_launch(ctx, row, argv)
        ctx.scene.locator = ModelLocator(root=base / "root", cwd=base / "cwd")


class ProcessEnviron(Collector):
    """``/proc/PID/environ``: the process's environment (readable by its owner and root)."""

    name = "env.process"
    limits: ClassVar[Limits] = _PROC_LIMITS

    def skip(self, plan: CapturePlan) -> Skip | None:
        """Applies to --pid."""
        return None if isinstance(plan.target, Process) else Skip("no --pid given")

    def collect(self, ctx: Context, row: SourceRow) -> None:
        """Write env.txt."""
        assert isinstance(ctx.plan.target, Process)
        raw = _read_proc(ctx.proc_root / str(ctx.plan.target.pid) / "environ", self.limits.max_bytes)
        env: dict[str, str] = {}
        for item in raw.split(b"\0"):
            name, eq, value = item.decode("utf-8", "replace").partition("=")
            if eq and name:
                env[name] = value
        _write_env(ctx, row, env)


def _redacted_inspect(ctx: Context, doc: dict[str, Any]) -> dict[str, Any]:
    """The inspect document with its command lines and environment redacted as argv and env (a short
    ``--api-key`` value inside a JSON array is not found by the text detectors alone)."""
    redactor = ctx.writer.redactor
    clean = dict(doc)
    if isinstance(doc.get("Args"), list):
        clean["Args"] = redactor.redact_argv([str(a) for a in doc["Args"]])
    config = doc.get("Config")
    if isinstance(config, dict):
        config = dict(config)
        for key in ("Cmd", "Entrypoint"):
            if isinstance(config.get(key), list):
                config[key] = redactor.redact_argv([str(a) for a in config[key]])
        if isinstance(config.get("Env"), list):
            env = dict(str(item).partition("=")[::2] for item in config["Env"])
            config["Env"] = [f"{k}={v}" for k, v in redactor.redact_env(env).items()]
        clean["Config"] = config
    return clean


def _read_proc(path: Path, max_bytes: int) -> bytes:
    try:
        with path.open("rb") as f:
            return f.read(max_bytes)
    except PermissionError as e:
        raise Failed(f"permission denied reading {path} (run as the server's user, or root)") from e
    except OSError as e:
        raise Failed(f"cannot read {path}: {e.strerror or e}") from e
