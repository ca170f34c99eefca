"""A served model keeps one SDK client, and its connections, for the life of the app.

A model that is not entered builds a client per call (an HTTP client, a TLS context with the
CA bundle loaded) that lives in reference cycles until the cyclic collector runs: ``reverie
serve`` grew by about 1 MB per turn that way. The app's lifespan enters the served agents'
models; the fake provider sees every call of every turn arrive on one connection.
"""

from __future__ import annotations

from typing import Any

from reverie import Agent, tool
from reverie.models.openai import OpenAIChatModel
from reverie.testing.fake_openai import FakeOpenAIServer, FakeReply, FakeToolCall
from serve.serve_support import serving

REPLY = "2 + 3 = 5."


def add_then_reply(body: dict[str, Any]) -> FakeReply:
    """Call ``add`` once, then reply."""
    if body["messages"][-1]["role"] == "tool":
        return FakeReply(text=REPLY)
    return FakeReply(tool_calls=(FakeToolCall("add", {"a": 2, "b": 3}),))


@tool(effects=set())
def add(a: int, b: int) -> int:
    """Add two integers."""
    return a + b


async def test_a_served_model_makes_every_call_of_every_turn_on_one_kept_connection() -> None:
    async with FakeOpenAIServer(add_then_reply) as fake:
        model = OpenAIChatModel("fake-model", base_url=fake.base_url, api_key_env=None)
        agent = Agent(name="adder", model=model, instructions="You add.", tools=[add])
        async with serving(agent) as srv, srv.openai() as client:
            texts: list[str] = []
            for _ in range(3):
                answer = await client.chat.completions.create(
                    model="adder", messages=[{"role": "user", "content": "2 + 3?"}]
                )
                texts.append(answer.choices[0].message.content or "")
            stream = await client.chat.completions.create(
                model="adder", messages=[{"role": "user", "content": "2 + 3?"}], stream=True
            )
            texts.append("".join([c.choices[0].delta.content or "" async for c in stream]))
    assert texts == [REPLY] * 4
    assert len(fake.requests) == 8  # two model calls a turn
    assert len(fake.connections) == 1, fake.connections
