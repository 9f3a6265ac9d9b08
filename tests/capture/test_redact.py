"""Redaction: every kind of secret goes, the same secret reads the same everywhere, look-alikes stay."""

from __future__ import annotations

from pathlib import Path

import pytest

from llmtriage.redact import PLACEHOLDER_PREFIX, Redactor, rules

from ..conftest import FIXTURES

# Planted secrets: the shapes each issuer documents, made up for the tests (none is a live credential).
HF = "hf_QkXhVbYwLmNoPzRsTuVaBcDeFgHiJkLmNo"
OPENAI = "sk-proj-9fJ2kLmN0pQrStUvWxYz1234AbCdEfGh"
AWS_ID = "AKIAQ3EGX2TPLANTED77"
AWS_SECRET = "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"
GITHUB = "ghp_0123456789abcdefghijABCDEFGHIJ012345"
BEARER = "eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiJ0cmlhZ2UifQ.c2lnbmF0dXJlLXBsYW50ZWQ"
URL_PASSWORD = "s3cr3t-pass-word"
API_KEY = "local-api-key-8c1e"

CASES = [
    (f"export HF_TOKEN={HF}", HF, "hf_token"),
    (f"OPENAI key {OPENAI} in a log line", OPENAI, "openai_key"),
    (f"aws_access_key_id = {AWS_ID}", AWS_ID, "aws_access_key_id"),
    (f"AWS_SECRET_ACCESS_KEY={AWS_SECRET}", AWS_SECRET, "secret_assignment"),
    (f"git clone https://{GITHUB}@github.com/org/repo", GITHUB, "github_token"),
    (f"curl -H 'Authorization: Bearer {BEARER}' http://127.0.0.1:8000/v1/models", BEARER, "bearer_token"),
    (f"postgres://llm:{URL_PASSWORD}@db.internal:5432/runs", URL_PASSWORD, "url_password"),
    (f"vllm serve m --api-key {API_KEY} --port 8000", API_KEY, "secret_flag"),
    (f"vllm serve m --api-key={API_KEY}", API_KEY, "secret_flag"),
    (f"non-default args: {{'model': 'm', 'api_key': ['{API_KEY}'], 'port': 8000}}", API_KEY, "secret_assignment"),
    (f'{{"password": "{URL_PASSWORD}"}}', URL_PASSWORD, "secret_assignment"),
    (f"GET /v1/models?token={API_KEY}&x=1", API_KEY, "secret_assignment"),
    (
        "-----BEGIN RSA PRIVATE KEY-----\nMIIEowIBAAKCAQEA\n-----END RSA PRIVATE KEY-----",
        "MIIEowIBAAKCAQEA",
        "private_key",
    ),
]


@pytest.mark.parametrize(("text", "secret", "kind"), CASES, ids=[c[2] + ":" + c[0][:24] for c in CASES])
def test_each_kind_is_redacted_and_counted(text: str, secret: str, kind: str) -> None:
    redactor = Redactor()
    clean = redactor.redact_text(text)
    assert secret not in clean
    assert f"{PLACEHOLDER_PREFIX}{kind}:1>" in clean
    assert redactor.counts[kind] >= 1
    assert redactor.redact_text(clean) == clean  # idempotent: placeholders are never redacted again


def test_same_secret_same_placeholder_across_env_argv_and_text() -> None:
    redactor = Redactor()
    env = redactor.redact_env({"VLLM_API_KEY": API_KEY, "HF_TOKEN": HF, "PWD": "/srv/vllm-lab"})
    argv = redactor.redact_argv(["vllm", "serve", "m", "--api-key", API_KEY])
    text = redactor.redact_text(f"request with key {API_KEY} and token {HF}")
    placeholder = env["VLLM_API_KEY"]
    assert placeholder.startswith(PLACEHOLDER_PREFIX)
    assert argv[-1] == placeholder
    assert placeholder in text and API_KEY not in text  # learned from its name, replaced where it recurs
    assert env["HF_TOKEN"] in text and HF not in text
    assert env["PWD"] == "/srv/vllm-lab"
    # Counted by the detector that replaced each occurrence (a recurring learned secret: by its first kind).
    assert redactor.counts == {"secret_env_var": 3, "secret_flag": 1, "hf_token": 1}


