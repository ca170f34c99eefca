"""A crash at any store await: the run resumes, completes, and no side effect runs twice.

Every store call the runtime makes while advancing a run is an await where a worker can die.
For each of them, before and after the call takes effect, this test kills the run right there
(an exception no handler catches, like a dying process) and resumes it with a fresh runtime on
the same store. The SIGKILL tests in this folder do the same with real processes at chosen points;
this one covers every point.
"""

from __future__ import annotations

import time
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

from reverie import Agent, Runtime, Scope, tool
from reverie.core.messages import ModelRequest, ModelResponse
from reverie.store.memory import MemoryStore
from reverie.store.sqlite import SQLiteStore
from reverie.testing import ScriptedModel, call, calls, reply

SCOPE = Scope(tenant="acme", user="ana")


class Crash(BaseException):
    """Not an Exception: no `except Exception` in the runtime can turn it into a result."""


_EVENT_LOG = frozenset({"append_run_events", "run_events", "wait_run_events"})
"""The run event log is written beside the run, not by it (a failed write is logged and the run
goes on), so its awaits are not crash points of the run."""


class CrashingStore:
    """A MemoryStore whose n-th call (counted once armed) dies before or after taking effect."""

    def __init__(self, inner: Any, at: int | None, when: str) -> None:
        self._inner, self._at, self._when = inner, at, when
        self.calls = 0
        self.armed = False

    def __getattr__(self, name: str) -> Any:
        target = getattr(self._inner, name)
        if not callable(target) or name in ("open", "close") or name in _EVENT_LOG:
            return target

        async def wrapped(*args: Any, **kwargs: Any) -> Any:
            if not self.armed:
                return await target(*args, **kwargs)
            self.calls += 1
            crash_here = self.calls == self._at
            if crash_here and self._when == "before":
                self.armed = False
                raise Crash(name)
            result = await target(*args, **kwargs)
            if crash_here:
                self.armed = False
                raise Crash(name)
            return result

        return wrapped


def make_agent(sent: Counter[str]) -> Agent:
    @tool(effects={"read"}, idempotent=True)
    async def lookup(key: str) -> str:
        """Read a value."""
        return f"value of {key}"

    @tool(effects={"write"}, idempotent=False)
    async def send(to: str) -> str:
        """Send a message (a side effect that must not repeat)."""
        sent[to] += 1
        return f"sent to {to}"

    def script(request: ModelRequest) -> ModelResponse:
        results = sum(1 for m in request.messages if m.role == "tool")
        if results == 0:
            return calls(("lookup", {"key": "a"}), ("send", {"to": "x"}))
        if results == 2:
            return call("send", to="y")
        return reply("done")

    return Agent(name="mailer", model=ScriptedModel(script), tools=[lookup, send])


def new_store(kind: str, tmp_path: Path, n: int) -> Any:
    return MemoryStore() if kind == "memory" else SQLiteStore(tmp_path / f"crash{n}.db")


async def run_clean(inner: Any) -> int:
    """How many store calls a run makes when nothing crashes."""
    store = CrashingStore(inner, at=None, when="before")
    async with Runtime(store) as rt:
        handle = await rt.start(make_agent(Counter()), "go", scope=SCOPE)
        store.armed = True
        result = await handle.result()
    assert result.status == "completed"
    return store.calls


@pytest.mark.crash
@pytest.mark.parametrize("kind", ["memory", "sqlite"])
async def test_a_crash_at_any_store_await_resumes_without_repeating_a_side_effect(
    kind: str, tmp_path: Path
) -> None:
    total = await run_clean(new_store(kind, tmp_path, 0))
    assert total > 10
    for when in ("before", "after"):
        for at in range(1, total + 1):
            inner = new_store(kind, tmp_path, at * 2 + (when == "after"))
            store = CrashingStore(inner, at=at, when=when)
            sent: Counter[str] = Counter()
            agent = make_agent(sent)
            rt = Runtime(store)
            await rt.__aenter__()
            handle = await rt.start(agent, "go", scope=SCOPE)
            store.armed = True
            with pytest.raises(BaseException):  # noqa: B017 - the crash, however it surfaces
                await handle.result()
            await rt.aclose()

            async with Runtime(inner, agents=[agent]) as fresh:
                # The dead worker's lease (if it held one) runs out.
                await inner.acquire_lease(
                    handle.run_id, "gone:0:0", ttl_s=0, now=time.time() - 1, force=True
                )
                result = await fresh.resume(handle.run_id)
                rows = await inner.thread_items(handle.thread_id)
            where = f"crash {when} store call {at} of {total}"
            assert result.status == "completed", where
            assert result.text == "done", where
            assert all(count == 1 for count in sent.values()), (where, sent)
            results = [r.tool_call_id for r in rows if r.role == "tool"]
            assert len(results) == len(set(results)) == 3, (where, results)
