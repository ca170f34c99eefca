"""The wall clock bounds a model call in flight through the official SDK (issue 10): a provider
that holds its answer far past the run's budget is cut at the deadline."""

from __future__ import annotations

import pytest

from reverie import Agent, Limits, Runtime, Scope
from reverie.core.exits import Failed
from reverie.models.openai import OpenAIChatModel
from reverie.testing import FakeOpenAIServer
from reverie.testing.fake_openai import FakeHang

SCOPE = Scope(tenant="acme", user="ana")


async def test_wall_clock_limit_cuts_a_hanging_openai_request(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("OPENAI_API_KEY", "sk-test-123")
    # The server would answer after 60 s, the client would give up after 60 s: only the run's
    # wall clock (0.5 s) can end the run in reasonable time.
    async with FakeOpenAIServer([FakeHang(seconds=60)]) as srv:
        model = OpenAIChatModel("gpt-test", base_url=srv.base_url, timeout_s=60)
        agent = Agent(name="w", model=model, limits=Limits(wall_clock_s=0.5), on_limit="fail")
        async with Runtime.open(":memory:") as rt:
            r = await rt.run(agent, "go", scope=SCOPE)
            rows = await rt.store.thread_items(r.thread_id)

    assert isinstance(r.exit, Failed)
    assert r.exit.kind == "wall_clock_limit"
    assert len(srv.requests) == 1
    assert [row.role for row in rows] == ["user"]
