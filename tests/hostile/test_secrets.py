"""Redaction gaps (capture, report, runbook): a corpus of planted secrets and of look-alikes, through every path.

Each planted secret has the shape its issuer documents (or the shape gitleaks, detect-secrets and kingfisher
rules look for), with made-up characters from a seeded hash: none is a live credential. Every path that shows or
stores text from a bundle must drop all of them, and leave every look-alike (model names, digests, UUIDs, request
ids, token counts, key file paths, special tokens) exactly as it was: the Redactor itself, a real ``capture`` of a
log file and of a process (its command line and environment), a hand-made bundle through the bundle reader,
``diagnose --format json`` and ``report``, and the runbook (its sqlite file, its Markdown export, and an import of a
document holding the corpus).
"""

from __future__ import annotations

import base64
import hashlib
import html
import json
import os
import re
import shlex
import string
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from llmtriage.evidence.bundle import read_evidence
from llmtriage.redact import PLACEHOLDER_PREFIX, Redactor, rules

from .conftest import llmtriage

ALNUM = string.ascii_letters + string.digits
UPPER_DIGITS = string.ascii_uppercase + string.digits
HEX = "0123456789abcdef"
B64 = ALNUM + "+/"
URLSAFE = ALNUM + "-_"


def fake(seed: str, n: int, alphabet: str = ALNUM) -> str:
    """``n`` characters of ``alphabet``, the same for the same seed: a planted value, never a live one."""
    out: list[str] = []
    counter = 0
    while len(out) < n:
        digest = hashlib.sha256(f"llmtriage-planted:{seed}:{counter}".encode()).digest()
        out.extend(alphabet[b % len(alphabet)] for b in digest)
        counter += 1
    return "".join(out[:n])


def fake_uuid(seed: str) -> str:
    h = fake(seed, 32, HEX)
    return f"{h[:8]}-{h[8:12]}-{h[12:16]}-{h[16:20]}-{h[20:]}"


def password(seed: str) -> str:
    """A password as people choose them: letters, digits and a few symbols (none that ends a URL's userinfo)."""
    return fake(seed, 6, string.ascii_letters) + "!" + fake(seed + "d", 4, string.digits) + "x" + fake(seed, 5)


@dataclass(frozen=True, slots=True)
class Plant:
    """One kind of planted secret: ``text`` as it shows up, the ``secrets`` in it, and which bundle file holds it
    besides the log (``env`` lines go into config/env.txt, ``flag`` arguments into config/launch.txt)."""

    kind: str
    text: str
    secrets: tuple[str, ...]
    where: str = "log"


def _pem(label: str, seed: str, lines: int, *, end: bool = True, newline: str = "\n") -> tuple[str, tuple[str, ...]]:
    body = [fake(f"{seed}{i}", 64, B64) for i in range(lines - 1)] + [fake(f"{seed}last", 24, B64) + "=="]
    text = newline.join([f"-----BEGIN {label}-----", *body, *([f"-----END {label}-----"] if end else [])])
    return text, tuple(body)


def plant(kind: str, template: str, *secrets: str, where: str = "log") -> Plant:
    """A plant whose text is ``template`` with the ``secrets`` put in its ``{}``."""
    return Plant(kind, template.format(*secrets), secrets, where)


