"""OpenTelemetry spans of whole runs (GenAI semantic conventions), read from the SDK's
in-memory exporter (docs/observability.md)."""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import Iterator
from typing import Any

import pytest
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from reverie import Agent, Runtime, Scope, tool
from reverie.core.messages import ModelRequest
from reverie.models.openai import OpenAIChatModel
from reverie.runtime.telemetry import Telemetry
from reverie.store.memory import MemoryStore
from reverie.testing import FakeOpenAIServer, ScriptedModel, call, calls, error, reply
from reverie.testing.fake_openai import FakeReply, FakeToolCall

SCOPE = Scope(tenant="acme", user="ana")


@tool(effects=set())
def add(a: int, b: int) -> int:
    """Add two integers."""
    return a + b


@tool(effects={"read"})
def lookup(key: str) -> str:
    """Look something up."""
    return f"value of {key}"


@tool(effects={"write"}, needs_approval=True, idempotent=False)
def send_email(to: str, body: str) -> str:
    """Send an email."""
    return f"sent to {to}"


class Traces:
    """A tracer provider that keeps every finished span in memory."""

    def __init__(self) -> None:
        self.exporter = InMemorySpanExporter()
        self.provider = TracerProvider()
        self.provider.add_span_processor(SimpleSpanProcessor(self.exporter))

    def spans(self) -> list[ReadableSpan]:
        return list(self.exporter.get_finished_spans())

    def named(self, prefix: str) -> list[ReadableSpan]:
        return [s for s in self.spans() if s.name.startswith(prefix)]

    def one(self, name: str) -> ReadableSpan:
        found = [s for s in self.spans() if s.name == name]
        assert len(found) == 1, [s.name for s in self.spans()]
        return found[0]


@pytest.fixture
def traces() -> Iterator[Traces]:
    t = Traces()
    yield t
    t.provider.shutdown()


def parent_of(span: ReadableSpan) -> int | None:
    return span.parent.span_id if span.parent is not None else None


def span_id(span: ReadableSpan) -> int:
    assert span.context is not None
    value: int = span.context.span_id
    return value


def attr(span: ReadableSpan, key: str) -> Any:
    assert span.attributes is not None
    return span.attributes.get(key)


