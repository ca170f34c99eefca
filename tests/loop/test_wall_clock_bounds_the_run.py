"""The wall clock bounds the whole run (DESIGN §20): after a wall-clock exhaustion the
finalizer gets ``Limits.finalizer_grace_s`` (never more than ``wall_clock_s``), not its own
long deadline, so a run ends within ``wall_clock_s`` + that grace whatever the model does."""

from __future__ import annotations

import asyncio

import pytest

from reverie import Agent, Limits, Runtime, Scope
from reverie.core.exits import Failed
from reverie.core.messages import ModelRequest, ModelResponse
from reverie.errors import UsageError
from reverie.testing import ScriptedModel

SCOPE = Scope(tenant="acme", user="ana")
GENEROUS_S = 60.0
"""Far below the finalizer's own 120 s deadline, far above wall clock + grace here."""


async def test_the_wall_clock_bounds_the_whole_run_even_when_the_finalizer_freezes() -> None:
    asked: list[ModelRequest] = []
    frozen = asyncio.Event()  # never set: every call hangs until cut

    async def freeze(request: ModelRequest) -> ModelResponse:
        asked.append(request)
        await frozen.wait()
        raise AssertionError("unreachable")

    agent = Agent(
        name="slow",
        model=ScriptedModel(freeze),
        limits=Limits(wall_clock_s=0.2, finalizer_grace_s=0.2),
    )
    async with Runtime.open(":memory:") as rt:
        result = await asyncio.wait_for(rt.run(agent, "go", scope=SCOPE), GENEROUS_S)

    assert isinstance(result.exit, Failed) and result.exit.kind == "wall_clock_limit"
    assert "did not finish within" in result.exit.safe_summary
    # The run's own call was cut by the wall clock, then the finalizer's by the grace.
    assert len(asked) == 2 and not asked[1].tools


def test_the_finalizer_grace_is_never_more_than_the_wall_clock_itself() -> None:
    assert Limits(wall_clock_s=2, finalizer_grace_s=30).finalizer_grace == 2
    assert Limits(wall_clock_s=90).finalizer_grace == 10.0  # the default grace
    assert Limits().finalizer_grace is None  # no wall clock: the finalizer's own deadline
    assert Limits(finalizer_grace_s=5).narrow(Limits(finalizer_grace_s=3)).finalizer_grace_s == 3
    with pytest.raises(UsageError, match="finalizer_grace_s"):
        Limits(finalizer_grace_s=-1)
