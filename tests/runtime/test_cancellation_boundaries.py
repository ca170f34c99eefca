"""Cancellation wins at every boundary of the tick (DESIGN §5, §19), strategy by strategy.

Each of the nine strategies of the default family is wrapped, through the public composition
API (``LoopFamily`` and ``Runtime.open(families=...)``), so that one call site — the input
drain, the context plan, the tool filter, the model choice, the batch policy, recovery, the
gate decision, the stop decision, the follow-up drain, the iteration budget — cancels the run
from inside the loop, synchronously, as that strategy is consulted. At each site the run must
end ``cancelled`` (never completed, blocked or failed), nothing the loop would have done next
happens (no further model call, no tool run after it), every admitted call is settled with a
result, and the thread is left well-formed for the next turn.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import pytest

from reverie import Agent, Runtime, Scope, tool
from reverie.core.exits import Cancelled
from reverie.errors import CapabilityError
from reverie.hooks import CheckpointHookContext
from reverie.loop.family import LoopFamily, default_families
from reverie.testing import ScriptedModel, call, error, reply

SCOPE = Scope(tenant="acme", user="ana")


@dataclass(slots=True)
class Trigger:
    """Cancels the run from inside a strategy call, at once (no await in between)."""

    rt: Runtime | None = None
    run_id: str | None = None
    site: str = ""
    """``"<strategy>.<method>"``: where to cancel."""
    nth: int = 1
    """On the site's ``nth`` call (2: in the tick after a wave, its results still staged)."""
    seen: int = 0
    fired: list[str] = field(default_factory=list)
    called_after: list[str] = field(default_factory=list)
    """Strategy calls made after the cancel (the loop went on consulting strategies)."""

    def reached(self, site: str) -> None:
        if self.fired:
            self.called_after.append(site)
            return
        if site != self.site:
            return
        self.seen += 1
        if self.seen < self.nth:
            return
        assert self.rt is not None and self.run_id is not None, "the run is not known yet"
        self.fired.append(site)
        # rt.cancel over the in-memory store never waits: drive it to its end right here, so
        # the cancel has landed before the strategy returns to the loop.
        coro: Any = self.rt.cancel(self.run_id, reason=f"cancelled at {site}")
        try:
            coro.send(None)
        except StopIteration:
            return
        coro.close()
        raise AssertionError("rt.cancel waited; this test needs it to land synchronously")


class Cancelling:
    """A strategy that asks ``trigger`` at each call, then does what ``inner`` does."""

    def __init__(self, name: str, inner: Any, trigger: Trigger) -> None:
        self._name = name
        self._inner = inner
        self._trigger = trigger

    def describe(self) -> Any:
        return self._inner.describe()

    def __getattr__(self, method: str) -> Any:
        found = getattr(self._inner, method)
        if not callable(found):
            return found

        def wrapped(*args: Any, **kwargs: Any) -> Any:
            self._trigger.reached(f"{self._name}.{method}")
            return found(*args, **kwargs)

        return wrapped


STRATEGIES = (
    "context",
    "capabilities",
    "model",
    "inputs",
    "batch",
    "recovery",
    "gates",
    "stop",
    "budget",
)


def families(trigger: Trigger) -> list[LoopFamily]:
    """The default families, with every strategy of ``default`` asking ``trigger``."""
    default, *rest = default_families()
    wrapped: dict[str, Any] = {
        name: Cancelling(name, getattr(default, name), trigger) for name in STRATEGIES
    }
    return [dataclasses.replace(default, **wrapped), *rest]


ran: list[str] = []


@tool(effects={"write"})
async def note(text: str) -> str:
    """Write a note."""
    ran.append(f"note {text}")
    return "noted"


@tool(effects={"write"}, needs_approval=True)
async def send(to: str) -> str:
    """Send something (needs approval)."""
    ran.append(f"send {to}")
    return "sent"


@tool(effects={"write"})
async def flaky(n: int) -> str:
    """Fails transiently."""
    ran.append(f"flaky {n}")
    raise CapabilityError("transient", "try again later")


@dataclass(frozen=True, slots=True)
class Case:
    site: str
    script: Callable[[], list[Any]]
    """The scripted model's answers (a fresh list per run)."""
    model_calls: int
    """Model requests made before the cancel landed (none may follow it)."""
    tools_ran: Sequence[str]
    """Tools that ran before the cancel landed (none may follow it)."""
    fallback: bool = False
    """Give the agent a fallback model (which must never be asked)."""
    nth: int = 1
    """Cancel on the site's nth call."""
    kept_reply: bool = False
    """The reply was already said (its ``assistant_message`` event out) when the cancel
    landed: it stays in the thread as said, but the run ends cancelled, not with it."""

    @property
    def id(self) -> str:
        return self.site if self.nth == 1 else f"{self.site}#{self.nth}"


WAVE = [call("note", text="a"), reply("done")]
CASES = [
    Case("budget.iteration_limit", lambda: list(WAVE), 0, ()),
    Case("inputs.drain_steering", lambda: list(WAVE), 0, ()),
    Case("context.plan", lambda: list(WAVE), 0, ()),
    Case("capabilities.filter", lambda: list(WAVE), 0, ()),
    Case("model.select", lambda: list(WAVE), 0, ()),
    Case("recovery.on_model_error", lambda: [error("transient"), reply("ok")], 1, ()),
    Case("model.fall_back", lambda: [error("unavailable")], 1, (), fallback=True),
    Case("batch.choose", lambda: list(WAVE), 1, ()),
    Case("recovery.on_tool_error", lambda: [call("flaky", n=1), reply("done")], 1, ["flaky 1"]),
    Case("gates.on_gate", lambda: [call("send", to="bob"), reply("sent")], 1, ()),
    Case("stop.after_wave", lambda: list(WAVE), 1, ["note a"]),
    Case("stop.after_reply", lambda: [reply("done")], 1, (), kept_reply=True),
    Case("inputs.drain_follow_up", lambda: [reply("done")], 1, (), kept_reply=True),
    # The same boundaries in the tick after a wave: its results are staged, not yet written.
    Case("inputs.drain_steering", lambda: list(WAVE), 1, ["note a"], nth=2),
    Case("context.plan", lambda: list(WAVE), 1, ["note a"], nth=2),
    Case("capabilities.filter", lambda: list(WAVE), 1, ["note a"], nth=2),
]


