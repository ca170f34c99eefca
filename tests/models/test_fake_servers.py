"""The fake provider servers as users see them: SDK calls, script forms, lifecycle."""

from __future__ import annotations

import asyncio
import time
from typing import Any

import anthropic
import httpx
import openai
import pytest

from reverie.core.messages import Message, ModelRequest
from reverie.errors import ModelError
from reverie.models.base import complete
from reverie.models.openai import OpenAIChatModel
from reverie.testing.fake_anthropic import FakeAnthropicServer
from reverie.testing.fake_openai import (
    FakeError,
    FakeHang,
    FakeOpenAIServer,
    FakeReply,
    FakeStep,
    FakeToolCall,
)
from reverie.testing.scripted import call, error, raw_call

HI = ModelRequest(messages=(Message(role="user", content="hi"),))


async def test_openai_non_streaming_completion_and_model_list() -> None:
    reply = FakeReply(text="sure", tool_calls=(FakeToolCall("add", {"a": 1}),))
    async with (
        FakeOpenAIServer([reply], models=("m1", "m2")) as srv,
        openai.AsyncOpenAI(base_url=srv.base_url, api_key="k", max_retries=0) as client,
    ):
        completion = await client.chat.completions.create(
            model="m1", messages=[{"role": "user", "content": "hi"}]
        )
        models = [m.id async for m in client.models.list()]
    message = completion.choices[0].message
    assert message.content == "sure"
    assert message.tool_calls is not None
    assert message.tool_calls[0].type == "function"
    assert message.tool_calls[0].function.arguments == '{"a": 1}'
    assert completion.usage is not None
    assert models == ["m1", "m2"]


async def test_anthropic_non_streaming_message() -> None:
    async with (
        FakeAnthropicServer(["hello"]) as srv,
        anthropic.AsyncAnthropic(base_url=srv.base_url, api_key="k", max_retries=0) as client,
    ):
        message = await client.messages.create(
            model="claude-test", max_tokens=10, messages=[{"role": "user", "content": "hi"}]
        )
    assert message.content[0].type == "text"
    assert message.stop_reason == "end_turn"


async def test_script_may_be_a_function_of_the_request_body(openai_key: str) -> None:
    def answer(body: dict[str, Any]) -> str:
        return f"you said {body['messages'][-1]['content']}"

    async with (
        FakeOpenAIServer(answer) as srv,
        OpenAIChatModel("m", base_url=srv.base_url) as model,
    ):
        response = await complete(model, HI)
    assert response.text == "you said hi"
    assert srv.remaining is None


async def test_scripted_model_helpers_are_valid_steps(openai_key: str) -> None:
    steps: list[FakeStep] = [
        call("add", a=1, b=2),
        raw_call("add", arguments_error="bad"),
        error("transient"),
    ]
    async with (
        FakeOpenAIServer(steps) as srv,
        OpenAIChatModel("m", base_url=srv.base_url) as model,
    ):
        first = await complete(model, HI)
        second = await complete(model, HI)
        with pytest.raises(ModelError) as info:
            await complete(model, HI)
    assert dict(first.tool_calls[0].arguments) == {"a": 1, "b": 2}
    assert second.tool_calls[0].arguments_error is not None
    assert info.value.kind == "transient"


@pytest.mark.parametrize(
    "kind", ["unavailable", "context_overflow", "content_filtered", "internal"]
)
async def test_model_error_steps_come_back_as_the_same_kind(openai_key: str, kind: Any) -> None:
    async with (
        FakeOpenAIServer([error(kind)]) as srv,
        OpenAIChatModel("m", base_url=srv.base_url) as model,
    ):
        with pytest.raises(ModelError) as info:
            await complete(model, HI)
    assert info.value.kind == kind


async def test_a_short_hang_is_latency_then_the_answer(openai_key: str) -> None:
    async with (
        FakeOpenAIServer([FakeHang(0.05, then="late")]) as srv,
        OpenAIChatModel("m", base_url=srv.base_url) as model,
    ):
        assert (await complete(model, HI)).text == "late"


async def test_stopping_the_server_ends_a_hang_in_flight(openai_key: str) -> None:
    loop = asyncio.get_running_loop()
    arrived = asyncio.Event()

    def hang(body: dict[str, Any]) -> FakeStep:
        loop.call_soon_threadsafe(arrived.set)  # the script runs on the server's thread
        return FakeHang(60)

    srv = FakeOpenAIServer(hang)
    await srv.__aenter__()
    model = OpenAIChatModel("m", base_url=srv.base_url, timeout_s=30)
    task = asyncio.create_task(complete(model, HI))
    await arrived.wait()
    started = time.monotonic()
    await srv.__aexit__(None, None, None)
    assert time.monotonic() - started < 5
    await task  # the hang ended with an (empty) answer


