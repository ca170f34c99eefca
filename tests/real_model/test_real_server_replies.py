"""reverie against a real OpenAI-compatible model server (llama-cpp-python serving SmolLM2-135M).

Replies through each surface a user takes: the Python API (plain and streamed), the CLI, and
``reverie serve`` with the official openai SDK as its client. The tiny model's words are not
asserted, only that a real reply arrived whole and was metered.
"""

from __future__ import annotations

import pytest

from real_model.llama_support import LlamaServer
from reverie import Agent, Runtime, Scope
from reverie.core.events import TextDeltaEvent

pytestmark = pytest.mark.real_model

SCOPE = Scope(tenant="acme", user="ana")


async def test_a_real_server_answers_a_run_through_the_python_api(llama: LlamaServer) -> None:
    agent = Agent(name="smol", model=llama.spec, instructions="Answer in one short sentence.")
    async with Runtime.open(":memory:") as rt:
        result = await rt.run(agent, "Say hello.", scope=SCOPE)
    assert result.status == "completed", result.exit
    assert result.text
    assert result.usage.model_calls == 1
    assert result.usage.input_tokens > 0
    assert result.usage.output_tokens > 0


async def test_a_real_servers_stream_reaches_the_run_as_text_deltas(llama: LlamaServer) -> None:
    agent = Agent(name="smol", model=llama.spec, instructions="Answer in one short sentence.")
    async with Runtime.open(":memory:") as rt:
        handle = await rt.start(agent, "Say hello.", scope=SCOPE)
        deltas = [ev.text async for ev in handle.events() if isinstance(ev, TextDeltaEvent)]
        result = await handle.result()
    assert result.status == "completed", result.exit
    assert len(deltas) > 1
    assert "".join(deltas) == result.text
