"""The fast ``replace`` used for loop state equals ``dataclasses.replace``."""

from __future__ import annotations

import dataclasses

import pytest

from reverie.core.events import (
    AssistantMessage,
    CheckpointEvent,
    ModelRequested,
    RunEvent,
    TextDeltaEvent,
    ToolFinished,
    ToolStarted,
    event_to_dict,
)
from reverie.core.fastcopy import fast_frozen, from_fields, maker, replace
from reverie.core.limits import Limits
from reverie.core.messages import Message, ToolCall
from reverie.core.transcript import NewItem, TranscriptItem, placed
from reverie.loop.family import LoopFamily
from reverie.loop.state import BudgetLedger, LoopExecutionState
from reverie.loop.strategies import DefaultRecovery
from reverie.runtime.window import to_message


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


@fast_frozen
@dataclasses.dataclass(frozen=True)
class _Row:
    ref: str
    seq: int = 0
    meta: dict[str, int] = dataclasses.field(default_factory=dict)
    label: str = dataclasses.field(init=False, default="made")
    tags: list[str] = dataclasses.field(init=False, default_factory=list)
    note: str | None = dataclasses.field(default=None, kw_only=True)


@dataclasses.dataclass(frozen=True)
class _StandardRow:
    """``_Row`` as the dataclass itself builds it."""

    ref: str
    seq: int = 0
    meta: dict[str, int] = dataclasses.field(default_factory=dict)
    label: str = dataclasses.field(init=False, default="made")
    tags: list[str] = dataclasses.field(init=False, default_factory=list)
    note: str | None = dataclasses.field(default=None, kw_only=True)


def _fields(value: object) -> dict[str, object]:
    return {f.name: getattr(value, f.name) for f in dataclasses.fields(value)}  # type: ignore[arg-type]


def test_fast_frozen_init_builds_what_the_dataclass_init_builds() -> None:
    assert _fields(_Row("a")) == _fields(_StandardRow("a"))
    assert _fields(_Row("b", 2, {"x": 1}, note="n")) == _fields(
        _StandardRow("b", 2, {"x": 1}, note="n")
    )
    assert _fields(_Row(ref="c", seq=3)) == _fields(_StandardRow(ref="c", seq=3))
    with pytest.raises(TypeError):
        _Row()  # type: ignore[call-arg]
    with pytest.raises(TypeError):
        _Row("a", 1, {}, "positional note")  # type: ignore[call-arg]


def test_fast_frozen_default_factories_give_each_value_its_own() -> None:
    first, second = _Row("a"), _Row("b")
    assert first.meta is not second.meta and first.tags is not second.tags


def test_fast_frozen_values_stay_frozen_and_compare_as_dataclasses() -> None:
    row = _Row("a", 1)
    with pytest.raises(dataclasses.FrozenInstanceError):
        row.seq = 2  # type: ignore[misc]
    assert row == _Row("a", 1) and row != _Row("a", 2)
    assert repr(row) == "_Row(ref='a', seq=1, meta={}, label='made', tags=[], note=None)"


def test_fast_frozen_refuses_classes_it_cannot_build() -> None:
    @dataclasses.dataclass(frozen=True, slots=True)
    class Slotted:
        value: int

    @dataclasses.dataclass(frozen=True)
    class Checked:
        value: int

        def __post_init__(self) -> None:
            pass

    @dataclasses.dataclass
    class Mutable:
        value: int

    for cls in (Slotted, Checked, Mutable):
        with pytest.raises(TypeError):
            fast_frozen(cls)


def test_fast_replace_of_a_fast_frozen_value_equals_dataclasses_replace() -> None:
    @fast_frozen
    @dataclasses.dataclass(frozen=True, kw_only=True)
    class Point:
        x: int
        y: int = 0

    point = Point(x=1, y=2)
    copy = replace(point, y=3)
    assert copy == dataclasses.replace(point, y=3) and point == Point(x=1, y=2)
    with pytest.raises(dataclasses.FrozenInstanceError):
        copy.x = 5  # type: ignore[misc]
    with pytest.raises(TypeError, match="nope"):
        replace(point, nope=1)


def test_the_loop_state_is_built_fast_and_stays_frozen() -> None:
    state = LoopExecutionState(iteration=1)
    assert "__slots__" not in type(state).__dict__
    with pytest.raises(dataclasses.FrozenInstanceError):
        state.iteration = 2  # type: ignore[misc]
    assert replace(state, iteration=2).budget is state.budget