async def well_formed(rt: Runtime, thread_id: str) -> list[tuple[str, str]]:
    """The thread's rows as (role, content); asserts each tool call has exactly one result."""
    items = await rt.store.thread_items(thread_id)
    asked = [c.id for i in items if i.role == "assistant" for c in i.tool_calls]
    answered = [i.tool_call_id for i in items if i.role == "tool" and not i.superseded]
    assert sorted(asked) == sorted(a for a in answered if a is not None), items
    assert len(answered) == len(set(answered)), items
    return [(i.role, i.content) for i in items if not i.superseded]


@pytest.mark.parametrize("case", CASES, ids=[c.id for c in CASES])
async def test_cancellation_wins_at_every_strategy_call_site_of_the_tick(case: Case) -> None:
    ran.clear()
    trigger = Trigger(site=case.site, nth=case.nth)
    primary = ScriptedModel(case.script(), name="primary")
    backup = ScriptedModel([reply("from the fallback")], name="backup")
    models: Any = [primary, backup] if case.fallback else primary
    agent = Agent(name="c", model=models, tools=[note, send, flaky])
    async with Runtime.open(":memory:", families=families(trigger)) as rt:
        trigger.rt = rt
        handle = await rt.start(agent, "go", scope=SCOPE)
        trigger.run_id = handle.run_id
        result = await handle.result()
        rows = await well_formed(rt, handle.thread_id)
        gates = await rt.gates.list(scope=SCOPE)
        run = await rt.store.get_run(handle.run_id)

        assert trigger.fired == [case.site], "the site was never reached"
        assert result.status == "cancelled", (result.status, result.exit)
        assert isinstance(result.exit, Cancelled)
        assert result.exit.reason == f"cancelled at {case.site}"
        assert run.status == "cancelled" and result.text is None
        assert len(primary.requests) == case.model_calls  # no model call after the cancel
        assert backup.requests == []
        assert ran == list(case.tools_ran)  # no tool run after the cancel
        assert [g for g in gates if g.status == "pending"] == []  # no gate left open
        assert (("assistant", "done") in rows) is case.kept_reply
        if "note a" in case.tools_ran:  # the wave's result is written with the cancellation
            assert ("tool", "noted") in rows

        # The thread takes the next turn: the cancelled one left it well-formed.
        nxt = await rt.run(
            Agent(name="next", model=ScriptedModel([reply("next")])),
            "again",
            scope=SCOPE,
            thread_id=handle.thread_id,
        )
        assert nxt.status == "completed" and nxt.text == "next"


async def test_cancellation_wins_when_it_lands_as_a_step_commit_lands() -> None:
    """The commit boundary: a cancel that lands with the wave's BeforeSideEffect checkpoint
    stops the wave before its tool runs; the admitted call is settled with a result."""
    ran.clear()
    run_ids: list[str] = []
    rt_box: list[Runtime] = []

    async def cancel_at_admission(ctx: CheckpointHookContext) -> None:
        if ctx.checkpoint_kind == "BeforeSideEffect":
            await rt_box[0].cancel(run_ids[0], reason="cancelled at the commit")

    model = ScriptedModel([call("note", text="a"), reply("done")])
    async with Runtime.open(":memory:") as rt:
        rt_box.append(rt)
        rt.hooks.register("after_checkpoint", cancel_at_admission, name="canceller", timeout_s=30)
        handle = await rt.start(Agent(name="c", model=model, tools=[note]), "go", scope=SCOPE)
        run_ids.append(handle.run_id)
        result = await handle.result()
        rows = await well_formed(rt, handle.thread_id)
    assert result.status == "cancelled" and isinstance(result.exit, Cancelled)
    assert result.exit.reason == "cancelled at the commit"
    assert ran == [] and len(model.requests) == 1
    assert [role for role, _ in rows] == ["user", "assistant", "tool"]


async def test_cancellation_wins_when_it_lands_while_a_tool_runs() -> None:
    """The tool-execution boundary: a cancel that lands while the wave's tool runs ends the
    run cancelled; nothing after the wave happens, and the call has exactly one result."""
    run_ids: list[str] = []
    rt_box: list[Runtime] = []

    @tool(effects={"write"})
    async def cancels_its_run() -> str:
        """Cancels the run it belongs to, then finishes."""
        await rt_box[0].cancel(run_ids[0], reason="cancelled in the tool")
        return "finished anyway"

    model = ScriptedModel([call("cancels_its_run"), reply("done")])
    async with Runtime.open(":memory:") as rt:
        rt_box.append(rt)
        agent = Agent(name="c", model=model, tools=[cancels_its_run])
        handle = await rt.start(agent, "go", scope=SCOPE)
        run_ids.append(handle.run_id)
        result = await handle.result()
        rows = await well_formed(rt, handle.thread_id)
    assert result.status == "cancelled" and isinstance(result.exit, Cancelled)
    assert result.exit.reason == "cancelled in the tool"
    assert len(model.requests) == 1  # no model call after the wave
    assert [role for role, _ in rows] == ["user", "assistant", "tool"]
