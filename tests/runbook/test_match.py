"""Seen before: matches by stack, by fingerprint and by cause, the fix that worked, seeds never counted."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import jsonschema

from llmtriage.diagnose.engine import diagnose
from llmtriage.evidence.bundle import read_evidence
from llmtriage.runbook.match import seen_before
from llmtriage.runbook.store import Runbook

from ..diagnose.test_stack import DRIVER_SNAPSHOT, DRIVER_TOO_OLD_LINE
from .conftest import EXAMPLES, SCHEMA, bundle, diagnosed_entry, edited


def test_matches_by_fingerprint_then_by_cause(tmp_path: Path) -> None:
    incident = bundle("019", tmp_path)
    again = edited(incident, tmp_path / "again", {"44319": "8000", "60914": "777", "2024-09-05": "2026-10-02"})
    same = diagnosed_entry(incident)
    with Runbook.open(tmp_path / "rb.sqlite3", create=True) as runbook:
        runbook.add_many(
            [
                dataclasses.replace(
                    same, uid="a", recorded_at="2026-09-01T10:00:00Z", fix="killed the old server", outcome="worked"
                ),
                dataclasses.replace(
                    same, uid="b", recorded_at="2026-09-20T10:00:00Z", fix="rebooted", outcome="failed: no"
                ),
                dataclasses.replace(
                    same, uid="c", recorded_at="2026-10-02T10:00:00Z", cause="other_process_holds_memory"
                ),
                # Same cause, another error (recorded by hand against a bundle without the bind error).
                dataclasses.replace(
                    diagnosed_entry(EXAMPLES / "healthy", cause="port_in_use"),
                    uid="d",
                    recorded_at="2026-08-01T00:00:00Z",
                    fix="moved to --port 8001",
                ),
            ]
        )
        evidence = read_evidence(again)
        diagnosis = diagnose(evidence)
        by_print, by_cause = seen_before(diagnosis, evidence, runbook)
    assert by_print.match == "fingerprint" and by_print.count == 3 and by_print.last_seen == "2026-10-02"
    assert by_print.causes == ("port_in_use", "other_process_holds_memory")
    assert by_print.fix == "killed the old server" and by_print.fix_worked is True
    assert by_print.summary == (
        "same error seen 3 times, last on 2026-10-02 (cause recorded: port_in_use, other_process_holds_memory); "
        "the fix that worked: killed the old server"
    )
    assert by_cause.match == "cause" and by_cause.count == 1 and by_cause.last_seen == "2026-08-01"
    assert by_cause.summary == (
        "port_in_use seen 1 time, last on 2026-08-01; the last fix tried (outcome not recorded): moved to --port 8001"
    )
    diagnosis.seen_before = [by_print.to_dict(), by_cause.to_dict()]
    jsonschema.validate(diagnosis.to_dict(), SCHEMA)


def test_seeds_alone_are_not_seen_before(tmp_path: Path) -> None:
    evidence = read_evidence(EXAMPLES / "port-in-use")
    with Runbook.open(tmp_path / "rb.sqlite3", create=True) as runbook:
        assert runbook.with_cause("port_in_use") == []
        assert seen_before(diagnose(evidence), evidence, runbook) == []


def test_a_failed_fix_is_said_so(tmp_path: Path) -> None:
    evidence = read_evidence(EXAMPLES / "port-in-use")
    with Runbook.open(tmp_path / "rb.sqlite3", create=True) as runbook:
        runbook.add(diagnosed_entry(EXAMPLES / "port-in-use", fix="waited", outcome="failed"))
        runbook.add(diagnosed_entry(EXAMPLES / "port-in-use"))
        (found,) = seen_before(diagnose(evidence), evidence, runbook)
    assert found.fix_worked is False and found.summary.endswith("; the last fix tried (failed): waited")


def test_the_same_error_on_the_same_driver_comes_first(tmp_path: Path) -> None:
    """A real collect_env (torch 2.5.1+cu118, vllm#10147) and nvidia-smi (driver 418.87.00) with the real error line:
    recorded once on this driver and once after the driver line was changed to another one."""
    incident = tmp_path / "incident"
    for rel, text in {**DRIVER_SNAPSHOT, "logs/server.log": DRIVER_TOO_OLD_LINE}.items():
        (incident / rel).parent.mkdir(parents=True, exist_ok=True)
        (incident / rel).write_text(text)
    other_driver = edited(incident, tmp_path / "other", {"418.87.00": "470.82.01"})
    with Runbook.open(tmp_path / "rb.sqlite3", create=True) as runbook:
        here = dataclasses.replace(diagnosed_entry(incident), uid="a", fix="upgraded the driver", outcome="worked")
        elsewhere = dataclasses.replace(diagnosed_entry(other_driver), uid="b", recorded_at="2026-11-30T10:00:00Z")
        assert (here.driver, here.cuda_runtime, here.torch) == ("418.87.00", "11.8", "2.5.1+cu118")
        assert elsewhere.driver == "470.82.01" and elsewhere.fingerprint == here.fingerprint
        runbook.add_many([here, elsewhere])
        evidence = read_evidence(incident)
        diagnosis = diagnose(evidence)
        on_stack, by_print = seen_before(diagnosis, evidence, runbook)
        # What the runbook keeps reads back the same.
        assert runbook.get(on_stack.entry_ids[0]).driver == "418.87.00"
    assert on_stack.match == "stack" and on_stack.count == 1
    assert on_stack.stack == ("driver 418.87.00", "CUDA runtime 11.8", "torch 2.5.1+cu118")
    assert on_stack.summary.startswith("same error on the same driver 418.87.00, CUDA runtime 11.8, torch 2.5.1+cu118")
    assert on_stack.fix == "upgraded the driver" and on_stack.fix_worked is True
    assert by_print.match == "fingerprint" and by_print.count == 1 and by_print.stack == ()
    diagnosis.seen_before = [on_stack.to_dict(), by_print.to_dict()]
    jsonschema.validate(diagnosis.to_dict(), SCHEMA)


def test_another_cuda_runtime_on_the_same_driver_is_not_the_same_stack(tmp_path: Path) -> None:
    incident = tmp_path / "incident"
    for rel, text in {**DRIVER_SNAPSHOT, "logs/server.log": DRIVER_TOO_OLD_LINE}.items():
        (incident / rel).parent.mkdir(parents=True, exist_ok=True)
        (incident / rel).write_text(text)
    with Runbook.open(tmp_path / "rb.sqlite3", create=True) as runbook:
        runbook.add(dataclasses.replace(diagnosed_entry(incident), cuda_runtime="12.1"))
        evidence = read_evidence(incident)
        (found,) = seen_before(diagnose(evidence), evidence, runbook)
    assert found.match == "fingerprint"
