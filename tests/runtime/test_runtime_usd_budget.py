"""USD budgets need a price (DESIGN §4.5)."""

from __future__ import annotations

import pytest

from reverie import Agent, Limits, Runtime, Scope, tool
from reverie.core.messages import ModelRequest, ModelResponse, TokenUsage
from reverie.errors import ConfigError
from reverie.models.pricing import Price
from reverie.testing import ScriptedModel, call, reply

SCOPE = Scope(tenant="acme", user="ana")


@tool(effects=set())
def add(a: int, b: int) -> int:
    """Add two integers."""
    return a + b


async def test_usd_limit_without_a_price_is_a_configuration_error() -> None:
    agent = Agent(name="a", model=ScriptedModel([reply("x")]), limits=Limits(max_usd=1.0))
    async with Runtime.open(":memory:") as rt:
        with pytest.raises(ConfigError, match="scripted"):
            await rt.run(agent, "hi", scope=SCOPE)


async def test_usd_budget_is_enforced_from_the_price_table() -> None:
    usage = TokenUsage(input_tokens=1_000_000, output_tokens=0)

    def script(request: ModelRequest) -> ModelResponse:
        # Every response costs $1 (1M input tokens at $1/Mtok); the budget is $2.
        step = call("add", a=1, b=len(model.requests))
        return ModelResponse(parts=step.parts, usage=usage, finish_reason="tool_calls")

    model = ScriptedModel(script, name="priced")
    agent = Agent(name="a", model=model, tools=[add], limits=Limits(max_usd=2.0))
    prices = {"scripted:priced": Price(input_per_mtok=1.0, output_per_mtok=1.0)}
    async with Runtime.open(":memory:", prices=prices) as rt:
        r = await rt.run(agent, "go", scope=SCOPE)
    assert r.status == "failed"
    assert r.exit.kind == "budget_usd"  # type: ignore[union-attr]
    assert r.usage.usd == pytest.approx(2.0)
    assert len(model.requests) == 2  # the third call would exceed the budget: never made
