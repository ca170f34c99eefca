"""Calls are identified by their position in the response (DESIGN §19), never by the provider's
id: admission, budgets, results, journal and gates all hold when a provider repeats one id."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from loop.loop_support import tool_messages
from reverie import Agent, Limits, Runtime, Scope, tool
from reverie.core.messages import ModelResponse, ToolCall, ToolCallPart
from reverie.core.transcript import TranscriptItem
from reverie.testing import ScriptedModel, reply


def same_id_calls(*items: tuple[str, Mapping[str, Any]], call_id: str = "dup") -> ModelResponse:
    """One response whose calls all carry the same provider id."""
    parts = tuple(
        ToolCallPart(call=ToolCall(id=call_id, name=name, arguments=arguments))
        for name, arguments in items
    )
    return ModelResponse(parts=parts, finish_reason="tool_calls")


def probe_tool() -> tuple[list[int], Any]:
    ran: list[int] = []

    @tool(effects=set())
    def probe(n: int) -> str:
        """Probe something."""
        ran.append(n)
        return f"probed {n}"

    return ran, probe


async def calls_row(rt: Runtime, thread_id: str) -> TranscriptItem:
    rows = await rt.store.thread_items(thread_id)
    (row,) = [r for r in rows if r.role == "assistant" and r.tool_calls]
    return row


async def tool_rows(rt: Runtime, thread_id: str) -> list[str]:
    return [r.content for r in await rt.store.thread_items(thread_id) if r.role == "tool"]


async def test_repeated_provider_id_cannot_exceed_max_capability_calls(
    rt: Runtime, scope: Scope
) -> None:
    ran, probe = probe_tool()
    model = ScriptedModel(
        [same_id_calls(*[("probe", {"n": i}) for i in range(100)]), reply("summary")]
    )
    agent = Agent(name="p", model=model, tools=[probe], limits=Limits(max_capability_calls=5))
    r = await rt.run(agent, "go", scope=scope)

    assert sorted(ran) == [0, 1, 2, 3, 4]
    assert r.usage.capability_calls == 5
    # Every call has its result (read from the store: 100 rows exceed the prompt's window).
    results = await tool_rows(rt, r.thread_id)
    assert len(results) == 100
    assert results[:5] == [f"probed {i}" for i in range(5)]
    # Past the default fan-out of 32 the batch limit answers first; no call ran either way.
    assert all("budget of 5" in text for text in results[5:32])
    assert all("at most 32 tool calls" in text for text in results[32:])
    # Five distinct journal entries, one per admitted position.
    row = await calls_row(rt, r.thread_id)
    keys = [f"{row.ref}#{i}" for i in range(100)]
    journal = await rt.store.journal_get(r.run_id, keys)
    assert sorted(journal) == sorted(keys[:5])
    assert all(entry.state == "finished" for entry in journal.values())


async def test_repeated_provider_id_cannot_exceed_max_calls_per_batch(
    rt: Runtime, scope: Scope
) -> None:
    ran, probe = probe_tool()
    model = ScriptedModel(
        [same_id_calls(*[("probe", {"n": i}) for i in range(100)]), reply("done")]
    )
    agent = Agent(name="p", model=model, tools=[probe], limits=Limits(max_calls_per_batch=3))
    r = await rt.run(agent, "go", scope=scope)

    assert sorted(ran) == [0, 1, 2]
    assert r.usage.capability_calls == 3
    results = await tool_rows(rt, r.thread_id)
    assert len(results) == 100
    assert results[:3] == ["probed 0", "probed 1", "probed 2"]
    assert all("at most 3 tool calls" in text for text in results[3:])
    assert r.text == "done"


async def test_repeated_provider_ids_are_made_unique_in_the_transcript_the_provider_sees(
    rt: Runtime, scope: Scope
) -> None:
    _, probe = probe_tool()
    model = ScriptedModel([same_id_calls(*[("probe", {"n": i}) for i in range(4)]), reply("done")])
    r = await rt.run(Agent(name="p", model=model, tools=[probe]), "go", scope=scope)

    assert r.text == "done"
    (assistant,) = [m for m in model.requests[1].messages if m.tool_calls]
    ids = [c.id for c in assistant.tool_calls]
    assert ids[0] == "dup"  # the first use keeps the provider's id
    assert len(set(ids)) == 4
    # Each result answers its own call, in the model's order.
    assert [m.tool_call_id for m in tool_messages(model.requests[1])] == ids
    assert [m.content for m in tool_messages(model.requests[1])] == [
        f"probed {i}" for i in range(4)
    ]


async def test_gate_on_the_kth_same_id_call_shows_and_runs_that_calls_arguments(
    rt: Runtime, scope: Scope
) -> None:
    noted: list[str] = []
    published: list[str] = []

    @tool(effects={"write"})
    def note(text: str) -> str:
        """Write a note."""
        noted.append(text)
        return f"noted {text}"

    @tool(effects={"write"}, needs_approval=True)
    def publish(text: str) -> str:
        """Publish; a person approves first."""
        published.append(text)
        return f"published {text}"

    model = ScriptedModel(
        [
            same_id_calls(
                ("note", {"text": "first"}),
                ("note", {"text": "second"}),
                ("publish", {"text": "third"}),
                ("note", {"text": "fourth"}),
            ),
            reply("done"),
        ]
    )
    agent = Agent(name="g", model=model, tools=[note, publish])
    r = await rt.run(agent, "go", scope=scope)

    assert r.status == "blocked" and r.gate is not None
    assert (r.gate.tool, dict(r.gate.arguments)) == ("publish", {"text": "third"})
    r = await rt.approve(r.gate.ref)

    assert r.status == "completed" and r.text == "done"
    assert published == ["third"]
    assert noted == ["first", "second", "fourth"]  # none ran twice across the resume
    assert [m.content for m in tool_messages(model.requests[1])] == [
        "noted first",
        "noted second",
        "published third",
        "noted fourth",
    ]


async def test_rewritten_call_ids_stay_within_openais_forty_characters(
    rt: Runtime, scope: Scope
) -> None:
    _, probe = probe_tool()
    long_id = "call_" + "x" * 35  # 40 characters, the most OpenAI accepts
    model = ScriptedModel(
        [same_id_calls(*[("probe", {"n": i}) for i in range(12)], call_id=long_id), reply("ok")]
    )
    r = await rt.run(Agent(name="p", model=model, tools=[probe]), "go", scope=scope)

    assert r.text == "ok"
    (assistant,) = [m for m in model.requests[1].messages if m.tool_calls]
    ids = [c.id for c in assistant.tool_calls]
    assert len(set(ids)) == 12
    assert all(len(i) <= 40 for i in ids)
