"""Step commits: a boundary's durable writes are one store operation (docs/internals/storage.md).

A run's start, its segment's start and its segment's end are one store operation each too.

A tool step makes at most two (admit the wave; settle it with the next BeforeModel checkpoint),
a reply step one, and no step reads what the runtime already has (the input queue is read only
when a step commit says something is waiting; the prompt window comes from the segment). A wave
whose calls replay harmlessly (idempotent or pure) settles with no commit of its own: its admit
checkpoint resumes it, its results ride the next step commit, and one read of the input queue
stands in for the settle commit's receipt.
"""

from __future__ import annotations

from collections import Counter
from pathlib import Path
from typing import Any

import pytest

from reverie import Agent, Runtime, Scope, tool
from reverie.core.messages import ModelRequest, ModelResponse
from reverie.core.transcript import NewItem
from reverie.store.memory import MemoryStore
from reverie.store.sqlite import SQLiteStore
from reverie.testing import ScriptedModel, call, calls, reply
from runtime.runtime_support import CountingStore

SCOPE = Scope(tenant="acme", user="ana")


def stepping_agent(steps: int, tool_obj: Any) -> Agent:
    def script(request: ModelRequest) -> ModelResponse:
        done = sum(1 for m in request.messages if m.role == "tool")
        return call(tool_obj.descriptor.name, n=done) if done < steps else reply("done")

    return Agent(name="stepper", model=ScriptedModel(script), tools=[tool_obj])


@tool(effects=set())
def echo(n: int) -> int:
    """Return n."""
    return n


@tool(effects={"write"})
def put(n: int) -> int:
    """Store n (not safe to repeat)."""
    return n


def backend(kind: str, tmp_path: Path) -> Any:
    return MemoryStore() if kind == "memory" else SQLiteStore(tmp_path / "steps.db")


async def counts_for(kind: str, tmp_path: Path, steps: int, tool_obj: Any = put) -> Counter[str]:
    where = tmp_path / f"{tool_obj.descriptor.name}{steps}"
    store = CountingStore(backend(kind, where))
    where.mkdir()
    async with Runtime(store) as rt:
        result = await rt.run(stepping_agent(steps, tool_obj), "go", scope=SCOPE)
        assert result.status == "completed", result.exit
    return store.counts


@pytest.mark.parametrize("kind", ["memory", "sqlite"])
async def test_a_tool_step_makes_two_step_commits_and_no_reads(kind: str, tmp_path: Path) -> None:
    short = await counts_for(kind, tmp_path, 3)
    long = await counts_for(kind, tmp_path, 13)
    per_step = {name: (long[name] - short[name]) / 10 for name in long | short}
    assert per_step.pop("commit_step") == 2
    # A call that must not repeat is durable before it runs and the moment it returns.
    assert (per_step.pop("journal_started"), per_step.pop("journal_finished")) == (1, 1)
    # Nothing else grows with the number of steps: no reads of the window, the inputs or
    # the journal, and no separate writes.
    assert {name: n for name, n in per_step.items() if n} == {}


@pytest.mark.parametrize("kind", ["memory", "sqlite"])
async def test_a_wave_that_replays_harmlessly_makes_one_step_commit_and_one_queue_read(
    kind: str, tmp_path: Path
) -> None:
    short = await counts_for(kind, tmp_path, 3, echo)
    long = await counts_for(kind, tmp_path, 13, echo)
    per_step = {name: (long[name] - short[name]) / 10 for name in long | short}
    # The wave's results ride the next admit commit; the read tells whether an input (a
    # steering message, a stop) arrived while the wave ran, as a settle receipt would.
    assert {name: n for name, n in per_step.items() if n} == {"commit_step": 1, "poll_inputs": 1}


@pytest.mark.parametrize("kind", ["memory", "sqlite"])
async def test_a_reply_step_makes_one_step_commit(kind: str, tmp_path: Path) -> None:
    zero = await counts_for(kind, tmp_path, 0)
    # BeforeModel of the one tick, then the reply with its Final checkpoint and the seal.
    assert zero["commit_step"] == 2
    assert zero["poll_inputs"] <= 1  # the first boundary of the segment reads the queue
    # The opening row is written by start_run, with the run.
    assert zero["save_checkpoint"] == zero["append_items"] == 0