def _plants() -> list[Plant]:
    hf = "hf_" + fake("hf", 34, string.ascii_letters)
    teams = [fake_uuid("teams0"), fake_uuid("teams1"), fake("teams-key", 32, HEX), fake_uuid("teams2")]
    sas_sig = fake("sas", 40) + "%2B" + fake("sas2", 3) + "%3D"
    basic = base64.b64encode(f"admin:{password('basic')}".encode()).decode()
    rsa, rsa_body = _pem("RSA PRIVATE KEY", "rsa", 5)
    ssh, ssh_body = _pem("OPENSSH PRIVATE KEY", "ssh", 4, end=False)
    gcp, gcp_body = _pem("PRIVATE KEY", "gcp", 4, newline="\\n")
    cut, cut_body = _pem("EC PRIVATE KEY", "cut", 3, end=False, newline="\\n")
    jwt = f"eyJ{fake('jwt1', 30, URLSAFE)}.eyJ{fake('jwt2', 40, URLSAFE)}.{fake('jwt3', 43, URLSAFE)}"
    key1, key2 = f"key-{fake('k1', 20)}", f"key-{fake('k2', 20)}"
    slack = (fake("slT", 10, UPPER_DIGITS), fake("slB", 10, UPPER_DIGITS), fake("slX", 24))
    digits = string.digits
    return [
        # Issuers' token formats, wherever they occur.
        plant("hf_token_env", "HF_TOKEN={}", hf, where="env"),
        plant("hf_token_docker_e", "docker run --gpus all -e HUGGING_FACE_HUB_TOKEN={} vllm/vllm-openai", hf),
        plant("hf_org_token", "login with {} ok", "api_org_" + fake("org", 34, string.ascii_letters)),
        plant("openai_project_key", "client = OpenAI(key {})",
              f"sk-proj-{fake('op', 74, URLSAFE)}T3BlbkFJ{fake('op2', 74, URLSAFE)}"),
        plant("openai_legacy_key", "using {} for the judge", f"sk-{fake('ol', 20)}T3BlbkFJ{fake('ol2', 20)}"),
        plant("anthropic_key", "anthropic client {}", f"sk-ant-api03-{fake('an', 93, URLSAFE)}AA"),
        plant("anthropic_admin_key", "admin {}", f"sk-ant-admin01-{fake('ad', 93, URLSAFE)}AA"),
        plant("aws_access_key_id", "boto3: using {}", "AKIA" + fake("aws", 16, string.ascii_uppercase + "234567")),
        plant("aws_secret_in_code", "s3 = boto3.client('s3', aws_secret = \"{}\")", fake("awss", 40, B64)),
        plant("aws_secret_env", "AWS_SECRET_ACCESS_KEY={}", fake("awse", 40, B64), where="env"),
        plant("aws_bedrock_key", "bedrock key {}", "ABSK" + fake("absk", 128, B64)),
        plant("github_pat", "git clone https://{}@github.com/org/weights", "ghp_" + fake("gh", 36)),
        plant("github_fine_grained", "token {}", "github_pat_" + fake("ghf", 82, ALNUM + "_")),
        plant("gitlab_pat", "pip install from gitlab with {}", "glpat-" + fake("gl", 20, URLSAFE)),
        plant("gitlab_runner_token", "runner registered {}", "glrt-" + fake("glr", 20)),
        plant("slack_bot_token", "alerting via {}",
              f"xoxb-{fake('sb1', 12, digits)}-{fake('sb2', 13, digits)}-{fake('sb3', 24)}"),
        plant("slack_webhook_url", "alert sent to https://hooks.slack.com/services/T{}/B{}/{}", *slack),
        plant("teams_webhook_url", "teams: https://contoso.webhook.office.com/webhookb2/{}@{}/IncomingWebhook/{}/{}",
              *teams),
        plant("discord_webhook_url", "POST https://discord.com/api/webhooks/1234567890123456789/{}",
              fake("discord", 68, URLSAFE)),
        plant("stripe_key", "billing {}", "sk_live_" + fake("st", 24)),
        plant("google_api_key", "gemini judge key {}", "AIza" + fake("g", 35, URLSAFE)),
        Plant("gcp_service_account_json",
              f'{{"type": "service_account", "private_key": "{gcp}\\n", "client_email": "x"}}', gcp_body),
        plant("azure_sas_signature", "GET https://llmstore.blob.core.windows.net/models/w.safetensors?sv=2022-11-02"
              "&ss=b&srt=o&sp=r&se=2026-01-01T00:00:00Z&spr=https&sig={} 200", sas_sig),
        plant("azure_storage_connection_string",
              "DefaultEndpointsProtocol=https;AccountName=llmstore;AccountKey={};EndpointSuffix=core.windows.net",
              fake("azkey", 86, B64) + "=="),
        plant("azure_ad_client_secret", "msal: confidential client with {} for app",
              f"{fake('aad', 3)}8Q~{fake('aad2', 34)}"),
        plant("azure_openai_api_key_header", "api-key: {}", fake("aoai", 32, HEX)),
        plant("nvidia_nvapi_key", "NIM: using {} for build.nvidia.com", "nvapi-" + fake("nv", 64, URLSAFE)),
        plant("groq_key", "judge=groq {}", "gsk_" + fake("gsk", 52)),
        plant("replicate_token", "replicate {}", "r8_" + fake("r8", 37)),
        plant("xai_key", "grok {}", "xai-" + fake("xai", 80)),
        plant("perplexity_key", "search {}", "pplx-" + fake("pplx", 48)),
        plant("databricks_token", "serving endpoint {}", "dapi" + fake("dapi", 32, HEX)),
        plant("npm_token", "//registry.npmjs.org/:_authToken={}", "npm_" + fake("npm", 36)),
        plant("pypi_token", "twine upload -p {}", "pypi-AgEIcHlwaS5vcmc" + fake("pypi", 60, URLSAFE)),
        plant("digitalocean_token", "doctl auth {}", "dop_v1_" + fake("do", 64, HEX)),
        plant("vault_token", "vault: {}", "hvs." + fake("hvs", 95, URLSAFE)),
        plant("grafana_service_account_token", "grafana {}", f"glsa_{fake('glsa', 32)}_{fake('glsa2', 8, HEX)}"),
        plant("jwt_in_json", '{{"session": "{}"}}', jwt),
        # Private keys, whole or cut before their END line.
        Plant("pem_rsa_key", rsa, rsa_body),
        Plant("pem_openssh_key_without_end", ssh + "\nINFO 01-02 12:00:00 engine started", ssh_body),
        Plant("pem_escaped_key_cut", f'{{"tls_cert": "{cut}', cut_body),
        # Passwords in URLs, connection strings, curl and headers.
        plant("redis_url_empty_user", "connecting to redis://:{}@cache.internal:6379/0", password("redis")),
        plant("postgres_url", "DATABASE_URL=postgresql://vllm:{}@db.internal:5432/runs", password("post"),
              where="env"),
        plant("mongodb_srv_url", "mongodb+srv://app:{}@cluster0.ab1cd.mongodb.net/?retryWrites=true",
              password("mongo")),
        plant("amqp_url_raw_at", "broker amqp://guest:{}@rabbit:5672/", "p@" + password("amqp")),
        plant("odbc_connection_string", "Driver={{ODBC Driver 18}};Server=db;Uid=sa;PWD={};Encrypt=yes",
              password("odbc")),
        plant("curl_user", "curl -sS -u admin:{} http://127.0.0.1:8000/v1/models", password("curl")),
        plant("basic_auth_header", "Authorization: Basic {}", basic),
        plant("bearer_opaque", "curl -H 'Authorization: Bearer {}' http://127.0.0.1:8000/v1/models",
              fake("bearer", 40)),
        plant("token_auth_header", "Authorization: Token {}", fake("tok", 40, HEX)),
        plant("x_api_key_header", "x-api-key: {}", fake("xak", 32)),
        plant("cookie_header", "Cookie: session={}", fake("cookie", 32)),
        plant("query_access_token", "GET /v1/models?access_token={}&x=1 401", fake("qat", 32)),
        # Names that hold secrets.
        plant("pgpassword_env", "PGPASSWORD={}", password("pg"), where="env"),
        plant("mysql_pwd_env", "MYSQL_PWD={}", password("my"), where="env"),
        plant("suffix_pw_env", "DB_PW={}", password("pw"), where="env"),
        plant("suffix_pwd_env", "CACHE_PWD={}", password("pwd"), where="env"),
        plant("plural_api_keys_env", "API_KEYS={},{}", key1, key2, where="env"),
        plant("plural_secrets_env", "SECRETS={}", password("secrets"), where="env"),
        plant("plural_hf_tokens_env", "HF_TOKENS={},{}", f"tok{fake('t1', 24)}", f"tok{fake('t2', 24)}",
              where="env"),
        plant("wandb_api_key_env", "WANDB_API_KEY={}", fake("wandb", 40, HEX), where="env"),
        plant("ngc_api_key_env", "NGC_API_KEY={}", fake("ngc", 84, B64), where="env"),
        plant("langsmith_key_env", "LANGSMITH_API_KEY={}", f"lsv2_pt_{fake('ls', 32, HEX)}_{fake('ls2', 10, HEX)}",
              where="env"),
        plant("api_key_flag", "--api-key {}", f"vllm-{fake('flag', 24)}", where="flag"),
        plant("hf_token_flag_equals", "--hf-token={}", fake("hff", 30), where="flag"),
        plant("escaped_json_api_key", 'msg="{{\\"api_key\\": \\"{}\\", \\"model\\": \\"m\\"}}"', password("esc")),
        plant("double_escaped_json_password", 'body: "{{\\\\\\"password\\\\\\": \\\\\\"{}\\\\\\"}}"', password("esc2")),
        plant("escaped_json_key_list", '"{{\\"api_keys\\": [\\"{}\\", \\"{}\\"]}}"', password("l1"), password("l2")),
        plant("vllm_non_default_args", "non-default args: {{'model': 'm', 'api_key': ['{}'], 'port': 8000}}",
              key1 + "x"),
        plant("pydantic_repr", "ServerArgs(model='m', api_key='{}', port=8000)", fake("pyd", 24)),
        plant("yaml_password", "  password: {}", password("yaml")),
    ]  # fmt: skip


