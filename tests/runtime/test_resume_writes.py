"""What a resume writes before its first step (runtime/resume.py).

Rows past a run's last checkpoint exist only when a segment crashed after writing them: a
resume supersedes them then, and only then (a gate's resume makes no such write).
"""

from __future__ import annotations

import asyncio
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

from reverie import Agent, Runtime, Scope, tool
from reverie.core.messages import ModelRequest, ModelResponse
from reverie.core.transcript import NewItem
from reverie.store.memory import MemoryStore
from reverie.store.sqlite import SQLiteStore
from reverie.testing import ScriptedModel, call, reply

SCOPE = Scope(tenant="acme", user="ana")


class Counting:
    """Counts the store calls a runtime makes (the real store does the work)."""

    def __init__(self, inner: Any) -> None:
        self._inner = inner
        self.counts: Counter[str] = Counter()

    def __getattr__(self, name: str) -> Any:
        target = getattr(self._inner, name)
        if not callable(target) or name in ("open", "close"):
            return target

        async def counted(*args: Any, **kwargs: Any) -> Any:
            self.counts[name] += 1
            return await target(*args, **kwargs)

        return counted


def backend(kind: str, tmp_path: Path) -> Any:
    return MemoryStore() if kind == "memory" else SQLiteStore(tmp_path / "resume.db")


@tool(effects={"write"}, needs_approval=True)
def deploy() -> str:
    """Deploys (after an approval)."""
    return "deployed"


def gated() -> Agent:
    def script(request: ModelRequest) -> ModelResponse:
        if any(m.role == "tool" for m in request.messages):
            return reply("shipped")
        return call("deploy")

    return Agent(name="gated", model=ScriptedModel(script), tools=[deploy])


@pytest.mark.parametrize("kind", ["memory", "sqlite"])
async def test_a_gate_resume_supersedes_nothing_and_makes_no_write_for_it(
    kind: str, tmp_path: Path
) -> None:
    store = Counting(backend(kind, tmp_path))
    async with Runtime(store, agents=[gated()]) as rt:
        blocked = await rt.run(gated(), "ship it", scope=SCOPE)
        assert blocked.gate is not None
        store.counts.clear()
        done = await rt.approve(blocked.gate.ref)
    assert (done.status, done.text) == ("completed", "shipped")
    assert store.counts["begin_segment"] == 1
    assert store.counts["supersede_items_after"] == 0


class CrashAfterStep:
    """A store whose first ``BeforeModel`` step commit after ``arm`` lands, then never answers."""

    def __init__(self, inner: Any) -> None:
        self._inner = inner
        self.armed = False
        self.landed = asyncio.Event()

    def __getattr__(self, name: str) -> Any:
        return getattr(self._inner, name)

    async def commit_step(self, run_id: str, step: Any, *, fence: int) -> Any:
        receipt = await self._inner.commit_step(run_id, step, fence=fence)
        if self.armed and step.checkpoint_kind == "BeforeModel" and not self.landed.is_set():
            self.landed.set()
            await asyncio.Event().wait()  # the process stops here
        return receipt


@pytest.mark.parametrize("kind", ["memory", "sqlite"])
async def test_a_crash_resume_supersedes_rows_past_the_checkpoint_once(
    kind: str, tmp_path: Path
) -> None:
    # The run's rows past its checkpoint: append_items as a segment that crashed before its
    # checkpoint would leave them. The resume supersedes them (one write), and replays none.
    inner = backend(kind, tmp_path)
    crashing = CrashAfterStep(inner)
    crashing.armed = True
    rt = Runtime(crashing)
    await rt.__aenter__()
    agent = Agent(name="a", model=ScriptedModel([reply("done")]))
    handle = await rt.start(agent, "go", scope=SCOPE)
    await asyncio.wait_for(crashing.landed.wait(), 30)
    run = await inner.get_run(handle.run_id)
    fence = await inner.acquire_lease(handle.run_id, "stray", ttl_s=60, now=0.0, force=True)
    await inner.append_items(
        handle.thread_id, handle.run_id, [NewItem(role="assistant", content="lost")], fence=fence
    )
    await inner.release_lease(handle.run_id, fence)
    await rt.aclose()
    assert run.status == "running"

    counting = Counting(inner)
    async with Runtime(counting, agents=[agent]) as fresh:
        [result] = await fresh.recover()
        rows = await fresh.store.thread_items(handle.thread_id)
    assert (result.status, result.text) == ("completed", "done")
    assert counting.counts["supersede_items_after"] == 1
    assert [(r.role, r.content) for r in rows] == [("user", "go"), ("assistant", "done")]