def test_sync_context_manager_and_one_model_across_two_event_loops(openai_key: str) -> None:
    with FakeOpenAIServer(["first", "second"]) as srv:
        model = OpenAIChatModel("m", base_url=srv.base_url)

        async def ask() -> str:
            return (await complete(model, HI)).text

        # Unentered, each request has its own client: nothing is left bound to a dead loop.
        assert asyncio.run(ask()) == "first"
        assert asyncio.run(ask()) == "second"
        response = httpx.get(f"{srv.base_url}/models")
    assert response.json()["data"][0]["id"] == "fake-model"


def test_base_url_before_start_is_an_error() -> None:
    with pytest.raises(RuntimeError, match="not running"):
        _ = FakeOpenAIServer([]).base_url


async def test_error_step_headers_and_non_json_request_body() -> None:
    async with (
        FakeOpenAIServer([FakeError(429, headers={"retry-after": "7"})]) as srv,
        httpx.AsyncClient() as client,
    ):
        bad = await client.post(f"{srv.base_url}/chat/completions", content=b"not json")
        limited = await client.post(f"{srv.base_url}/chat/completions", json={"model": "m"})
    assert bad.status_code == 400
    assert limited.status_code == 429
    assert limited.headers["retry-after"] == "7"
    assert limited.json()["error"]["type"] == "rate_limit_exceeded"
    assert srv.requests == [{"model": "m"}]


# -- conversation rules on the wire ----------------------------------------------------------

ASSISTANT_CALL: dict[str, Any] = {
    "role": "assistant",
    "content": None,
    "tool_calls": [
        {"id": "call_a", "type": "function", "function": {"name": "add", "arguments": "{}"}}
    ],
}


async def test_openai_fake_answers_a_broken_rule_as_the_api_does() -> None:
    messages: list[Any] = [{"role": "user", "content": "hi"}, ASSISTANT_CALL]
    messages.append({"role": "user", "content": "and?"})
    async with (
        FakeOpenAIServer(["never sent"]) as srv,
        openai.AsyncOpenAI(base_url=srv.base_url, api_key="k", max_retries=0) as client,
    ):
        with pytest.raises(openai.BadRequestError) as info:
            await client.chat.completions.create(model="m", messages=messages)
    assert info.value.status_code == 400
    body = info.value.body
    assert isinstance(body, dict)
    assert body["type"] == "invalid_request_error"
    assert body["param"] == "messages.[1].role"
    assert "tool_calls_answered" in body["message"]
    assert "call_a" in body["message"]
    assert srv.requests[0]["messages"] == messages  # recorded, and no script step used
    assert srv.remaining == 1


async def test_openai_tool_messages_must_answer_the_preceding_tool_calls() -> None:
    orphan: list[Any] = [
        {"role": "user", "content": "hi"},
        {"role": "tool", "tool_call_id": "call_z", "content": "2"},
    ]
    async with (
        FakeOpenAIServer(["never sent"]) as srv,
        openai.AsyncOpenAI(base_url=srv.base_url, api_key="k", max_retries=0) as client,
    ):
        with pytest.raises(openai.BadRequestError) as info:
            await client.chat.completions.create(model="m", messages=orphan)
    assert isinstance(info.value.body, dict)
    assert info.value.body["param"] == "messages.[1].role"
    assert [v.rule for v in srv.violations] == ["tool_result_answers_a_call"]
    assert srv.violations[0].call_ids == ("call_z",)


async def test_openai_fake_with_strict_false_answers_a_malformed_conversation() -> None:
    messages: list[Any] = [{"role": "user", "content": "hi"}, ASSISTANT_CALL]
    async with (
        FakeOpenAIServer(["anyway"], strict=False) as srv,
        openai.AsyncOpenAI(base_url=srv.base_url, api_key="k", max_retries=0) as client,
    ):
        completion = await client.chat.completions.create(model="m", messages=messages)
    assert completion.choices[0].message.content == "anyway"
    assert srv.violations == []


async def _anthropic_refusal(messages: list[Any]) -> tuple[str, FakeAnthropicServer]:
    async with (
        FakeAnthropicServer(["never sent"]) as srv,
        anthropic.AsyncAnthropic(base_url=srv.base_url, api_key="k", max_retries=0) as client,
    ):
        with pytest.raises(anthropic.BadRequestError) as info:
            await client.messages.create(model="claude-test", max_tokens=10, messages=messages)
    assert info.value.status_code == 400
    body = info.value.body
    assert isinstance(body, dict)
    assert body["type"] == "error"
    assert body["error"]["type"] == "invalid_request_error"
    assert srv.remaining == 1
    return str(body["error"]["message"]), srv


TOOL_USE: dict[str, Any] = {"type": "tool_use", "id": "toolu_a", "name": "add", "input": {}}
TOOL_RESULT: dict[str, Any] = {"type": "tool_result", "tool_use_id": "toolu_a", "content": "2"}


async def test_anthropic_tool_use_is_answered_by_tool_result_in_the_next_message() -> None:
    message, srv = await _anthropic_refusal(
        [
            {"role": "user", "content": "hi"},
            {"role": "assistant", "content": [TOOL_USE]},
            {"role": "user", "content": "and?"},
        ]
    )
    assert "tool_calls_answered" in message
    assert srv.violations[0].call_ids == ("toolu_a",)
    assert srv.violations[0].index == 1