PLANTS = _plants()

# Text that looks like a secret, or sits where one would, and must pass untouched.
LOOK_ALIKES = [
    "model=meta-llama/Llama-3.1-8B-Instruct",
    "Qwen/Qwen2.5-Coder-32B-Instruct-AWQ",
    "sha256:0a51ea5b4ae2dc5d81890e5173f54203d2a3ae0cfffe51b8fd2afd4391bfd967",
    "image vllm/vllm-openai@sha256:9c1d2a1e0c4fa2e4e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934c",
    "commit e54485ebab921f2c18c4d092b3f4c40dcca26781",
    "request_id=550e8400-e29b-41d4-a716-446655440000",
    "Finished request cmpl-8f3a9c2e4b5d4e6f8a1b2c3d4e5f6a7b-0",
    "chatcmpl-3f2a1b0c9d8e7f6a5b4c3d2e1f0a9b8c",
    "GPU-0b11d014-1685-04bd-26ed-5fc0bc1c44ae",
    "prompt_token_ids: [128000, 791, 6864, 315, 9822, 374]",
    "max_num_batched_tokens=8192",
    "--max-num-batched-tokens 8192",
    "--ssl-keyfile /etc/ssl/private/server.key --ssl-certfile /etc/ssl/certs/server.pem",
    "HF_HUB_ENABLE_HF_TRANSFER=1 uses hf_transfer",
    "scikit-learn (sk-learn) 1.5.2",
    "api_key=None",
    "HF_TOKEN_PATH=/root/.cache/huggingface/token",
    "TOKENIZERS_PARALLELISM=false",
    'vllm:prompt_tokens_total{model_name="meta-llama/Llama-3.1-8B"} 1.2345678e+06',
    'vllm:cache_config_info{block_size="16",cache_dtype="auto",num_gpu_blocks="27235"} 1.0',
    "process_start_time_seconds 1.7234567891e+09",
    "/root/.cache/huggingface/hub/models--meta-llama--Llama-3.1-8B-Instruct/snapshots/"
    "0e9e39f249a16976918f6564b8830bc894c89659/model-00001-of-00004.safetensors",
    '"eos_token": "</s>", "pad_token": "<|endoftext|>"',
    "special_tokens: ['<|im_start|>', '<|im_end|>']",
    '{"unk_token": "[UNK]", "sep_token": "[SEP]", "cls_token": "[CLS]", "mask_token": "[MASK]"}',
    "missing_keys: ['lm_head.weight', 'model.norm.weight']",
    "PWD=/srv/vllm-lab",
    "SSH_AUTH_SOCK=/tmp/ssh-XXXXabcd/agent.4242",
    "kv_cache_dtype=fp8_e5m2",
    "#new-token: 13938, max_tokens=16",
    "http://[::1]:8000/metrics",
    "http://127.0.0.1:8000/v1/chat/completions",
    "NCCL INFO comm 0x55d5c8a3b2c0 rank 0 nranks 2 cudaDev 0 busId 1000 commId 0x8f3e0c5a2b1d4e6f",
    '{\\"model\\": \\"meta-llama/Llama-3.1-8B\\", \\"max_tokens\\": 128}',
    "/etc/passwd: No such file or directory",
    "NVIDIA_API_KEY must start with nvapi-",
    "torch.Size([4096, 4096]) x-request-id: 7f3a9c2e-1b2d-4e5f-8a9b-0c1d2e3f4a5b",
    "hf_token: None, 'api_key': None, password=, TOKEN=true",
    "HF_TOKEN=$HF_TOKEN OPENAI_API_KEY=${OPENAI_API_KEY}",
]
# Look-alikes that are environment variables or flags go into the hand-made bundle's env.txt and launch.txt too.
ENV_LOOK_ALIKES = ["HF_TOKEN_PATH=/root/.cache/huggingface/token", "TOKENIZERS_PARALLELISM=false", "PWD=/srv/vllm-lab",
                   "HF_HUB_ENABLE_HF_TRANSFER=1"]  # fmt: skip
