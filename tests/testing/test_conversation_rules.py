"""The test doubles refuse the conversations OpenAI and Anthropic reject with HTTP 400.

Each shared rule is checked through the three doubles as reverie uses them: ``ScriptedModel`` in
process, and the fake servers behind the real provider adapters and official SDKs (so a broken
rule arrives as the ``ModelError`` a real 400 becomes). The relaxed flag lets one through.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable, Sequence
from contextlib import AbstractAsyncContextManager, asynccontextmanager

import pytest

from reverie import Agent, Runtime, Scope
from reverie.core.exits import Failed
from reverie.core.messages import Message, ModelRequest, ToolCall
from reverie.errors import ModelError
from reverie.models.anthropic import AnthropicModel
from reverie.models.base import Model, complete
from reverie.models.openai import OpenAIChatModel
from reverie.testing import ConversationRuleError, ScriptedModel, reply
from reverie.testing.fake_anthropic import FakeAnthropicServer
from reverie.testing.fake_openai import FakeOpenAIServer

SCOPE = Scope(tenant="acme", user="ana")

Double = Callable[[bool], AbstractAsyncContextManager[Model]]
"""Opens a model double answering ``"ok"``, strict or not."""


@asynccontextmanager
async def _scripted(strict: bool) -> AsyncIterator[Model]:
    yield ScriptedModel([reply("ok")], strict=strict)


@asynccontextmanager
async def _openai(strict: bool) -> AsyncIterator[Model]:
    async with (
        FakeOpenAIServer(["ok"], strict=strict) as srv,
        OpenAIChatModel("gpt-test", base_url=srv.base_url, api_key="sk-test") as model,
    ):
        yield model


@asynccontextmanager
async def _anthropic(strict: bool) -> AsyncIterator[Model]:
    async with (
        FakeAnthropicServer(["ok"], strict=strict) as srv,
        AnthropicModel("claude-test", base_url=srv.base_url, api_key="sk-ant-test") as model,
    ):
        yield model


DOUBLES: dict[str, Double] = {"scripted": _scripted, "openai": _openai, "anthropic": _anthropic}


def _call(call_id: str, name: str = "add") -> ToolCall:
    return ToolCall(id=call_id, name=name, arguments={"a": 1})


def _user(text: str = "hi") -> Message:
    return Message(role="user", content=text)


def _calls(*ids: str, text: str = "") -> Message:
    return Message(role="assistant", content=text, tool_calls=tuple(_call(i) for i in ids))


def _result(call_id: str) -> Message:
    return Message(role="tool", content="2", tool_call_id=call_id, name="add")


async def _refusal(double: Double, messages: Sequence[Message]) -> ModelError:
    async with double(True) as model:
        with pytest.raises(ModelError) as info:
            await complete(model, ModelRequest(messages=tuple(messages)))
    assert info.value.kind == "internal"  # not retried: the run fails, as on a real 400
    return info.value


def _doubles(*names: str) -> pytest.MarkDecorator:
    return pytest.mark.parametrize("double", [DOUBLES[n] for n in names], ids=list(names))


ALL = ("scripted", "openai", "anthropic")


@_doubles(*ALL)
async def test_every_tool_call_is_answered_before_the_next_message(double: Double) -> None:
    error = await _refusal(
        double, [_user(), _calls("call_a", "call_b"), _result("call_a"), _user("and?")]
    )
    assert "tool_calls_answered" in str(error)
    assert "call_b" in str(error)
    assert "call_a" not in str(error).split("right after it:")[1]


@_doubles(*ALL)
async def test_a_conversation_does_not_end_on_an_unanswered_tool_call(double: Double) -> None:
    error = await _refusal(double, [_user(), _calls("call_a")])
    assert "tool_calls_answered" in str(error)
    assert "call_a" in str(error)


@pytest.mark.parametrize(
    ("double", "rule"),
    [
        (_scripted, "tool_calls_answered"),
        (_openai, "tool_calls_answered"),
        # Anthropic's adapter merges the user text into the results' turn, before them.
        (_anthropic, "tool_results_first"),
    ],
    ids=ALL,
)
async def test_nothing_comes_between_a_tool_call_and_its_result(double: Double, rule: str) -> None:
    error = await _refusal(double, [_user(), _calls("call_a"), _user("wait"), _result("call_a")])
    assert rule in str(error)


@_doubles(*ALL)
async def test_a_tool_result_answers_a_call_of_the_message_right_before_it(
    double: Double,
) -> None:
    error = await _refusal(
        double, [_user(), Message(role="assistant", content="sure"), _result("call_x")]
    )
    assert "tool_result_answers_a_call" in str(error)
    assert "call_x" in str(error)


@_doubles(*ALL)
async def test_a_tool_call_is_answered_once(double: Double) -> None:
    twice = [_user(), _calls("call_a"), _result("call_a"), _result("call_a")]
    error = await _refusal(double, twice)
    assert "one_result_per_call" in str(error)


@_doubles(*ALL)
async def test_tool_call_ids_are_unique_within_an_assistant_message(double: Double) -> None:
    error = await _refusal(
        double, [_user(), _calls("call_a", "call_a"), _result("call_a"), _result("call_a")]
    )
    assert "unique_tool_call_ids" in str(error)
    assert "call_a" in str(error)


# Anthropic's adapter drops an empty assistant message; the wire rule is tested on the fake.
@_doubles("scripted", "openai")
async def test_an_assistant_message_is_never_empty(double: Double) -> None:
    error = await _refusal(double, [_user(), Message(role="assistant", content=""), _user("so?")])
    assert "no_empty_assistant_turn" in str(error)
    assert "assistant message at index 1" in str(error)


@_doubles(*ALL)
async def test_a_valid_conversation_with_parallel_tool_calls_is_accepted(double: Double) -> None:
    messages = (
        Message(role="system", content="be brief"),
        _user("add twice"),
        _calls("call_a", "call_b", text="adding"),
        _result("call_a"),
        _result("call_b"),
        Message(role="assistant", content="4 and 4"),
        _user("once more"),
        _calls("call_c"),
        _result("call_c"),
    )
    async with double(True) as model:
        response = await complete(model, ModelRequest(messages=messages))
    assert response.text == "ok"


@_doubles(*ALL)
async def test_strict_false_answers_a_malformed_conversation(double: Double) -> None:
    async with double(False) as model:
        response = await complete(
            model, ModelRequest(messages=(_user(), _calls("call_a"), _user("never mind")))
        )
    assert response.text == "ok"


async def test_scripted_model_records_a_refused_request_and_uses_no_step() -> None:
    model = ScriptedModel([reply("ok")])
    bad = ModelRequest(messages=(_user(), _calls("call_a")))
    with pytest.raises(ConversationRuleError) as info:
        await complete(model, bad)
    assert [v.rule for v in info.value.violations] == ["tool_calls_answered"]
    assert info.value.violations[0].call_ids == ("call_a",)
    assert info.value.violations[0].index == 1
    assert model.violations == list(info.value.violations)
    assert model.requests == [bad]
    assert model.remaining == 1
    assert "scripted:scripted refused the request" in str(info.value)
    assert "strict=False" in str(info.value)


def _malformed_opening() -> list[Message]:
    # What a cancelled tool call leaves behind: the call, no result, then the user again.
    return [_user("add"), _calls("call_lost"), _user("are you there?")]


async def test_a_run_sent_a_malformed_conversation_fails_naming_the_rule() -> None:
    model = ScriptedModel([reply("never sent")])
    async with Runtime.open(":memory:") as rt:
        result = await (
            await rt.start(Agent(name="a", model=model), _malformed_opening(), scope=SCOPE)
        ).result()
    assert result.status == "failed"
    assert isinstance(result.exit, Failed)
    assert result.exit.kind == "model_error"
    assert "tool_calls_answered" in result.exit.safe_summary
    assert "call_lost" in result.exit.safe_summary
    assert model.remaining == 1


async def test_a_run_on_a_fake_server_fails_as_on_a_real_400() -> None:
    async with (
        FakeOpenAIServer(["never sent"]) as srv,
        Runtime.open(":memory:") as rt,
    ):
        model = OpenAIChatModel("gpt-test", base_url=srv.base_url, api_key="sk-test")
        handle = await rt.start(Agent(name="a", model=model), _malformed_opening(), scope=SCOPE)
        result = await handle.result()
    assert isinstance(result.exit, Failed)
    assert result.exit.kind == "model_error"
    assert "HTTP 400" in result.exit.safe_summary
    assert "tool_calls_answered" in result.exit.safe_summary
    assert srv.remaining == 1
    assert [v.rule for v in srv.violations] == ["tool_calls_answered"]


async def test_a_relaxed_run_is_sent_the_malformed_conversation() -> None:
    model = ScriptedModel([reply("ok")], strict=False)
    async with Runtime.open(":memory:") as rt:
        handle = await rt.start(Agent(name="a", model=model), _malformed_opening(), scope=SCOPE)
        result = await handle.result()
    assert result.ok
    assert result.text == "ok"
    assert [m.role for m in model.requests[0].messages][-3:] == ["user", "assistant", "user"]
    assert model.violations == []
