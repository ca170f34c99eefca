"""Untrusted data is walked with a bounded depth (DESIGN §20): a model's tool-call arguments
nested past the limit are a tool error the model sees, never a crash of the run."""

from __future__ import annotations

import json
from typing import Any

from reverie import Agent, Runtime, Scope, tool
from reverie.core.depth import MAX_DEPTH
from reverie.models.openai import OpenAIChatModel
from reverie.testing import FakeOpenAIServer, ScriptedModel, call, reply
from reverie.testing.fake_openai import FakeReply, FakeToolCall

SCOPE = Scope(tenant="acme", user="ana")


def nested(levels: int, leaf: Any = 1) -> Any:
    value = leaf
    for level in range(levels):
        value = [value] if level % 2 else {"a": value}
    return value


def tools(ran: list[str]) -> list[Any]:
    @tool(effects=set())
    def echo(x: Any) -> str:
        """Echo."""
        ran.append("echo")
        return "ok"

    @tool(effects={"write"}, needs_approval=True)
    def store(x: Any) -> str:
        """Store (needs approval)."""
        ran.append("store")
        return "stored"

    return [echo, store]


async def test_tool_call_arguments_nested_too_deep_are_a_tool_error_and_the_run_goes_on() -> None:
    ran: list[str] = []
    model = ScriptedModel(
        [
            call("echo", x=nested(900)),
            call("store", x=nested(900, 1.5)),
            call("echo", x=nested(MAX_DEPTH - 1)),
            reply("done"),
        ]
    )
    async with Runtime.open(":memory:") as rt:
        result = await rt.run(Agent(name="a", model=model, tools=tools(ran)), "go", scope=SCOPE)
        gates = await rt.gates.list(scope=SCOPE, status=None)
    assert result.status == "completed" and result.text == "done"
    told = [m.content for m in model.requests[-1].messages if m.role == "tool"]
    assert len(told) == 3
    for answer in told[:2]:
        assert answer.startswith("error (input_invalid)")
        assert f"nested more than {MAX_DEPTH} levels deep" in answer
    assert told[2] == "ok"  # at the limit the call runs
    assert ran == ["echo"] and gates == []  # the deep calls ran nothing and opened no gate


async def test_deep_arguments_on_the_wire_are_a_tool_error_the_model_sees() -> None:
    ran: list[str] = []
    raw = json.dumps({"x": nested(900)})
    script = [FakeReply(tool_calls=(FakeToolCall("echo", raw),)), "recovered"]
    async with FakeOpenAIServer(script) as server, Runtime.open(":memory:") as rt:
        model = OpenAIChatModel("gpt-test", base_url=server.base_url, api_key="sk-test")
        agent = Agent(name="a", model=model, tools=tools(ran))
        result = await rt.run(agent, "go", scope=SCOPE)
        second = server.requests[1]["messages"]
    assert result.status == "completed" and result.text == "recovered"
    [answer] = [m["content"] for m in second if m["role"] == "tool"]
    assert f"nested more than {MAX_DEPTH} levels deep" in answer
    assert ran == []
