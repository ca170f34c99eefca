"""A CLI session (``reverie serve``, ``worker``, ``chat``, ...) keeps one SDK client per model.

The session enters its agents' models for its whole life, so every call of every run reuses
the model's client and connections, instead of building a client per call that only the cyclic
garbage collector frees (a server's memory grew with every turn that way).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from reverie import Scope
from reverie.cli.common import open_session
from reverie.config import build_agents, load_config
from reverie.testing.fake_openai import FakeOpenAIServer, FakeReply, FakeToolCall

REPLY = "2 + 3 = 5."


def add_then_reply(body: dict[str, Any]) -> FakeReply:
    if body["messages"][-1]["role"] == "tool":
        return FakeReply(text=REPLY)
    return FakeReply(tool_calls=(FakeToolCall("add", {"a": 2, "b": 3}),))


async def test_a_session_makes_every_call_of_its_runs_on_one_kept_connection(
    tmp_path: Path,
) -> None:
    async with FakeOpenAIServer(add_then_reply) as fake:
        path = tmp_path / "reverie.toml"
        path.write_text(
            f"[models.fake]\nbase_url = {json.dumps(fake.base_url)}\n"
            '[agents.adder]\nmodel = "fake:fake-model"\n'
            'tools = ["reverie.cli.demo_tools:add"]\n',
            encoding="utf-8",
        )
        config = load_config(path)
        async with open_session(config, ":memory:", agents=build_agents(config)) as session:
            for _ in range(3):
                result = await session.rt.run(
                    session.agent("adder"), "2 + 3?", scope=Scope(tenant="t", user="u")
                )
                assert result.text == REPLY
    assert len(fake.requests) == 6  # two model calls a run
    assert len(fake.connections) == 1, fake.connections