def test_different_secrets_get_different_placeholders() -> None:
    redactor = Redactor()
    clean = redactor.redact_text(f"--api-key {API_KEY} --hf-token {HF}x --api-key other-key-000")
    assert len({p for p in clean.split() if p.startswith(PLACEHOLDER_PREFIX)}) == 3


@pytest.mark.parametrize(
    "name",
    ["HF_TOKEN", "HUGGING_FACE_HUB_TOKEN", "OPENAI_API_KEY", "VLLM_API_KEY", "AWS_SECRET_ACCESS_KEY", "DB_PASSWORD",
     "apiKey", "X-API-Key", "--api-key", "--hf-token", "JWT_SECRET", "SECRET_KEY_BASE"],
)  # fmt: skip
def test_secret_names(name: str) -> None:
    assert rules().is_secret_name(name)


@pytest.mark.parametrize(
    "name",
    ["TOKENIZERS_PARALLELISM", "max_num_batched_tokens", "prompt_token_ids", "HF_TOKEN_PATH", "--ssl-keyfile",
     "--tokenizer", "PWD", "HF_HUB_DISABLE_IMPLICIT_TOKEN", "kv_cache_dtype", "PATH", "SSH_AUTH_SOCK"],
)  # fmt: skip
def test_names_that_are_not_secrets(name: str) -> None:
    assert not rules().is_secret_name(name)


def test_argv_flag_without_value_leaves_the_next_flag_alone() -> None:
    assert Redactor().redact_argv(["vllm", "serve", "m", "--api-key", "--port", "8000"]) == [
        "vllm", "serve", "m", "--api-key", "--port", "8000"
    ]  # fmt: skip


def test_values_that_are_never_secrets_stay() -> None:
    redactor = Redactor()
    text = "hf_token: None, 'api_key': None, password=, #new-token: 13938, max_tokens=16, TOKEN=true"
    assert redactor.redact_text(text) == text
    assert redactor.counts == {}


LOOK_ALIKES = [
    "sha256:0a51ea5b4ae2dc5d81890e5173f54203d2a3ae0cfffe51b8fd2afd4391bfd967",
    "e54485ebab921f2c18c4d092b3f4c40dcca26781",
    "550e8400-e29b-41d4-a716-446655440000",
    "GPU-0b11d014-1685-04bd-26ed-5fc0bc1c44ae",
    "meta-llama/Llama-3.1-8B-Instruct",
    "Qwen/Qwen2.5-Coder-32B-Instruct-AWQ",
    "/root/.cache/huggingface/hub/models--meta-llama--Llama-3.1-8B-Instruct/snapshots/"
    "0e9e39f249a16976918f6564b8830bc894c89659/model-00001-of-00004.safetensors",
    '"sha256": "9c1d2a1e0c4fa2e4e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934c"',
    "vllm/vllm-openai:v0.6.4.post1",
    "http://127.0.0.1:8000/metrics",
    "task-management-service-for-inference-jobs",
    "num_gpu_blocks_override=None kv_cache_memory_bytes=1048576",
]


@pytest.mark.parametrize("text", LOOK_ALIKES)
def test_look_alikes_survive(text: str) -> None:
    assert Redactor().redact_text(text) == text


REAL_FILES = sorted(
    p
    for directory in ("vllm-cpu", "nvidia-smi", "dmesg", "incidents")
    for p in (FIXTURES / directory).rglob("*")
    if p.is_file() and p.suffix in (".log", ".txt", ".yaml", ".csv", ".json", ".jsonl")
)


@pytest.mark.parametrize("path", REAL_FILES, ids=[p.relative_to(FIXTURES).as_posix() for p in REAL_FILES])
def test_real_recordings_pass_unchanged(path: Path) -> None:
    text = path.read_text(errors="replace")
    assert Redactor().redact_text(text) == text


def test_catalog_hints_are_lower_case_and_patterns_compile() -> None:
    loaded = rules()
    assert loaded.detectors
    for detector in loaded.detectors:
        assert all(h == h.lower() for h in detector.hints)