@pytest.mark.parametrize("kind", ["memory", "sqlite"])
async def test_a_reply_only_run_makes_four_store_operations(kind: str, tmp_path: Path) -> None:
    counts = await counts_for(kind, tmp_path, 0)
    # One transaction to start the run and begin its segment, the step commits of its one tick
    # (BeforeModel, then the reply with its Final checkpoint) and one to end it.
    assert dict(counts) == {"start_segment": 1, "commit_step": 2, "end_segment": 1}


@pytest.mark.parametrize("kind", ["memory", "sqlite"])
async def test_a_one_tool_step_run_makes_eight_store_operations(kind: str, tmp_path: Path) -> None:
    counts = await counts_for(kind, tmp_path, 1)
    # The tool step adds its two step commits (admit the wave; settle it before the next call)
    # and the journal records of a call that must not repeat.
    assert dict(counts) == {
        "start_segment": 1,
        "commit_step": 4,
        "journal_started": 1,
        "journal_finished": 1,
        "end_segment": 1,
    }


@pytest.mark.parametrize("kind", ["memory", "sqlite"])
async def test_a_one_pure_tool_step_run_makes_five_writes_and_one_read(
    kind: str, tmp_path: Path
) -> None:
    counts = await counts_for(kind, tmp_path, 1, echo)
    assert dict(counts) == {
        "start_segment": 1,
        "commit_step": 3,
        "poll_inputs": 1,
        "end_segment": 1,
    }


async def test_a_non_idempotent_call_is_durable_the_moment_it_returns(tmp_path: Path) -> None:
    store = SQLiteStore(tmp_path / "journal.db")
    seen: dict[str, Any] = {}

    @tool(effects={"write"}, idempotent=False)
    async def send(n: int) -> str:
        """Send (must not repeat)."""
        if n == 1:
            # Same wave, no step commit in between: the first call's outcome is durable.
            items = await store.thread_items(seen["thread_id"])
            wave = next(i for i in items if i.role == "assistant" and i.tool_calls)
            key = f"{wave.ref}#0"
            seen["first"] = (await store.journal_get(seen["run_id"], [key])).get(key)
        return f"sent {n}"

    def script(request: ModelRequest) -> ModelResponse:
        if any(m.role == "tool" for m in request.messages):
            return reply("done")
        return calls(("send", {"n": 0}), ("send", {"n": 1}))

    agent = Agent(name="sender", model=ScriptedModel(script), tools=[send])
    async with Runtime(store) as rt:
        handle = await rt.start(agent, "go", scope=SCOPE)
        seen["run_id"], seen["thread_id"] = handle.run_id, handle.thread_id
        result = await handle.result()
    assert result.status == "completed"
    assert seen["first"] is not None and seen["first"].state == "finished"


async def test_a_pure_call_needs_no_started_record(tmp_path: Path) -> None:
    store = CountingStore(MemoryStore())
    async with Runtime(store) as rt:
        result = await rt.run(stepping_agent(2, echo), "go", scope=SCOPE)
    assert result.status == "completed"
    assert store.counts["journal_started"] == store.counts["journal_finished"] == 0


async def test_an_input_arriving_during_a_step_is_read_and_delivered_once(
    tmp_path: Path,
) -> None:
    inner = SQLiteStore(tmp_path / "inputs.db")
    store = CountingStore(inner)
    sent: dict[str, bool] = {}
    requests: list[ModelRequest] = []

    def script(request: ModelRequest) -> ModelResponse:
        requests.append(request)
        done = sum(1 for m in request.messages if m.role == "tool")
        return call("echo", n=done) if done < 3 else reply("done")

    agent = Agent(name="steered", model=ScriptedModel(script), tools=[echo])
    async with Runtime(store) as rt:
        handle = await rt.start(agent, "go", scope=SCOPE)

        async def steer_once(name: str, args: Any, kwargs: Any) -> None:
            # Right before the second step commit: the steering lands between two boundaries.
            if name == "commit_step" and store.counts["commit_step"] == 2 and not sent:
                sent["yes"] = True
                await handle.steer("also mind X")

        store.hook = steer_once
        result = await handle.result()
        items = await inner.thread_items(result.thread_id)
    assert result.status == "completed"
    texts = [m.content for r in requests[-1:] for m in r.messages if m.role == "user"]
    assert texts.count("also mind X") == 1
    assert [i.content for i in items if i.role == "user"].count("also mind X") == 1


