"""docs/http.md, "Events are stored": the recorder batches a segment's events into few writes."""

from __future__ import annotations

import asyncio
import dataclasses
from collections.abc import Mapping, Sequence
from typing import Any, get_args

import pytest

from reverie import Agent, Limits, Runtime, Scope, tool
from reverie.core.events import (
    AssistantMessage,
    RunEvent,
    RunFinished,
    RunStarted,
    ToolStarted,
    event_from_dict,
    event_to_dict,
)
from reverie.errors import StoreError
from reverie.runtime.event_log import EventRecorder, record_events
from reverie.runtime.events import EventBus
from reverie.store.memory import MemoryStore
from reverie.store.run_events import MAX_RUN_EVENTS
from reverie.testing import ScriptedModel, call, reply

GUARD_S = 60.0
"""A hang guard and a flush window no test waits out: generous for a loaded machine."""
RUN = "run_1"


class CountingStore(MemoryStore):
    """A memory store that records each ``append_run_events`` batch."""

    def __init__(self) -> None:
        super().__init__()
        self.batches: list[list[str]] = []

    async def append_run_events(
        self, run_id: str, events: Sequence[Mapping[str, Any]], *, keep: int = MAX_RUN_EVENTS
    ) -> int:
        self.batches.append([str(e["kind"]) for e in events])
        return await super().append_run_events(run_id, events, keep=keep)


def _tool_started(i: int) -> ToolStarted:
    return ToolStarted(run_id=RUN, call_id=f"c{i}", tool="t")


async def test_events_after_the_first_batch_wait_for_more_and_the_close_stores_them() -> None:
    store, bus = CountingStore(), EventBus()
    recorder = asyncio.ensure_future(record_events(store, RUN, bus, flush_s=GUARD_S))
    bus.emit(RunStarted(run_id=RUN))
    async with asyncio.timeout(GUARD_S):
        while not store.batches:
            await store.wait_run_events(RUN, timeout_s=GUARD_S)
        for i in range(10):
            bus.emit(_tool_started(i))
            await asyncio.sleep(0)  # the recorder runs between events, as it does in a run
        bus.close()
        await recorder

    assert store.batches == [["run_started"], ["tool_started"] * 10]
    stored = await store.run_events(RUN)
    assert [r.seq for r in stored] == list(range(1, 12))
    assert [r.data.get("call_id") for r in stored[1:]] == [f"c{i}" for i in range(10)]


async def test_the_segments_first_events_are_stored_at_once() -> None:
    store, bus = CountingStore(), EventBus()
    recorder = asyncio.ensure_future(record_events(store, RUN, bus, flush_s=GUARD_S))
    bus.emit(RunStarted(run_id=RUN, resumed=True))
    async with asyncio.timeout(GUARD_S):
        while not await store.run_events(RUN):
            await store.wait_run_events(RUN, timeout_s=GUARD_S)
    assert not recorder.done()  # stored while the segment goes on
    bus.close()
    await recorder
    assert store.batches == [["run_started"]]


async def test_a_batch_is_stored_after_its_flush_window_while_the_segment_goes_on() -> None:
    store, bus = CountingStore(), EventBus()
    recorder = asyncio.ensure_future(record_events(store, RUN, bus, flush_s=0.001))
    bus.emit(RunStarted(run_id=RUN))
    bus.emit(_tool_started(0))
    async with asyncio.timeout(GUARD_S):
        while len(await store.run_events(RUN)) < 2:
            await store.wait_run_events(RUN, timeout_s=GUARD_S)
        bus.emit(_tool_started(1))
        while len(await store.run_events(RUN)) < 3:
            await store.wait_run_events(RUN, timeout_s=GUARD_S)
    assert not recorder.done()
    bus.close()
    await recorder


