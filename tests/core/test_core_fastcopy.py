"""The fast ``replace`` used for loop state equals ``dataclasses.replace``."""

from __future__ import annotations

import dataclasses

import pytest

from reverie.core.fastcopy import replace
from reverie.core.limits import Limits
from reverie.loop.family import LoopFamily
from reverie.loop.state import BudgetLedger, LoopExecutionState
from reverie.loop.strategies import DefaultRecovery


def test_fast_replace_equals_dataclasses_replace() -> None:
    state = LoopExecutionState(iteration=2, recent_call_signatures=("a",))
    changes = {"iteration": 3, "budget": BudgetLedger(model_calls=4)}
    assert replace(state, **changes) == dataclasses.replace(state, **changes)  # type: ignore[arg-type]


def test_fast_replace_keeps_the_copy_frozen() -> None:
    copy = replace(LoopExecutionState(), iteration=1)
    with pytest.raises(dataclasses.FrozenInstanceError):
        copy.iteration = 2  # type: ignore[misc]


def test_fast_replace_rejects_unknown_fields() -> None:
    with pytest.raises(TypeError, match="nope"):
        replace(LoopExecutionState(), nope=1)


def test_classes_with_post_init_still_validate() -> None:
    from reverie.errors import UsageError

    with pytest.raises(UsageError):
        replace(Limits(), max_iterations=0)


def test_fast_replace_keeps_fields_outside_init() -> None:
    @dataclasses.dataclass(frozen=True, slots=True)
    class Counted:
        value: int
        label: str = dataclasses.field(init=False, default="kept")

    copy = replace(Counted(1), value=2)
    assert (copy.value, copy.label) == (2, "kept")


def test_fast_replace_gives_a_field_outside_init_afresh_as_dataclasses_replace_does() -> None:
    family = LoopFamily(id="f")
    cached = family.identity  # kept on a field outside __init__
    derived = replace(family, recovery=DefaultRecovery(max_tool_retries=7))
    assert derived.identity.digest != cached.digest
    assert derived.identity == dataclasses.replace(family, recovery=derived.recovery).identity
