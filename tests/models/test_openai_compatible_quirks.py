"""Real OpenAI-compatible servers' quirks (issue 28), reproduced by FakeOpenAIServer's switches
and driven through the public API: null content, streams that never finish, dropped
connections, error objects inside streams."""

from __future__ import annotations

from typing import Any

import pytest

from reverie import Agent, Compaction, Limits, Runtime, Scope, tool
from reverie.core.messages import Message, ModelRequest
from reverie.errors import ModelError
from reverie.models.base import complete
from reverie.models.openai import OpenAIChatModel
from reverie.testing import FakeOpenAIServer, call
from reverie.testing.fake_openai import FakeCutStream, FakeError, FakeRawStream, FakeStep

SCOPE = Scope(tenant="acme", user="ana")
HI = ModelRequest(messages=(Message(role="user", content="hi"),))
OVERFLOW = (
    "This model's maximum context length is 2048 tokens. However, you requested 2300 tokens "
    "(2100 in the messages, 200 in the completion). Please reduce the length of the messages."
)


@tool(effects=set())
def add(a: int, b: int) -> int:
    """Add two integers."""
    return a + b


def is_summary(body: dict[str, Any]) -> bool:
    """Whether a request is compaction's summary call."""
    return str(body["messages"][0].get("content", "")).startswith("You compact a conversation")


def model_for(srv: FakeOpenAIServer, **kwargs: Any) -> OpenAIChatModel:
    return OpenAIChatModel("local", base_url=srv.base_url, api_key_env=None, **kwargs)


async def ask(steps: list[FakeStep], **server: Any) -> tuple[ModelError, FakeOpenAIServer]:
    """One request through the model that must fail; its error and the server."""
    async with FakeOpenAIServer(steps, **server) as srv, model_for(srv) as model:
        with pytest.raises(ModelError) as info:
            await complete(model, HI)
    return info.value, srv


# ------------------------------------------------------------------------------ null content
async def test_a_tool_round_trip_sends_empty_content_to_a_server_that_refuses_null_content() -> (
    None
):
    async with FakeOpenAIServer([call("add", a=2, b=3), "5"], null_content=False) as srv:
        agent = Agent(name="calc", model=model_for(srv), tools=[add])
        async with Runtime.open(":memory:") as rt:
            r = await rt.run(agent, "add 2 and 3", scope=SCOPE)
    assert r.status == "completed" and r.text == "5"
    [assistant] = [m for m in srv.requests[1]["messages"] if m["role"] == "assistant"]
    assert assistant["content"] == "" and assistant["tool_calls"]


async def test_an_endpoint_declaring_null_content_fine_gets_null_as_openai_does() -> None:
    async with FakeOpenAIServer([call("add", a=2, b=3), "5"]) as srv:
        agent = Agent(name="calc", model=model_for(srv, null_content=True), tools=[add])
        async with Runtime.open(":memory:") as rt:
            r = await rt.run(agent, "add 2 and 3", scope=SCOPE)
    assert r.status == "completed"
    [assistant] = [m for m in srv.requests[1]["messages"] if m["role"] == "assistant"]
    assert assistant["content"] is None


async def test_the_fake_refuses_null_content_with_a_500_validation_error_not_retried() -> None:
    async with FakeOpenAIServer(
        [call("add", a=2, b=3), "never", "never"], null_content=False
    ) as srv:
        agent = Agent(name="calc", model=model_for(srv, null_content=True), tools=[add])
        async with Runtime.open(":memory:") as rt:
            r = await rt.run(agent, "add 2 and 3", scope=SCOPE)
    assert r.status == "failed"
    summary = r.exit.safe_summary  # type: ignore[union-attr]
    assert "model call failed (internal)" in summary and "HTTP 500" in summary
    assert len(srv.requests) == 2  # a validation error is deterministic: never retried
    assert "site-packages" not in summary and "/opt/" not in summary  # the install path


# --------------------------------------------------------------------- streams that never end
async def test_a_stream_cut_before_its_finish_reason_is_a_model_error_not_an_empty_reply() -> None:
    cut = FakeCutStream(text="The answer is")
    async with FakeOpenAIServer([cut, cut, cut]) as srv:
        agent = Agent(name="a", model=model_for(srv))
        async with Runtime.open(":memory:") as rt:
            r = await rt.run(agent, "hi", scope=SCOPE)
    assert r.status == "failed"
    assert r.exit.kind == "model_error"  # type: ignore[union-attr]
    summary = r.exit.safe_summary  # type: ignore[union-attr]
    assert "(transient)" in summary and "no finish_reason" in summary
    assert len(srv.requests) == 3  # transient: retried as the recovery strategy says