async def test_a_tool_wave_yields_an_invoke_agent_span_with_chat_and_execute_tool_children(
    traces: Traces, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("OPENAI_API_KEY", "sk-test-123")
    script = [
        FakeReply(
            tool_calls=(FakeToolCall("add", {"a": 2, "b": 3}), FakeToolCall("lookup", {"key": "k"}))
        ),
        FakeReply("The sum is five.", input_tokens=11, output_tokens=4),
    ]
    async with FakeOpenAIServer(script) as srv:
        agent = Agent(
            name="calc",
            model=OpenAIChatModel("gpt-test", base_url=srv.base_url),
            tools=[add, lookup],
        )
        async with Runtime.open(":memory:", tracer_provider=traces.provider) as rt:
            r = await rt.run(agent, "2+3?", scope=SCOPE)
    assert r.status == "completed"
    root = traces.one("invoke_agent calc")
    assert attr(root, "gen_ai.operation.name") == "invoke_agent"
    assert attr(root, "gen_ai.agent.name") == "calc"
    assert attr(root, "reverie.run.id") == r.run_id
    assert attr(root, "gen_ai.conversation.id") == r.thread_id
    assert attr(root, "reverie.run.status") == "completed"
    assert attr(root, "gen_ai.usage.output_tokens") == r.usage.output_tokens
    chats = traces.named("chat ")
    assert [c.name for c in chats] == ["chat gpt-test", "chat gpt-test"]
    assert all(parent_of(c) == span_id(root) for c in chats)
    last = chats[-1]
    assert attr(last, "gen_ai.operation.name") == "chat"
    assert attr(last, "gen_ai.request.model") == "gpt-test"
    assert attr(last, "gen_ai.response.model") == "gpt-test"
    assert attr(last, "gen_ai.usage.input_tokens") == 11
    assert attr(last, "gen_ai.usage.output_tokens") == 4
    assert attr(last, "gen_ai.response.finish_reasons") == ("stop",)
    assert attr(chats[0], "gen_ai.response.finish_reasons") == ("tool_calls",)
    tools = sorted(traces.named("execute_tool "), key=lambda s: s.name)
    assert [t.name for t in tools] == ["execute_tool add", "execute_tool lookup"]
    assert all(parent_of(t) == span_id(root) for t in tools)
    assert {attr(t, "gen_ai.tool.name") for t in tools} == {"add", "lookup"}
    assert all(attr(t, "gen_ai.tool.call.id") for t in tools)
    assert all(attr(t, "reverie.tool.outcome") == "completed" for t in tools)
    assert all(attr(t, "error.type") is None for t in tools)
    # Content is off by default: no messages, no arguments, no results.
    for span in traces.spans():
        assert not any(
            k.startswith(("gen_ai.input", "gen_ai.output", "gen_ai.tool.call.arg"))
            for k in (span.attributes or {})
        )


async def test_a_gate_and_its_approval_link_the_resumed_segment_to_the_blocked_one(
    traces: Traces,
) -> None:
    model = ScriptedModel([call("send_email", to="bob@x", body="hi"), reply("done")])
    agent = Agent(name="mailer", model=model, tools=[send_email])
    async with Runtime.open(":memory:", tracer_provider=traces.provider) as rt:
        r = await rt.run(agent, "mail bob", scope=SCOPE)
        assert r.gate is not None
        r2 = await rt.approve(r.gate.ref)
    assert r2.status == "completed"
    first, second = traces.named("invoke_agent mailer")
    assert attr(first, "reverie.run.status") == "blocked"
    assert attr(first, "reverie.gate.ref") == r.gate.ref
    assert attr(first, "reverie.run.resumed") is False
    gate = traces.one("gate send_email")
    assert parent_of(gate) == span_id(first)
    assert attr(gate, "reverie.gate.ref") == r.gate.ref
    # approve → resolve_gate → resume_run → the resumed segment, linked to the blocked one.
    resolve = traces.one("resolve_gate")
    resume = traces.one("resume_run")
    assert attr(resolve, "reverie.gate.status") == "approved"
    assert parent_of(resume) == span_id(resolve)
    assert parent_of(second) == span_id(resume)
    assert attr(second, "reverie.run.resumed") is True
    assert attr(second, "reverie.run.id") == attr(first, "reverie.run.id") == r.run_id
    assert [link.context.span_id for link in second.links] == [span_id(first)]
    assert second.links[0].attributes == {
        "reverie.run.id": r.run_id,
        "reverie.link": "earlier_segment",
    }
    gated, sent = traces.named("execute_tool send_email")
    assert parent_of(gated) == span_id(first)
    assert attr(gated, "reverie.tool.outcome") == "gated"
    assert attr(gated, "error.type") is None  # a gate is not an error
    assert parent_of(sent) == span_id(second)
    assert attr(sent, "reverie.tool.outcome") == "completed"


async def test_a_failed_model_call_records_its_typed_kind_on_the_chat_and_agent_spans(
    traces: Traces,
) -> None:
    model = ScriptedModel([error("content_filtered", "refused")])
    agent = Agent(name="calc", model=model, tools=[add])
    async with Runtime.open(":memory:", tracer_provider=traces.provider) as rt:
        r = await rt.run(agent, "hi", scope=SCOPE)
    assert r.status == "failed"
    chat = traces.named("chat ")[0]
    assert attr(chat, "error.type") == "content_filtered"
    assert chat.status.status_code.name == "ERROR"
    root = traces.one("invoke_agent calc")
    assert attr(root, "error.type") == r.exit.kind  # type: ignore[union-attr]
    assert root.status.status_code.name == "ERROR"


async def test_a_failed_tool_call_records_its_error_kind_on_the_execute_tool_span(
    traces: Traces,
) -> None:
    @tool(effects=set())
    def boom() -> str:
        """Always fails."""
        raise ValueError("nope")

    model = ScriptedModel([call("boom"), reply("it failed")])
    agent = Agent(name="calc", model=model, tools=[boom])
    async with Runtime.open(":memory:", tracer_provider=traces.provider) as rt:
        r = await rt.run(agent, "hi", scope=SCOPE)
    assert r.status == "completed"
    span = traces.named("execute_tool boom")[0]
    assert attr(span, "reverie.tool.outcome") == "failed"
    assert attr(span, "error.type")
    assert span.status.status_code.name == "ERROR"


async def test_a_crash_resumed_run_links_its_new_segment_to_the_crashed_one(
    traces: Traces,
) -> None:
    store = MemoryStore()
    in_call = asyncio.Event()
    never = asyncio.Event()

    async def stuck(request: ModelRequest) -> Any:
        if not any(m.role == "tool" for m in request.messages):
            return call("add", a=1, b=2)
        in_call.set()
        await never.wait()
        return reply("unreachable")

    rt = Runtime(store, tracer_provider=traces.provider)
    await rt.__aenter__()
    handle = await rt.start(
        Agent(name="calc", model=ScriptedModel(stuck), tools=[add]), "go", scope=SCOPE
    )
    await in_call.wait()
    await rt.aclose()  # the worker stops mid model call, leaving the run running
    crashed = traces.one("invoke_agent calc")
    assert attr(crashed, "error.type") == "cancelled"

    agent = Agent(name="calc", model=ScriptedModel([reply("3")]), tools=[add])
    async with Runtime(store, agents=[agent], tracer_provider=traces.provider) as rt2:
        r = await rt2.resume(handle.run_id)
    assert r.status == "completed"
    crashed_again, resumed = traces.named("invoke_agent calc")
    assert span_id(crashed_again) == span_id(crashed)
    assert attr(resumed, "reverie.run.id") == handle.run_id
    assert [link.context.span_id for link in resumed.links] == [span_id(crashed)]


async def test_message_content_and_tool_arguments_are_on_spans_only_when_the_operator_opts_in(
    traces: Traces,
) -> None:
    model = ScriptedModel(
        [calls(("add", {"a": 2, "b": 3}), ("lookup", {"key": "k", "api_key": "sk-x"})), reply("5")]
    )
    agent = Agent(name="calc", model=model, tools=[add, lookup])
    async with Runtime.open(":memory:", tracer_provider=traces.provider, trace_content=True) as rt:
        await rt.run(agent, "what is 2+3?", scope=SCOPE)
    chats = traces.named("chat ")
    sent = json.loads(str(attr(chats[0], "gen_ai.input.messages")))
    assert {"role": "user", "content": "what is 2+3?"} in sent
    answered = json.loads(str(attr(chats[-1], "gen_ai.output.messages")))
    assert answered[0]["content"] == "5"
    tools = {s.name: s for s in traces.named("execute_tool ")}
    assert json.loads(str(attr(tools["execute_tool add"], "gen_ai.tool.call.arguments"))) == {
        "a": 2,
        "b": 3,
    }
    assert attr(tools["execute_tool add"], "gen_ai.tool.call.result") == "5"
    # Even opted in, a secret-looking argument stays masked.
    looked = json.loads(str(attr(tools["execute_tool lookup"], "gen_ai.tool.call.arguments")))
    assert looked == {"key": "k", "api_key": "[redacted]"}


async def test_opted_in_span_arguments_mask_secrets_inside_lists(traces: Traces) -> None:
    @tool(effects={"read"})
    def audit(accounts: list[dict[str, str]]) -> str:
        """Audit accounts."""
        return "ok"

    accounts = [{"name": "main", "password": "hunter2-main"}]
    model = ScriptedModel([call("audit", accounts=accounts), reply("audited")])
    agent = Agent(name="auditor", model=model, tools=[audit])
    async with Runtime.open(":memory:", tracer_provider=traces.provider, trace_content=True) as rt:
        await rt.run(agent, "audit", scope=SCOPE)
    span = traces.one("execute_tool audit")
    shown = str(attr(span, "gen_ai.tool.call.arguments"))
    assert "hunter2-main" not in shown
    assert json.loads(shown) == {"accounts": [{"name": "main", "password": "[redacted]"}]}


async def test_without_a_tracer_provider_no_span_is_made_and_the_ports_are_not_wrapped() -> None:
    # The API alone (no SDK provider registered globally) means nowhere for spans to go.
    assert Telemetry().tracer() is None
    seen: list[str] = []

    async def answer(request: ModelRequest) -> Any:
        return reply("hi")

    model = ScriptedModel(answer)
    agent = Agent(name="calc", model=model, tools=[add])
    async with Runtime.open(":memory:") as rt:
        r = await rt.run(agent, "hi", scope=SCOPE)
        seen.append(r.status)
        store_checkpoint = await rt.store.load_checkpoint(r.run_id)
    assert seen == ["completed"]
    # No span context is kept in the checkpoint either.
    assert store_checkpoint is not None
    assert b'"trace"' not in store_checkpoint.payload


async def test_a_denied_gate_is_a_resolve_gate_span_and_a_denied_execute_tool_span(
    traces: Traces,
) -> None:
    model = ScriptedModel([call("send_email", to="bob@x", body="hi"), reply("not sent")])
    agent = Agent(name="mailer", model=model, tools=[send_email])
    async with Runtime.open(":memory:", tracer_provider=traces.provider) as rt:
        r = await rt.run(agent, "mail bob", scope=SCOPE)
        assert r.gate is not None
        await rt.deny(r.gate.ref, reason="not today")
    resolve = traces.one("resolve_gate")
    assert attr(resolve, "reverie.gate.status") == "denied"
    _, resumed = traces.named("invoke_agent mailer")
    _, denied = traces.named("execute_tool send_email")
    assert parent_of(denied) == span_id(resumed)
    assert attr(denied, "reverie.tool.outcome") == "denied"
    assert attr(denied, "error.type") == "denied"


async def test_with_tracing_on_a_failed_model_call_and_its_retry_are_each_logged_once(
    traces: Traces, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.WARNING, logger="reverie")
    model = ScriptedModel([error("transient", "try again"), reply("fine")])
    async with Runtime.open(":memory:", tracer_provider=traces.provider) as rt:
        r = await rt.run(Agent(name="calc", model=model, tools=[add]), "hi", scope=SCOPE)
    assert r.status == "completed"
    warnings = [rec.getMessage() for rec in caplog.records if rec.levelno == logging.WARNING]
    assert warnings.count(f"run {r.run_id}: model scripted:scripted call failed (transient)") == 1
    assert warnings.count(f"run {r.run_id}: retrying the model call (attempt 1)") == 1
    failed, _ = traces.named("chat ")
    assert attr(failed, "error.type") == "transient"


async def test_spans_say_when_usage_is_estimated_because_the_endpoint_sent_none(
    traces: Traces,
) -> None:
    async with FakeOpenAIServer(["Hello there."], usage_in_streams=False) as srv:
        agent = Agent(name="calc", model=OpenAIChatModel("m", base_url=srv.base_url, api_key="k"))
        async with Runtime.open(":memory:", tracer_provider=traces.provider) as rt:
            r = await rt.run(agent, "hi", scope=SCOPE)
    assert r.status == "completed" and r.usage.estimated
    assert attr(traces.one("invoke_agent calc"), "reverie.usage.estimated") is True
    [chat] = traces.named("chat ")
    assert attr(chat, "reverie.usage.estimated") is True
    assert attr(chat, "gen_ai.usage.output_tokens") == r.usage.output_tokens > 0


async def test_spans_carry_the_cached_input_tokens_under_the_genai_names(traces: Traces) -> None:
    instructions = "Follow the house rules in every answer. " * 200  # past the cache's minimum
    async with FakeOpenAIServer([call("add", a=1, b=2), "3"]) as srv:
        model = OpenAIChatModel("m", base_url=srv.base_url, api_key="k")
        agent = Agent(name="calc", model=model, tools=[add], instructions=instructions)
        async with Runtime.open(":memory:", tracer_provider=traces.provider) as rt:
            r = await rt.run(agent, "add", scope=SCOPE)
    assert r.usage.cache_read_tokens > 0
    first, second = traces.named("chat ")
    assert attr(first, "gen_ai.usage.cache_read.input_tokens") == 0
    assert attr(second, "gen_ai.usage.cache_read.input_tokens") == r.usage.cache_read_tokens
    run = traces.one("invoke_agent calc")
    assert attr(run, "gen_ai.usage.cache_read.input_tokens") == r.usage.cache_read_tokens
    assert attr(run, "gen_ai.usage.cache_creation.input_tokens") == 0