async def test_a_recorder_stopped_by_the_runtime_closing_stores_what_was_emitted() -> None:
    store, bus = CountingStore(), EventBus()
    recorder = asyncio.ensure_future(record_events(store, RUN, bus, flush_s=GUARD_S))
    bus.emit(RunStarted(run_id=RUN))
    async with asyncio.timeout(GUARD_S):
        while not store.batches:
            await store.wait_run_events(RUN, timeout_s=GUARD_S)
    bus.emit(_tool_started(0))
    await asyncio.sleep(0)  # the recorder now waits for the rest of the batch
    bus.emit(_tool_started(1))
    recorder.cancel()
    with pytest.raises(asyncio.CancelledError):
        await recorder

    assert store.batches == [["run_started"], ["tool_started", "tool_started"]]


async def test_a_run_stores_every_event_it_emits_in_fewer_writes_than_events() -> None:
    @tool(effects=set())
    def bump(n: int) -> int:
        """Return n + 1."""
        return n + 1

    steps = 30
    store = CountingStore()
    script = [call("bump", n=i) for i in range(steps)] + [reply("done")]
    agent = Agent(
        name="a",
        model=ScriptedModel(script),
        tools=[bump],
        limits=Limits(max_iterations=steps + 5),
    )
    async with Runtime(store) as rt:
        handle = await rt.start(agent, "go", scope=Scope(tenant="acme", user="ana"))
        emitted = [e.kind async for e in handle.events()]
        assert (await handle.result()).status == "completed"
    stored = [r.kind for r in await store.run_events(handle.run_id, limit=MAX_RUN_EVENTS)]

    assert stored == emitted
    assert stored[-1] == "run_finished"
    assert len(store.batches) < len(stored) / 2  # a step's events share a write


def _example(cls: type[Any]) -> RunEvent:
    values: dict[str, Any] = {}
    for f in dataclasses.fields(cls):
        if f.name == "kind":
            continue
        text = str(f.type)
        if "int" in text:
            values[f.name] = 3
        elif "tuple" in text:
            values[f.name] = ("a", "b")
        elif "dict" in text:
            values[f.name] = {"status": "completed", "nested": {"n": 1}}
        elif "bool" in text:
            values[f.name] = True
        elif "Literal" in text:
            values[f.name] = "fail"
        else:
            values[f.name] = f"{f.name}-value"
    event: RunEvent = cls(**values)
    return event


@pytest.mark.parametrize("cls", get_args(RunEvent), ids=lambda c: c.__name__)
def test_an_events_object_has_kind_first_then_every_field(cls: type[Any]) -> None:
    event = _example(cls)
    data = event_to_dict(event)

    expected = dataclasses.asdict(event)
    assert data == expected
    assert next(iter(data)) == "kind"
    assert list(data)[1:] == [f.name for f in dataclasses.fields(cls) if f.name != "kind"]
    assert event_from_dict(data) == event


def test_a_run_finished_object_does_not_share_the_exit_with_the_event() -> None:
    event = RunFinished(run_id=RUN, status="completed", exit={"status": "completed", "n": {}})
    data = event_to_dict(event)
    data["exit"]["n"]["changed"] = True
    assert event.exit == {"status": "completed", "n": {}}


def test_a_run_finished_object_is_the_exit_copied_as_asdict_copies_it() -> None:
    exit_ = {
        "status": "failed",
        "usage": {"model_calls": 3, "usd": 0.25, "by_model": {"m": [1, 2.5, None, True]}},
        "refs": ("itm_1", "itm_2"),
        "nested": [{"a": ("b", {"c": []})}],
    }
    event = RunFinished(run_id=RUN, status="failed", exit=exit_)
    data = event_to_dict(event)
    assert data == dataclasses.asdict(event)
    assert type(data["exit"]["refs"]) is tuple  # containers keep their own type
    assert type(data["exit"]["nested"][0]["a"]) is tuple
    assert data["exit"]["usage"]["by_model"] is not exit_["usage"]["by_model"]  # type: ignore[index]


