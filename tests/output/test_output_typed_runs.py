"""Typed output of interactive runs (docs/output.md), through the real SDKs and fake servers."""

from __future__ import annotations

import json
from typing import Any

import pytest

from output.output_support import (
    SCOPE,
    TICKET_SCHEMA,
    Gate,
    Verdict,
    add,
    anthropic_model,
    openai_model,
    openai_roles,
)
from reverie import Agent, Limits, Runtime
from reverie.core.exits import Completed, Failed
from reverie.loop.finish import (
    STRUCTURED_INVALID_PROMPT,
    STRUCTURED_REPAIR_PROMPT,
    STRUCTURED_RESULT_TOOL,
)
from reverie.testing import FakeAnthropicServer, FakeOpenAIServer
from reverie.testing.fake_openai import FakeReply, FakeToolCall


def answer(**arguments: Any) -> FakeReply:
    """The model's structured answer: a call of structured_result."""
    return FakeReply(tool_calls=(FakeToolCall(STRUCTURED_RESULT_TOOL, arguments),))


def verdict_schema() -> dict[str, Any]:
    return Verdict.model_json_schema()


# ------------------------------------------------------------------------------ the output


async def test_typed_run_ends_with_a_validated_model_instance_in_run_result_output(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    async with FakeOpenAIServer([answer(verdict="approve", score=7)]) as srv:
        agent = Agent(
            name="judge", model=openai_model(srv.base_url, monkeypatch), output_type=Verdict
        )
        async with Runtime.open(":memory:") as rt:
            r = await rt.run(agent, "Judge this PR.", scope=SCOPE)
            stored = await rt.get_result(r.run_id)
            run = await rt.store.get_run(r.run_id)

    assert r.status == "completed"
    assert isinstance(r.exit, Completed) and r.exit.kind == "structured"
    assert r.output == Verdict(verdict="approve", score=7)
    assert isinstance(r.output, Verdict)
    assert json.loads(r.text or "") == {"verdict": "approve", "score": 7}
    assert stored.output == r.output  # rebuilt from the store, not only kept in memory
    assert (run.profile, run.family_id) == ("interactive", "default_structured")
    # The wire: the tool carries the model's schema, its call is forced, response_format set.
    [body] = srv.requests
    assert [t["function"]["name"] for t in body["tools"]] == [STRUCTURED_RESULT_TOOL]
    assert body["tools"][0]["function"]["parameters"] == verdict_schema()
    assert body["tool_choice"] == {"type": "function", "function": {"name": STRUCTURED_RESULT_TOOL}}
    assert body["response_format"] == {
        "type": "json_schema",
        "json_schema": {"name": "Verdict", "schema": verdict_schema()},
    }


async def test_typed_run_with_a_json_schema_ends_with_the_plain_json_through_anthropic(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    async with FakeAnthropicServer([answer(title="Disk full", priority="high")]) as srv:
        agent = Agent(
            name="triage",
            model=anthropic_model(srv.base_url, monkeypatch),
            output_type=TICKET_SCHEMA,
        )
        async with Runtime.open(":memory:") as rt:
            r = await rt.run(agent, "The disk is full!", scope=SCOPE)

    assert r.status == "completed", r.exit
    assert r.output == {"title": "Disk full", "priority": "high"}
    [body] = srv.requests
    [spec] = body["tools"]
    assert (spec["name"], spec["input_schema"]) == (STRUCTURED_RESULT_TOOL, TICKET_SCHEMA)
    # Anthropic: the forced tool is the route; no JSON-outputs format beside a forced call.
    assert body["tool_choice"] == {"type": "tool", "name": STRUCTURED_RESULT_TOOL}
    assert "output_config" not in body


async def test_output_is_validated_with_the_model_class_and_its_validators(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    script = [answer(verdict="maybe", score=3), answer(verdict="reject", score=3)]
    async with FakeOpenAIServer(script) as srv:
        agent = Agent(
            name="judge", model=openai_model(srv.base_url, monkeypatch), output_type=Verdict
        )
        async with Runtime.open(":memory:") as rt:
            r = await rt.run(agent, "Judge.", scope=SCOPE)

    assert r.output == Verdict(verdict="reject", score=3)
    told = [c for role, c in openai_roles(srv.requests[1]) if role == "tool"]
    assert len(told) == 1
    assert told[0].startswith("error (input_invalid): the arguments do not match the output schema")
    assert "at $.verdict: Value error, verdict must be 'approve' or 'reject'" in told[0]


async def test_schema_valid_json_text_from_a_backend_honouring_response_format_is_the_output(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    text = '{"verdict": "approve", "score": 9}'
    async with FakeOpenAIServer([FakeReply(text=text)]) as srv:
        model = openai_model(srv.base_url, monkeypatch)
        model.supports_tool_choice = False  # type: ignore[attr-defined]  # a compatible server
        agent = Agent(name="judge", model=model, output_type=Verdict)
        async with Runtime.open(":memory:") as rt:
            r = await rt.run(agent, "Judge.", scope=SCOPE)
            rows = await rt.store.thread_items(r.thread_id)

    assert r.status == "completed" and r.output == Verdict(verdict="approve", score=9)
    [body] = srv.requests
    assert body["tool_choice"] == "auto"  # not forced: the JSON text is the answer
    assert body["response_format"]["type"] == "json_schema"
    # Kept as a structured_result call and its result, as if the model had made the call.
    assistant = [row for row in rows if row.role == "assistant"]
    assert [c.name for c in assistant[0].tool_calls] == [STRUCTURED_RESULT_TOOL]


async def test_schema_invalid_json_text_is_a_wrong_answer_that_gets_the_one_repair(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    script = [FakeReply(text='{"verdict": "approve"}'), FakeReply(text='{"score": 1}')]
    async with FakeOpenAIServer(script) as srv:
        model = openai_model(srv.base_url, monkeypatch)
        model.supports_tool_choice = False  # type: ignore[attr-defined]
        agent = Agent(name="judge", model=model, output_type=Verdict)
        async with Runtime.open(":memory:") as rt:
            r = await rt.run(agent, "Judge.", scope=SCOPE)

    assert isinstance(r.exit, Failed) and r.exit.kind == "output_contract_violation"
    assert len(srv.requests) == 2
    second = openai_roles(srv.requests[1])
    assert second[-1] == ("user", STRUCTURED_INVALID_PROMPT)
    assert "at $.score: Field required" in second[-2][1]


# ------------------------------------------------------------------------------ one repair


async def test_invalid_answer_gets_exactly_one_repair_prompt_then_output_contract_violation(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    script = [answer(verdict="approve", score=11), "I think it is fine.", "never asked"]
    async with FakeOpenAIServer(script) as srv:
        agent = Agent(
            name="judge", model=openai_model(srv.base_url, monkeypatch), output_type=Verdict
        )
        async with Runtime.open(":memory:") as rt:
            r = await rt.run(agent, "Judge.", scope=SCOPE)

    assert r.status == "failed"
    assert isinstance(r.exit, Failed) and r.exit.kind == "output_contract_violation"
    assert r.output is None and r.text is None
    assert len(srv.requests) == 2  # the answer, the one repair; no third call
    repairs = [
        c
        for role, c in openai_roles(srv.requests[1])
        if role == "user" and c in (STRUCTURED_INVALID_PROMPT, STRUCTURED_REPAIR_PROMPT)
    ]
    assert repairs == [STRUCTURED_INVALID_PROMPT]
    # The repair request still forces the call, with the schema.
    assert srv.requests[1]["tool_choice"]["function"]["name"] == STRUCTURED_RESULT_TOOL


async def test_plain_text_answer_gets_one_repair_then_a_valid_call_completes_through_anthropic(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    script = ["It is high priority.", answer(title="Disk full", priority="high")]
    async with FakeAnthropicServer(script) as srv:
        agent = Agent(
            name="triage",
            model=anthropic_model(srv.base_url, monkeypatch),
            output_type=TICKET_SCHEMA,
        )
        async with Runtime.open(":memory:") as rt:
            r = await rt.run(agent, "The disk is full!", scope=SCOPE)

    assert r.status == "completed" and r.output == {"title": "Disk full", "priority": "high"}
    last = srv.requests[1]["messages"][-1]
    assert last == {"role": "user", "content": [{"type": "text", "text": STRUCTURED_REPAIR_PROMPT}]}


async def test_a_typed_agent_never_finalizes_with_a_text_summary() -> None:
    agent = Agent(name="judge", model="openai:gpt-4.1-mini", output_type=Verdict)
    assert agent.on_limit == "fail"


# ------------------------------------------------------------------------------ tools, inputs


async def test_tools_still_work_in_a_typed_run(monkeypatch: pytest.MonkeyPatch) -> None:
    script = [
        FakeReply(tool_calls=(FakeToolCall("add", {"a": 2, "b": 3}),)),
        answer(verdict="approve", score=5),
    ]
    async with FakeOpenAIServer(script) as srv:
        agent = Agent(
            name="judge",
            model=openai_model(srv.base_url, monkeypatch),
            tools=[add],
            output_type=Verdict,
        )
        async with Runtime.open(":memory:") as rt:
            r = await rt.run(agent, "Score it as 2+3.", scope=SCOPE)

    assert r.output == Verdict(verdict="approve", score=5)
    assert r.usage.capability_calls == 2  # add, then structured_result
    first = srv.requests[0]
    assert [t["function"]["name"] for t in first["tools"]] == ["add", STRUCTURED_RESULT_TOOL]
    assert first["tool_choice"] == "required"  # a call is forced; the model picks which
    assert ("tool", "5") in openai_roles(srv.requests[1])


async def test_steering_reaches_a_typed_run_before_its_next_model_call(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    gate = Gate()
    script = [
        FakeReply(tool_calls=(FakeToolCall("wait_a_bit", {}),)),
        answer(verdict="reject", score=1),
    ]
    async with FakeAnthropicServer(script) as srv:
        agent = Agent(
            name="judge",
            model=anthropic_model(srv.base_url, monkeypatch),
            tools=[gate.tool()],
            output_type=Verdict,
        )
        async with Runtime.open(":memory:") as rt:
            handle = await rt.start(agent, "Judge.", scope=SCOPE)
            await gate.entered.wait()
            await handle.steer("Be strict.")
            gate.opened.set()
            r = await handle.result()

    assert r.output == Verdict(verdict="reject", score=1)
    texts = [
        block.get("text")
        for message in srv.requests[1]["messages"]
        if message["role"] == "user"
        for block in message["content"]
    ]
    assert "Be strict." in texts


async def test_a_follow_up_sent_before_the_structured_answer_continues_the_run_to_a_new_output(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    gate = Gate()
    script = [
        FakeReply(tool_calls=(FakeToolCall("wait_a_bit", {}),)),
        answer(verdict="approve", score=6),
        answer(verdict="reject", score=2),
    ]
    async with FakeOpenAIServer(script) as srv:
        agent = Agent(
            name="judge",
            model=openai_model(srv.base_url, monkeypatch),
            tools=[gate.tool()],
            output_type=Verdict,
        )
        async with Runtime.open(":memory:") as rt:
            handle = await rt.start(agent, "Judge.", scope=SCOPE)
            await gate.entered.wait()
            await handle.follow_up("Now judge it again, strictly.")
            gate.opened.set()
            r = await handle.result()

    assert r.output == Verdict(verdict="reject", score=2)  # the answer after the follow-up
    assert len(srv.requests) == 3
    assert openai_roles(srv.requests[2])[-1] == ("user", "Now judge it again, strictly.")


# ------------------------------------------------------------------------------ budgets


async def test_the_repair_attempt_counts_against_max_model_calls(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    script = [answer(verdict="approve", score=99), answer(verdict="approve", score=9)]
    async with FakeOpenAIServer(script) as srv:
        model = openai_model(srv.base_url, monkeypatch)
        async with Runtime.open(":memory:") as rt:
            tight = Agent(
                name="tight", model=model, output_type=Verdict, limits=Limits(max_model_calls=1)
            )
            r = await rt.run(tight, "Judge.", scope=SCOPE)
            # The budget is spent by the first answer: the repair is never sent, no hang.
            assert isinstance(r.exit, Failed) and r.exit.kind == "model_call_limit"
            assert r.usage.model_calls == 1 and len(srv.requests) == 1

    script = [answer(verdict="approve", score=99), answer(verdict="approve", score=9)]
    async with FakeOpenAIServer(script) as srv:
        model = openai_model(srv.base_url, monkeypatch)
        async with Runtime.open(":memory:") as rt:
            enough = Agent(
                name="enough", model=model, output_type=Verdict, limits=Limits(max_model_calls=2)
            )
            r = await rt.run(enough, "Judge.", scope=SCOPE)
    assert r.output == Verdict(verdict="approve", score=9)
    assert r.usage.model_calls == 2  # the answer and its repair, both counted


async def test_a_typed_run_at_its_iteration_limit_fails_with_the_limit_kind_not_a_summary(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    script = [FakeReply(tool_calls=(FakeToolCall("add", {"a": 1, "b": 1}),))]
    async with FakeOpenAIServer(script) as srv:
        agent = Agent(
            name="judge",
            model=openai_model(srv.base_url, monkeypatch),
            tools=[add],
            output_type=Verdict,
            limits=Limits(max_iterations=1),
        )
        async with Runtime.open(":memory:") as rt:
            r = await rt.run(agent, "Judge.", scope=SCOPE)

    assert isinstance(r.exit, Failed) and r.exit.kind == "iteration_limit"
    assert len(srv.requests) == 1  # no finalizer call: a text summary is not the output
