"""Whole runs through the official openai and anthropic SDKs against local fake servers."""

from __future__ import annotations

import pytest

from reverie import Agent, Runtime, Scope, tool
from reverie.core.events import TextDeltaEvent
from reverie.models.openai import OpenAIChatModel
from reverie.testing import FakeOpenAIServer
from reverie.testing.fake_openai import FakeError, FakeReply, FakeToolCall

SCOPE = Scope(tenant="acme", user="ana")


@tool(effects=set())
def add(a: int, b: int) -> int:
    """Add two integers."""
    return a + b


async def test_tool_call_and_streamed_reply_through_the_openai_sdk(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("OPENAI_API_KEY", "sk-test-123")
    script = [
        FakeReply(tool_calls=(FakeToolCall("add", {"a": 2, "b": 3}),)),
        FakeError(429),
        FakeReply("The sum is five.", input_tokens=11, output_tokens=4),
    ]
    async with FakeOpenAIServer(script) as srv:
        model = OpenAIChatModel("gpt-test", base_url=srv.base_url)
        agent = Agent(name="calc", model=model, tools=[add])
        async with Runtime.open(":memory:") as rt:
            handle = await rt.start(agent, "2+3?", scope=SCOPE)
            events = [e async for e in handle.events()]
            r = await handle.result()
        assert r.status == "completed"
        assert r.text == "The sum is five."
        # The 429 was retried by our recovery strategy (SDK retries off): 3 HTTP requests.
        assert len(srv.requests) == 3
        assert r.usage.model_calls == 3
        assert r.usage.input_tokens >= 11 and r.usage.output_tokens >= 4
        tool_msgs = [m for m in srv.requests[-1]["messages"] if m["role"] == "tool"]
        assert tool_msgs[0]["content"] == "5"
        assert [e for e in events if isinstance(e, TextDeltaEvent)]


async def test_401_fails_the_run_naming_the_key_variable_without_its_value(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("OPENAI_API_KEY", "sk-secret-value-987")
    async with FakeOpenAIServer([FakeError(401)]) as srv:
        model = OpenAIChatModel("gpt-test", base_url=srv.base_url)
        agent = Agent(name="calc", model=model, tools=[add])
        async with Runtime.open(":memory:") as rt:
            r = await rt.run(agent, "hi", scope=SCOPE)
    assert r.status == "failed"
    assert r.exit.kind == "model_error"  # type: ignore[union-attr]
    summary = r.exit.safe_summary  # type: ignore[union-attr]
    assert "OPENAI_API_KEY" in summary
    assert "sk-secret-value-987" not in summary


async def test_tool_call_and_reply_through_the_anthropic_sdk(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from reverie.models.anthropic import AnthropicModel
    from reverie.testing import FakeAnthropicServer

    monkeypatch.setenv("ANTHROPIC_API_KEY", "sk-ant-test")
    script = [
        FakeReply(tool_calls=(FakeToolCall("add", {"a": 2, "b": 3}),)),
        FakeError(529),
        FakeReply("Five.", input_tokens=7, output_tokens=2),
    ]
    async with FakeAnthropicServer(script) as srv:
        model = AnthropicModel("claude-test", base_url=srv.base_url)
        agent = Agent(name="calc", model=model, tools=[add])
        async with Runtime.open(":memory:") as rt:
            r = await rt.run(agent, "2+3?", scope=SCOPE)
    assert r.status == "completed" and r.text == "Five."
    assert len(srv.requests) == 3  # the 529 was retried by reverie's recovery, not the SDK
    last = srv.requests[-1]["messages"]
    results = [
        b
        for m in last
        if m["role"] == "user"
        for b in m["content"]
        if isinstance(b, dict) and b.get("type") == "tool_result"
    ]
    assert results and "5" in str(results[0]["content"])
