"""The fakes refuse the tool choices and output formats the real APIs refuse (HTTP 400)."""

from __future__ import annotations

from typing import Any

import pytest

from reverie.core.messages import Message, ModelRequest, ModelResponse, ResponseComplete, ToolSpec
from reverie.errors import ModelError
from reverie.models.anthropic import AnthropicModel
from reverie.models.base import Model
from reverie.models.openai import OpenAIChatModel
from reverie.testing import FakeAnthropicServer, FakeOpenAIServer
from reverie.testing.fake_openai import FakeModelServer

ADD = ToolSpec(
    name="add",
    description="Add two integers.",
    parameters={"type": "object", "properties": {"a": {"type": "integer"}}},
)
HI = (Message(role="user", content="hi"),)
CLOSED = {
    "type": "object",
    "properties": {"n": {"type": "integer"}},
    "required": ["n"],
    "additionalProperties": False,
}


async def ask(model: Model, request: ModelRequest) -> ModelResponse:
    async for event in model.stream(request):
        if isinstance(event, ResponseComplete):
            return event.response
    raise AssertionError("no response")


async def refused(
    server: type[FakeModelServer], request: ModelRequest, monkeypatch: pytest.MonkeyPatch
) -> tuple[str, FakeModelServer]:
    """The error the fake answers ``request`` with (it uses no script step)."""
    async with server(["never sent"]) as srv:
        model = _model(srv, monkeypatch)
        with pytest.raises(ModelError) as caught:
            await ask(model, request)
        await model.aclose()
    assert caught.value.kind == "internal"
    assert srv.remaining == 1
    return str(caught.value), srv


def _model(srv: FakeModelServer, monkeypatch: pytest.MonkeyPatch) -> Any:
    if isinstance(srv, FakeAnthropicServer):
        monkeypatch.setenv("ANTHROPIC_API_KEY", "sk-ant-rules")
        return AnthropicModel("claude-test", base_url=srv.base_url)
    monkeypatch.setenv("OPENAI_API_KEY", "sk-rules")
    return OpenAIChatModel("gpt-test", base_url=srv.base_url)


@pytest.mark.parametrize("server", [FakeOpenAIServer, FakeAnthropicServer])
async def test_a_tool_choice_naming_a_tool_not_offered_is_refused(
    server: type[FakeModelServer], monkeypatch: pytest.MonkeyPatch
) -> None:
    request = ModelRequest(messages=HI, tools=(ADD,), tool_choice="subtract")
    message, srv = await refused(server, request, monkeypatch)
    assert "tool_choice_names_a_tool" in message
    assert [v.rule for v in srv.violations] == ["tool_choice_names_a_tool"]


async def test_a_strict_openai_response_format_with_an_open_object_is_refused(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    open_schema: dict[str, Any] = {"type": "object", "properties": {"n": {"type": "integer"}}}
    async with FakeOpenAIServer(["never sent"]) as srv:
        monkeypatch.setenv("OPENAI_API_KEY", "sk-rules")
        import openai

        client = openai.AsyncOpenAI(base_url=srv.base_url, max_retries=0)
        with pytest.raises(openai.BadRequestError) as caught:
            await client.chat.completions.create(
                model="gpt-test",
                messages=[{"role": "user", "content": "hi"}],
                response_format={
                    "type": "json_schema",
                    "json_schema": {"name": "n", "schema": open_schema, "strict": True},
                },
            )
        await client.close()
    assert "additionalProperties" in str(caught.value)
    assert caught.value.param == "response_format.json_schema.schema"


async def test_an_openai_json_object_format_needs_the_word_json_in_the_messages(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    async with FakeOpenAIServer(["never sent", '{"ok": true}']) as srv:
        monkeypatch.setenv("OPENAI_API_KEY", "sk-rules")
        import openai

        client = openai.AsyncOpenAI(base_url=srv.base_url, max_retries=0)
        with pytest.raises(openai.BadRequestError, match="must contain the word 'json'"):
            await client.chat.completions.create(
                model="gpt-test",
                messages=[{"role": "user", "content": "hi"}],
                response_format={"type": "json_object"},
            )
        ok = await client.chat.completions.create(
            model="gpt-test",
            messages=[{"role": "user", "content": "answer in JSON"}],
            response_format={"type": "json_object"},
        )
        await client.close()
    assert ok.choices[0].message.content == "never sent"


async def test_an_anthropic_output_format_outside_the_json_outputs_subset_is_refused(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    bounded = {"type": "object", "properties": {"n": {"type": "integer", "minimum": 0}}}
    request = ModelRequest(messages=HI, output_schema=bounded)
    message, srv = await refused(FakeAnthropicServer, request, monkeypatch)
    assert "output_format_valid" in message
    problems = [v.detail for v in srv.violations]
    assert any("'additionalProperties' to false" in p for p in problems)
    assert any("'minimum' is not supported" in p for p in problems)


async def test_anthropic_sends_json_outputs_only_when_no_call_is_forced(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    async with FakeAnthropicServer(['{"n": 1}', "done"]) as srv:
        model = _model(srv, monkeypatch)
        free = await ask(model, ModelRequest(messages=HI, tools=(ADD,), output_schema=CLOSED))
        forced = ModelRequest(messages=HI, tools=(ADD,), tool_choice="add", output_schema=CLOSED)
        await ask(model, forced)
        await model.aclose()
    assert free.text == '{"n": 1}'
    assert srv.requests[0]["output_config"] == {"format": {"type": "json_schema", "schema": CLOSED}}
    assert srv.requests[0]["tool_choice"] == {"type": "auto"}
    assert "output_config" not in srv.requests[1]
    assert srv.requests[1]["tool_choice"] == {"type": "tool", "name": "add"}


async def test_anthropic_tool_choice_any_without_tools_is_refused(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    async with FakeAnthropicServer(["never sent"]) as srv:
        monkeypatch.setenv("ANTHROPIC_API_KEY", "sk-ant-rules")
        import anthropic

        client = anthropic.AsyncAnthropic(base_url=srv.base_url, max_retries=0)
        with pytest.raises(anthropic.BadRequestError, match="tool_choice_needs_tools"):
            await client.messages.create(
                model="claude-test",
                max_tokens=10,
                messages=[{"role": "user", "content": "hi"}],
                tool_choice={"type": "any"},
            )
        await client.close()


async def test_scripted_model_refuses_a_tool_choice_naming_a_tool_not_offered() -> None:
    from reverie.testing import ScriptedModel, reply
    from reverie.testing.conversation_rules import ConversationRuleError

    model = ScriptedModel([reply("never")])
    with pytest.raises(ConversationRuleError, match="tool_choice_names_a_tool"):
        await ask(model, ModelRequest(messages=HI, tools=(ADD,), tool_choice="subtract"))
    assert model.remaining == 1
    assert (await ask(model, ModelRequest(messages=HI, tools=(ADD,), tool_choice="add"))).text
