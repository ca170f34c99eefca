"""Model output at the trust boundary: tool arguments, provider stream payloads, Hermes text.

Each property drives the real path (official SDK → fake server, or the runtime) with generated
input and asserts that only typed errors escape and that the runtime keeps serving afterwards.
"""

from __future__ import annotations

import json
from collections import deque
from collections.abc import AsyncIterator
from typing import Any

import pytest
from hypothesis import given, settings, strategies as st

from fuzz.strategies import DEEP, DEEP_TEXT, FUZZ, JSON, TEXT, objects_with
from reverie import Agent, Runtime, Scope, tool
from reverie.core.messages import Message, ModelRequest, ResponseComplete
from reverie.errors import ModelError
from reverie.models.anthropic import AnthropicModel
from reverie.models.hermes import parse_hermes
from reverie.models.openai import OpenAIChatModel, parse_tool_arguments
from reverie.testing import (
    FakeAnthropicServer,
    FakeOpenAIServer,
    ScriptedModel,
    call as scripted_call,
    reply,
)
from reverie.testing.fake_openai import FakeRawStream, FakeReply, FakeStep, FakeToolCall

SCOPE = Scope(tenant="acme", user="ana")
REQUEST = ModelRequest(messages=(Message(role="user", content="hi"),))


@tool(effects=set())
def add(a: int, b: int = 0) -> int:
    """Add two integers."""
    return a + b


class Queue:
    """A fake server script fed by the test: each request takes the next step."""

    def __init__(self) -> None:
        self.steps: deque[FakeStep] = deque()

    def __call__(self, body: dict[str, Any]) -> FakeStep:
        return self.steps.popleft() if self.steps else "fallback"


SDK_FUZZ = settings(parent=FUZZ, max_examples=30)
"""Each example is a real HTTP exchange or two: fewer of them."""


@pytest.fixture
async def openai_model() -> AsyncIterator[tuple[OpenAIChatModel, Queue]]:
    """A model on a fake server whose answers the test queues (one client for all examples)."""
    queue = Queue()
    async with (
        FakeOpenAIServer(queue) as srv,
        OpenAIChatModel("m", base_url=srv.base_url, api_key="sk-test") as model,
    ):
        yield model, queue


@pytest.fixture
async def anthropic_model() -> AsyncIterator[tuple[AnthropicModel, Queue]]:
    """As :func:`openai_model`, for the Anthropic SDK."""
    queue = Queue()
    async with (
        FakeAnthropicServer(queue) as srv,
        AnthropicModel("claude-test", base_url=srv.base_url, api_key="sk-ant-test") as model,
    ):
        yield model, queue


@pytest.fixture
async def runtime() -> AsyncIterator[Runtime]:
    async with Runtime.open(":memory:") as rt:
        yield rt


# ------------------------------------------------------------------------------ tool arguments
ARGUMENT_TEXT = (
    st.text(max_size=60)
    | JSON.map(json.dumps)
    | objects_with(["a", "b", "c"]).map(json.dumps)
    | st.integers(min_value=1, max_value=3000).map(lambda n: "[" * n + "]" * n)
    | st.sampled_from(['{"a": NaN}', '{"a": Infinity}', '{"a": 1e999}', '{"a": 1', "{}", ""])
    | DEEP_TEXT.map(lambda deep: f'{{"a": {deep}, "b": 1}}')
)


@FUZZ
@given(ARGUMENT_TEXT)
def test_parse_tool_arguments_never_raises_and_returns_an_object_or_a_reason(raw: str) -> None:
    arguments, reason = parse_tool_arguments(raw)

    assert isinstance(arguments, dict)
    assert (reason is None) or (arguments == {} and isinstance(reason, str))


@SDK_FUZZ
@given(ARGUMENT_TEXT)
async def test_any_tool_argument_text_from_the_model_ends_the_run_cleanly(
    openai_model: tuple[OpenAIChatModel, Queue], runtime: Runtime, raw: str
) -> None:
    model, queue = openai_model
    queue.steps.clear()  # an earlier failing example may have left answers behind
    queue.steps.extend([FakeReply(tool_calls=(FakeToolCall("add", raw),)), "done"])
    agent = Agent(name="calc", model=model, tools=[add])

    result = await runtime.run(agent, "add", scope=SCOPE)

    # The model is told what was wrong and answers; nothing escapes as a driver bug.
    assert result.status == "completed", result.exit
    assert result.text == "done"


@FUZZ
@given(DEEP, st.booleans())
async def test_arguments_of_any_depth_from_a_model_end_the_run_cleanly(
    runtime: Runtime, value: Any, gated: bool
) -> None:
    @tool(effects={"write"}, needs_approval=gated)
    def keep(x: Any) -> str:
        """Keep a value."""
        return "kept"

    model = ScriptedModel([scripted_call("keep", x=value), reply("done")])
    result = await runtime.run(Agent(name="keeper", model=model, tools=[keep]), "go", scope=SCOPE)

    # Within the limit the call runs (or waits on its gate); past it the model is told.
    assert result.status in ("completed", "blocked"), result.exit
    if result.status == "completed":
        assert result.text == "done"