def test_from_fields_makes_the_value_the_dataclass_init_makes() -> None:
    @fast_frozen
    @dataclasses.dataclass(frozen=True, kw_only=True)
    class Point:
        x: int
        y: int = 0

    point = from_fields(Point, {"x": 1, "y": 2})
    assert point == Point(x=1, y=2) and repr(point) == repr(Point(x=1, y=2))
    with pytest.raises(dataclasses.FrozenInstanceError):
        point.x = 5  # type: ignore[misc]
    assert replace(point, y=3) == Point(x=1, y=3)


def test_from_fields_refuses_a_missing_field_and_a_class_fast_frozen_did_not_make() -> None:
    @fast_frozen
    @dataclasses.dataclass(frozen=True, kw_only=True)
    class Point:
        x: int
        y: int = 0

    @dataclasses.dataclass(frozen=True)
    class Plain:
        x: int

    with pytest.raises(TypeError, match="every field"):
        from_fields(Point, {"x": 1})  # a default is not filled in: every field is named
    with pytest.raises(TypeError, match="fast_frozen"):
        from_fields(Plain, {"x": 1})


def test_a_placed_row_is_the_row_the_dataclass_init_builds() -> None:
    call = ToolCall(id="c1", name="add", arguments={"a": 1})
    item = NewItem(
        role="assistant",
        content="text",
        tool_calls=(call,),
        tool_call_id="t",
        name="n",
        input_id="i",
        meta={"k": [1]},
    )
    row = placed(item, ref="itm_1", seq=3, thread_id="thr", run_id="run")
    expected = TranscriptItem(
        ref="itm_1",
        seq=3,
        thread_id="thr",
        run_id="run",
        role="assistant",
        content="text",
        tool_calls=(call,),
        tool_call_id="t",
        name="n",
        input_id="i",
        meta={"k": [1]},
    )
    assert row == expected and vars(row) == vars(expected)
    assert row.meta is not item.meta  # the row's meta is its own
    assert placed(item, ref="r", seq=1, thread_id="t", run_id=None, content="other").content == (
        "other"
    )


def test_a_rows_message_is_the_message_the_dataclass_init_builds() -> None:
    call = ToolCall(id="c1", name="add", arguments={"a": 1})
    row = placed(
        NewItem(role="assistant", content="x", tool_calls=(call,)),
        ref="r",
        seq=1,
        thread_id="t",
        run_id="u",
    )
    message = to_message(row)
    expected = Message(role="assistant", content="x", tool_calls=(call,))
    assert message == expected and vars(message) == vars(expected)


def test_a_maker_builds_the_value_the_class_call_builds() -> None:
    @fast_frozen
    @dataclasses.dataclass(frozen=True, kw_only=True)
    class Point:
        x: int
        y: int = 0
        tags: dict[str, int] = dataclasses.field(default_factory=dict)

    make = maker(Point)
    point = make(x=1)
    assert point == Point(x=1) and list(vars(point)) == ["x", "y", "tags"]
    assert make(x=1).tags is not point.tags  # each value gets its own default
    with pytest.raises(dataclasses.FrozenInstanceError):
        point.x = 2  # type: ignore[misc]
    with pytest.raises(TypeError):
        make(y=2)  # type: ignore[call-arg]


def test_a_maker_is_only_for_fast_frozen_classes() -> None:
    @dataclasses.dataclass(frozen=True)
    class Plain:
        x: int

    with pytest.raises(TypeError, match="not a fast_frozen class"):
        maker(Plain)


def test_the_loops_events_built_by_makers_are_objects_with_kind_first() -> None:
    # event_to_dict copies these events' __dict__: its order must be the fields' order.
    events: list[RunEvent] = [
        maker(ToolStarted)(run_id="r", call_id="c", tool="t", attempt=1),
        maker(ToolFinished)(run_id="r", call_id="c", tool="t", outcome="failed", error_kind="x"),
        maker(ModelRequested)(run_id="r", iteration=1, tools=2, attempt=0, model="m"),
        maker(AssistantMessage)(run_id="r", text="t", tool_calls=("a",)),
        maker(CheckpointEvent)(run_id="r", checkpoint_kind="BeforeModel", iteration=3),
        maker(TextDeltaEvent)(run_id="r", text="t"),
    ]
    for event in events:
        assert event_to_dict(event) == dataclasses.asdict(event)
        assert list(event_to_dict(event)) == [f.name for f in dataclasses.fields(event)]
