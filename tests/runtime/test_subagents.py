"""Subagents: agents as tools of other agents (docs/subagents.md), through the public API."""

from __future__ import annotations

import asyncio
import os
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from reverie import Agent, Limits, Runtime, Scope, tool
from reverie.core.exits import Blocked, Cancelled, Failed
from reverie.core.messages import ModelRequest, ModelResponse, TokenUsage
from reverie.errors import UsageError
from reverie.runtime.subagents import PARENT_CALL_KEY, PARENT_RUN_KEY, SubagentTool
from reverie.store.base import RunRecord
from reverie.testing import ScriptedModel, call, reply

SCOPE = Scope(tenant="acme", user="ana")
POSTGRES_URL = os.environ.get("REVERIE_TEST_POSTGRES_URL", "")


@pytest.fixture(
    params=[
        pytest.param("sqlite", id="sqlite"),
        pytest.param(
            "postgres",
            marks=[
                pytest.mark.postgres,
                pytest.mark.skipif(not POSTGRES_URL, reason="set REVERIE_TEST_POSTGRES_URL"),
            ],
        ),
    ]
)
async def db_url(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[str]:
    """An empty durable store of each backend."""
    if request.param == "sqlite":
        yield f"sqlite:///{tmp_path / 'runs.db'}"
        return
    from reverie.store.postgres import temporary_schema

    async with temporary_schema(POSTGRES_URL, prefix="reverie_subagents") as url:
        yield url


def tool_results(request: ModelRequest) -> list[str]:
    return [m.content for m in request.messages if m.role == "tool"]


def answer_with_tool_result(request: ModelRequest) -> ModelResponse:
    """A parent model: call the subagent first, then answer with what it said."""
    results = tool_results(request)
    if not results:
        return call("research", input="what is the capital of France?")
    return reply(f"the researcher says: {results[-1]}")


async def children(rt: Runtime, parent_id: str) -> list[RunRecord]:
    runs = await rt.store.list_runs(scope=SCOPE, limit=1000)
    return [r for r in runs if r.meta.get(PARENT_RUN_KEY) == parent_id]


def researcher(model: ScriptedModel, *, tools: list[object] | None = None) -> Agent:
    return Agent(
        name="researcher",
        model=model,
        instructions="You research.",
        tools=tools or [],
    )


def lead(child: Agent, model: ScriptedModel, *, limits: Limits | None = None) -> Agent:
    return Agent(
        name="lead",
        model=model,
        instructions="You lead.",
        tools=[child.as_tool(name="research", description="Ask the researcher.")],
        limits=limits or Limits(),
    )


async def test_the_parent_gets_the_childs_final_text_as_the_tool_result() -> None:
    child_model = ScriptedModel([reply("Paris")])
    parent_model = ScriptedModel(answer_with_tool_result)
    async with Runtime.open(":memory:") as rt:
        r = await rt.run(lead(researcher(child_model), parent_model), "go", scope=SCOPE)
    assert r.status == "completed"
    assert r.text == "the researcher says: Paris"
    assert tool_results(parent_model.requests[-1]) == ["Paris"]
    # The child's model saw its own instructions and the call's input as the user message.
    [child_request] = child_model.requests
    assert [(m.role, m.content) for m in child_request.messages] == [
        ("system", "You research."),
        ("user", "what is the capital of France?"),
    ]


async def test_the_child_run_has_its_own_thread_and_transcript_linked_to_the_parent_call() -> None:
    child_model = ScriptedModel([reply("Paris")])
    parent_model = ScriptedModel(answer_with_tool_result)
    async with Runtime.open(":memory:") as rt:
        r = await rt.run(lead(researcher(child_model), parent_model), "go", scope=SCOPE)
        [child] = await children(rt, r.run_id)
        parent_rows = await rt.store.thread_items(r.thread_id)
        child_rows = await rt.store.thread_items(child.thread_id)
    assert child.thread_id != r.thread_id
    assert child.status == "completed" and child.agent_name == "researcher"
    assert child.scope == SCOPE and child.has_actor is False
    # The link names the parent's call by its stable key (assistant row ref + position).
    [assistant] = [i for i in parent_rows if i.tool_calls]
    assert child.meta[PARENT_CALL_KEY] == f"{assistant.ref}#0"
    assert [(i.role, i.content) for i in child_rows] == [
        ("user", "what is the capital of France?"),
        ("assistant", "Paris"),
    ]
    # Nothing of the child's conversation is in the parent's transcript but its answer.
    assert [(i.role, i.content) for i in parent_rows if not i.tool_calls] == [
        ("user", "go"),
        ("tool", "Paris"),
        ("assistant", "the researcher says: Paris"),
    ]


async def test_the_childs_usage_is_charged_to_the_parent_as_well() -> None:
    spent = TokenUsage(input_tokens=100, output_tokens=10)

    @tool(effects={"read"})
    def look(q: str) -> str:
        """Look it up."""
        return f"found {q}"

    child_model = ScriptedModel([call("look", q="France"), reply("Paris", usage=spent)])
    parent_model = ScriptedModel(answer_with_tool_result)
    async with Runtime.open(":memory:") as rt:
        agent = lead(researcher(child_model, tools=[look]), parent_model)
        r = await rt.run(agent, "go", scope=SCOPE)
        [child] = await children(rt, r.run_id)
        child_result = await rt.get_result(child.run_id)
    assert r.status == "completed"
    assert child_result.usage.model_calls == 2
    assert child_result.usage.capability_calls == 1
    assert child_result.usage.input_tokens == 100
    # The parent's own: 2 model calls and 1 tool call (the subagent call), plus the child's.
    assert r.usage.model_calls == 2 + 2
    assert r.usage.capability_calls == 1 + 1
    assert r.usage.input_tokens == 100 and r.usage.output_tokens == 10


async def test_a_parent_model_call_budget_the_child_would_exceed_stops_the_child(
    db_url: str,
) -> None:
    @tool(effects={"read"})
    def look(q: str) -> str:
        """Look it up."""
        return f"found {q}"

    # The child would make 3 model calls; the parent has 3 and spends 1 before the call.
    child_model = ScriptedModel([call("look", q="a"), call("look", q="b"), reply("Paris")])
    parent_model = ScriptedModel(answer_with_tool_result)
    async with Runtime.open(db_url) as rt:
        agent = lead(
            researcher(child_model, tools=[look]), parent_model, limits=Limits(max_model_calls=3)
        )
        r = await rt.run(agent, "go", scope=SCOPE)
        [child] = await children(rt, r.run_id)
        child_result = await rt.get_result(child.run_id)
    assert isinstance(child_result.exit, Failed)
    assert child_result.exit.kind == "model_call_limit"
    assert child_result.usage.model_calls == 2  # what the parent had left
    assert child_model.remaining == 1  # its third call was never made
    # The parent was charged the child's calls and stops at its own limit.
    assert isinstance(r.exit, Failed) and r.exit.kind == "model_call_limit"
    assert r.usage.model_calls == 3
    assert len(parent_model.requests) == 1


async def test_cancelling_the_parent_cancels_the_child() -> None:
    entered = asyncio.Event()

    @tool(effects={"write"}, timeout_s=None)
    async def dig(where: str) -> str:
        """Dig (takes a while)."""
        entered.set()
        await asyncio.Event().wait()
        return "never"

    child_model = ScriptedModel([call("dig", where="here"), reply("dug")])
    parent_model = ScriptedModel(answer_with_tool_result)
    async with Runtime.open(":memory:") as rt:
        agent = lead(researcher(child_model, tools=[dig]), parent_model)
        handle = await rt.start(agent, "go", scope=SCOPE)
        await asyncio.wait_for(entered.wait(), timeout=30)
        await rt.cancel(handle.run_id)
        r = await handle.result()
        [child] = await children(rt, r.run_id)
        child_result = await rt.get_result(child.run_id)
    assert r.status == "cancelled"
    assert child_result.status == "cancelled"
    assert isinstance(child_result.exit, Cancelled)


async def test_cancelling_a_parent_blocked_on_a_child_gate_cancels_child_and_closes_gate() -> None:
    @tool(effects={"write"}, needs_approval=True)
    def pay(amount: int) -> str:
        """Pay."""
        return f"paid {amount}"

    child_model = ScriptedModel([call("pay", amount=5), reply("paid")])
    parent_model = ScriptedModel(answer_with_tool_result)
    async with Runtime.open(":memory:") as rt:
        agent = lead(researcher(child_model, tools=[pay]), parent_model)
        r = await rt.run(agent, "go", scope=SCOPE)
        assert r.status == "blocked" and r.gate is not None
        await rt.cancel(r.run_id)
        [child] = await children(rt, r.run_id)
        gate = await rt.store.get_gate(r.gate.ref)
        parent = await rt.store.get_run(r.run_id)
    assert parent.status == "cancelled"
    assert child.status == "cancelled"
    assert gate.status == "denied"  # nobody can approve it any more


async def test_a_child_gate_blocks_the_parent_and_approve_resumes_the_child_then_the_parent(
    db_url: str,
) -> None:
    paid: list[int] = []

    @tool(effects={"write"}, needs_approval=True)
    def pay(amount: int) -> str:
        """Pay."""
        paid.append(amount)
        return f"paid {amount}"

    def child_answer(request: ModelRequest) -> ModelResponse:
        results = tool_results(request)
        return reply(f"done: {results[-1]}") if results else call("pay", amount=5)

    child_model = ScriptedModel(child_answer)
    parent_model = ScriptedModel(answer_with_tool_result)
    async with Runtime.open(db_url) as rt:
        agent = lead(researcher(child_model, tools=[pay]), parent_model)
        r = await rt.run(agent, "go", scope=SCOPE)
        [child] = await children(rt, r.run_id)
        # The parent blocks on the child's own gate.
        assert r.status == "blocked" and isinstance(r.exit, Blocked)
        assert r.gate is not None and r.gate.tool == "pay" and r.gate.arguments == {"amount": 5}
        gate = await rt.store.get_gate(r.gate.ref)
        assert gate.run_id == child.run_id
        assert child.status == "blocked"
        assert [g.ref for g in await rt.store.list_gates(scope=SCOPE)] == [r.gate.ref]
        assert paid == []

        done = await rt.approve(r.gate.ref)
        child_after = await rt.store.get_run(child.run_id)
        assert len(await children(rt, r.run_id)) == 1  # resumed, never started again
    assert done.run_id == r.run_id  # approve answers with the parent's result
    assert done.status == "completed"
    assert done.text == "the researcher says: done: paid 5"
    assert child_after.status == "completed"
    assert paid == [5]


async def test_denying_a_child_gate_tells_the_child_and_the_parent_continues() -> None:
    @tool(effects={"write"}, needs_approval=True)
    def pay(amount: int) -> str:
        """Pay."""
        return f"paid {amount}"

    def child_answer(request: ModelRequest) -> ModelResponse:
        results = tool_results(request)
        return reply(f"could not pay: {results[-1][:6]}") if results else call("pay", amount=5)

    parent_model = ScriptedModel(answer_with_tool_result)
    async with Runtime.open(":memory:") as rt:
        agent = lead(researcher(ScriptedModel(child_answer), tools=[pay]), parent_model)
        r = await rt.run(agent, "go", scope=SCOPE)
        assert r.gate is not None
        done = await rt.deny(r.gate.ref, reason="too much")
    assert done.run_id == r.run_id and done.status == "completed"
    assert done.text == "the researcher says: could not pay: denied"


async def test_a_nested_subagent_gate_surfaces_on_the_root_and_approval_completes_all() -> None:
    @tool(effects={"write"}, needs_approval=True)
    def pay(amount: int) -> str:
        """Pay."""
        return f"paid {amount}"

    def leaf_answer(request: ModelRequest) -> ModelResponse:
        results = tool_results(request)
        return reply(results[-1]) if results else call("pay", amount=7)

    def middle_answer(request: ModelRequest) -> ModelResponse:
        results = tool_results(request)
        return reply(f"middle: {results[-1]}") if results else call("leaf", input="pay 7")

    leaf = Agent(name="leaf", model=ScriptedModel(leaf_answer), tools=[pay])
    middle = Agent(name="middle", model=ScriptedModel(middle_answer), tools=[leaf.as_tool()])
    root = Agent(
        name="root",
        model=ScriptedModel(answer_with_tool_result),
        tools=[middle.as_tool(name="research")],
    )
    async with Runtime.open(":memory:") as rt:
        r = await rt.run(root, "go", scope=SCOPE)
        assert r.status == "blocked" and r.gate is not None and r.gate.tool == "pay"
        done = await rt.approve(r.gate.ref)
    assert done.run_id == r.run_id
    assert done.text == "the researcher says: middle: paid 7"


async def test_a_subagent_tool_takes_one_non_empty_input_string() -> None:
    child_model = ScriptedModel([reply("never")])

    def parent_answer(request: ModelRequest) -> ModelResponse:
        results = tool_results(request)
        return reply(results[-1]) if results else call("research", input="  ", extra=1)

    async with Runtime.open(":memory:") as rt:
        r = await rt.run(
            lead(researcher(child_model), ScriptedModel(parent_answer)), "go", scope=SCOPE
        )
        assert await children(rt, r.run_id) == []
    assert r.text is not None and r.text.startswith("error (input_invalid)")
    assert child_model.requests == []


def test_as_tool_describes_the_agent_as_a_tool_with_one_input_argument() -> None:
    child = researcher(ScriptedModel([reply("x")]))
    t = child.as_tool(name="research", description="Ask the researcher.")
    assert isinstance(t, SubagentTool) and t.agent is child
    d = t.descriptor
    assert (d.name, d.description) == ("research", "Ask the researcher.")
    assert d.parameters["required"] == ["input"]
    assert d.concurrency == "exclusive"
    assert child.as_tool().descriptor.name == "researcher"


def test_as_tool_refuses_a_name_that_is_not_a_valid_tool_name() -> None:
    child = Agent(name="my researcher", model=ScriptedModel([reply("x")]))
    with pytest.raises(UsageError, match="invalid tool name"):
        child.as_tool()
    with pytest.raises(UsageError, match="max_output_bytes"):
        child.as_tool(name="ok", max_output_bytes=0)


async def test_a_subagent_tool_goes_over_the_openai_wire_with_its_schema_and_the_childs_answer(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from reverie.models.openai import OpenAIChatModel
    from reverie.testing import FakeOpenAIServer
    from reverie.testing.fake_openai import FakeReply, FakeToolCall

    monkeypatch.setenv("OPENAI_API_KEY", "sk-test-123")
    script = [
        FakeReply(
            tool_calls=(FakeToolCall("research", {"input": "capital of France?"}, id="call_r1"),),
            input_tokens=20,
            output_tokens=5,
        ),
        FakeReply("Paris", input_tokens=7, output_tokens=1),  # the child's model call
        FakeReply("The researcher says Paris.", input_tokens=30, output_tokens=6),
    ]
    async with FakeOpenAIServer(script) as srv:
        child = Agent(
            name="researcher",
            model=OpenAIChatModel("gpt-child", base_url=srv.base_url),
            instructions="You research.",
        )
        parent = Agent(
            name="lead",
            model=OpenAIChatModel("gpt-lead", base_url=srv.base_url),
            tools=[child.as_tool(name="research", description="Ask the researcher.")],
        )
        async with Runtime.open(":memory:") as rt:
            r = await rt.run(parent, "capital?", scope=SCOPE)
    assert r.status == "completed" and r.text == "The researcher says Paris."
    first, child_request, last = srv.requests
    [offered] = first["tools"]
    assert offered == {
        "type": "function",
        "function": {
            "name": "research",
            "description": "Ask the researcher.",
            "parameters": {
                "type": "object",
                "properties": {
                    "input": {
                        "type": "string",
                        "description": "The task or question for the agent, with everything "
                        "it needs.",
                    }
                },
                "required": ["input"],
                "additionalProperties": False,
            },
        },
    }
    assert child_request["model"] == "gpt-child"
    assert "tools" not in child_request
    assert child_request["messages"] == [
        {"role": "system", "content": "You research."},
        {"role": "user", "content": "capital of France?"},
    ]
    assert last["model"] == "gpt-lead"
    [assistant] = [m for m in last["messages"] if m["role"] == "assistant"]
    assert assistant["tool_calls"][0]["id"] == "call_r1"
    assert assistant["tool_calls"][0]["function"]["name"] == "research"
    [result] = [m for m in last["messages"] if m["role"] == "tool"]
    assert result == {"role": "tool", "tool_call_id": "call_r1", "content": "Paris"}
    # The parent's usage includes the child's call.
    assert r.usage.model_calls == 3
    assert r.usage.input_tokens == 20 + 7 + 30 and r.usage.output_tokens == 5 + 1 + 6


async def test_subagent_runs_nest_at_most_max_depth_levels() -> None:
    from reverie.runtime.subagents import DEPTH_KEY, MAX_DEPTH

    def recurse(request: ModelRequest) -> ModelResponse:
        results = tool_results(request)
        return reply(f"got: {results[-1][:60]}") if results else call("myself", input="again")

    # An agent that delegates to itself, level after level (its tool list names itself).
    tools: list[object] = []
    looping = Agent(name="looping", model=ScriptedModel(recurse), tools=tools)
    tools.append(looping.as_tool(name="myself"))
    async with Runtime.open(":memory:") as rt:
        r = await rt.run(looping, "go", scope=SCOPE)
        runs = await rt.store.list_runs(scope=SCOPE, limit=100)
        [deepest] = [x for x in runs if x.meta.get(DEPTH_KEY) == MAX_DEPTH]
        deepest_result = await rt.get_result(deepest.run_id)
    assert r.status == "completed"
    assert len(runs) == MAX_DEPTH + 1  # the root and one run per level, no more
    assert (
        deepest_result.text == "got: error (permanent): the myself agent was not started: subagen"
    )


async def test_a_parent_resumed_after_a_shutdown_mid_child_joins_the_same_child_run(
    tmp_path: Path,
) -> None:
    url = f"sqlite:///{tmp_path / 'runs.db'}"
    entered = asyncio.Event()
    hold = True
    fetched: list[str] = []

    @tool(effects={"read"}, idempotent=True, timeout_s=None)
    async def fetch(url: str) -> str:
        """Fetch a page (safe to repeat)."""
        fetched.append(url)
        if hold:
            entered.set()
            await asyncio.Event().wait()  # until the runtime shuts down
        return f"page {url}"

    def child_answer(request: ModelRequest) -> ModelResponse:
        results = tool_results(request)
        return reply(f"read {results[-1]}") if results else call("fetch", url="a")

    agent = lead(
        researcher(ScriptedModel(child_answer), tools=[fetch]),
        ScriptedModel(answer_with_tool_result),
    )
    async with Runtime.open(url) as rt:
        handle = await rt.start(agent, "go", scope=SCOPE)
        await asyncio.wait_for(entered.wait(), timeout=30)
    # Closed mid-child: both runs are still "running", to be continued.
    hold = False
    async with Runtime.open(url, agents=[agent]) as rt:
        assert [r.run_id for r in await rt.recover()] == [handle.run_id]
        result = await rt.get_result(handle.run_id)
        kids = await children(rt, handle.run_id)
    assert result.status == "completed"
    assert result.text == "the researcher says: read page a"
    assert len(kids) == 1 and kids[0].status == "completed"
    assert fetched == ["a", "a"]  # the idempotent read re-ran inside the same child run


async def test_the_child_runs_under_the_tighter_of_its_own_limits_and_what_the_parent_left() -> (
    None
):
    from reverie.runtime.subagents import LIMITS_KEY

    child_model = ScriptedModel([reply("Paris")])
    async with Runtime.open(":memory:") as rt:
        tight_child = Agent(
            name="researcher",
            model=child_model,
            limits=Limits(max_model_calls=1, max_tokens=50_000),
        )
        agent = lead(
            tight_child,
            ScriptedModel(answer_with_tool_result),
            limits=Limits(max_model_calls=10, max_tokens=1000, max_capability_calls=4),
        )
        r = await rt.run(agent, "go", scope=SCOPE)
        [child] = await children(rt, r.run_id)
    stored = child.meta[LIMITS_KEY]
    assert stored["max_model_calls"] == 1  # its own is tighter than the parent's 9 left
    assert stored["max_tokens"] == 1000  # the parent's is tighter (it used none so far)
    assert stored["max_capability_calls"] == 3  # the parent's 4, less the call itself
    assert r.status == "completed"


async def test_a_child_cancelled_on_its_own_is_a_failed_call_and_the_parent_goes_on() -> None:
    entered = asyncio.Event()

    @tool(effects={"write"}, timeout_s=None)
    async def dig(where: str) -> str:
        """Dig (takes a while)."""
        entered.set()
        await asyncio.Event().wait()
        return "never"

    child_model = ScriptedModel([call("dig", where="here"), reply("dug")])
    parent_model = ScriptedModel(answer_with_tool_result)
    async with Runtime.open(":memory:") as rt:
        handle = await rt.start(
            lead(researcher(child_model, tools=[dig]), parent_model), "go", scope=SCOPE
        )
        await asyncio.wait_for(entered.wait(), timeout=30)
        [child] = await children(rt, handle.run_id)
        await rt.cancel(child.run_id, reason="not needed")
        r = await handle.result()
    assert r.status == "completed"
    assert r.text == (
        "the researcher says: error (permanent): the research agent was cancelled (not needed)"
    )


async def test_a_waves_second_subagent_call_gets_only_what_the_first_child_left() -> None:
    from reverie.runtime.subagents import LIMITS_KEY
    from reverie.testing import calls

    def parent_answer(request: ModelRequest) -> ModelResponse:
        results = tool_results(request)
        if not results:
            return calls(("research", {"input": "one"}), ("research", {"input": "two"}))
        return reply(" / ".join(results))

    def child_answer(request: ModelRequest) -> ModelResponse:
        return reply(f"answer to {request.messages[-1].content}")

    async with Runtime.open(":memory:") as rt:
        agent = lead(
            researcher(ScriptedModel(child_answer)),
            ScriptedModel(parent_answer),
            limits=Limits(max_model_calls=6),
        )
        r = await rt.run(agent, "go", scope=SCOPE)
        kids = await children(rt, r.run_id)
        first, second = sorted(kids, key=lambda k: str(k.meta[PARENT_CALL_KEY]))
    assert r.text == "answer to one / answer to two"
    # The parent spent 1 before the wave; the first child then spent 1 more.
    assert first.meta[LIMITS_KEY]["max_model_calls"] == 5
    assert second.meta[LIMITS_KEY]["max_model_calls"] == 4
    assert r.usage.model_calls == 2 + 1 + 1


async def test_a_subagent_tool_goes_over_the_anthropic_wire_with_its_schema_and_the_childs_answer(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from reverie.models.anthropic import AnthropicModel
    from reverie.testing import FakeAnthropicServer
    from reverie.testing.fake_openai import FakeReply, FakeToolCall

    monkeypatch.setenv("ANTHROPIC_API_KEY", "sk-ant-test")
    script = [
        FakeReply(tool_calls=(FakeToolCall("research", {"input": "capital?"}, id="toolu_r1"),)),
        FakeReply("Paris"),  # the child's model call
        FakeReply("The researcher says Paris."),
    ]
    async with FakeAnthropicServer(script) as srv:
        child = Agent(
            name="researcher",
            model=AnthropicModel("claude-child", base_url=srv.base_url),
            instructions="You research.",
        )
        parent = Agent(
            name="lead",
            model=AnthropicModel("claude-lead", base_url=srv.base_url),
            tools=[child.as_tool(name="research", description="Ask the researcher.")],
        )
        async with Runtime.open(":memory:") as rt:
            r = await rt.run(parent, "capital?", scope=SCOPE)
    assert r.status == "completed" and r.text == "The researcher says Paris."
    first, child_request, last = srv.requests
    [offered] = first["tools"]
    assert offered["name"] == "research" and offered["description"] == "Ask the researcher."
    assert offered["input_schema"]["required"] == ["input"]
    assert child_request["model"] == "claude-child"
    assert child_request["system"] == "You research."
    assert child_request["messages"] == [
        {"role": "user", "content": [{"type": "text", "text": "capital?"}]}
    ]
    assert last["messages"][1:] == [
        {
            "role": "assistant",
            "content": [
                {
                    "type": "tool_use",
                    "id": "toolu_r1",
                    "name": "research",
                    "input": {"input": "capital?"},
                }
            ],
        },
        {
            "role": "user",
            "content": [{"type": "tool_result", "tool_use_id": "toolu_r1", "content": "Paris"}],
        },
    ]


class _JournalWrites:
    """A store that notes every journal write made on its own (outside a step commit)."""

    def __init__(self, inner: Any) -> None:
        self._inner = inner
        self.alone: list[tuple[str, str]] = []

    def __getattr__(self, name: str) -> Any:
        target = getattr(self._inner, name)
        if name not in ("journal_started", "journal_finished"):
            return target

        async def noted(run_id: str, *args: Any, **kwargs: Any) -> Any:
            self.alone.append((name, run_id))
            return await target(run_id, *args, **kwargs)

        return noted


async def test_a_subagent_calls_outcome_is_journaled_with_the_parents_next_step_commit() -> None:
    from reverie.store.memory import MemoryStore

    store = _JournalWrites(MemoryStore())
    agent = lead(
        researcher(ScriptedModel([reply("Paris")])), ScriptedModel(answer_with_tool_result)
    )
    async with Runtime(store) as rt:
        r = await rt.run(agent, "go", scope=SCOPE)
        [child] = await children(rt, r.run_id)
        wave = next(i for i in await rt.store.thread_items(r.thread_id) if i.tool_calls)
        key = f"{wave.ref}#0"
        recorded = (await rt.store.journal_get(r.run_id, [key]))[key]
    assert r.text == "the researcher says: Paris" and child.status == "completed"
    # Like any repeatable call's: no record of its own, the finished one rides the step commit.
    assert [w for w in store.alone if w[1] == r.run_id] == []
    assert recorded.state == "finished" and recorded.outcome is not None
