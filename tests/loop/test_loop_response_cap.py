"""A model response has a byte cap (``Limits.max_response_bytes``, issue 10): over it the run
fails with ``invalid_model_output`` and nothing of the response is stored."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

from reverie import Agent, Limits, Runtime, Scope, tool
from reverie.config import LimitsConfig
from reverie.core.exits import Failed
from reverie.core.messages import ModelEvent, ModelRequest, TextDelta
from reverie.testing import ScriptedModel, call, reply

ran: list[str] = []


@tool(effects={"write"})
def save(blob: str) -> str:
    """Save a blob."""
    ran.append(blob)
    return "saved"


async def roles(rt: Runtime, thread_id: str) -> list[str]:
    return [row.role for row in await rt.store.thread_items(thread_id)]


async def test_reply_over_the_byte_cap_is_invalid_model_output_and_is_not_stored(
    rt: Runtime, scope: Scope
) -> None:
    model = ScriptedModel([reply("é" * 600)])  # 1,200 bytes of UTF-8 in 600 characters
    agent = Agent(name="c", model=model, limits=Limits(max_response_bytes=1000))
    r = await rt.run(agent, "go", scope=scope)

    assert isinstance(r.exit, Failed)
    assert r.exit.kind == "invalid_model_output"
    assert "1000 bytes" in r.exit.safe_summary
    assert await roles(rt, r.thread_id) == ["user"]
    assert len(model.requests) == 1  # never retried


async def test_tool_call_arguments_over_the_byte_cap_run_nothing_and_are_not_stored(
    rt: Runtime, scope: Scope
) -> None:
    ran.clear()
    model = ScriptedModel([call("save", blob="x" * 5000)])
    agent = Agent(name="c", model=model, tools=[save], limits=Limits(max_response_bytes=1000))
    r = await rt.run(agent, "go", scope=scope)

    assert isinstance(r.exit, Failed)
    assert r.exit.kind == "invalid_model_output"
    assert ran == []
    assert await roles(rt, r.thread_id) == ["user"]


class RunawayModel:
    """Streams text without end: the cap must cut the stream, not wait for it to finish."""

    def __init__(self) -> None:
        self.chunks = 0
        self.closed = asyncio.Event()

    @property
    def name(self) -> str:
        return "runaway"

    async def stream(self, request: ModelRequest) -> AsyncIterator[ModelEvent]:
        try:
            while True:
                self.chunks += 1
                yield TextDelta(text="y" * 1000)
                await asyncio.sleep(0)
        finally:
            self.closed.set()


async def test_a_runaway_stream_is_cut_at_the_byte_cap_and_closed(
    rt: Runtime, scope: Scope
) -> None:
    model = RunawayModel()
    agent = Agent(name="c", model=model, limits=Limits(max_response_bytes=10_000))
    r = await rt.run(agent, "go", scope=scope)

    assert isinstance(r.exit, Failed)
    assert r.exit.kind == "invalid_model_output"
    assert model.chunks == 11  # the chunk that crossed the cap was the last one read
    assert model.closed.is_set()
    assert await roles(rt, r.thread_id) == ["user"]


def test_response_byte_cap_defaults_to_4_mib_and_only_narrows() -> None:
    assert Limits().max_response_bytes == 4 * 1024 * 1024
    assert Limits(max_response_bytes=10).narrow(Limits()).max_response_bytes == 10
    assert Limits().narrow(Limits(max_response_bytes=10)).max_response_bytes == 10
    assert LimitsConfig(max_response_bytes=512).to_limits().max_response_bytes == 512
