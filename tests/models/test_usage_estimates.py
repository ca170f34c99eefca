"""Usage is honest (DESIGN §20): an endpoint that reports no usage in its streams is estimated
locally, marked so, and still binds ``max_tokens`` and ``max_usd`` — never counted 0."""

from __future__ import annotations

from typing import Any

from reverie import Agent, Limits, Runtime, Scope, tool
from reverie.models.estimate import CHARS_PER_TOKEN, estimate_tokens
from reverie.models.openai import OpenAIChatModel
from reverie.models.pricing import Price
from reverie.testing import FakeOpenAIServer, call

SCOPE = Scope(tenant="acme", user="ana")


@tool(effects=set())
def add(a: int, b: int) -> int:
    """Add two integers."""
    return a + b


def agent_for(srv: FakeOpenAIServer, **kwargs: Any) -> Agent:
    model = OpenAIChatModel("local", base_url=srv.base_url, api_key_env=None, name="llamacpp:x")
    return Agent(name="calc", model=model, tools=[add], **kwargs)


ADDING = [call("add", a=i, b=i) for i in range(8)] + ["done"]


async def test_a_token_budget_trips_against_an_endpoint_that_sends_no_usage_in_streams() -> None:
    async with FakeOpenAIServer(ADDING, usage_in_streams=False) as srv:
        agent = agent_for(srv, limits=Limits(max_tokens=400), on_limit="fail")
        async with Runtime.open(":memory:") as rt:
            r = await rt.run(agent, "add numbers until told to stop", scope=SCOPE)
    assert r.status == "failed"
    assert r.exit.kind == "token_limit"  # type: ignore[union-attr]
    assert r.usage.estimated
    assert r.usage.input_tokens > 0 and r.usage.output_tokens > 0


async def test_a_usd_budget_trips_against_an_endpoint_that_sends_no_usage_in_streams() -> None:
    prices = {"llamacpp:x": Price(input_per_mtok=10_000.0, output_per_mtok=10_000.0)}
    async with FakeOpenAIServer(ADDING, usage_in_streams=False) as srv:
        agent = agent_for(srv, limits=Limits(max_usd=5.0), on_limit="fail")
        async with Runtime.open(":memory:", prices=prices) as rt:
            r = await rt.run(agent, "add numbers until told to stop", scope=SCOPE)
    assert r.status == "failed"
    assert r.exit.kind == "budget_usd"  # type: ignore[union-attr]
    assert r.usage.usd > 0 and r.usage.estimated


async def test_an_estimated_usage_is_marked_per_model_and_a_reported_one_is_not() -> None:
    async with (
        FakeOpenAIServer(["Hello there!"], usage_in_streams=False) as srv,
        Runtime.open(":memory:") as rt,
    ):
        r = await rt.run(agent_for(srv), "hi", scope=SCOPE)
    assert r.usage.estimated and r.usage.by_model["llamacpp:x"].estimated
    assert r.usage.output_tokens == estimate_tokens("Hello there!")
    assert r.usage.to_dict()["estimated"] is True
    async with FakeOpenAIServer(["Hello there!"]) as srv, Runtime.open(":memory:") as rt:
        r = await rt.run(agent_for(srv), "hi", scope=SCOPE)
    assert not r.usage.estimated and "estimated" not in r.usage.to_dict()


async def test_an_endpoint_declaring_no_usage_in_streams_is_not_asked_for_it() -> None:
    async with FakeOpenAIServer(["Hi."]) as srv:
        model = OpenAIChatModel("m", base_url=srv.base_url, api_key_env=None, server="lmstudio")
        async with Runtime.open(":memory:") as rt:
            r = await rt.run(Agent(name="a", model=model), "hi", scope=SCOPE)
    assert "stream_options" not in srv.requests[0]
    assert r.usage.estimated


def test_the_estimate_is_one_token_per_three_characters_rounded_up() -> None:
    assert CHARS_PER_TOKEN == 3
    assert [estimate_tokens("x" * n) for n in (0, 1, 3, 4, 300)] == [0, 1, 1, 2, 100]


async def test_a_request_refused_with_a_status_is_charged_no_tokens() -> None:
    from reverie.testing.fake_openai import FakeError, FakeReply

    steps = [FakeError(429), FakeReply(text="Hi.", input_tokens=7, output_tokens=2)]
    async with FakeOpenAIServer(steps) as srv, Runtime.open(":memory:") as rt:
        r = await rt.run(agent_for(srv), "hi", scope=SCOPE)
    assert r.status == "completed"
    assert (r.usage.model_calls, r.usage.input_tokens, r.usage.output_tokens) == (2, 7, 2)
    assert not r.usage.estimated
