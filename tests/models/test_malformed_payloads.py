"""Malformed provider payloads are typed model errors, through the official SDKs, never a crash."""

from __future__ import annotations

from typing import Any

import pytest

from reverie import Agent, Runtime, Scope
from reverie.core.messages import Message, ModelEvent, ModelRequest, ResponseComplete
from reverie.errors import ModelError
from reverie.models.anthropic import AnthropicModel
from reverie.models.openai import OpenAIChatModel
from reverie.testing import FakeAnthropicServer, FakeOpenAIServer
from reverie.testing.fake_openai import FakeRawStream

SCOPE = Scope(tenant="acme", user="ana")
REQUEST = ModelRequest(messages=(Message(role="user", content="hi"),))
SECRET = "ana-private-text"
"""Content placed in malformed payloads: it must never appear in an error."""

_CHUNK: dict[str, Any] = {"id": "c1", "object": "chat.completion.chunk", "created": 0, "model": "m"}


def chunk(**fields: Any) -> dict[str, Any]:
    return {**_CHUNK, **fields}


def choice(delta: Any, **fields: Any) -> dict[str, Any]:
    return {"index": 0, "delta": delta, **fields}


OPENAI_MALFORMED: dict[str, list[Any]] = {
    "choices-string": [chunk(choices=SECRET)],
    "choice-number": [chunk(choices=[5])],
    "content-number": [chunk(choices=[choice({"content": 5})])],
    "index-string": [chunk(choices=[{"index": "0", "delta": {"content": SECRET}}])],
    "tool-calls-string": [chunk(choices=[choice({"tool_calls": SECRET})])],
    "arguments-object": [
        chunk(
            choices=[
                choice(
                    {"tool_calls": [{"index": 0, "id": "a", "function": {"arguments": {"x": 1}}}]}
                )
            ]
        )
    ],
    "tool-name-number": [
        chunk(choices=[choice({"tool_calls": [{"index": 0, "function": {"name": 3}}]})])
    ],
    "usage-string": [chunk(choices=[], usage=SECRET)],
    "tokens-string": [chunk(choices=[], usage={"prompt_tokens": "many"})],
    "tokens-negative": [chunk(choices=[], usage={"prompt_tokens": -1, "completion_tokens": 1})],
    "finish-number": [chunk(choices=[choice({}, finish_reason=5)])],
    "model-number": [chunk(model=5, choices=[])],
    "chunk-array": [[SECRET]],
    "chunk-null": [None],
    "chunk-number": [7],
}


async def collect(model: OpenAIChatModel | AnthropicModel) -> list[ModelEvent]:
    return [event async for event in model.stream(REQUEST)]


@pytest.mark.parametrize("name", sorted(OPENAI_MALFORMED))
async def test_a_malformed_openai_chunk_is_an_internal_model_error_naming_no_content(
    name: str,
) -> None:
    async with FakeOpenAIServer([FakeRawStream(OPENAI_MALFORMED[name])]) as srv:
        model = OpenAIChatModel("m", base_url=srv.base_url, api_key="sk-test")
        with pytest.raises(ModelError) as info:
            await collect(model)

    assert info.value.kind == "internal"
    assert "malformed response" in str(info.value)
    assert SECRET not in str(info.value)


async def test_an_openai_error_event_with_fields_of_the_wrong_type_is_an_internal_error() -> None:
    error = {"error": {"message": [SECRET], "type": {"x": 1}, "code": [1, 2]}}
    async with FakeOpenAIServer([FakeRawStream([chunk(choices=[]), error])]) as srv:
        model = OpenAIChatModel("m", base_url=srv.base_url, api_key="sk-test")
        with pytest.raises(ModelError) as info:
            await collect(model)

    assert info.value.kind == "internal"
    assert SECRET not in str(info.value)


async def test_choices_null_in_a_usage_chunk_reads_as_no_choices() -> None:
    events = [
        chunk(choices=[choice({"content": "Hello"})]),
        chunk(choices=[choice({}, finish_reason="stop")]),
        chunk(choices=None, usage={"prompt_tokens": 3, "completion_tokens": 1}),
    ]
    async with FakeOpenAIServer([FakeRawStream(events)]) as srv:
        model = OpenAIChatModel("m", base_url=srv.base_url, api_key="sk-test")
        out = await collect(model)

    done = out[-1]
    assert isinstance(done, ResponseComplete)
    assert done.response.text == "Hello"
    assert (done.response.usage.input_tokens, done.response.usage.output_tokens) == (3, 1)


async def test_a_run_whose_stream_has_choices_null_and_no_finish_reason_is_a_model_error() -> None:
    # Not an empty reply (DESIGN §20): a stream without a finish_reason did not end properly.
    cut = FakeRawStream([chunk(choices=None)])
    async with FakeOpenAIServer([cut, cut, cut]) as srv:
        agent = Agent(name="a", model=OpenAIChatModel("m", base_url=srv.base_url, api_key="k"))
        async with Runtime.open(":memory:") as rt:
            result = await rt.run(agent, "hi", scope=SCOPE)

    assert result.status == "failed"
    assert result.exit.kind == "model_error"  # type: ignore[union-attr]
    assert "no finish_reason" in result.exit.safe_summary  # type: ignore[union-attr]