FLAG_LOOK_ALIKES = ["--max-num-batched-tokens 8192", "--ssl-keyfile /etc/ssl/private/server.key",
                    "--model meta-llama/Llama-3.1-8B-Instruct", "--kv-cache-dtype fp8_e5m2"]  # fmt: skip


def all_secrets() -> Iterator[tuple[str, str]]:
    for plant in PLANTS:
        for secret in plant.secrets:
            yield plant.kind, secret


def leaks(text: str) -> list[str]:
    """The planted secrets found in ``text`` (by kind)."""
    return sorted({kind for kind, secret in all_secrets() if secret in text})


def corpus_log() -> str:
    return "\n".join([*(p.text for p in PLANTS), *LOOK_ALIKES]) + "\n"


def test_the_corpus_is_big_enough() -> None:
    assert len(PLANTS) >= 40 and len({p.kind for p in PLANTS}) == len(PLANTS)
    assert len(LOOK_ALIKES) >= 20


@pytest.mark.parametrize("plant", PLANTS, ids=[p.kind for p in PLANTS])
def test_each_planted_secret_is_redacted(plant: Plant) -> None:
    redactor = Redactor()
    clean = redactor.redact_text(plant.text)
    assert not [s for s in plant.secrets if s in clean], clean
    assert PLACEHOLDER_PREFIX in clean
    assert redactor.redact_text(clean) == clean


