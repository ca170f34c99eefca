"""AnthropicModel through the real ``anthropic`` SDK against FakeAnthropicServer."""

from __future__ import annotations

from typing import Any

import pytest

from reverie.core.messages import (
    Message,
    ModelEvent,
    ModelRequest,
    ModelResponse,
    ModelSettings,
    ResponseComplete,
    TextDelta,
    TokenUsage,
    ToolCall,
    ToolSpec,
)
from reverie.errors import ModelError
from reverie.models.anthropic import AnthropicModel
from reverie.models.base import complete
from reverie.testing.fake_anthropic import FakeAnthropicServer
from reverie.testing.fake_openai import (
    FakeCutStream,
    FakeError,
    FakeHang,
    FakeMalformed,
    FakeReply,
    FakeStep,
    FakeToolCall,
)

HI = ModelRequest(messages=(Message(role="user", content="hi"),))
ADD = ToolSpec(
    name="add",
    description="Add two integers.",
    parameters={"type": "object", "properties": {"a": {"type": "integer"}}},
)


async def run(
    steps: list[FakeStep], request: ModelRequest = HI, **model_kwargs: Any
) -> tuple[ModelResponse, FakeAnthropicServer]:
    """One request through a fresh server and model; the response and the server."""
    async with (
        FakeAnthropicServer(steps) as srv,
        AnthropicModel("claude-test", base_url=srv.base_url, **model_kwargs) as model,
    ):
        return await complete(model, request), srv


async def fail(
    steps: list[FakeStep], **model_kwargs: Any
) -> tuple[ModelError, FakeAnthropicServer]:
    """One request that must fail; the error and the server."""
    async with (
        FakeAnthropicServer(steps) as srv,
        AnthropicModel("claude-test", base_url=srv.base_url, **model_kwargs) as model,
    ):
        with pytest.raises(ModelError) as info:
            await complete(model, HI)
        return info.value, srv


async def test_plain_reply_is_one_text_part(anthropic_key: str) -> None:
    response, _ = await run(["Hello there!"])
    assert response.text == "Hello there!"
    assert response.tool_calls == ()
    assert response.finish_reason == "stop"
    assert response.model_name == "claude-test"


async def test_one_tool_call_is_assembled_from_input_json_deltas(anthropic_key: str) -> None:
    response, _ = await run([FakeReply(tool_calls=(FakeToolCall("add", {"a": 1, "b": 2}),))])
    assert response.tool_calls == (ToolCall(id="toolu_0", name="add", arguments={"a": 1, "b": 2}),)
    assert response.finish_reason == "tool_calls"


async def test_two_parallel_tool_calls_keep_their_order_ids_and_arguments(
    anthropic_key: str,
) -> None:
    step = FakeReply(
        text="Adding both.",
        tool_calls=(
            FakeToolCall("add", {"a": 1}, id="toolu_A"),
            FakeToolCall("add", {"a": 3}, id="toolu_B"),
        ),
    )
    response, _ = await run([step])
    assert response.text == "Adding both."
    assert [(c.id, dict(c.arguments)) for c in response.tool_calls] == [
        ("toolu_A", {"a": 1}),
        ("toolu_B", {"a": 3}),
    ]


async def test_streamed_reply_yields_several_text_deltas_then_exactly_one_complete(
    anthropic_key: str,
) -> None:
    async with (
        FakeAnthropicServer(["one two three"]) as srv,
        AnthropicModel("claude-test", base_url=srv.base_url) as model,
    ):
        events: list[ModelEvent] = [e async for e in model.stream(HI)]
    assert [e.text for e in events if isinstance(e, TextDelta)] == ["one ", "two ", "three"]
    assert sum(isinstance(e, ResponseComplete) for e in events) == 1
    assert isinstance(events[-1], ResponseComplete)


async def test_usage_is_recorded(anthropic_key: str) -> None:
    response, _ = await run([FakeReply(text="ok", input_tokens=321, output_tokens=12)])
    assert response.usage == TokenUsage(input_tokens=321, output_tokens=12)


async def test_429_is_transient_on_the_first_attempt_because_sdk_retries_are_off(
    anthropic_key: str,
) -> None:
    error, srv = await fail([FakeError(429), "never reached"])
    assert error.kind == "transient"
    assert len(srv.requests) == 1


@pytest.mark.parametrize("status", [500, 529])
async def test_server_errors_and_overload_are_transient(anthropic_key: str, status: int) -> None:
    error, srv = await fail([FakeError(status), "never reached"])
    assert error.kind == "transient"
    assert len(srv.requests) == 1


async def test_401_is_an_authentication_failure_naming_the_env_var_but_never_the_key(
    anthropic_key: str,
) -> None:
    error, srv = await fail([FakeError(401)])  # the fake echoes the key in its message
    assert error.kind == "authentication"
    assert "ANTHROPIC_API_KEY" in str(error)
    assert anthropic_key not in str(error)
    sent = srv.headers[0].get("x-api-key") or srv.headers[0]["authorization"]
    assert anthropic_key in sent


