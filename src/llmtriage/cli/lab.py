"""``llmtriage lab``, ``demo`` and ``serve``: reproduce the classic faults, record everything, then stop."""

from __future__ import annotations

import signal
import subprocess
import time
from pathlib import Path
from typing import Annotated

import typer

from llmtriage.cli.app import app, fail, stderr, stdout
from llmtriage.errors import ExitCode, UnavailableError, UsageError
from llmtriage.lab import docker, vllm_cpu
from llmtriage.lab.run import Outcome, make_target, run_scenario
from llmtriage.lab.scenarios import SCENARIOS, scenario
from llmtriage.lab.targets import LlamaCppCpuTarget, UrlTarget, VllmCpuTarget

DEMO_SCENARIOS = ("startup-oom", "runtime-oom", "prefill-jam")
# Where lab and serve keep the vllm-cpu venv and the tiny model: one install for both.
LAB_CACHE = Path(".cache")


def _print(outcome: Outcome) -> None:
    if outcome.status == "skipped":
        stdout.print(f"[yellow]skipped[/] {outcome.scenario} on {outcome.target}: {outcome.reason}", highlight=False)
        return
    mark = "[green]matched[/]" if outcome.status == "matched" else "[red]mismatched[/]"
    confidence = f" ({outcome.confidence:.2f})" if outcome.confidence is not None else ""
    stdout.print(
        f"{mark} {outcome.scenario} on {outcome.target} in {outcome.seconds:.0f} s\n"
        f"  expected  {outcome.expected_class} / {' or '.join(outcome.expected_causes)}\n"
        f"  observed  {outcome.observed_class} / {outcome.observed_cause or '-'}{confidence}\n"
        f"  report    {outcome.folder}/report.html  (summary.md, diagnosis.json, bundle-*/)",
        highlight=False,
    )


def _say(message: str) -> None:
    stderr.print(f"[dim]{message}[/]", highlight=False)


def _check_out(out: Path) -> None:
    """--out is a directory, or can become one: never a file, and never a path through one."""
    if out.exists() and not out.is_dir():
        raise UsageError(f"--out {out}: exists and is not a directory", "give a directory (it is created if missing)")
    try:
        out.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        raise UsageError(f"--out {out}: cannot create it ({e.strerror or e})", "give a directory you can write") from e


def _run(names: list[str], target_name: str, out: Path, speed: float, model: str) -> list[Outcome]:
    target = make_target(target_name, LAB_CACHE.resolve(), speed, model)
    if isinstance(target, VllmCpuTarget | LlamaCppCpuTarget):
        target.progress = _say
    _check_out(out)
    if isinstance(target, UrlTarget):  # fail fast on a server that is not there, before any folder is touched
        _say(f"checking that {target.base_url} accepts connections")
        target.check(_say)
    outcomes = []
    for name in names:
        outcome = run_scenario(scenario(name), target, out, progress=_say)
        _print(outcome)
        outcomes.append(outcome)
    return outcomes


def _exit(outcomes: list[Outcome]) -> None:
    if any(o.status == "mismatched" for o in outcomes):
        raise typer.Exit(int(ExitCode.PROBLEM_FOUND))
    raise typer.Exit(int(ExitCode.OK))


@app.command()
def lab(
    which: Annotated[
        str, typer.Argument(help="startup-oom | runtime-oom | prefill-jam | context-overflow | throttle | all")
    ],
    target: Annotated[
        str,
        typer.Option(
            help="sim (built in), vllm-cpu (a real vLLM on the CPU), llamacpp-cpu (a real llama.cpp llama-server on "
            "the CPU), docker (GPU host), or a server URL."
        ),
    ] = "sim",
    out: Annotated[Path, typer.Option(help="One folder per scenario is written here.")] = Path("benchmarks/gpu/oom"),
    speed: Annotated[float, typer.Option(help="Simulated seconds per wall second (target sim).")] = 20.0,
    model: Annotated[str, typer.Option(help="Model for the docker target.")] = "Qwen/Qwen2.5-7B-Instruct",
) -> None:
    """Reproduce a classic fault end to end: start the server(s), drive load with bench while capture records,
    diagnose, write expected vs observed (summary.md), then stop what was started.

    Exit codes: 0 every scenario run matched its expectation (skipped ones are listed), 1 one did not, 2 usage.
    """
    names = [s.name for s in SCENARIOS] if which == "all" else [which]
    for name in names:
        try:
            scenario(name)
        except KeyError:
            fail(UsageError(f"unknown scenario {name!r}", f"one of {', '.join(s.name for s in SCENARIOS)}, all"))
    _exit(_run(names, target, out, speed, model))


@app.command()
def demo(
    out: Annotated[Path, typer.Option(help="Where the three scenario folders go.")] = Path("llmtriage-demo"),
) -> None:
    """The lab on the built-in simulator, end to end (no GPU, no network): startup OOM, runtime OOM and a
    prefill jam, each diagnosed, with where its report is."""
    started = time.monotonic()
    stdout.print("[bold]llmtriage demo[/]: three classic faults on the simulator, recorded and diagnosed\n")
    outcomes = _run(list(DEMO_SCENARIOS), "sim", out, 20.0, "")
    stdout.print(f"\n{sum(o.status == 'matched' for o in outcomes)} of {len(outcomes)} diagnosed as expected "
                 f"in {time.monotonic() - started:.0f} s; open the reports under {out}/")  # fmt: skip
    _exit(outcomes)


