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
