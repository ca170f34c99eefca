"""Repeated provider call ids through the official SDKs (issue 10): the loop keys calls by
position, and the transcript sent back to the provider pairs every result with a unique id."""

from __future__ import annotations

from typing import Any

import pytest

from reverie import Agent, Limits, Runtime, Scope, tool
from reverie.testing import FakeAnthropicServer, FakeOpenAIServer
from reverie.testing.fake_openai import FakeReply, FakeToolCall

SCOPE = Scope(tenant="acme", user="ana")


def probe_tool() -> tuple[list[int], Any]:
    ran: list[int] = []

    @tool(effects=set())
    def probe(n: int) -> str:
        """Probe something."""
        ran.append(n)
        return f"probed {n}"

    return ran, probe


def same_id_reply(count: int, call_id: str) -> FakeReply:
    return FakeReply(
        tool_calls=tuple(FakeToolCall("probe", {"n": i}, id=call_id) for i in range(count))
    )


async def test_openai_repeated_call_ids_are_sent_back_unique_and_paired(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from reverie.models.openai import OpenAIChatModel

    monkeypatch.setenv("OPENAI_API_KEY", "sk-test-123")
    ran, probe = probe_tool()
    async with FakeOpenAIServer([same_id_reply(6, "call_dup"), "done"]) as srv:
        model = OpenAIChatModel("gpt-test", base_url=srv.base_url)
        agent = Agent(name="p", model=model, tools=[probe], limits=Limits(max_capability_calls=2))
        async with Runtime.open(":memory:") as rt:
            r = await rt.run(agent, "go", scope=SCOPE)

    assert r.status == "completed" and r.text == "done"
    assert sorted(ran) == [0, 1]
    messages = srv.requests[-1]["messages"]
    (assistant,) = [m for m in messages if m["role"] == "assistant" and m.get("tool_calls")]
    ids = [c["id"] for c in assistant["tool_calls"]]
    assert ids[0] == "call_dup" and len(set(ids)) == 6
    assert [m["tool_call_id"] for m in messages if m["role"] == "tool"] == ids


async def test_anthropic_repeated_tool_use_ids_are_sent_back_unique_and_paired(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from reverie.models.anthropic import AnthropicModel

    monkeypatch.setenv("ANTHROPIC_API_KEY", "sk-ant-test")
    ran, probe = probe_tool()
    async with FakeAnthropicServer([same_id_reply(3, "toolu_dup"), "done"]) as srv:
        model = AnthropicModel("claude-test", base_url=srv.base_url)
        agent = Agent(name="p", model=model, tools=[probe], limits=Limits(max_calls_per_batch=2))
        async with Runtime.open(":memory:") as rt:
            r = await rt.run(agent, "go", scope=SCOPE)

    assert r.status == "completed" and r.text == "done"
    assert sorted(ran) == [0, 1]
    blocks = [
        b
        for m in srv.requests[-1]["messages"]
        if isinstance(m["content"], list)
        for b in m["content"]
        if isinstance(b, dict)
    ]
    uses = [b["id"] for b in blocks if b.get("type") == "tool_use"]
    results = [b["tool_use_id"] for b in blocks if b.get("type") == "tool_result"]
    assert uses[0] == "toolu_dup" and len(set(uses)) == 3
    assert results == uses