@pytest.mark.parametrize("text", LOOK_ALIKES)
def test_each_look_alike_survives(text: str) -> None:
    redactor = Redactor()
    assert redactor.redact_text(text) == text
    assert redactor.counts == {}


def test_the_whole_corpus_at_once_keeps_every_look_alike() -> None:
    clean = Redactor().redact_text(corpus_log())
    assert leaks(clean) == []
    for text in LOOK_ALIKES:
        assert text in clean


def test_env_and_argv_forms() -> None:
    redactor = Redactor()
    env = dict(line.split("=", 1) for line in (p.text for p in PLANTS if p.where == "env"))
    env.update(dict(line.split("=", 1) for line in ENV_LOOK_ALIKES))
    argv = ["vllm", "serve"] + [t for p in PLANTS if p.where == "flag" for t in shlex.split(p.text)]
    argv += [t for f in FLAG_LOOK_ALIKES for t in shlex.split(f)]
    clean_env = redactor.redact_env(env)
    clean_argv = redactor.redact_argv(argv)
    assert leaks(json.dumps([clean_env, clean_argv])) == []
    for line in ENV_LOOK_ALIKES:
        name, value = line.split("=", 1)
        assert clean_env[name] == value
    assert " ".join(clean_argv).endswith(" ".join(FLAG_LOOK_ALIKES))
    # Each item of a plural name is a secret of its own, learned where it recurs alone.
    keys = next(p for p in PLANTS if p.kind == "plural_api_keys_env").secrets
    assert clean_env["API_KEYS"].count(PLACEHOLDER_PREFIX) == 2
    assert keys[1] not in redactor.redact_text(f"request with key {keys[1]}")


