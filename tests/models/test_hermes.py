"""The Hermes text protocol: parse_hermes and the HermesModel wrapper."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator

from hypothesis import given, settings, strategies as st

from reverie.core.messages import (
    Message,
    ModelEvent,
    ModelRequest,
    ModelResponse,
    ResponseComplete,
    TextDelta,
    TextPart,
    ToolCall,
    ToolCallPart,
    ToolSpec,
)
from reverie.models.base import complete
from reverie.models.hermes import MALFORMED_NAME, HermesModel, parse_hermes
from reverie.models.openai import OpenAIChatModel
from reverie.testing.fake_openai import FakeOpenAIServer


def tag(payload: object) -> str:
    return f"<tool_call>\n{json.dumps(payload)}\n</tool_call>"


# -- parse_hermes ------------------------------------------------------------------------------


def test_single_call_is_parsed() -> None:
    result = parse_hermes(tag({"name": "search", "arguments": {"q": "reverie"}}))
    (call,) = result.calls
    assert (call.name, dict(call.arguments), call.arguments_error) == (
        "search",
        {"q": "reverie"},
        None,
    )
    assert call.id
    assert result.text_parts == ()
    assert result.errors == ()


def test_multiple_calls_keep_their_order_and_get_distinct_ids() -> None:
    text = tag({"name": "a", "arguments": {}}) + "\n" + tag({"name": "b", "arguments": {"x": 1}})
    result = parse_hermes(text)
    assert [c.name for c in result.calls] == ["a", "b"]
    assert len({c.id for c in result.calls}) == 2


def test_text_around_calls_is_kept_as_progress_text_in_order() -> None:
    text = "Let me check.\n" + tag({"name": "a", "arguments": {}}) + "\nThen this.\n"
    text += tag({"name": "b", "arguments": {}}) + "\nDone soon."
    result = parse_hermes(text)
    assert result.text_parts == ("Let me check.", "Then this.", "Done soon.")
    kinds = [p.kind for p in result.parts]
    assert kinds == ["text", "tool_call", "text", "tool_call", "text"]


def test_malformed_json_becomes_a_call_with_arguments_error_not_an_exception() -> None:
    result = parse_hermes('Sure.\n<tool_call>{"name": "a", "arguments": {"x": }</tool_call>')
    (call,) = result.calls
    assert call.name == MALFORMED_NAME
    assert call.arguments == {}
    assert call.arguments_error is not None and "not valid JSON" in call.arguments_error
    assert result.errors == (call.arguments_error,)
    assert result.text_parts == ("Sure.",)


def test_unterminated_tag_is_an_error_entry_that_keeps_the_name_when_readable() -> None:
    result = parse_hermes('Working.\n<tool_call>\n{"name": "search", "arguments": {"q": 1}}')
    (call,) = result.calls
    assert call.name == "search"
    assert call.arguments_error is not None and "unterminated" in call.arguments_error
    assert len(result.errors) == 1
    assert result.text_parts == ("Working.",)


def test_unterminated_tag_with_garbage_is_malformed() -> None:
    result = parse_hermes("<tool_call> {oops")
    (call,) = result.calls
    assert call.name == MALFORMED_NAME
    assert call.arguments_error is not None


def test_tag_inside_a_code_fence_is_text_not_a_call() -> None:
    text = (
        "Call tools like this:\n```\n"
        + tag({"name": "example", "arguments": {}})
        + "\n```\nNow for real:\n"
        + tag({"name": "real", "arguments": {}})
    )
    result = parse_hermes(text)
    assert [c.name for c in result.calls] == ["real"]
    assert "example" in result.text_parts[0]


def test_tag_after_an_unclosed_fence_is_text() -> None:
    result = parse_hermes("```json\n" + tag({"name": "x", "arguments": {}}))
    assert result.calls == ()
    assert result.errors == ()


def test_missing_name_and_non_object_arguments_are_errors() -> None:
    result = parse_hermes(tag({"arguments": {}}) + tag({"name": "a", "arguments": [1]}))
    no_name, bad_args = result.calls
    assert no_name.name == MALFORMED_NAME
    assert no_name.arguments_error is not None and '"name"' in no_name.arguments_error
    assert bad_args.name == "a"
    assert bad_args.arguments_error is not None and "JSON object" in bad_args.arguments_error
    assert len(result.errors) == 2


def test_string_encoded_arguments_parameters_alias_and_array_of_calls() -> None:
    text = tag(
        [
            {"name": "a", "arguments": json.dumps({"x": 1})},
            {"name": "b", "parameters": {"y": 2}},
        ]
    )
    result = parse_hermes(text)
    assert [(c.name, dict(c.arguments)) for c in result.calls] == [("a", {"x": 1}), ("b", {"y": 2})]
    assert result.errors == ()


def test_plain_text_has_no_calls() -> None:
    result = parse_hermes("  Just an answer.  ")
    assert result.calls == ()
    assert result.text_parts == ("Just an answer.",)
    assert parse_hermes("").parts == ()


@settings(max_examples=300, deadline=None)
@given(
    st.lists(
        st.one_of(
            st.text(),
            st.sampled_from(["<tool_call>", "</tool_call>", "```", "{", "}", '"name"', ":", "["]),
        ),
        max_size=12,
    ).map("".join)
)
def test_parse_hermes_never_raises_on_arbitrary_text(text: str) -> None:
    result = parse_hermes(text)
    assert len(result.parts) == len(result.text_parts) + len(result.calls)
    for call in result.calls:
        assert call.name
        assert (call.arguments_error is None) or (dict(call.arguments) == {})
    assert len(result.errors) == sum(c.arguments_error is not None for c in result.calls)


# -- HermesModel -------------------------------------------------------------------------------


class ChunkedTextModel:
    """An inner model that streams fixed chunks of text and records requests."""

    def __init__(self, chunks: list[str]) -> None:
        self.chunks = chunks
        self.requests: list[ModelRequest] = []

    @property
    def name(self) -> str:
        return "chunks"

    async def stream(self, request: ModelRequest) -> AsyncIterator[ModelEvent]:
        self.requests.append(request)
        for chunk in self.chunks:
            yield TextDelta(text=chunk)
        yield ResponseComplete(
            response=ModelResponse(
                parts=(TextPart(text="".join(self.chunks)),), finish_reason="stop"
            )
        )


SEARCH = ToolSpec(name="search", description="Search.", parameters={"type": "object"})


async def test_hermes_model_turns_text_into_calls_and_streams_only_the_text_before_them() -> None:
    inner = ChunkedTextModel(
        [
            "Let me ",
            "look.\n<tool",
            '_call>{"name": "search", ',
            '"arguments": {"q": "x"}}',
            "</tool_call>",
        ]
    )
    model = HermesModel(inner)
    events = [e async for e in model.stream(ModelRequest(messages=(), tools=(SEARCH,)))]
    deltas = "".join(e.text for e in events if isinstance(e, TextDelta))
    assert deltas == "Let me look.\n"
    final = events[-1]
    assert isinstance(final, ResponseComplete)
    assert final.response.text == "Let me look."
    assert [(c.name, dict(c.arguments)) for c in final.response.tool_calls] == [
        ("search", {"q": "x"})
    ]
    assert final.response.finish_reason == "tool_calls"
    assert model.name == "hermes:chunks"


async def test_hermes_model_renders_tools_calls_and_results_as_text() -> None:
    inner = ChunkedTextModel(["ok"])
    call = ToolCall(id="c1", name="search", arguments={"q": "x"})
    request = ModelRequest(
        messages=(
            Message(role="system", content="Be brief."),
            Message(role="user", content="find x"),
            Message(role="assistant", content="Looking.", tool_calls=(call,)),
            Message(role="tool", content="found", tool_call_id="c1", name="search"),
            Message(role="tool", content="more", tool_call_id="c2", name="search"),
        ),
        tools=(SEARCH,),
        tool_choice="search",
    )
    response = await complete(HermesModel(inner), request)
    assert response.text == "ok"
    sent = inner.requests[0]
    assert sent.tools is None
    system, _user, assistant, results = sent.messages
    assert system.role == "system" and system.content.startswith("Be brief.")
    assert "<tools>" in system.content and '"name": "search"' in system.content
    assert "You must call the function search" in system.content
    assert assistant.content.startswith("Looking.\n<tool_call>")
    assert assistant.tool_calls == ()
    assert results.role == "user"
    assert results.content.count("<tool_response>") == 2


async def test_hermes_model_without_tools_adds_no_tool_prompt() -> None:
    inner = ChunkedTextModel(["plain"])
    await complete(HermesModel(inner), ModelRequest(messages=(Message(role="user", content="hi"),)))
    assert [m.role for m in inner.requests[0].messages] == ["user"]


async def test_hermes_model_malformed_tag_reaches_the_loop_as_a_call_with_arguments_error() -> None:
    inner = ChunkedTextModel(['<tool_call>{"name": "search", "arguments": {</tool_call>'])
    response = await complete(HermesModel(inner), ModelRequest(messages=(), tools=(SEARCH,)))
    (part,) = response.parts
    assert isinstance(part, ToolCallPart)
    assert part.call.arguments_error is not None


async def test_hermes_over_an_openai_compatible_server_end_to_end(openai_key: str) -> None:
    answer = "Searching.\n" + tag({"name": "search", "arguments": {"q": "x"}})
    async with (
        FakeOpenAIServer([answer]) as srv,
        HermesModel(OpenAIChatModel("hermes-3", base_url=srv.base_url)) as model,
    ):
        request = ModelRequest(messages=(Message(role="user", content="find x"),), tools=(SEARCH,))
        response = await complete(model, request)
    assert response.text == "Searching."
    assert [c.name for c in response.tool_calls] == ["search"]
    body = srv.requests[0]
    assert "tools" not in body
    assert body["messages"][0]["role"] == "system"
    assert "<tools>" in body["messages"][0]["content"]
