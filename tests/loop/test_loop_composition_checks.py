"""Small departures fixed: a family is checked when it is built, a model strategy's index is
checked when it is used, a no-progress window the state cannot hold is refused, and a call
signature over arguments outside canonical JSON still tells calls apart."""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any

import pytest

from reverie import Agent, Runtime, Scope
from reverie.core.exits import Failed
from reverie.core.messages import ToolCall
from reverie.errors import ConfigError, UsageError
from reverie.loop.family import LoopFamily, default_families
from reverie.loop.signatures import call_signature
from reverie.loop.state import RING, LoopExecutionState
from reverie.loop.strategies import PrimaryModel, RepetitionStop
from reverie.testing import ScriptedModel, reply

SCOPE = Scope(tenant="acme", user="ana")


class PastTheEnd(PrimaryModel):
    """A model strategy with a bug: it selects a model the agent does not have."""

    def select(self, state: LoopExecutionState) -> int:
        return 3

    def describe(self) -> Mapping[str, Any]:
        return {"index": 3}


async def test_an_out_of_range_model_index_is_a_typed_failure_never_clamped() -> None:
    primary = ScriptedModel([reply("from the primary")], name="primary")
    default, *rest = default_families()
    broken = dataclasses.replace(default, model=PastTheEnd())
    async with Runtime.open(":memory:", families=[broken, *rest]) as rt:
        r = await rt.run(Agent(name="a", model=primary), "hi", scope=SCOPE)
    assert r.status == "failed"
    assert isinstance(r.exit, Failed) and r.exit.kind == "driver_bug"
    assert "selected model 3" in r.exit.safe_summary and "has 1" in r.exit.safe_summary
    assert primary.requests == []  # never sent to another model in its place


class NoPlan:
    """Not a context strategy: it has no ``plan``."""

    def describe(self) -> Mapping[str, Any]:
        return {}


class Unhashable:
    """A context strategy whose configuration is not JSON."""

    def plan(self, state: LoopExecutionState) -> Any:
        raise AssertionError("never called")

    def describe(self) -> Mapping[str, Any]:
        return {"when": object()}


def test_a_family_built_from_an_incompatible_composition_raises_at_build_time() -> None:
    with pytest.raises(UsageError, match="context strategy NoPlan lacks plan"):
        LoopFamily(id="broken", context=NoPlan())  # type: ignore[arg-type]
    with pytest.raises(UsageError, match="describe"):
        LoopFamily(id="odd", context=Unhashable())
    with pytest.raises(UsageError, match="non-empty id"):
        LoopFamily(id=" ")
    with pytest.raises(UsageError, match="LoopFamily values"):
        Runtime.open(":memory:", families=[object()])  # type: ignore[list-item]


@pytest.mark.parametrize(
    "settings",
    [
        {"signature_window": RING + 4},
        {"failure_run": RING + 1},
        {"signature_window": 0},
        {"repeat_threshold": 6, "signature_window": 5},
    ],
)
def test_a_no_progress_window_the_state_cannot_hold_is_a_config_error(
    settings: dict[str, int],
) -> None:
    with pytest.raises(ConfigError, match="RepetitionStop"):
        RepetitionStop(**settings)
    assert RepetitionStop(signature_window=RING, failure_run=RING).signature_window == RING


def test_calls_with_nan_arguments_are_told_apart_and_a_repeat_is_still_a_repeat() -> None:
    nan = float("nan")
    first = ToolCall(id="1", name="plot", arguments={"x": nan, "y": 1})
    again = ToolCall(id="2", name="plot", arguments={"y": 1, "x": nan})
    other = ToolCall(id="3", name="plot", arguments={"x": nan, "y": 2})
    infinite = ToolCall(id="4", name="plot", arguments={"x": float("inf"), "y": 1})
    assert call_signature(first) == call_signature(again)  # key order never matters
    assert call_signature(first) != call_signature(other)
    assert call_signature(first) != call_signature(infinite)
    # Never equal to a canonical body's signature.
    assert call_signature(first) != call_signature(
        ToolCall(id="5", name="plot", arguments={"x": "NaN", "y": 1})
    )