@pytest.mark.parametrize("kind", ["memory", "sqlite"])
async def test_an_input_queued_before_the_segment_begins_is_delivered_from_its_first_read(
    kind: str, tmp_path: Path
) -> None:
    # The run starts queued and its segment begins in a begin_segment of its own (as when no
    # slot is free): the input lands between the two.
    store = CountingStore(backend(kind, tmp_path), hide=frozenset({"start_segment"}))
    requests: list[ModelRequest] = []

    def script(request: ModelRequest) -> ModelResponse:
        requests.append(request)
        return reply("done")

    agent = Agent(name="steered", model=ScriptedModel(script))
    async with Runtime(store) as rt:
        handle = await rt.start(agent, "go", scope=SCOPE)

        async def steer_first(name: str, args: Any, kwargs: Any) -> None:
            if name == "begin_segment":
                store.hook = None
                await handle.steer("also mind X")

        store.hook = steer_first
        result = await handle.result()
    assert result.status == "completed"
    # begin_segment read the queue: the first model call sees the input, with no poll.
    assert [m.content for m in requests[0].messages if m.role == "user"] == ["go", "also mind X"]
    assert store.counts["poll_inputs"] == 0


@pytest.mark.parametrize("kind", ["memory", "sqlite"])
async def test_an_input_arriving_after_the_segment_began_is_delivered_once(
    kind: str, tmp_path: Path
) -> None:
    store = CountingStore(backend(kind, tmp_path))
    requests: list[ModelRequest] = []

    def script(request: ModelRequest) -> ModelResponse:
        requests.append(request)
        seen = [m.content for m in request.messages if m.role == "user"]
        return reply("done, minding X") if "also mind X" in seen else call("echo", n=0)

    agent = Agent(name="late", model=ScriptedModel(script), tools=[echo])
    async with Runtime(store) as rt:
        handle = await rt.start(agent, "go", scope=SCOPE)

        async def steer_after_begin(name: str, args: Any, kwargs: Any) -> None:
            # begin_segment has read the queue; the input lands before the first step commit.
            if name == "commit_step":
                store.hook = None
                await handle.steer("also mind X")

        store.hook = steer_after_begin
        result = await handle.result()
        items = await rt.runs.thread_items(result.thread_id)
    assert result.status == "completed"
    assert result.text == "done, minding X"  # the model saw it before answering
    assert [i.content for i in items if i.role == "user"] == ["go", "also mind X"]  # once


async def test_a_foreign_append_under_a_step_resumes_the_run(tmp_path: Path) -> None:
    inner = SQLiteStore(tmp_path / "foreign.db")
    store = CountingStore(inner)
    ran: Counter[str] = Counter()

    @tool(effects={"write"}, idempotent=False)
    async def send(n: int) -> str:
        """Send (must not repeat)."""
        ran[str(n)] += 1
        return f"sent {n}"

    def script(request: ModelRequest) -> ModelResponse:
        done = sum(1 for m in request.messages if m.role == "tool")
        return call("send", n=done) if done < 2 else reply("done")

    agent = Agent(name="sender", model=ScriptedModel(script), tools=[send])
    async with Runtime(store, agents=[agent]) as rt:
        handle = await rt.start(agent, "go", scope=SCOPE)
        appended: dict[str, bool] = {}

        async def foreign(name: str, args: Any, kwargs: Any) -> None:
            # Before the step that writes the first assistant row: the thread moved under it.
            if name == "commit_step" and store.counts["commit_step"] == 2 and not appended:
                appended["yes"] = True
                await inner.append_items(
                    handle.thread_id,
                    None,
                    [NewItem(role="user", content="from elsewhere")],
                    fence=None,
                )

        store.hook = foreign
        result = await handle.result()
        items = await inner.thread_items(handle.thread_id)
    assert appended
    assert result.status == "completed", result.exit
    assert ran == Counter({"0": 1, "1": 1})  # no side effect twice
    assert [i.content for i in items].count("from elsewhere") == 1
    assert [i.role for i in items].count("assistant") == 3  # two waves and the reply, once