@pytest.mark.parametrize(
    "name", ["PGPASSWORD", "MYSQL_PWD", "DB_PW", "REDIS_PWD", "API_KEYS", "SECRETS", "HF_TOKENS", "CLIENTSECRET",
             "OPENAI_API_KEYS", "ACCESS_TOKENS", "dbPassword", "MYSQL_ROOT_PASSWORD"],
)  # fmt: skip
def test_more_secret_names(name: str) -> None:
    assert rules().is_secret_name(name)


@pytest.mark.parametrize(
    "name", ["PWD", "OLDPWD", "max_num_batched_tokens", "special_tokens", "missing_keys", "unexpected_keys",
             "num_tokens", "SECRET_KEY_FILE", "PGPASSFILE", "HF_TOKEN_PATH", "prompt_token_ids", "eos_token_id"],
)  # fmt: skip
def test_more_names_that_are_not_secrets(name: str) -> None:
    assert not rules().is_secret_name(name)


def test_real_logs_with_special_tokens_pass() -> None:
    text = "{'bos_token': '<|begin_of_text|>', 'eos_token': '<|eot_id|>', 'pad_token': '<|finetune_right_pad_id|>'}"
    assert Redactor().redact_text(text) == text


# ---------------------------------------------------------------- through the CLI


def _bundle_texts(root: Path) -> dict[str, str]:
    return {p.relative_to(root).as_posix(): p.read_text(errors="replace") for p in root.rglob("*") if p.is_file()}


@pytest.fixture(scope="module")
def corpus_file(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("corpus") / "server.log"
    path.write_text(corpus_log())
    return path


def test_capture_of_a_log_file_keeps_no_secret(corpus_file: Path, tmp_path: Path) -> None:
    out = tmp_path / "bundles"
    out.mkdir()
    result = llmtriage("capture", "--log-file", str(corpus_file), "--no-diagnose", "--duration", "1s",
                       "--gpu", "nvidia-smi", "--out", str(out))  # fmt: skip
    assert result.returncode == 0, result.stderr
    assert leaks(result.stdout + result.stderr) == []
    (bundle,) = [p for p in out.iterdir() if p.is_dir()]
    files = _bundle_texts(bundle)
    assert {name: leaks(text) for name, text in files.items() if leaks(text)} == {}
    (log,) = [text for name, text in files.items() if name.startswith("logs/")]
    assert [text for text in LOOK_ALIKES if text not in log] == []
    # The corpus exercises every detector of the catalog (the manifest counts replacements by kind).
    counted = json.loads(files["manifest.json"])["redactions"]
    assert sorted({d.kind for d in rules().detectors} - set(counted)) == []


def test_capture_of_a_process_keeps_no_secret_of_its_command_line_or_environment(tmp_path: Path) -> None:
    env = {"PATH": os.environ.get("PATH", "")}
    for line in [p.text for p in PLANTS if p.where == "env"] + ENV_LOOK_ALIKES:
        name, value = line.split("=", 1)
        env[name] = value
    flags = [t for f in [p.text for p in PLANTS if p.where == "flag"] + FLAG_LOOK_ALIKES for t in shlex.split(f)]
    server = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)", "serve", *flags], env=env)
    try:
        result = llmtriage("capture", "--pid", str(server.pid), "--no-diagnose", "--duration", "1s",
                           "--gpu", "nvidia-smi", "--out", str(tmp_path))  # fmt: skip
    finally:
        server.kill()
        server.wait()
    assert result.returncode == 0, result.stderr
    (bundle,) = [p for p in tmp_path.iterdir() if p.is_dir()]
    files = _bundle_texts(bundle)
    assert {name: leaks(text) for name, text in files.items() if leaks(text)} == {}
    assert " ".join(FLAG_LOOK_ALIKES) in files["config/launch.txt"]
    assert [line for line in ENV_LOOK_ALIKES if line not in files["config/env.txt"].splitlines()] == []


