"""OpenAIChatModel through the real ``openai`` SDK against FakeOpenAIServer."""

from __future__ import annotations

import socket
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
from reverie.models.base import complete
from reverie.models.openai import OpenAIChatModel, parse_tool_arguments
from reverie.testing.fake_openai import (
    FakeError,
    FakeHang,
    FakeMalformed,
    FakeOpenAIServer,
    FakeReply,
    FakeStep,
    FakeToolCall,
)

HI = ModelRequest(messages=(Message(role="user", content="hi"),))
ADD = ToolSpec(
    name="add",
    description="Add two integers.",
    parameters={
        "type": "object",
        "properties": {"a": {"type": "integer"}, "b": {"type": "integer"}},
        "required": ["a", "b"],
    },
)


async def run(
    steps: list[FakeStep], request: ModelRequest = HI, **model_kwargs: Any
) -> tuple[ModelResponse, FakeOpenAIServer]:
    """One request through a fresh server and model; the response and the server."""
    async with (
        FakeOpenAIServer(steps) as srv,
        OpenAIChatModel("gpt-test", base_url=srv.base_url, **model_kwargs) as model,
    ):
        return await complete(model, request), srv


async def fail(steps: list[FakeStep], **model_kwargs: Any) -> tuple[ModelError, FakeOpenAIServer]:
    """One request that must fail; the error and the server."""
    async with (
        FakeOpenAIServer(steps) as srv,
        OpenAIChatModel("gpt-test", base_url=srv.base_url, **model_kwargs) as model,
    ):
        with pytest.raises(ModelError) as info:
            await complete(model, HI)
        return info.value, srv


async def test_plain_reply_is_one_text_part(openai_key: str) -> None:
    response, _ = await run(["Hello there!"])
    assert response.text == "Hello there!"
    assert response.tool_calls == ()
    assert response.finish_reason == "stop"
    assert response.model_name == "gpt-test"


async def test_one_tool_call_is_assembled_from_deltas(openai_key: str) -> None:
    response, _ = await run([FakeReply(tool_calls=(FakeToolCall("add", {"a": 1, "b": 2}),))])
    assert response.tool_calls == (ToolCall(id="call_0", name="add", arguments={"a": 1, "b": 2}),)
    assert response.finish_reason == "tool_calls"


async def test_two_parallel_tool_calls_keep_their_order_ids_and_arguments(openai_key: str) -> None:
    step = FakeReply(
        text="Adding both.",
        tool_calls=(
            FakeToolCall("add", {"a": 1, "b": 2}, id="call_A"),
            FakeToolCall("add", {"a": 3, "b": 4}, id="call_B"),
        ),
    )
    response, _ = await run([step])
    assert response.text == "Adding both."
    assert [(c.id, c.name, dict(c.arguments)) for c in response.tool_calls] == [
        ("call_A", "add", {"a": 1, "b": 2}),
        ("call_B", "add", {"a": 3, "b": 4}),
    ]


async def test_streamed_reply_yields_several_text_deltas_then_exactly_one_complete(
    openai_key: str,
) -> None:
    async with (
        FakeOpenAIServer(["one two three four"]) as srv,
        OpenAIChatModel("gpt-test", base_url=srv.base_url) as model,
    ):
        events: list[ModelEvent] = [e async for e in model.stream(HI)]
    deltas = [e.text for e in events if isinstance(e, TextDelta)]
    assert deltas == ["one ", "two ", "three ", "four"]
    assert [type(e) for e in events[-1:]] == [ResponseComplete]
    assert sum(isinstance(e, ResponseComplete) for e in events) == 1
    complete_event = events[-1]
    assert isinstance(complete_event, ResponseComplete)
    assert complete_event.response.text == "".join(deltas)


async def test_usage_is_recorded_from_the_final_chunk(openai_key: str) -> None:
    response, srv = await run([FakeReply(text="ok", input_tokens=123, output_tokens=45)])
    assert response.usage == TokenUsage(input_tokens=123, output_tokens=45)
    assert srv.requests[0]["stream"] is True
    assert srv.requests[0]["stream_options"] == {"include_usage": True}


async def test_429_is_transient_on_the_first_attempt_because_sdk_retries_are_off(
    openai_key: str,
) -> None:
    error, srv = await fail([FakeError(429), "never reached"])
    assert error.kind == "transient"
    assert "429" in str(error)
    assert len(srv.requests) == 1


