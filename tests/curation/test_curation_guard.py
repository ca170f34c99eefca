"""Write-once and compare-and-swap, enforced in code (DESIGN §13), and how a pass fails."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable
from dataclasses import replace
from typing import Any

import pytest

from curation.curation_support import (
    ANA,
    DUPLICATES,
    TIDY,
    curating,
    curator,
    settled_passes,
    tidy_curator,
    tool_payloads,
    turns,
    user_agent,
)
from reverie import Runtime
from reverie.core.messages import ModelRequest, ModelResponse
from reverie.core.scope import Scope
from reverie.core.transcript import TranscriptItem
from reverie.errors import CapabilityError
from reverie.memory.curation import PassGuard, load_pass_prompt
from reverie.memory.native import native_manifest
from reverie.store import Document
from reverie.testing import ScriptedModel, call, reply


def spy_writes(rt: Runtime) -> list[tuple[Scope, str, str]]:
    """Record every write that reaches the store under the provider."""
    calls: list[tuple[Scope, str, str]] = []
    real = rt.store.write_document  # type: ignore[attr-defined]

    async def spy(scope: Scope, path: str, text: str, expected_version: int) -> Document:
        calls.append((scope, path, text))
        return await real(scope, path, text, expected_version)  # type: ignore[no-any-return]

    rt.store.write_document = spy  # type: ignore[attr-defined]
    return calls


async def test_a_second_write_in_a_pass_gets_a_tool_error_and_never_reaches_the_provider() -> None:
    model = curator(writes=2)
    async with curating(model) as rt:
        await rt.memory.write(ANA, "MEMORY.md", DUPLICATES, expected_version=0)
        writes = spy_writes(rt)
        await turns(rt, user_agent(), ANA, 2)
        (record,) = await settled_passes(rt, ANA)
        doc = await rt.memory.read(ANA)
    assert writes == [(ANA, "MEMORY.md", TIDY)]  # the second write never reached the store
    results = tool_payloads(model.requests[-1])
    assert results[1]["status"] == "written"
    second = results[2]
    assert isinstance(second, str) and second.startswith("error (policy_denied)")
    assert "may write once" in second
    assert doc == Document(TIDY, 2)
    assert record.report["write"] == "written" and record.report["status"] == "completed"


@pytest.mark.parametrize(
    "write",
    [
        None,  # replace with the version read
        {"content": TIDY},  # replace, version omitted: the host fills in the version read
    ],
    ids=["replace", "replace-without-version"],
)
async def test_a_user_write_between_the_passs_read_and_write_wins_and_the_pass_reports_conflict(
    write: dict[str, Any] | None,
) -> None:
    read_done = asyncio.Event()
    user_done = asyncio.Event()
    inner = tidy_curator(write=write)

    async def racing(request: ModelRequest) -> ModelResponse:
        if len(tool_payloads(request)) == 1:  # the pass has read; the user writes now
            read_done.set()
            await user_done.wait()
        return inner(request)

    async with curating(ScriptedModel(racing)) as rt:
        await rt.memory.write(ANA, "MEMORY.md", DUPLICATES, expected_version=0)
        await turns(rt, user_agent(), ANA, 2)
        await read_done.wait()
        mine = await rt.memory.read(ANA)
        users = mine.text + "- Ana moved to Porto.\n"
        await rt.memory.write(ANA, "MEMORY.md", users, expected_version=mine.version)
        user_done.set()
        (record,) = await settled_passes(rt, ANA)
        doc = await rt.memory.read(ANA)
        history = await rt.memory.history(ANA)
    assert doc == Document(users, 2)  # the user's text survives, untouched
    assert [v.text for v in history] == [users, DUPLICATES]  # the pass wrote no version
    report = record.report
    assert report["write"] == "conflict" and report["changed"] is False
    assert report["conflicts"] and any("MEMORY.md" in c for c in report["conflicts"])
    assert report["status"] == "completed"


def writer(**arguments: Any) -> Callable[[ModelRequest], ModelResponse]:
    """A curator that writes ``arguments`` once (reading first iff it has ``path`` to read)."""

    def answer(request: ModelRequest) -> ModelResponse:
        done = tool_payloads(request)
        if not done:
            return call("memory_write", target="MEMORY.md", **arguments)
        return call("structured_result", changed=False, summary="tried")

    return answer


@pytest.mark.parametrize(
    "arguments",
    [
        {"content": "blind", "expected_version": 1},
        {"content": "- appended", "append": True},
        {"old_string": "vegetarian", "new_string": "vegan"},
    ],
)
async def test_a_pass_cannot_write_what_it_did_not_read(arguments: dict[str, Any]) -> None:
    model = ScriptedModel(writer(**arguments))
    async with curating(model) as rt:
        await rt.memory.write(ANA, "MEMORY.md", DUPLICATES, expected_version=0)
        writes = spy_writes(rt)
        await turns(rt, user_agent(), ANA, 2)
        (record,) = await settled_passes(rt, ANA)
    assert writes == []
    (refusal,) = tool_payloads(model.requests[-1])
    assert "read MEMORY.md with memory_read first" in refusal
    assert record.report["write"] == "none"


def test_pass_guard_holds_a_write_to_the_version_read() -> None:
    guard = PassGuard()
    guard.read("MEMORY.md", 3)
    with pytest.raises(CapabilityError) as stale:
        guard.admit("MEMORY.md", 4, content=TIDY)  # a version the pass did not read
    assert stale.value.kind == "policy_denied" and guard.writes == 0
    assert guard.admit("MEMORY.md", None, content=TIDY) == 3  # omitted: the version read
    with pytest.raises(CapabilityError) as twice:
        guard.admit("MEMORY.md", 3, content=TIDY)
    assert twice.value.kind == "policy_denied"
    guard.wrote("MEMORY.md", "conflict")
    assert guard.outcome == "conflict" and not guard.changed


async def test_a_structured_pass_answering_in_plain_text_gets_one_repair_then_fails_cleanly() -> (
    None
):
    model = ScriptedModel(lambda request: reply("I tidied it, all good."))
    async with curating(model) as rt:
        await rt.memory.write(ANA, "MEMORY.md", DUPLICATES, expected_version=0)
        results = [await rt.run(user_agent(), f"turn {i}", scope=ANA) for i in range(2)]
        (record,) = await settled_passes(rt, ANA)
        pass_run = await rt.get_result(record.run_id)
        doc = await rt.memory.read(ANA)
        later = await rt.run(user_agent(), "and now?", scope=ANA)
    assert [r.status for r in results] == ["completed", "completed"]
    assert later.status == "completed"  # the user's turns are unaffected
    assert len(model.requests) == 2  # the answer, and one repair prompt
    repair = model.requests[1].messages[-1]
    assert repair.role == "user" and "structured_result" in repair.content
    assert pass_run.status == "failed"
    assert pass_run.exit.kind == "output_contract_violation"  # type: ignore[union-attr]
    assert record.report["status"] == "failed"
    assert "output_contract_violation" in record.report["error"]
    assert record.report["changed"] is False and record.report["write"] == "none"
    assert doc == Document(DUPLICATES, 1)


def one_write(**arguments: Any) -> Callable[[ModelRequest], ModelResponse]:
    """A curator that reads MEMORY.md, makes one write with ``arguments`` (``expected_version``
    filled in with the version read unless given), then reports."""

    def answer(request: ModelRequest) -> ModelResponse:
        results = tool_payloads(request)
        if not results:
            return call("memory_read", path="MEMORY.md")
        if len(results) == 1:
            write = {"expected_version": results[0]["version"], **arguments}
            return call("memory_write", target="MEMORY.md", **write)
        return call("structured_result", changed=False, summary="tried")

    return answer


@pytest.mark.parametrize(
    ("arguments", "named"),
    [
        ({"content": TIDY, "append": True}, "append"),
        ({"old_string": "- Ana is a vegetarian.\n", "new_string": ""}, "patch"),
    ],
    ids=["append", "patch"],
)
async def test_a_pass_write_is_a_replace_and_an_append_or_patch_is_refused_as_a_tool_error(
    db_url: str, arguments: dict[str, Any], named: str
) -> None:
    model = ScriptedModel(one_write(**arguments))
    async with curating(model, url=db_url) as rt:
        await rt.memory.write(ANA, "MEMORY.md", DUPLICATES, expected_version=0)
        writes = spy_writes(rt)
        await turns(rt, user_agent(), ANA, 2)
        (record,) = await settled_passes(rt, ANA)
        doc = await rt.memory.read(ANA)
    assert writes == []  # never reached the store
    refusal = tool_payloads(model.requests[-1])[1]
    assert isinstance(refusal, str) and refusal.startswith("error (policy_denied)")
    assert f"{named} is not allowed" in refusal and "whole tidied document" in refusal
    assert doc == Document(DUPLICATES, 1)  # not one fact duplicated
    assert record.report["write"] == "none" and record.report["changed"] is False


async def test_a_pass_over_a_missing_document_does_not_create_one_from_nothing(db_url: str) -> None:
    model = ScriptedModel(one_write(content="- Ana likes jazz.\n"))
    async with curating(model, url=db_url) as rt:
        writes = spy_writes(rt)
        await turns(rt, user_agent(), ANA, 2)
        (record,) = await settled_passes(rt, ANA)
        doc = await rt.memory.read(ANA)
    assert writes == []
    read, refusal = tool_payloads(model.requests[-1])
    assert read["exists"] is False and read["version"] == 0
    assert refusal.startswith("error (policy_denied)") and "never creates a document" in refusal
    assert doc == Document("", 0)  # still missing
    assert record.report["write"] == "none"


async def test_a_pass_cannot_erase_the_document_it_tidies(db_url: str) -> None:
    model = ScriptedModel(one_write(content="   "))
    async with curating(model, url=db_url) as rt:
        await rt.memory.write(ANA, "MEMORY.md", DUPLICATES, expected_version=0)
        await turns(rt, user_agent(), ANA, 2)
        await settled_passes(rt, ANA)
        doc = await rt.memory.read(ANA)
    refusal = tool_payloads(model.requests[-1])[1]
    assert refusal.startswith("error (policy_denied)") and "never erases" in refusal
    assert doc == Document(DUPLICATES, 1)


def test_the_curation_prompt_says_the_write_replaces_and_a_missing_document_is_left_alone() -> None:
    op = native_manifest().op_for("after_turn")
    assert op is not None
    manifest = native_manifest()
    prompt = load_pass_prompt(op, provider=manifest.name, base_dir=manifest.base_dir)
    assert "replaces the document" in prompt
    assert "never use `append` or `old_string`" in prompt
    assert "does not exist" in prompt and "never creates it" in prompt


@pytest.mark.parametrize("blank", ["", "  \n\t\n"], ids=["empty", "whitespace"])
async def test_a_pass_over_an_existing_empty_document_makes_no_edits_and_reports_that(
    db_url: str, blank: str
) -> None:
    model = ScriptedModel(one_write(content="- Ana likes jazz.\n"))
    async with curating(model, url=db_url) as rt:
        await rt.memory.write(ANA, "MEMORY.md", "- placeholder\n", expected_version=0)
        await rt.memory.write(ANA, "MEMORY.md", blank, expected_version=1)
        writes = spy_writes(rt)
        await turns(rt, user_agent(), ANA, 2)
        (record,) = await settled_passes(rt, ANA)
        doc = await rt.memory.read(ANA)
    assert writes == []  # never reached the store
    read, refusal = tool_payloads(model.requests[-1])
    assert read["exists"] is True and read["version"] == 2
    assert refusal.startswith("error (policy_denied)") and "MEMORY.md is empty" in refusal
    assert "changed=false" in refusal  # the model is told to report, not to retry
    assert doc == Document(blank, 2)  # untouched
    assert record.report["write"] == "none" and record.report["changed"] is False
    assert record.report["status"] == "completed"


def test_pass_guard_restored_from_a_transcript_still_refuses_a_write_into_an_empty_read() -> None:
    read = json.dumps({"path": "MEMORY.md", "exists": True, "version": 4, "content": " \n"})
    row = TranscriptItem(ref="r1", seq=1, thread_id="t", run_id="p", role="tool", content=read)
    guard = PassGuard.from_transcript([replace(row, name="memory_read")])
    with pytest.raises(CapabilityError) as refused:
        guard.admit("MEMORY.md", 4, content=TIDY)
    assert refused.value.kind == "policy_denied" and guard.writes == 0
    guard.read("MEMORY.md", 5)  # re-read after someone filled it in: the write is admitted
    assert guard.admit("MEMORY.md", 5, content=TIDY) == 5


async def test_the_curation_prompt_states_its_model_call_budget_and_that_no_report_is_worse() -> (
    None
):
    model = curator()
    async with curating(model) as rt:
        await rt.memory.write(ANA, "MEMORY.md", DUPLICATES, expected_version=0)
        await turns(rt, user_agent(), ANA, 2)
        await settled_passes(rt, ANA)
    system = model.requests[0].messages[0]
    assert system.role == "system"
    op = native_manifest().op_for("after_turn")
    assert op is not None
    assert f"at most {op.pass_.max_model_calls} model calls" in system.content
    assert "Ending without calling structured_result is worse than changing nothing" in (
        system.content
    )
    assert "missing or empty, make no edits and report that" in system.content