async def test_a_cut_stream_is_retried_and_the_retry_completes_the_turn() -> None:
    async with FakeOpenAIServer([FakeCutStream(text="The ans"), "The answer."]) as srv:
        agent = Agent(name="a", model=model_for(srv))
        async with Runtime.open(":memory:") as rt:
            r = await rt.run(agent, "hi", scope=SCOPE)
    assert r.status == "completed" and r.text == "The answer."


async def test_an_empty_stream_is_asked_again_without_streaming_to_learn_the_servers_error() -> (
    None
):
    steps: list[FakeStep] = [
        FakeCutStream(),  # HTTP 200, then nothing
        FakeError(400, OVERFLOW, code="context_length_exceeded"),
    ]
    error, srv = await ask(steps)
    assert error.kind == "context_overflow"
    assert [r["stream"] for r in srv.requests] == [True, False]


async def test_an_empty_stream_answered_whole_on_the_second_ask_is_the_reply() -> None:
    async with FakeOpenAIServer([FakeCutStream(), "Whole reply."]) as srv:
        agent = Agent(name="a", model=model_for(srv))
        async with Runtime.open(":memory:") as rt:
            r = await rt.run(agent, "hi", scope=SCOPE)
    assert r.status == "completed" and r.text == "Whole reply."


async def test_a_context_overflow_behind_an_empty_stream_runs_compaction_and_completes() -> None:
    def script(body: dict[str, Any]) -> FakeStep:
        messages = body["messages"]
        if is_summary(body):
            return "The user said hello earlier."
        if len(messages) > 2:  # the whole conversation: too long for this server
            return FakeCutStream() if body["stream"] else FakeError(400, OVERFLOW)
        return "Fine."

    async with FakeOpenAIServer(script) as srv:
        agent = Agent(
            name="a",
            model=model_for(srv),
            compaction=Compaction(trigger_tokens=None, keep_last_turns=1),
        )
        async with Runtime.open(":memory:") as rt:
            first = await rt.run(agent, "hello", scope=SCOPE)
            r = await rt.run(agent, "and now?", scope=SCOPE, thread_id=first.thread_id)
    assert r.status == "completed" and r.text == "Fine."
    assert [is_summary(b) for b in srv.requests[-3:]] == [False, True, False]
    assert [b["stream"] for b in srv.requests[-4:-2]] == [True, False]  # the empty stream re-asked


async def test_an_error_object_inside_a_stream_is_classified_like_its_http_twin() -> None:
    mid = FakeError(400, OVERFLOW, code="context_length_exceeded", mid_stream=True, text="Hi")
    error, _ = await ask([mid])
    assert error.kind == "context_overflow"


async def test_a_vllm_style_error_object_in_a_stream_is_classified_like_its_http_twin() -> None:
    vllm = {"object": "error", "message": OVERFLOW, "type": "BadRequestError", "code": 400}
    error, _ = await ask([FakeRawStream([vllm])])
    assert error.kind == "context_overflow"


# ------------------------------------------------------------------------ dropped connections
async def test_a_connection_dropped_mid_stream_is_transient_and_keeps_the_usage_so_far() -> None:
    error, _ = await ask([FakeCutStream(text="Hello there, how are", drop=True)])
    assert error.kind == "transient"
    assert "dropped mid-stream" in str(error)
    assert error.usage is not None and error.usage.estimated
    assert error.usage.input_tokens > 0 and error.usage.output_tokens > 0


async def test_a_run_whose_connection_drops_mid_stream_retries_and_counts_the_lost_call() -> None:
    steps: list[FakeStep] = [FakeCutStream(text="Hello there, how are", drop=True), "Hello!"]
    async with FakeOpenAIServer(steps) as srv:
        agent = Agent(name="a", model=model_for(srv))
        async with Runtime.open(":memory:") as rt:
            r = await rt.run(agent, "hi", scope=SCOPE)
    assert r.status == "completed" and r.text == "Hello!"
    assert r.usage.model_calls == 2
    assert r.usage.estimated  # the dropped call's tokens are an estimate, and counted


async def test_dropped_connections_end_a_run_with_a_model_error_not_a_driver_bug() -> None:
    drop = FakeCutStream(text="Hello", drop=True)
    async with FakeOpenAIServer([drop, drop, drop]) as srv:
        agent = Agent(name="a", model=model_for(srv), limits=Limits(max_model_calls=10))
        async with Runtime.open(":memory:") as rt:
            r = await rt.run(agent, "hi", scope=SCOPE)
    assert r.status == "failed"
    assert r.exit.kind == "model_error"  # type: ignore[union-attr]
    assert "Traceback" not in r.exit.safe_summary  # type: ignore[union-attr]