async def test_500_is_transient_without_a_retry(openai_key: str) -> None:
    error, srv = await fail([FakeError(500), "never reached"])
    assert error.kind == "transient"
    assert len(srv.requests) == 1


async def test_401_is_an_authentication_failure_naming_the_env_var_but_never_the_key(
    openai_key: str,
) -> None:
    # The fake server echoes the key it received in its 401 message, as real servers partly do.
    error, srv = await fail([FakeError(401)])
    assert error.kind == "authentication"
    assert "OPENAI_API_KEY" in str(error)
    assert openai_key not in str(error)
    assert openai_key not in repr(error)
    assert srv.headers[0]["authorization"] == f"Bearer {openai_key}"


async def test_401_names_a_custom_key_env_var(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("MY_LLM_KEY", "custom-secret-value-42")
    error, _ = await fail([FakeError(401)], api_key_env="MY_LLM_KEY")
    assert error.kind == "authentication"
    assert "MY_LLM_KEY" in str(error)
    assert "custom-secret-value-42" not in str(error)


async def test_missing_key_env_var_fails_at_first_call_not_at_construction(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    async with FakeOpenAIServer(["unused"]) as srv:
        model = OpenAIChatModel("gpt-test", base_url=srv.base_url)  # no error here
        with pytest.raises(ModelError) as info:
            await complete(model, HI)
        await model.aclose()
    assert info.value.kind == "unavailable"
    assert "set OPENAI_API_KEY" in str(info.value)
    assert srv.requests == []


async def test_malformed_tool_call_json_gives_arguments_error_not_an_exception(
    openai_key: str,
) -> None:
    step = FakeReply(
        tool_calls=(
            FakeToolCall("add", '{"a": 1, "b": '),
            FakeToolCall("add", "[1, 2]"),
            FakeToolCall("add", {"a": 1, "b": 2}),
        )
    )
    response, _ = await run([step])
    broken, not_object, fine = response.tool_calls
    assert broken.arguments == {}
    assert broken.arguments_error is not None and "not valid JSON" in broken.arguments_error
    assert not_object.arguments == {}
    assert not_object.arguments_error == "tool arguments must be a JSON object, got an array"
    assert fine.arguments_error is None


async def test_hang_past_the_client_timeout_is_transient(openai_key: str) -> None:
    error, srv = await fail([FakeHang(10), "never reached"], timeout_s=0.3)
    assert error.kind == "transient"
    assert "timed out" in str(error)
    assert len(srv.requests) == 1


async def test_context_length_error_is_context_overflow(openai_key: str) -> None:
    error, _ = await fail(
        [
            FakeError(
                400,
                "This model's maximum context length is 8192 tokens.",
                code="context_length_exceeded",
            )
        ]
    )
    assert error.kind == "context_overflow"


async def test_context_length_message_without_code_is_context_overflow(openai_key: str) -> None:
    error, _ = await fail([FakeError(400, "Please reduce the length of the messages.")])
    assert error.kind == "context_overflow"


async def test_content_filter_finish_reason_is_content_filtered(openai_key: str) -> None:
    error, _ = await fail([FakeReply(text="partial", finish_reason="content_filter")])
    assert error.kind == "content_filtered"


async def test_content_filter_error_code_is_content_filtered(openai_key: str) -> None:
    error, _ = await fail([FakeError(400, "Filtered.", code="content_filter")])
    assert error.kind == "content_filtered"


async def test_other_4xx_is_internal(openai_key: str) -> None:
    error, _ = await fail([FakeError(422, "Unprocessable.")])
    assert error.kind == "internal"


async def test_error_inside_the_stream_is_classified_by_its_type(openai_key: str) -> None:
    error, _ = await fail([FakeError(500, "boom", type="server_error", mid_stream=True, text="Hi")])
    assert error.kind == "transient"
    assert "error in stream" in str(error)


async def test_malformed_sse_data_is_internal(openai_key: str) -> None:
    error, _ = await fail([FakeMalformed()])
    assert error.kind == "internal"


async def test_exhausted_script_is_internal_and_names_the_script(openai_key: str) -> None:
    error, _ = await fail([])
    assert error.kind == "internal"
    assert "script exhausted" in str(error)


async def test_refused_connection_is_unavailable(openai_key: str) -> None:
    with socket.socket() as sock:  # a port nobody listens on
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    async with OpenAIChatModel("gpt-test", base_url=f"http://127.0.0.1:{port}/v1") as model:
        with pytest.raises(ModelError) as info:
            await complete(model, HI)
    assert info.value.kind == "unavailable"


async def test_request_maps_messages_tools_choice_schema_and_settings(openai_key: str) -> None:
    call = ToolCall(id="call_1", name="add", arguments={"a": 1, "b": 2})
    request = ModelRequest(
        messages=(
            Message(role="system", content="Be brief."),
            Message(role="user", content="add 1 and 2"),
            Message(role="assistant", content="", tool_calls=(call,)),
            Message(role="tool", content="3", tool_call_id="call_1", name="add"),
        ),
        tools=(ADD,),
        tool_choice="add",
        output_schema={"title": "Sum result", "type": "object", "properties": {"sum": {}}},
        settings=ModelSettings(temperature=0.2, max_tokens=50, extra={"seed": 7}),
    )
    _, srv = await run(["3"], request)
    body = srv.requests[0]
    assert body["messages"] == [
        {"role": "system", "content": "Be brief."},
        {"role": "user", "content": "add 1 and 2"},
        {
            "role": "assistant",
            "content": "",  # a compatible endpoint: never null (declared null_content)
            "tool_calls": [
                {
                    "id": "call_1",
                    "type": "function",
                    "function": {"name": "add", "arguments": '{"a": 1, "b": 2}'},
                }
            ],
        },
        {"role": "tool", "tool_call_id": "call_1", "content": "3"},
    ]
    assert body["tools"] == [
        {
            "type": "function",
            "function": {
                "name": "add",
                "description": "Add two integers.",
                "parameters": dict(ADD.parameters),
            },
        }
    ]
    assert body["tool_choice"] == {"type": "function", "function": {"name": "add"}}
    assert body["response_format"] == {
        "type": "json_schema",
        "json_schema": {
            "name": "Sum_result",
            "schema": {"title": "Sum result", "type": "object", "properties": {"sum": {}}},
        },
    }
    assert body["temperature"] == 0.2
    assert body["max_tokens"] == 50  # a compatible server: max_tokens, not max_completion_tokens
    assert body["seed"] == 7


@pytest.mark.parametrize("choice", ["auto", "none", "required"])
async def test_tool_choice_keywords_pass_through(openai_key: str, choice: str) -> None:
    request = ModelRequest(messages=HI.messages, tools=(ADD,), tool_choice=choice)
    _, srv = await run(["ok"], request)
    assert srv.requests[0]["tool_choice"] == choice


async def test_tools_none_omits_tools_and_tool_choice(openai_key: str) -> None:
    request = ModelRequest(messages=HI.messages, tools=None, tool_choice="required")
    _, srv = await run(["ok"], request)
    assert "tools" not in srv.requests[0]
    assert "tool_choice" not in srv.requests[0]


async def test_model_name_and_explicit_key(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    response, srv = await run(["ok"], api_key="sk-explicit", name="my:label")
    assert response.text == "ok"
    assert srv.headers[0]["authorization"] == "Bearer sk-explicit"
    assert OpenAIChatModel("gpt-x", name="my:label").name == "my:label"
    assert OpenAIChatModel("gpt-x").name == "openai:gpt-x"


async def test_no_key_endpoint_sends_a_placeholder(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    response, _ = await run(["ok"], api_key_env=None)
    assert response.text == "ok"


@pytest.mark.parametrize(
    ("raw", "expected", "error"),
    [
        ("", {}, None),
        ('{"x": 1}', {"x": 1}, None),
        ("{", {}, "not valid JSON"),
        ('"text"', {}, "got a string"),
        ("NaN", {}, "not valid JSON"),
        ('{"x": NaN}', {}, "not valid JSON"),
        ("[" * 100_000, {}, "nested too deeply"),
    ],
)
def test_parse_tool_arguments_never_raises(
    raw: str, expected: dict[str, Any], error: str | None
) -> None:
    arguments, reason = parse_tool_arguments(raw)
    assert arguments == expected
    if error is None:
        assert reason is None
    else:
        assert reason is not None and error in reason