@app.command()
def serve(
    target: Annotated[
        str,
        typer.Option(
            help="docker: print (or --run) the `docker run vllm/vllm-openai` command for a GPU host; vllm-cpu: start "
            "a real vLLM on this machine's CPU with llmtriage's own install, serving the tiny generated model, "
            "until Ctrl-C."
        ),
    ] = "docker",
    model: Annotated[
        str | None,
        typer.Option(help="Model id or path inside the container (docker; default Qwen/Qwen2.5-7B-Instruct)."),
    ] = None,
    gpu_mem_util: Annotated[float, typer.Option(help="--gpu-memory-utilization (docker)")] = 0.9,
    max_num_seqs: Annotated[int | None, typer.Option(help="--max-num-seqs")] = None,
    max_model_len: Annotated[int | None, typer.Option(help="--max-model-len")] = None,
    port: Annotated[int, typer.Option(help="Host port.")] = 8000,
    name: Annotated[str, typer.Option(help="Container name (docker).")] = "vllm",
    image: Annotated[str, typer.Option(help="Image (docker).")] = docker.DEFAULT_IMAGE,
    run: Annotated[
        bool, typer.Option("--run", help="Run it (docker; needs a Docker engine); default: print it.")
    ] = False,
    stop: Annotated[bool, typer.Option("--stop", help="Stop and remove the container instead (docker).")] = False,
) -> None:
    """Start a vLLM to try llmtriage on: the `docker run vllm/vllm-openai` command for a GPU host (printed, or run
    with --run), or a real vLLM on this machine's CPU (--target vllm-cpu; the first start installs vllm-cpu into
    .cache/, a few minutes).

    Exit codes: 0 printed, ran, or served until stopped; 2 usage; 4 the server could not start (its log is named).
    """
    if not 0 < gpu_mem_util <= 1:
        fail(UsageError("--gpu-mem-util must be in (0, 1]"))
    flags = []
    if max_num_seqs is not None:
        flags += ["--max-num-seqs", str(max_num_seqs)]
    if max_model_len is not None:
        flags += ["--max-model-len", str(max_model_len)]
    if target == "vllm-cpu":
        if model is not None or run or stop:
            fail(UsageError("--target vllm-cpu serves the tiny generated model in the foreground",
                            "leave out --model, --run and --stop (they are for --target docker)"))  # fmt: skip
        _serve_on_cpu(port, flags)
        return
    if target != "docker":
        fail(UsageError(f"unknown --target {target!r}", "docker or vllm-cpu"))
    flags = ["--gpu-memory-utilization", f"{gpu_mem_util:g}", *flags]
    argv = (
        docker.stop_command(name)
        if stop
        else docker.run_command(model or docker.DEFAULT_MODEL, port, name, flags, image)
    )
    stdout.print(docker.shell(argv), highlight=False, soft_wrap=True)
    if not (run or stop):
        return
    problem = docker.docker_engine_problem()
    if problem is not None:
        fail(UsageError(f"cannot run it here: {problem}", "run the printed command on a GPU host with Docker"))
    done = subprocess.run(argv, capture_output=True, text=True, check=False, timeout=docker.DOCKER_TIMEOUT_S)
    stderr.print(done.stdout.strip() or done.stderr.strip())
    raise typer.Exit(0 if done.returncode == 0 else int(ExitCode.UNAVAILABLE))


def _stop_on_sigterm(signum: int, frame: object) -> None:
    raise KeyboardInterrupt


def _serve_on_cpu(port: int, flags: list[str]) -> None:
    """A real vLLM on the CPU in the foreground, stopped (with its workers) by Ctrl-C or SIGTERM."""
    cache = LAB_CACHE.resolve()
    python = vllm_cpu.ensure_venv(cache, _say)
    model = vllm_cpu.ensure_tiny_model(cache, python, _say)
    log = cache / "serve" / f"vllm-cpu-{port}.log"
    server = vllm_cpu.VllmCpuServer(python=python, model=model, cache=cache, log_path=log, port=port, args=flags)
    _say(f"starting vLLM (vllm-cpu from the venv {python.parent.parent}) on 127.0.0.1:{port}; its log: {log}")
    previous = signal.signal(signal.SIGTERM, _stop_on_sigterm)
    try:
        server.start()
        if not server.wait():
            tail = "\n".join(server.log().splitlines()[-5:])
            fail(UnavailableError(f"vLLM exited before it was ready:\n{tail}", f"llmtriage diagnose --log {log}"))
        stdout.print(
            f"serving {vllm_cpu.SERVED_NAME} at {server.url}: OpenAI API {server.url}/v1, metrics {server.url}/metrics"
            f"\ntry: llmtriage bench --base-url {server.url} --requests 16; Ctrl-C stops it",
            highlight=False,
            soft_wrap=True,
        )
        assert server.process is not None
        code = server.process.wait()
        fail(UnavailableError(f"vLLM exited by itself (exit {code})", f"llmtriage diagnose --log {log}"))
    except KeyboardInterrupt:
        _say("stopping vLLM")
    finally:
        server.stop()
        signal.signal(signal.SIGTERM, previous)