def test_an_assistant_messages_tool_names_stay_a_tuple() -> None:
    data = event_to_dict(AssistantMessage(run_id=RUN, text="t", tool_calls=("x",)))
    assert data["tool_calls"] == ("x",)


class BatchingStore(CountingStore):
    """A memory store that also appends many runs' events in one operation (as SQL stores do)."""

    def __init__(self, *, refuse: frozenset[str] = frozenset()) -> None:
        super().__init__()
        self.together: list[dict[str, list[str]]] = []
        self.refuse = refuse
        """Runs whose events every append refuses (a batch holding one is refused whole)."""

    async def append_event_batches(
        self, batches: Mapping[str, Sequence[Mapping[str, Any]]], *, keep: int = MAX_RUN_EVENTS
    ) -> dict[str, int]:
        self.together.append({r: [str(e["kind"]) for e in es] for r, es in batches.items()})
        if self.refuse & set(batches):
            raise StoreError("refused")
        return {r: await MemoryStore.append_run_events(self, r, es) for r, es in batches.items()}

    async def append_run_events(
        self, run_id: str, events: Sequence[Mapping[str, Any]], *, keep: int = MAX_RUN_EVENTS
    ) -> int:
        if run_id in self.refuse:
            raise StoreError("refused")
        return await super().append_run_events(run_id, events, keep=keep)


async def test_one_flush_stores_the_events_of_every_run_together() -> None:
    store = BatchingStore()
    recorder = EventRecorder(store, flush_s=GUARD_S)
    buses = {f"run_{i}": EventBus() for i in range(3)}
    for run_id, bus in buses.items():
        recorder.record(run_id, bus)
    for run_id, bus in buses.items():
        bus.emit(RunStarted(run_id=run_id))  # each segment's first events: stored at once
    await recorder.drain()
    for i, (run_id, bus) in enumerate(buses.items()):
        bus.emit(ToolStarted(run_id=run_id, call_id=f"c{i}", tool="t"))
    for run_id, bus in buses.items():
        bus.close()
        recorder.finish(run_id)
    await recorder.drain()

    assert store.together == [
        {run_id: ["run_started"] for run_id in buses},
        {run_id: ["tool_started"] for run_id in buses},
    ]
    assert store.batches == []  # no run was written alone
    for run_id in buses:
        assert [r.kind for r in await store.run_events(run_id)] == ["run_started", "tool_started"]


async def test_a_refused_batch_is_stored_run_by_run_and_only_the_bad_runs_events_are_lost() -> None:
    store = BatchingStore(refuse=frozenset({"bad"}))
    recorder = EventRecorder(store, flush_s=GUARD_S)
    buses = {run_id: EventBus() for run_id in ("good", "bad", "fine")}
    for run_id, bus in buses.items():
        recorder.record(run_id, bus)
        bus.emit(RunStarted(run_id=run_id))
    await recorder.drain()

    assert [set(batch) for batch in store.together] == [set(buses)]
    assert [r.kind for r in await store.run_events("good")] == ["run_started"]
    assert [r.kind for r in await store.run_events("fine")] == ["run_started"]
    assert await store.run_events("bad") == []


async def test_a_runtime_closing_stores_the_events_of_the_segments_it_stops() -> None:
    in_tool, never = asyncio.Event(), asyncio.Event()

    @tool(effects=set())
    async def hang() -> str:
        """Wait for good."""
        in_tool.set()
        await never.wait()
        return "unreachable"

    store = CountingStore()
    agent = Agent(name="a", model=ScriptedModel([call("hang"), reply("done")]), tools=[hang])
    async with Runtime(store) as rt:
        handle = await rt.start(agent, "go", scope=Scope(tenant="acme", user="ana"))
        await in_tool.wait()
    stored = [r.kind for r in await store.run_events(handle.run_id, limit=MAX_RUN_EVENTS)]
    assert stored[0] == "run_started"
    assert "tool_started" in stored  # emitted within the flush window, stored by the close