OOM = "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB."


def _first_lines() -> list[str]:
    """Each plant's first line and each look-alike, as the message of an error line the log parser keeps."""
    return [p.text.splitlines()[0] for p in PLANTS] + LOOK_ALIKES


@pytest.fixture(scope="module")
def bundle(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A bundle as someone else made it (not redacted): the corpus in its log, launch command and environment.

    The log holds the corpus as it is (multi-line keys too), then each plant's first line and each look-alike
    after an out-of-memory error, so that the log parser keeps them (it keeps only the lines it recognises).
    """
    root = tmp_path_factory.mktemp("handmade") / "incident"
    (root / "logs").mkdir(parents=True)
    (root / "config").mkdir()
    shown_first = f"{OOM} loading with {PLANTS[0].text} api_key=None request_id=550e8400-e29b-41d4-a716-446655440000"
    lines = [f"ERROR 01-02 12:00:00 [worker.py:2] {shown_first}", *corpus_log().splitlines()]
    lines += [f"ERROR 01-02 12:00:01 [worker.py:2] {OOM} {text}" for text in _first_lines()]
    (root / "logs" / "server.log").write_text("\n".join(lines) + "\n")
    flags = [p.text for p in PLANTS if p.where == "flag"] + FLAG_LOOK_ALIKES
    (root / "config" / "launch.txt").write_text("vllm serve " + " ".join(flags) + "\n")
    env = [p.text.split("=", 1) for p in PLANTS if p.where == "env"] + [e.split("=", 1) for e in ENV_LOOK_ALIKES]
    (root / "config" / "env.txt").write_text("".join(f"{k}={shlex.quote(v)}\n" for k, v in env))
    return root


def test_the_bundle_reader_keeps_no_secret_and_every_look_alike(bundle: Path) -> None:
    evidence = read_evidence(bundle)
    assert evidence.logs is not None and evidence.launch is not None
    kept = [e.text for e in evidence.logs.events]
    assert len(kept) > len(_first_lines())
    assert leaks("\n".join(kept)) == []
    assert [text for text in LOOK_ALIKES if not any(text in line for line in kept)] == []
    launch = evidence.launch
    assert leaks(json.dumps([launch.env, launch.unknown_args, launch.model])) == []
    for line in ENV_LOOK_ALIKES:
        name, value = line.split("=", 1)
        assert launch.env[name] == value
    assert launch.max_num_batched_tokens == 8192 and launch.model == "meta-llama/Llama-3.1-8B-Instruct"
    assert "--ssl-keyfile /etc/ssl/private/server.key" in " ".join(launch.unknown_args)


def _strings(value: object) -> Iterator[str]:
    if isinstance(value, str):
        yield value
    elif isinstance(value, dict):
        for k, v in value.items():
            yield str(k)
            yield from _strings(v)
    elif isinstance(value, list):
        for v in value:
            yield from _strings(v)


def test_diagnose_json_shows_no_secret(bundle: Path) -> None:
    result = llmtriage("diagnose", str(bundle), "--format", "json", "--no-runbook")
    assert result.returncode == 1, result.stderr  # something is wrong: an out-of-memory error at startup
    assert leaks(result.stdout + result.stderr) == []
    shown = "\n".join(_strings(json.loads(result.stdout)))
    assert f"{PLANTS[0].text.split('=')[0]}={PLACEHOLDER_PREFIX}" in shown  # the first error line, redacted
    assert "api_key=None request_id=550e8400-e29b-41d4-a716-446655440000" in shown


def test_report_shows_no_secret(bundle: Path, tmp_path: Path) -> None:
    page = tmp_path / "page.html"
    result = llmtriage("report", str(bundle), "-o", str(page), "--no-runbook")
    assert result.returncode == 0, result.stderr  # the page was written
    text = html.unescape(page.read_text())
    assert leaks(text) == [] and leaks(result.stdout + result.stderr) == []
    # The launch configuration is shown: environment and flags, secrets replaced, look-alikes as they were.
    for line in ENV_LOOK_ALIKES:
        name, value = line.split("=", 1)
        assert re.search(rf"env {name}</dt><dd>{re.escape(value)}</dd>", page.read_text()), name
    for plant in PLANTS:
        if plant.where == "env":
            name = plant.text.split("=", 1)[0]
            assert re.search(rf"env {name}</dt><dd>[^<]*&lt;redacted:", page.read_text()), name
    assert "--ssl-keyfile /etc/ssl/private/server.key" in text and "8192" in text


def test_runbook_stores_and_exports_no_secret(bundle: Path, tmp_path: Path) -> None:
    db = tmp_path / "runbook.sqlite"
    note = "\n".join(p.text for p in PLANTS)
    result = llmtriage("runbook", "add", str(bundle), "--db", str(db), "--note", note, "--fix", corpus_log())
    assert result.returncode == 0, result.stderr
    assert leaks(_sqlite_bytes(db)) == []
    exported = tmp_path / "runbook.md"
    result = llmtriage("runbook", "export", "--markdown", "-o", str(exported), "--db", str(db))
    assert result.returncode == 0, result.stderr
    document = exported.read_text()
    assert leaks(document) == []
    assert "env.PGPASSWORD: <redacted:" in document and "- env.PWD: /srv/vllm-lab" in document
    assert "- env.TOKENIZERS_PARALLELISM: false" in document

    # A document written by hand (or by an older llmtriage) holding the corpus: nothing planted is stored.
    planted = document.replace("**Notes**\n\n", "**Notes**\n\n" + "".join(f"> {line}\n" for line in note.splitlines()))
    planted = planted.replace("- config:\n", "- config:\n" + "".join(
        f"  - env.{p.text.split('=', 1)[0]}: {p.text.split('=', 1)[1]}\n" for p in PLANTS if p.where == "env"))  # fmt: skip
    assert leaks(planted) != []
    hand = tmp_path / "hand.md"
    hand.write_text(planted)
    other = tmp_path / "other.sqlite"
    result = llmtriage("runbook", "import", str(hand), "--db", str(other))
    assert result.returncode == 0, result.stderr + result.stdout
    assert "imported 1 " in result.stdout
    assert leaks(_sqlite_bytes(other)) == []
    again = tmp_path / "again.md"
    assert llmtriage("runbook", "export", "--markdown", "-o", str(again), "--db", str(other)).returncode == 0
    reread = again.read_text()
    assert leaks(reread) == []
    assert "> NIM: using <redacted:nvidia_api_key:" in reread  # the notes were read, and redacted
    assert "- env.MYSQL_PWD: <redacted:" in reread and "- env.PWD: /srv/vllm-lab" in reread


def _sqlite_bytes(db: Path) -> str:
    """Every byte of the runbook's files (the database, its journal and write-ahead log), as text."""
    return b"".join(p.read_bytes() for p in db.parent.glob(db.name + "*")).decode("utf-8", "replace")