async def test_a_run_whose_stream_is_malformed_fails_as_model_error_not_driver_bug() -> None:
    async with FakeOpenAIServer([FakeRawStream([chunk(choices=SECRET)])]) as srv:
        agent = Agent(name="a", model=OpenAIChatModel("m", base_url=srv.base_url, api_key="k"))
        async with Runtime.open(":memory:") as rt:
            result = await rt.run(agent, "hi", scope=SCOPE)

    assert result.status == "failed"
    assert result.exit.kind == "model_error"  # type: ignore[union-attr]
    assert SECRET not in result.exit.safe_summary  # type: ignore[union-attr]


# ---------------------------------------------------------------------------------- Anthropic
_START = (
    "message_start",
    {
        "type": "message_start",
        "message": {
            "id": "msg_1",
            "type": "message",
            "role": "assistant",
            "model": "claude-test",
            "content": [],
            "stop_reason": None,
            "usage": {"input_tokens": 3, "output_tokens": 1},
        },
    },
)
_STOP = ("message_stop", {"type": "message_stop"})


def text_block(index: int = 0) -> tuple[str, dict[str, Any]]:
    return (
        "content_block_start",
        {
            "type": "content_block_start",
            "index": index,
            "content_block": {"type": "text", "text": ""},
        },
    )


ANTHROPIC_MALFORMED: dict[str, list[Any]] = {
    "message-null": [("message_start", {"type": "message_start", "message": None})],
    "block-null": [
        _START,
        ("content_block_start", {"type": "content_block_start", "index": 0, "content_block": 1}),
    ],
    "text-number": [
        _START,
        text_block(),
        (
            "content_block_delta",
            {"type": "content_block_delta", "index": 0, "delta": {"type": "text_delta", "text": 5}},
        ),
    ],
    "partial-json-object": [
        _START,
        (
            "content_block_start",
            {
                "type": "content_block_start",
                "index": 0,
                "content_block": {"type": "tool_use", "id": "t", "name": "f", "input": {}},
            },
        ),
        (
            "content_block_delta",
            {
                "type": "content_block_delta",
                "index": 0,
                "delta": {"type": "input_json_delta", "partial_json": {"x": SECRET}},
            },
        ),
    ],
    "event-array": [_START, ("content_block_delta", [SECRET])],
    "event-null": [_START, ("message_delta", None)],
    "stop-reason-number": [
        _START,
        ("message_delta", {"type": "message_delta", "delta": {"stop_reason": 5}}),
    ],
    "tokens-negative": [
        _START,
        ("message_delta", {"type": "message_delta", "delta": {}, "usage": {"output_tokens": -2}}),
    ],
    "usage-string": [
        ("message_start", {"type": "message_start", "message": {"model": "c", "usage": SECRET}})
    ],
    "not-json": [_START, ("content_block_delta", "{" + SECRET)],
    "error-event-without-error": [_START, ("error", {"type": "error", "error": None})],
    "error-event-typed-wrong": [
        _START,
        ("error", {"type": "error", "error": {"type": [SECRET], "message": {"x": SECRET}}}),
    ],
}


@pytest.mark.parametrize("name", sorted(ANTHROPIC_MALFORMED))
async def test_a_malformed_anthropic_event_is_an_internal_model_error_naming_no_content(
    name: str,
) -> None:
    stream = FakeRawStream([*ANTHROPIC_MALFORMED[name], _STOP], done=False)
    async with FakeAnthropicServer([stream]) as srv:
        model = AnthropicModel("claude-test", base_url=srv.base_url, api_key="sk-ant-test")
        with pytest.raises(ModelError) as info:
            await collect(model)

    assert info.value.kind == "internal"
    assert SECRET not in str(info.value)


async def test_unknown_anthropic_events_and_block_types_are_skipped() -> None:
    events = [
        _START,
        ("ping", {"type": "ping"}),
        ("mystery", {"type": "mystery", "index": 0}),
        (
            "content_block_start",
            {"type": "content_block_start", "index": 0, "content_block": {"type": "thinking"}},
        ),
        ("content_block_delta", {"type": "content_block_delta", "index": 0, "delta": {}}),
        text_block(1),
        (
            "content_block_delta",
            {
                "type": "content_block_delta",
                "index": 1,
                "delta": {"type": "text_delta", "text": "Hi"},
            },
        ),
        (
            "content_block_delta",
            {"type": "content_block_delta", "index": 1, "delta": {"type": "?"}},
        ),
        ("message_delta", {"type": "message_delta", "delta": {"stop_reason": "end_turn"}}),
        _STOP,
    ]
    async with FakeAnthropicServer([FakeRawStream(events, done=False)]) as srv:
        model = AnthropicModel("claude-test", base_url=srv.base_url, api_key="sk-ant-test")
        out = await collect(model)

    done = out[-1]
    assert isinstance(done, ResponseComplete)
    assert done.response.text == "Hi"
    assert done.response.finish_reason == "stop"