# ----------------------------------------------------------------------- provider stream payloads
CHUNK_KEYS = ["id", "object", "created", "model", "choices", "usage"]
CHOICE_KEYS = ["index", "delta", "finish_reason"]
DELTA_KEYS = ["content", "role", "tool_calls"]


def _chunk(choice: dict[str, Any], delta: dict[str, Any], extra: dict[str, Any]) -> dict[str, Any]:
    return {"object": "chat.completion.chunk", **extra, "choices": [{**choice, "delta": delta}]}


OPENAI_CHUNKS = st.lists(
    st.builds(_chunk, objects_with(CHOICE_KEYS), objects_with(DELTA_KEYS), objects_with(CHUNK_KEYS))
    | objects_with(CHUNK_KEYS)
    | JSON,
    min_size=1,
    max_size=4,
)


# A stream the SDK gives up on mid-way leaves httpx's byte iterator to the garbage collector,
# whose asyncgen finalizer may run while the next example streams ("async generator already
# executing", raised inside the finalizer): noise from the SDK's internals, not an outcome of
# ours. What the test asserts — a response or a typed error, then the client still serves — holds.
@pytest.mark.filterwarnings("ignore::pytest.PytestUnraisableExceptionWarning")
@SDK_FUZZ
@given(OPENAI_CHUNKS)
async def test_any_openai_chunk_shape_is_a_response_or_a_typed_model_error(
    openai_model: tuple[OpenAIChatModel, Queue], chunks: list[Any]
) -> None:
    model, queue = openai_model
    queue.steps.clear()  # an earlier failing example may have left answers behind
    queue.steps.extend([FakeRawStream(chunks), "still serving"])

    try:
        events = [event async for event in model.stream(REQUEST)]
        assert isinstance(events[-1], ResponseComplete)
    except ModelError:
        pass
    after = [event async for event in model.stream(REQUEST)]
    assert isinstance(after[-1], ResponseComplete)
    assert after[-1].response.text == "still serving"


EVENT_NAMES = [
    "message_start",
    "content_block_start",
    "content_block_delta",
    "content_block_stop",
    "message_delta",
    "message_stop",
    "ping",
    "error",
    "mystery",
]
EVENT_KEYS = ["type", "index", "message", "content_block", "delta", "usage", "error"]
INNER_KEYS = ["type", "text", "partial_json", "id", "name", "input", "stop_reason", "model"]


def _event(name: str, body: dict[str, Any], inner: dict[str, Any], key: str) -> tuple[str, Any]:
    return name, {"type": name, **body, key: inner}


ANTHROPIC_EVENTS = st.lists(
    st.builds(
        _event,
        st.sampled_from(EVENT_NAMES),
        objects_with(EVENT_KEYS),
        objects_with(INNER_KEYS),
        st.sampled_from(["message", "content_block", "delta", "usage"]),
    )
    | st.tuples(st.sampled_from(EVENT_NAMES), JSON),
    min_size=1,
    max_size=5,
)


@SDK_FUZZ
@given(ANTHROPIC_EVENTS)
async def test_any_anthropic_event_shape_is_a_response_or_a_typed_model_error(
    anthropic_model: tuple[AnthropicModel, Queue], events: list[tuple[str, Any]]
) -> None:
    model, queue = anthropic_model
    queue.steps.clear()  # an earlier failing example may have left answers behind
    queue.steps.extend([FakeRawStream(events, done=False), "still serving"])

    try:
        out = [event async for event in model.stream(REQUEST)]
        assert isinstance(out[-1], ResponseComplete)
    except ModelError:
        pass
    after = [event async for event in model.stream(REQUEST)]
    assert isinstance(after[-1], ResponseComplete)
    assert after[-1].response.text == "still serving"


# ---------------------------------------------------------------------------------- Hermes text
HERMES_PIECES = st.sampled_from(
    ["<tool_call>", "</tool_call>", "<tool_call", "```", "\n", " ", '{"name": "add"', "}", "]"]
)
HERMES_TEXT = st.lists(
    HERMES_PIECES
    | TEXT
    | JSON.map(json.dumps)
    | objects_with(["name", "arguments"]).map(json.dumps),
    max_size=8,
).map("".join)


@FUZZ
@given(HERMES_TEXT)
def test_parse_hermes_never_raises_and_every_malformed_tag_is_reported(text: str) -> None:
    parsed = parse_hermes(text)

    assert len(parsed.errors) == sum(1 for c in parsed.calls if c.arguments_error is not None)
    for call in parsed.calls:
        assert isinstance(call.name, str)
        assert isinstance(call.arguments, dict)


@FUZZ
@given(HERMES_TEXT)
async def test_any_hermes_answer_ends_the_run_as_completed_or_a_typed_failure(
    runtime: Runtime, text: str
) -> None:
    from reverie.models.hermes import HermesModel

    model = HermesModel(ScriptedModel([reply(text), reply("done"), reply("done")]))
    agent = Agent(name="hermes", model=model, tools=[add])

    result = await runtime.run(agent, "go", scope=SCOPE)

    assert result.status in ("completed", "failed")
    if result.status == "failed":
        assert result.exit.kind != "driver_bug"  # type: ignore[union-attr]
