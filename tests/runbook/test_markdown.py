"""The runbook as a document: export, import, and back again without losing anything exported."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest

from llmtriage.errors import UsageError
from llmtriage.runbook import markdown
from llmtriage.runbook.entry import Entry
from llmtriage.runbook.store import Runbook

from .conftest import EXAMPLES, bundle, diagnosed_entry

AWKWARD = Entry(
    uid="awkward",
    recorded_at="2026-10-02T11:22:33Z",
    symptom_class="startup_oom",
    cause="kv_cache_too_small_for_max_model_len",
    evidence=(
        "logs/server.log:76: ValueError: ``` fenced ```` four ````` five — root cause",
        "## not a heading",
        "> not a quote",
        "- recorded: not a detail",
        "vllm:kv_cache_usage_perc = 0.99 (≥ 0.95)  double  spaces",
    ),
    fingerprint="0123456789abcdef",
    signatures=("vllm_max_seq_len_gt_kv_v1", "vllm_worker_died"),
    config={"max_model_len": "32768", "env.PYTORCH_CUDA_ALLOC_CONF": "expandable_segments:True", "model": ""},
    gpu="2 x NVIDIA A100-SXM4-80GB (driver 550.54.15, CUDA 12.4)",
    engine="vllm",
    engine_version="0.6.3.post1",
    driver="550.54.15",
    cuda_runtime="12.4",
    torch="2.5.1+cu124",
    fix="Lowered --max-model-len:\n\n    vllm serve m --max-model-len 16384\n> quoted\n## heading\n**Details**",
    outcome="worked: serves 16k contexts; 日本語 too",
    notes=">\n-\n```",
    origin="/incidents/2026-10-02 kv",
)


def strip_ids(entries: list[Entry]) -> list[Entry]:
    return [dataclasses.replace(e, id=None) for e in entries]


def test_parse_reads_back_what_to_markdown_writes() -> None:
    minimal = Entry(uid="m", recorded_at="2026-01-01T00:00:00Z", symptom_class="slow_ttft", cause="prefill_congestion")
    document = markdown.to_markdown([AWKWARD, minimal])
    assert markdown.parse(document, "doc.md") == [AWKWARD, minimal]


def test_round_trip_through_two_runbooks_is_lossless(tmp_path: Path) -> None:
    recorded = [
        diagnosed_entry(bundle("019", tmp_path), fix="freed the port", outcome="worked"),
        diagnosed_entry(EXAMPLES / "startup-oom-kv-too-small", notes="tiny KV budget on the CPU backend"),
        diagnosed_entry(EXAMPLES / "gpu-fell-off-the-bus", outcome="failed: reseated, fell off again"),
        AWKWARD,
    ]
    with Runbook.open(tmp_path / "a.sqlite3", create=True) as first:
        first.add_many(recorded)
        exported = markdown.to_markdown(first.entries())
        originals = strip_ids(first.entries())
    with Runbook.open(tmp_path / "b.sqlite3", create=True) as second:
        assert len(second.add_many(markdown.parse(exported, "a.md"))) == len(recorded)
        assert strip_ids(second.entries()) == originals
        assert markdown.to_markdown(second.entries()) == exported
        assert second.add_many(markdown.parse(exported, "a.md")) == []  # the same uids: nothing twice


def test_a_hand_written_entry_is_read(tmp_path: Path) -> None:
    document = (
        "---\nschema_version: 1\ndocument: llmtriage runbook\n---\n\n# Our runbook\n\nSome words.\n\n"
        "## Port taken again\n\n**Symptom:** `startup_failure`\n\n**Cause:** `port_in_use`\n\n"
        "**Fix**\n\n> ss -ltnp | grep :8000\n"
    )
    (entry,) = markdown.parse(document, "ours.md")
    assert (entry.symptom_class, entry.cause, entry.fix) == ("startup_failure", "port_in_use", "ss -ltnp | grep :8000")
    assert len(entry.uid) == 32 and entry.recorded_at.endswith("Z")


def test_imported_text_is_redacted(tmp_path: Path) -> None:
    secret = "hf_" + "x1" * 17
    leaky = dataclasses.replace(AWKWARD, uid="leaky", notes=f"token {secret}")
    with Runbook.open(tmp_path / "rb.sqlite3", create=True) as runbook:
        (stored,) = runbook.add_many(markdown.parse(markdown.to_markdown([leaky]), "leaky.md"))
    assert stored.notes == "token <redacted:hf_token:1>"


HEAD = "---\nschema_version: 1\ndocument: llmtriage runbook\n---\n"
ENTRY = "## x\n\n**Symptom:** `startup_failure`\n\n**Cause:** `port_in_use`\n"


@pytest.mark.parametrize(
    ("document", "error"),
    [
        ("# no front matter\n", "doc.md:1: no front matter"),
        ("---\nschema_version: 1\n", "doc.md:3: the front matter does not end"),
        ("---\nschema_version: 2\ndocument: llmtriage runbook\n---\n", "doc.md:1: schema_version 2"),
        ("---\nschema_version: 1\ndocument: notes\n---\n", "doc.md:1: not a runbook document"),
        (HEAD + "## x\n\n**Symptom:** `startup_failure`\n", "doc.md:5: the entry has no \\*\\*Cause:\\*\\* line"),
        (HEAD + ENTRY.replace("port_in_use", "gremlins"), "doc.md:5: unknown cause 'gremlins'"),
        (HEAD + ENTRY.replace("startup_failure", "on_fire"), "doc.md:5: unknown symptom class 'on_fire'"),
        (HEAD + ENTRY + "\n**Outcome**\n\n> maybe\n", "doc.md:5: an outcome starts with worked"),
        (HEAD + ENTRY + "\nstray words\n", "doc.md:11: unexpected line 'stray words'"),
        (HEAD + ENTRY + "\n**Evidence**\n\n```text\nline\n", "doc.md:15: the evidence block does not end"),
        (HEAD + ENTRY + "\n**Evidence**\n\nline\n", "doc.md:13: evidence is a fenced block"),
        (HEAD + ENTRY + "\n**Fix**\n\nnot quoted\n", "doc.md:12: a fix, outcome or notes section is quoted"),
        (HEAD + ENTRY + "\n**Details**\n\n- colour: red\n", "doc.md:13: unknown detail '- colour: red'"),
        (HEAD + ENTRY + "\n**Details**\n\n- recorded: yesterday\n", "doc.md:5: recorded 'yesterday'"),
    ],
)
def test_what_cannot_be_read_is_named_with_its_line(document: str, error: str) -> None:
    with pytest.raises(UsageError, match=error) as info:
        markdown.parse(document, "doc.md")
    assert "export --markdown" in info.value.hint
