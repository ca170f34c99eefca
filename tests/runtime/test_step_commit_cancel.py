"""A step commit whose caller is cancelled after the store committed it (docs/durability.md).

The store wrote the step (rows, journal, checkpoint) but the segment never learns it: its task
is cancelled at the await (a shutdown), or the run is cancelled while the answer is on its way.
The run must still end with every row once — none written twice, none lost — whichever
boundary it was.
"""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest

from reverie import Agent, Runtime, Scope, tool
from reverie.core.messages import ModelRequest, ModelResponse
from reverie.store.base import StepWrite
from reverie.store.memory import MemoryStore
from reverie.store.sqlite import SQLiteStore
from reverie.testing import ScriptedModel, call, reply

SCOPE = Scope(tenant="acme", user="ana")


@tool(effects=set())
def echo(n: int) -> int:
    """Return n (pure: its results ride the next admit or Final commit, no BeforeModel)."""
    return n


@tool(effects={"write"})
def note(n: int) -> int:
    """Record n (not repeatable: its wave settles with a BeforeModel commit of its own)."""
    return n


TOOLS = {"pure": echo, "write": note}


def agent_for(tool_kind: str) -> Agent:
    name = TOOLS[tool_kind].descriptor.name

    def script(request: ModelRequest) -> ModelResponse:
        if any(m.role == "tool" for m in request.messages):
            return reply("done")
        return call(name, n=7)

    return Agent(name="stepper", model=ScriptedModel(script), tools=[TOOLS[tool_kind]])


class CancelledAfterCommit:
    """A store whose caller does not get the answer to one step commit (the ``nth`` with a
    ``kind`` checkpoint): the step is written, then the await hangs."""

    def __init__(self, inner: Any, kind: str, nth: int = 1) -> None:
        self._inner = inner
        self._kind = kind
        self._left = nth
        self.landed = asyncio.Event()
        self.answer = asyncio.Event()
        """Set: the hung commit answers after all (else only a cancellation ends its wait)."""

    def __getattr__(self, name: str) -> Any:
        return getattr(self._inner, name)

    async def commit_step(self, run_id: str, step: StepWrite, *, fence: int) -> Any:
        receipt = await self._inner.commit_step(run_id, step, fence=fence)
        if step.checkpoint_kind == self._kind:
            self._left -= 1
        if self._left == 0 and not self.landed.is_set():
            self.landed.set()
            await self.answer.wait()  # committed; the caller is cancelled while it waits
        return receipt


def backend(kind: str, tmp_path: Path) -> Any:
    return MemoryStore() if kind == "memory" else SQLiteStore(tmp_path / "steps.db")


@pytest.mark.parametrize("store_kind", ["memory", "sqlite"])
@pytest.mark.parametrize(
    ("boundary", "nth", "tool_kind"),
    [
        ("BeforeModel", 1, "pure"),
        ("BeforeSideEffect", 1, "pure"),
        ("Final", 1, "pure"),
        ("BeforeSideEffect", 1, "write"),
        ("BeforeModel", 2, "write"),
        ("Final", 1, "write"),
    ],
)
async def test_a_step_commit_cancelled_after_it_landed_writes_no_row_twice_and_loses_none(
    store_kind: str, boundary: str, nth: int, tool_kind: str, tmp_path: Path
) -> None:
    store = backend(store_kind, tmp_path)
    cancelled = CancelledAfterCommit(store, boundary, nth)
    agent = agent_for(tool_kind)
    rt = Runtime(cancelled)
    await rt.__aenter__()
    handle = await rt.start(agent, "go", scope=SCOPE)
    await asyncio.wait_for(cancelled.landed.wait(), timeout=30)
    await rt.aclose()  # cancels the segment at the await of the commit that landed

    async with Runtime(store, agents=[agent]) as fresh:
        [result] = await fresh.recover()
        rows = await fresh.store.thread_items(handle.thread_id)
    assert (result.run_id, result.status, result.text) == (handle.run_id, "completed", "done")
    assert [(r.role, r.content) for r in rows] == [
        ("user", "go"),
        ("assistant", ""),
        ("tool", "7"),
        ("assistant", "done"),
    ]
    assert [r.seq for r in rows] == sorted({r.seq for r in rows})
    assert len({r.ref for r in rows}) == len(rows)


@pytest.mark.parametrize("store_kind", ["memory", "sqlite"])
@pytest.mark.parametrize(
    ("boundary", "nth", "tool_kind", "rows_after"),
    [
        ("BeforeModel", 1, "pure", []),
        (
            "BeforeSideEffect",
            1,
            "pure",
            [("tool", "cancelled: the run ended before this call ran")],
        ),
        (
            "BeforeSideEffect",
            1,
            "write",
            [("tool", "cancelled: the run ended before this call ran")],
        ),
        ("BeforeModel", 2, "write", [("tool", "7")]),
    ],
)
async def test_a_run_cancelled_while_a_landed_step_commit_answers_ends_with_every_row_once(
    store_kind: str,
    boundary: str,
    nth: int,
    tool_kind: str,
    rows_after: list[tuple[str, str]],
    tmp_path: Path,
) -> None:
    store = backend(store_kind, tmp_path)
    slow = CancelledAfterCommit(store, boundary, nth)
    agent = agent_for(tool_kind)
    async with Runtime(slow) as rt:
        handle = await rt.start(agent, "go", scope=SCOPE)
        await asyncio.wait_for(slow.landed.wait(), timeout=30)
        assert await rt.cancel(handle.run_id, reason="stop") is None  # the segment ends it
        slow.answer.set()
        result = await handle.result()
        rows = await rt.store.thread_items(handle.thread_id)
    assert (result.status, getattr(result.exit, "reason", None)) == ("cancelled", "stop")
    wave = [("assistant", ""), *rows_after] if rows_after else []
    assert [(r.role, r.content) for r in rows] == [("user", "go"), *wave]
    assert len({r.ref for r in rows}) == len({r.seq for r in rows}) == len(rows)