async def test_missing_key_env_var_fails_at_first_call(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("ANTHROPIC_API_KEY", raising=False)
    error, srv = await fail(["unused"])
    assert error.kind == "unavailable"
    assert "set ANTHROPIC_API_KEY" in str(error)
    assert srv.requests == []


async def test_malformed_tool_input_json_gives_arguments_error(anthropic_key: str) -> None:
    response, _ = await run([FakeReply(tool_calls=(FakeToolCall("add", '{"a": '),))])
    (call,) = response.tool_calls
    assert call.name == "add"
    assert call.arguments == {}
    assert call.arguments_error is not None and "not valid JSON" in call.arguments_error


async def test_hang_past_the_client_timeout_is_transient(anthropic_key: str) -> None:
    error, srv = await fail([FakeHang(10), "never reached"], timeout_s=0.3)
    assert error.kind == "transient"
    assert len(srv.requests) == 1


async def test_prompt_too_long_is_context_overflow(anthropic_key: str) -> None:
    error, _ = await fail([FakeError(400, "prompt is too long: 210000 tokens > 200000 maximum")])
    assert error.kind == "context_overflow"


async def test_refusal_is_content_filtered(anthropic_key: str) -> None:
    error, _ = await fail([FakeReply(text="I can't", finish_reason="refusal")])
    assert error.kind == "content_filtered"


async def test_overload_inside_the_stream_is_transient(anthropic_key: str) -> None:
    error, _ = await fail([FakeError(529, mid_stream=True, text="Partial")])
    assert error.kind == "transient"


async def test_malformed_event_data_is_internal(anthropic_key: str) -> None:
    error, _ = await fail([FakeMalformed()])
    assert error.kind == "internal"


async def test_request_splits_system_and_merges_consecutive_tool_results(
    anthropic_key: str,
) -> None:
    calls = (
        ToolCall(id="toolu_1", name="add", arguments={"a": 1}),
        ToolCall(id="toolu_2", name="add", arguments={"a": 2}),
    )
    request = ModelRequest(
        messages=(
            Message(role="system", content="Be brief."),
            Message(role="user", content="add twice"),
            Message(role="assistant", content="On it.", tool_calls=calls),
            Message(role="tool", content="1", tool_call_id="toolu_1", name="add"),
            Message(role="tool", content="2", tool_call_id="toolu_2", name="add"),
            Message(role="user", content="and then?"),
        ),
        tools=(ADD,),
        tool_choice="required",
        output_schema={"type": "object"},
        settings=ModelSettings(temperature=0.5, max_tokens=99),
    )
    _, srv = await run(["done"], request)
    body = srv.requests[0]
    assert body["system"] == "Be brief."
    assert body["messages"] == [
        {"role": "user", "content": [{"type": "text", "text": "add twice"}]},
        {
            "role": "assistant",
            "content": [
                {"type": "text", "text": "On it."},
                {"type": "tool_use", "id": "toolu_1", "name": "add", "input": {"a": 1}},
                {"type": "tool_use", "id": "toolu_2", "name": "add", "input": {"a": 2}},
            ],
        },
        {
            "role": "user",
            "content": [
                {"type": "tool_result", "tool_use_id": "toolu_1", "content": "1"},
                {"type": "tool_result", "tool_use_id": "toolu_2", "content": "2"},
                {"type": "text", "text": "and then?"},
            ],
        },
    ]
    assert body["tools"] == [
        {"name": "add", "description": "Add two integers.", "input_schema": dict(ADD.parameters)}
    ]
    assert body["tool_choice"] == {"type": "any"}
    assert "output_config" not in body  # a forced call carries the schema; see test_output.py
    assert body["temperature"] == 0.5
    assert body["max_tokens"] == 99
    assert body["stream"] is True


@pytest.mark.parametrize(
    ("choice", "wire"),
    [
        ("auto", {"type": "auto"}),
        ("none", {"type": "none"}),
        ("add", {"type": "tool", "name": "add"}),
    ],
)
async def test_tool_choice_mapping(anthropic_key: str, choice: str, wire: dict[str, str]) -> None:
    request = ModelRequest(messages=HI.messages, tools=(ADD,), tool_choice=choice)
    _, srv = await run(["ok"], request)
    assert srv.requests[0]["tool_choice"] == wire


async def test_tools_none_omits_tools(anthropic_key: str) -> None:
    _, srv = await run(["ok"], ModelRequest(messages=HI.messages, tools=None))
    assert "tools" not in srv.requests[0]
    assert "tool_choice" not in srv.requests[0]
    assert srv.requests[0]["max_tokens"] == 4096


# -------------------------------------------------------------- streams that never end (§20)
async def test_a_connection_dropped_mid_stream_is_transient_and_keeps_the_usage_so_far(
    anthropic_key: str,
) -> None:
    error, _ = await fail([FakeCutStream(text="Hello there", drop=True)])
    assert error.kind == "transient"
    assert "dropped mid-stream" in str(error)
    assert error.usage is not None and error.usage.input_tokens > 0  # message_start's count


async def test_a_stream_cut_before_its_stop_reason_is_a_transient_error_not_a_reply(
    anthropic_key: str,
) -> None:
    error, _ = await fail([FakeCutStream(text="Hello there")])
    assert error.kind == "transient"
    assert "no stop_reason" in str(error)


async def test_a_base_url_ending_in_v1_reaches_the_messages_route_once(
    anthropic_key: str,
) -> None:
    async with (
        FakeAnthropicServer(["Hello!"]) as srv,
        AnthropicModel("claude-test", base_url=f"{srv.base_url}/v1/") as model,
    ):
        response = await complete(model, HI)
    assert response.text == "Hello!"
    assert len(srv.requests) == 1
