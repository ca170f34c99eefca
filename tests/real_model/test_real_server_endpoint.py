"""What a real OpenAI-compatible server does differently, handled end to end (issue 28's quirks).

llama-cpp-python 0.3.x serving SmolLM2-135M-Instruct: it takes ``response_format`` only as
``json_object`` (``json_schema`` is HTTP 500), sends no usage in streams, fails a streamed request
after its headers (HTTP 200, then nothing) when the context is exceeded, and is killed or frozen
here mid-stream. Each server that a test kills, freezes or shrinks is its own.
"""

from __future__ import annotations

import asyncio
import time
from pathlib import Path

import pytest
from pydantic import BaseModel

from real_model.llama_support import MODEL_NAME, ForceFirstTool, LlamaServer, llama_server
from reverie import Agent, Compaction, Limits, Runtime, Scope, Settings, tool
from reverie.core.events import TextDeltaEvent
from reverie.core.exits import Failed
from reverie.models.openai import OpenAIChatModel

pytestmark = pytest.mark.real_model

SCOPE = Scope(tenant="acme", user="ana")
SHORT = Settings(max_output_tokens=24, temperature=0.0)


def _model(server: LlamaServer, **compat: object) -> OpenAIChatModel:
    return OpenAIChatModel(
        MODEL_NAME,
        base_url=server.base_url,
        api_key_env=None,
        server="llama-cpp-python",
        **compat,  # type: ignore[arg-type]
    )


class City(BaseModel):
    name: str


@pytest.mark.parametrize("mode", ["json_object", "tool"])
async def test_typed_output_works_in_each_structured_output_mode_the_server_supports(
    llama: LlamaServer, mode: str
) -> None:
    agent = Agent(
        name="smol",
        model=_model(llama, structured_output=mode),
        instructions="Name one city.",
        output_type=City,
        settings=Settings(max_output_tokens=48, temperature=0.0),
        limits=Limits(max_model_calls=4),
    )
    async with Runtime.open(":memory:") as rt:
        result = await rt.run(agent, "Which city is the capital of France?", scope=SCOPE)
    assert result.status == "completed", result.exit
    assert isinstance(result.output, City)
    assert result.output.name


async def test_a_structured_output_mode_the_server_refuses_fails_typed_and_is_not_retried(
    llama: LlamaServer,
) -> None:
    agent = Agent(
        name="smol",
        model=_model(llama, structured_output="json_schema"),
        output_type=City,
        settings=SHORT,
    )
    async with Runtime.open(":memory:") as rt:
        result = await rt.run(agent, "Which city is the capital of France?", scope=SCOPE)
    assert isinstance(result.exit, Failed) and result.exit.kind == "model_error"
    assert result.usage.model_calls == 1  # a validation error is deterministic: never retried
    assert "/site-packages/" not in str(result.exit)  # the server's install path is scrubbed


@tool(effects=set())
def add(a: int, b: int) -> int:
    """Add two integers."""
    return a + b


async def test_usage_from_a_server_without_streamed_usage_is_estimated_and_budgets_trip(
    llama: LlamaServer,
) -> None:
    agent = Agent(
        name="smol",
        model=ForceFirstTool(_model(llama, streaming_tool_calls=True), "add"),
        instructions="Use the add tool.",
        tools=[add],
        settings=SHORT,
        limits=Limits(max_tokens=10, max_model_calls=4),
        on_limit="fail",
    )
    async with Runtime.open(":memory:") as rt:
        result = await rt.run(agent, "What is 2 + 3?", scope=SCOPE)
    assert result.usage.estimated  # the server sent no usage: reverie's estimate, marked
    assert result.usage.input_tokens > 0 and result.usage.output_tokens > 0
    # The first call (the forced tool call) spent more than 10 tokens: no second call is made.
    assert result.usage.model_calls == 1
    assert isinstance(result.exit, Failed) and result.exit.kind == "token_limit"


async def test_a_conversation_past_the_context_window_is_compacted_and_the_turn_completes(
    tmp_path: Path,
) -> None:
    with llama_server(tmp_path, n_ctx=1024) as server:
        agent = Agent(
            name="smol",
            model=_model(server),
            instructions="Answer in one short sentence.",
            settings=Settings(max_output_tokens=16, temperature=0.0),
            compaction=Compaction(trigger_tokens=None, keep_last_turns=1, max_summary_tokens=64),
            limits=Limits(max_model_calls=6),
        )
        filler = " ".join(f"fact{i} is that stone {i} is grey." for i in range(30))  # ~300 tokens
        async with Runtime.open(":memory:") as rt:
            thread_id: str | None = None
            results = []
            for turn in range(5):
                result = await rt.run(
                    agent, f"Turn {turn}. {filler}", scope=SCOPE, thread_id=thread_id
                )
                thread_id = result.thread_id
                results.append(result)
            assert thread_id is not None
            rows = await rt.store.thread_items(thread_id)
    assert [r.status for r in results] == ["completed"] * 5, [r.exit for r in results]
    assert any("summary_of" in row.meta for row in rows)  # a durable summary replaced old turns


async def test_a_server_killed_mid_stream_fails_the_run_with_a_typed_model_error(
    tmp_path: Path,
) -> None:
    with llama_server(tmp_path) as server:
        agent = Agent(
            name="smol",
            model=_model(server),
            settings=Settings(max_output_tokens=400),
            limits=Limits(max_model_calls=3),
        )
        async with Runtime.open(":memory:") as rt:
            handle = await rt.start(agent, "Count from one to two hundred in words.", scope=SCOPE)
            async for event in handle.events():
                if isinstance(event, TextDeltaEvent):
                    server.kill()
                    break
            result = await asyncio.wait_for(handle.result(), timeout=240)  # a hang guard
    assert isinstance(result.exit, Failed) and result.exit.kind == "model_error"
    assert "driver_bug" not in str(result.exit)
    assert result.usage.model_calls >= 1


async def test_a_frozen_server_is_bounded_by_the_endpoint_timeout_and_the_wall_clock(
    tmp_path: Path,
) -> None:
    with llama_server(tmp_path) as server:
        agent = Agent(
            name="smol",
            model=_model(server, timeout_s=5.0),
            settings=Settings(max_output_tokens=400),
            limits=Limits(wall_clock_s=20, max_model_calls=3),
        )
        async with Runtime.open(":memory:") as rt:
            started = time.monotonic()
            handle = await rt.start(agent, "Count from one to two hundred in words.", scope=SCOPE)
            async for event in handle.events():
                if isinstance(event, TextDeltaEvent):
                    server.freeze()
                    break
            result = await asyncio.wait_for(handle.result(), timeout=240)  # a hang guard
            elapsed = time.monotonic() - started
        server.thaw()
    assert result.status in ("failed", "completed")
    assert not isinstance(result.exit, Failed) or result.exit.kind != "driver_bug"
    # The wall clock (20 s) plus the finalizer's bounded grace, with room for a loaded machine;
    # before, a frozen server held a run for the SDK's 60 s per call, several calls over.
    assert elapsed < 20 + 60