async def test_anthropic_tool_result_must_match_a_tool_use_of_the_previous_message() -> None:
    message, srv = await _anthropic_refusal(
        [
            {"role": "user", "content": "hi"},
            {"role": "assistant", "content": "sure"},
            {"role": "user", "content": [TOOL_RESULT]},
        ]
    )
    assert "tool_result_answers_a_call" in message
    assert srv.violations[0].index == 2


async def test_anthropic_first_message_is_a_user_message() -> None:
    message, _ = await _anthropic_refusal(
        [{"role": "assistant", "content": "hello"}, {"role": "user", "content": "hi"}]
    )
    assert "first_message_is_user" in message


async def test_anthropic_roles_alternate() -> None:
    message, srv = await _anthropic_refusal(
        [{"role": "user", "content": "hi"}, {"role": "user", "content": "again"}]
    )
    assert "roles_alternate" in message
    assert srv.violations[0].index == 1


async def test_anthropic_messages_have_content() -> None:
    message, _ = await _anthropic_refusal(
        [
            {"role": "user", "content": "hi"},
            {"role": "assistant", "content": []},
            {"role": "user", "content": "so?"},
        ]
    )
    assert "no_empty_content" in message
    assert "no_empty_assistant_turn" in message


async def test_anthropic_text_blocks_are_non_empty() -> None:
    message, _ = await _anthropic_refusal(
        [{"role": "user", "content": [{"type": "text", "text": ""}]}]
    )
    assert "no_empty_content" in message


async def test_anthropic_tool_results_come_first_in_their_message() -> None:
    message, _ = await _anthropic_refusal(
        [
            {"role": "user", "content": "hi"},
            {"role": "assistant", "content": [TOOL_USE]},
            {"role": "user", "content": [{"type": "text", "text": "here"}, TOOL_RESULT]},
        ]
    )
    assert "tool_results_first" in message


async def test_anthropic_tool_use_ids_are_unique_in_the_conversation() -> None:
    message, srv = await _anthropic_refusal(
        [
            {"role": "user", "content": "hi"},
            {"role": "assistant", "content": [TOOL_USE]},
            {"role": "user", "content": [TOOL_RESULT]},
            {"role": "assistant", "content": [TOOL_USE]},
            {"role": "user", "content": [TOOL_RESULT]},
        ]
    )
    assert "unique_tool_call_ids" in message
    assert srv.violations[0].index == 3


async def test_anthropic_fake_accepts_a_valid_conversation_with_parallel_tool_use() -> None:
    second = {**TOOL_USE, "id": "toolu_b"}
    messages: list[Any] = [
        {"role": "user", "content": "add twice"},
        {"role": "assistant", "content": [{"type": "text", "text": "adding"}, TOOL_USE, second]},
        {
            "role": "user",
            "content": [
                TOOL_RESULT,
                {"type": "tool_result", "tool_use_id": "toolu_b", "content": "3"},
                {"type": "text", "text": "and explain"},
            ],
        },
    ]
    async with (
        FakeAnthropicServer(["5"]) as srv,
        anthropic.AsyncAnthropic(base_url=srv.base_url, api_key="k", max_retries=0) as client,
    ):
        answer = await client.messages.create(model="claude-test", max_tokens=10, messages=messages)
    assert answer.content[0].type == "text"
    assert srv.violations == []


async def test_anthropic_fake_with_strict_false_answers_a_malformed_conversation() -> None:
    malformed: list[Any] = [{"role": "assistant", "content": [TOOL_USE]}]
    async with (
        FakeAnthropicServer(["anyway"], strict=False) as srv,
        anthropic.AsyncAnthropic(base_url=srv.base_url, api_key="k", max_retries=0) as client,
    ):
        answer = await client.messages.create(
            model="claude-test",
            max_tokens=10,
            messages=malformed,
        )
    assert answer.content[0].type == "text"
    assert len(srv.requests) == 1
    assert srv.violations == []


async def test_anthropic_default_tool_use_ids_never_repeat_across_answers() -> None:
    step = FakeReply(tool_calls=(FakeToolCall("add"), FakeToolCall("add")))
    async with (
        FakeAnthropicServer([step, step]) as srv,
        anthropic.AsyncAnthropic(base_url=srv.base_url, api_key="k", max_retries=0) as client,
    ):
        first = await client.messages.create(
            model="claude-test", max_tokens=10, messages=[{"role": "user", "content": "hi"}]
        )
        async with client.messages.stream(
            model="claude-test", max_tokens=10, messages=[{"role": "user", "content": "hi"}]
        ) as stream:
            second = await stream.get_final_message()
    ids = [b.id for m in (first, second) for b in m.content if b.type == "tool_use"]
    assert ids == ["toolu_0", "toolu_1", "toolu_2", "toolu_3"]
