"""An input sent as a run ends is answered in that run or refused: never accepted and lost.

A reply ends a run: one step commit writes it with the ``Final`` checkpoint and seals the input
queue, unless inputs are waiting, in which case they are delivered and the run loops
(docs/loop.md, step 7); the segment then ends. An input that comes in anywhere in that stretch
(while the reply is committed, between that commit and the segment's end, as the segment
ends, after it) must meet exactly one of two fates: its ``send`` is refused with
``RunEndedError`` and the run completes with the reply it had, or its ``send`` is accepted and
the run goes on to answer it, the model seeing it exactly once.

Each test sweeps the moment of sending (:data:`SWEEP`): while the model's call is held, ever
closer to its reply, ever later after it, after the run's result. So every await on the way to
the run's end is met by some moment, whatever store operations the runtime uses there. The
sender is this runtime's handle or another store of this process on the same database.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path

import pytest

from reverie import Agent, RunHandle, Runtime, Scope
from reverie.core.messages import ModelRequest, ModelResponse
from reverie.errors import RunEndedError
from reverie.testing import ScriptedModel, reply
from runtime.runtime_support import (
    NEEDS_POSTGRES,
    memory_database,
    postgres_database,
    sqlite_database,
)

SCOPE = Scope(tenant="acme", user="ana")

LEADS = (45, 30, 22, 17, 13, 10, 8, 6, 5, 4, 3, 2, 1, 0)
"""Loop turns the model's reply waits after the send began (the send starts as it is called)."""

LAGS = (1, 2, 3, 4, 5, 6, 8, 10, 13, 17, 22, 30, 45, 70)
"""Loop turns after the model's reply at which the send begins."""

SWEEP = [("gate", 0)] + [("lead", n) for n in LEADS] + [("lag", n) for n in LAGS] + [("after", 0)]
"""Every moment of sending, in order: while the call is held until the input is in (answered,
whatever the store); then ever closer to the reply and ever later after it; then after the
run's result (refused, whatever the store). Between the two ends lies every await of the
run's end, on any store and whatever operations the runtime uses there."""

Send = Callable[[RunHandle, str], Awaitable[None]]
"""``send(handle, kind)``: send a ``kind`` input to the run; raises ``RunEndedError`` if its
queue is sealed."""

Opened = tuple[Runtime, Send]


@contextlib.asynccontextmanager
async def own_handle(url: str) -> AsyncIterator[Opened]:
    async with Runtime.open(url) as rt:

        async def send(h: RunHandle, kind: str) -> None:
            if kind == "steering":
                await h.steer("then do Y")
            else:
                await h.follow_up("then do Y")

        yield rt, send


@contextlib.asynccontextmanager
async def other_store(url: str) -> AsyncIterator[Opened]:
    async with Runtime.open(url) as rt, Runtime.open(url) as other:

        async def send(h: RunHandle, kind: str) -> None:
            await other.send_input(h.run_id, kind, "then do Y")  # type: ignore[arg-type]

        yield rt, send


SENDERS = [
    pytest.param(memory_database, own_handle, id="memory-own-handle"),
    pytest.param(sqlite_database, own_handle, id="sqlite-own-handle"),
    pytest.param(sqlite_database, other_store, id="sqlite-another-store"),
    pytest.param(postgres_database, own_handle, id="postgres-own-handle", marks=NEEDS_POSTGRES),
    pytest.param(postgres_database, other_store, id="postgres-another-store", marks=NEEDS_POSTGRES),
]


def user_texts(request: ModelRequest) -> list[str]:
    return [m.content for m in request.messages if m.role == "user"]


async def _one_ending(rt: Runtime, send: Send, kind: str, when: tuple[str, int], user: str) -> str:
    """Send ``kind`` at moment ``when`` of :data:`SWEEP`; check its fate; say it."""
    how, turns = when
    called, sent = asyncio.Event(), asyncio.Event()
    seen: list[list[str]] = []

    async def script(request: ModelRequest) -> ModelResponse:
        seen.append(user_texts(request))
        if len(seen) == 1:
            called.set()
            if how == "gate":
                await sent.wait()
            for _ in range(turns if how == "lead" else 0):
                await asyncio.sleep(0)
            return reply("first answer")
        return reply("second answer")

    agent = Agent(name="a", model=ScriptedModel(script))
    scope = Scope(tenant=SCOPE.tenant, user=user)
    h = await rt.start(agent, "do X", scope=scope)
    await called.wait()
    if how == "lag":
        for _ in range(turns + 1):  # the first turn lets the model's call return
            await asyncio.sleep(0)
    elif how == "after":
        await h.result()
    try:
        await send(h, kind)
    except RunEndedError:
        fate = "refused"
    else:
        fate = "answered"
    sent.set()
    r = await asyncio.wait_for(h.result(), 60)
    assert r.status == "completed", r.exit
    if fate == "refused":
        assert (r.text, seen) == ("first answer", [["do X"]])
    else:
        assert (r.text, seen) == ("second answer", [["do X"], ["do X", "then do Y"]])
    # The thread as stored agrees: the next turn sees the input exactly as often as it was
    # answered, after the reply it followed.
    nxt: list[list[str]] = []

    async def again(request: ModelRequest) -> ModelResponse:
        nxt.append(user_texts(request))
        return reply("third")

    await rt.run(
        Agent(name="a", model=ScriptedModel(again)), "next", scope=scope, thread_id=h.thread_id
    )
    expected = ["do X", "then do Y", "next"] if fate == "answered" else ["do X", "next"]
    assert nxt == [expected]
    return fate


@pytest.mark.parametrize("kind", ["follow_up", "steering"])
@pytest.mark.parametrize(("database", "opened"), SENDERS)
async def test_an_input_sent_as_the_run_ends_is_answered_once_or_refused_never_lost(
    tmp_path: Path,
    database: Callable[[Path], contextlib.AbstractAsyncContextManager[str]],
    opened: Callable[[str], contextlib.AbstractAsyncContextManager[Opened]],
    kind: str,
) -> None:
    fates: list[str] = []
    async with database(tmp_path) as url, opened(url) as (rt, send):
        for i, when in enumerate(SWEEP):
            fates.append(await _one_ending(rt, send, kind, when, user=f"u{i}"))
    # Both ends of the sweep are certain (a store's operations may take a thread's time, so the
    # moments between need not be in order); every moment kept its invariant above.
    assert (fates[0], fates[-1]) == ("answered", "refused"), fates
