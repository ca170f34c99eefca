"""Run and thread integrity when two things happen at once (DESIGN §19, issue "integrity").

Each test is named for the rule it pins: a transcript stays well formed whatever ends a run, a
thread holds one active run, control inputs never wait behind user inputs, an admitted call
always settles, and every terminal path seals the input queue.
"""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest

from reverie import Agent, Limits, Runtime, Scope, tool
from reverie.core.messages import Message, ModelRequest, ModelResponse
from reverie.errors import RunEndedError, ThreadBusy, UsageError
from reverie.store.memory import MemoryStore
from reverie.testing import ScriptedModel, call, calls, reply

SCOPE = Scope(tenant="acme", user="ana")


def unanswered_calls(messages: tuple[Message, ...] | list[Message]) -> list[str]:
    """Ids of assistant tool calls without exactly one tool result right after them."""
    problems: list[str] = []
    for i, m in enumerate(messages):
        if m.role != "assistant" or not m.tool_calls:
            continue
        results = []
        for later in messages[i + 1 :]:
            if later.role != "tool":
                break
            results.append(later.tool_call_id)
        for c in m.tool_calls:
            if results.count(c.id) != 1:
                problems.append(c.id)
    return problems


async def thread_messages(rt: Runtime, thread_id: str) -> list[Message]:
    rows = await rt.store.thread_items(thread_id)
    return [
        Message(
            role=r.role, content=r.content, tool_calls=r.tool_calls, tool_call_id=r.tool_call_id
        )
        for r in rows
    ]


# ------------------------------------------------------------------ transcript well-formedness
async def test_cancel_during_a_parallel_wave_answers_every_call_and_keeps_finished_results() -> (
    None
):
    started = asyncio.Event()

    @tool(effects={"read"})
    async def quick() -> str:
        """Returns at once."""
        return "quick result"

    @tool(effects={"read"})
    async def slow() -> str:
        """Never returns by itself."""
        started.set()
        await asyncio.Event().wait()
        return "never"

    model = ScriptedModel([calls(("quick", {}), ("slow", {})), reply("second turn")])
    agent = Agent(name="a", model=model, tools=[quick, slow])
    async with Runtime.open(":memory:") as rt:
        h = await rt.start(agent, "go", scope=SCOPE)
        await started.wait()
        await h.cancel()
        r = await h.result()
        assert r.status == "cancelled"
        msgs = await thread_messages(rt, h.thread_id)
        assert unanswered_calls(msgs) == []
        tool_rows = [m.content for m in msgs if m.role == "tool"]
        assert tool_rows[0] == "quick result"  # the finished call keeps its real result
        assert tool_rows[1].startswith("cancelled")
        # The next turn on the conversation sends a well-formed transcript.
        r2 = await rt.run(agent, "again", scope=SCOPE, thread_id=h.thread_id)
        assert r2.status == "completed"
        assert unanswered_calls(model.requests[-1].messages) == []


async def test_cancelling_a_blocked_run_answers_its_gated_call_as_denied() -> None:
    @tool(effects={"write"}, needs_approval=True)
    async def deploy() -> str:
        """Deploys."""
        return "deployed"

    model = ScriptedModel([call("deploy"), reply("next turn")])
    agent = Agent(name="a", model=model, tools=[deploy])
    async with Runtime.open(":memory:") as rt:
        r = await rt.run(agent, "ship it", scope=SCOPE)
        assert r.status == "blocked" and r.gate is not None
        await rt.cancel(r.run_id)
        assert (await rt.store.get_gate(r.gate.ref)).status == "denied"
        msgs = await thread_messages(rt, r.thread_id)
        assert unanswered_calls(msgs) == []
        assert next(m.content for m in msgs if m.role == "tool").startswith("denied")
        r2 = await rt.run(agent, "what now?", scope=SCOPE, thread_id=r.thread_id)
        assert r2.status == "completed"
        assert unanswered_calls(model.requests[-1].messages) == []


async def test_a_run_failing_mid_wave_leaves_no_unanswered_call() -> None:
    @tool(effects=set())
    async def boom() -> str:
        """Always fails."""
        raise RuntimeError("no")

    from reverie.loop.family import default_families
    from reverie.loop.strategies import Abort

    class AbortOnToolError:
        def describe(self) -> dict[str, Any]:
            return {}

        def on_tool_error(self, kind: str, attempt: int) -> Any:
            return Abort(failure_kind="tool_error")

        def on_model_error(self, kind: str, attempt: int) -> Any:
            return Abort(failure_kind="model_error")

    import dataclasses

    family = dataclasses.replace(default_families()[0], recovery=AbortOnToolError())
    agent = Agent(name="a", model=ScriptedModel([call("boom")]), tools=[boom])
    async with Runtime.open(":memory:", families=[family]) as rt:
        r = await rt.run(agent, "go", scope=SCOPE)
        assert r.status == "failed"
        assert unanswered_calls(await thread_messages(rt, r.thread_id)) == []


# ------------------------------------------------------------------ one active run per thread
def _blocking_agent(name: str = "a") -> Agent:
    @tool(effects={"write"}, needs_approval=True)
    async def deploy() -> str:
        """Deploys."""
        return "deployed"

    return Agent(name=name, model=ScriptedModel([call("deploy"), reply("done")]), tools=[deploy])


async def test_a_second_run_on_a_thread_with_a_blocked_run_is_rejected_with_thread_busy() -> None:
    async with Runtime.open(":memory:") as rt:
        r = await rt.run(_blocking_agent(), "ship it", scope=SCOPE)
        assert r.status == "blocked"
        other = Agent(name="b", model=ScriptedModel([reply("hi")]))
        with pytest.raises(ThreadBusy) as busy:
            await rt.run(other, "hello", scope=SCOPE, thread_id=r.thread_id)
        assert busy.value.run_id == r.run_id


async def test_a_second_run_on_a_thread_with_a_running_run_is_rejected_with_thread_busy() -> None:
    release = asyncio.Event()

    async def slow(request: ModelRequest) -> ModelResponse:
        await release.wait()
        return reply("first")

    agent = Agent(name="a", model=ScriptedModel(slow))
    async with Runtime.open(":memory:") as rt:
        h = await rt.start(agent, "one", scope=SCOPE)
        with pytest.raises(ThreadBusy):
            await rt.start(agent, "two", scope=SCOPE, thread_id=h.thread_id)
        release.set()
        assert (await h.result()).status == "completed"
        # Ended: the thread takes a new run.
        again = Agent(name="b", model=ScriptedModel([reply("second")]))
        assert (await rt.run(again, "two", scope=SCOPE, thread_id=h.thread_id)).text == "second"


async def test_enqueue_policy_makes_the_message_a_follow_up_of_the_active_run() -> None:
    release = asyncio.Event()
    seen: list[list[str]] = []

    async def script(request: ModelRequest) -> ModelResponse:
        seen.append([m.content for m in request.messages if m.role == "user"])
        if len(seen) == 1:
            await release.wait()
            return reply("first")
        return reply("second")

    agent = Agent(name="a", model=ScriptedModel(script))
    async with Runtime.open(":memory:") as rt:
        h = await rt.start(agent, "one", scope=SCOPE)
        joined = await rt.start(
            agent, "two", scope=SCOPE, thread_id=h.thread_id, thread_policy="enqueue"
        )
        assert joined.run_id == h.run_id
        release.set()
        r = await joined.result()
        assert r.text == "second"
        assert seen == [["one"], ["one", "two"]]


async def test_interrupt_policy_cancels_the_active_run_and_closes_its_gate_then_starts() -> None:
    async with Runtime.open(":memory:") as rt:
        blocked = await rt.run(_blocking_agent(), "ship it", scope=SCOPE)
        assert blocked.gate is not None
        model = ScriptedModel([reply("fresh start")])
        r = await rt.run(
            Agent(name="b", model=model),
            "never mind",
            scope=SCOPE,
            thread_id=blocked.thread_id,
            thread_policy="interrupt",
        )
        assert r.status == "completed" and r.text == "fresh start"
        assert (await rt.store.get_run(blocked.run_id)).status == "cancelled"
        assert (await rt.store.get_gate(blocked.gate.ref)).status == "denied"
        assert unanswered_calls(model.requests[0].messages) == []


async def test_enqueue_on_a_blocked_run_is_delivered_after_the_approval() -> None:
    ran: list[str] = []

    @tool(effects={"write"}, needs_approval=True)
    async def deploy() -> str:
        """Deploys."""
        ran.append("deploy")
        return "deployed"

    seen: list[list[str]] = []

    def script(request: ModelRequest) -> ModelResponse:
        users = [m.content for m in request.messages if m.role == "user"]
        seen.append(users)
        if not any(m.role == "tool" for m in request.messages):
            return call("deploy")
        return reply(f"answered {len(users)} messages")

    agent = Agent(name="a", model=ScriptedModel(script), tools=[deploy])
    async with Runtime.open(":memory:") as rt:
        blocked = await rt.run(agent, "ship it", scope=SCOPE)
        assert blocked.gate is not None
        joined = await rt.start(
            agent, "and tell me", scope=SCOPE, thread_id=blocked.thread_id, thread_policy="enqueue"
        )
        assert joined.run_id == blocked.run_id
        done = await rt.approve(blocked.gate.ref)
        assert ran == ["deploy"]  # the approved call ran first, then the follow-up
        assert done.status == "completed" and done.text == "answered 2 messages"
        assert seen[-1] == ["ship it", "and tell me"]
        assert unanswered_calls(await thread_messages(rt, blocked.thread_id)) == []


async def test_interrupt_policy_on_a_run_mid_tool_cancels_it_and_keeps_the_thread_well_formed() -> (
    None
):
    started = asyncio.Event()

    @tool(effects={"write"})
    async def slow() -> str:
        """Never returns by itself."""
        started.set()
        await asyncio.Event().wait()
        return "never"

    agent = Agent(name="a", model=ScriptedModel([call("slow")]), tools=[slow])
    model = ScriptedModel([reply("new turn")])
    async with Runtime.open(":memory:") as rt:
        h = await rt.start(agent, "go", scope=SCOPE)
        await started.wait()
        r = await rt.run(
            Agent(name="b", model=model),
            "stop that",
            scope=SCOPE,
            thread_id=h.thread_id,
            thread_policy="interrupt",
        )
        assert r.status == "completed" and r.text == "new turn"
        assert (await h.result()).status == "cancelled"
        assert unanswered_calls(model.requests[0].messages) == []


async def test_thread_policy_default_comes_from_the_runtime() -> None:
    async with Runtime.open(":memory:", thread_policy="interrupt") as rt:
        blocked = await rt.run(_blocking_agent(), "ship it", scope=SCOPE)
        r = await rt.run(
            Agent(name="b", model=ScriptedModel([reply("ok")])),
            "next",
            scope=SCOPE,
            thread_id=blocked.thread_id,
        )
        assert r.status == "completed"
    with pytest.raises(UsageError):
        Runtime(MemoryStore(), thread_policy="sometimes")  # type: ignore[arg-type]


async def test_one_active_run_per_thread_holds_across_two_runtimes_on_one_sqlite_file(
    tmp_path: Path,
) -> None:
    url = f"sqlite:///{tmp_path / 'shared.db'}"
    async with Runtime.open(url) as rt1, Runtime.open(url) as rt2:
        r = await rt1.run(_blocking_agent(), "ship it", scope=SCOPE)
        assert r.status == "blocked"
        with pytest.raises(ThreadBusy):
            await rt2.run(
                Agent(name="b", model=ScriptedModel([reply("x")])),
                "hi",
                scope=SCOPE,
                thread_id=r.thread_id,
            )


# ------------------------------------------------------------------ control inputs
async def test_a_cancel_queued_behind_a_steering_message_takes_effect_at_the_next_boundary() -> (
    None
):
    ran: list[int] = []
    first = asyncio.Event()
    release = asyncio.Event()

    @tool(effects={"write"})
    async def step(n: int) -> str:
        """One side-effecting step."""
        ran.append(n)
        if n == 1:
            first.set()
            await release.wait()
        return f"step {n}"

    model = ScriptedModel([call("step", n=1), call("step", n=2), call("step", n=3), reply("x")])
    agent = Agent(name="a", model=model, tools=[step])
    async with Runtime.open(":memory:") as rt:
        h = await rt.start(agent, "go", scope=SCOPE)
        await first.wait()
        await h.steer("a message ahead of the cancel")
        # The durable cancel request a remote worker would see (no in-process token fired).
        await rt.store.enqueue_input(h.run_id, "cancel", {"reason": "remote"}, input_id="c1")
        release.set()
        r = await h.result()
        assert r.status == "cancelled"
        assert ran == [1]  # no call after the boundary that saw the cancel


async def test_a_graceful_stop_queued_behind_a_follow_up_is_honoured() -> None:
    release = asyncio.Event()

    @tool(effects={"read"})
    async def look() -> str:
        """Waits, then reads."""
        await release.wait()
        return "seen"

    model = ScriptedModel([call("look"), reply("summary from evidence")])
    agent = Agent(name="a", model=model, tools=[look])
    async with Runtime.open(":memory:") as rt:
        h = await rt.start(agent, "go", scope=SCOPE)
        await asyncio.sleep(0)
        await h.follow_up("later, also this")
        await h.request_graceful_stop("host")
        release.set()
        r = await h.result()
        assert r.status == "completed" and r.exit.kind == "graceful_summary"  # type: ignore[union-attr]
        # The follow-up was delivered into the transcript the summary was made from.
        final_users = [m.content for m in model.requests[-1].messages if m.role == "user"]
        assert "later, also this" in final_users


# ------------------------------------------------------------------ an admitted call settles
async def test_an_approved_call_runs_even_if_a_graceful_stop_was_requested_while_blocked() -> None:
    ran: list[str] = []

    @tool(effects={"write"}, needs_approval=True)
    async def deploy() -> str:
        """Deploys."""
        ran.append("deploy")
        return "deployed"

    model = ScriptedModel([call("deploy"), reply("summary")])
    agent = Agent(name="a", model=model, tools=[deploy])
    async with Runtime.open(":memory:") as rt:
        r = await rt.run(agent, "ship it", scope=SCOPE)
        assert r.gate is not None
        await rt.request_graceful_stop(r.run_id, "host")
        done = await rt.approve(r.gate.ref)
        assert ran == ["deploy"]
        assert done.status == "completed"
        assert unanswered_calls(model.requests[-1].messages) == []


async def test_an_approved_call_runs_even_when_it_used_up_the_capability_budget() -> None:
    ran: list[str] = []

    @tool(effects={"write"}, needs_approval=True)
    async def deploy() -> str:
        """Deploys."""
        ran.append("deploy")
        return "deployed"

    model = ScriptedModel([call("deploy"), reply("summary")])
    agent = Agent(name="a", model=model, tools=[deploy], limits=Limits(max_capability_calls=1))
    async with Runtime.open(":memory:") as rt:
        r = await rt.run(agent, "ship it", scope=SCOPE)
        assert r.gate is not None
        done = await rt.approve(r.gate.ref)
        assert ran == ["deploy"]
        assert done.status == "completed"


# ------------------------------------------------------------------ sealing
async def test_steering_accepted_during_a_graceful_stop_is_delivered_not_dropped() -> None:
    release = asyncio.Event()

    async def script(request: ModelRequest) -> ModelResponse:
        if request.tools is None:  # the finalizer's tools-free request
            return reply("final summary")
        await release.wait()
        return call("look")

    @tool(effects={"read"})
    async def look() -> str:
        """Reads."""
        return "seen"

    model = ScriptedModel(script)
    agent = Agent(name="a", model=model, tools=[look])
    async with Runtime.open(":memory:") as rt:
        h = await rt.start(agent, "go", scope=SCOPE)
        await h.request_graceful_stop("host")
        await h.steer("one more thing")
        release.set()
        r = await h.result()
        assert r.exit.kind == "graceful_summary"  # type: ignore[union-attr]
        users = [m.content for m in model.requests[-1].messages if m.role == "user"]
        assert "one more thing" in users
        with pytest.raises(RunEndedError):
            await h.steer("after the end")


async def test_unbound_runs_refuse_steering_and_follow_ups() -> None:
    release = asyncio.Event()

    async def script(request: ModelRequest) -> ModelResponse:
        await release.wait()
        return reply("done")

    agent = Agent(name="a", model=ScriptedModel(script))
    async with Runtime.open(":memory:") as rt:
        h = await rt.start(agent, "go", scope=SCOPE, profile="unbound", has_actor=False)
        with pytest.raises(UsageError):
            await h.steer("hello")
        with pytest.raises(UsageError):
            await h.follow_up("hello")
        release.set()
        assert (await h.result()).status == "completed"


# ------------------------------------------------------------------ other contract gaps
class _DieAt(BaseException):
    """A dying worker (not an Exception: nothing in the runtime turns it into a result)."""


class _DyingStore:
    """Delegates to a MemoryStore; dies on the first status write (``set_run_status``, or the
    ``end_segment`` that ends a segment) to ``status``."""

    def __init__(self, inner: MemoryStore, status: str) -> None:
        self._inner, self._status, self.armed = inner, status, True

    def __getattr__(self, name: str) -> Any:
        target = getattr(self._inner, name)
        if name not in ("set_run_status", "end_segment"):
            return target

        async def wrapped(run_id: str, status: str, **kw: Any) -> Any:
            if self.armed and status == self._status:
                self.armed = False
                raise _DieAt(status)
            return await target(run_id, status, **kw)

        return wrapped


async def test_a_cancelled_run_that_crashes_before_its_status_write_resumes_cancelled() -> None:
    started = asyncio.Event()

    @tool(effects={"write"})
    async def work() -> str:
        """Works until cancelled."""
        started.set()
        await asyncio.Event().wait()
        return "never"

    inner = MemoryStore()
    agent = Agent(name="a", model=ScriptedModel([call("work"), reply("no")]), tools=[work])
    rt = Runtime(_DyingStore(inner, "cancelled"), agents=[agent])
    await rt.__aenter__()
    h = await rt.start(agent, "go", scope=SCOPE)
    await started.wait()
    await h.cancel()
    with pytest.raises(_DieAt):
        await h.result()
    run_id = h.run_id
    # A fresh runtime (the old one "died"): the Final checkpoint says it was a cancellation.
    async with Runtime(inner, agents=[agent]) as rt2:
        await inner.release_lease(run_id, (await inner.get_run(run_id)).fence)
        r = await rt2.resume(run_id)
        assert r.status == "cancelled"
        assert unanswered_calls(await thread_messages(rt2, r.thread_id)) == []
    rt._opened = False  # its store is shared with rt2, which closed it


async def test_a_run_resumed_more_than_max_resumes_fails_with_resume_limit() -> None:
    store = MemoryStore()
    agent = Agent(
        name="a",
        model=ScriptedModel([call("t"), reply("x")]),
        limits=Limits(max_resumes=2),
    )
    async with Runtime(store, agents=[agent]) as rt:
        # A run whose worker keeps dying: "running" with a checkpoint and an expired lease.
        h = await rt.start(agent, "go", scope=SCOPE)
        await h.result()
    from reverie.loop.state import LoopExecutionState, encode_checkpoint

    async with Runtime(store, agents=[agent]) as rt:
        r0 = await store.get_run(h.run_id)
        # Re-open the finished run as a crashed one to drive the resume counter directly.
        await store.set_run_status(h.run_id, "running", fence=None)
        family = rt._families.get(r0.family_id)
        state = LoopExecutionState(host_state={"crash_resumes": 2})
        await store.save_checkpoint(
            h.run_id,
            "BeforeModel",
            encode_checkpoint(state, family_digest=family.identity.digest),
            fence=(await store.get_run(h.run_id)).fence,
        )
        r = await rt.resume(h.run_id)
        assert r.status == "failed"
        assert r.exit.kind == "resume_limit"  # type: ignore[union-attr]


async def test_a_gated_call_whose_tool_changed_is_denied_after_approval() -> None:
    ran: list[str] = []

    @tool(effects={"write"}, needs_approval=True)
    async def deploy(target: str) -> str:
        """Deploys to staging."""
        ran.append("old")
        return "old"

    @tool(name="deploy", effects={"write"}, needs_approval=True)
    async def deploy_v2(target: str, force: bool = False) -> str:
        """Deploys anywhere, forcefully."""
        ran.append("new")
        return "new"

    store = MemoryStore()
    model = ScriptedModel([call("deploy", target="prod"), reply("ok")])
    async with Runtime(store) as rt:
        r = await rt.run(Agent(name="a", model=model, tools=[deploy]), "ship", scope=SCOPE)
        assert r.gate is not None
    # The agent's drift policy lets the resume go on (by default it refuses): the gated call
    # is still checked against the tool it was approved for.
    later = Agent(name="a", model=model, tools=[deploy_v2], on_drift="continue")
    async with Runtime(store, agents=[later]) as rt:
        done = await rt.approve(r.gate.ref)
        assert ran == []
        assert done.status == "completed"
        results = [m.content for m in model.requests[-1].messages if m.role == "tool"]
        assert results[0].startswith("denied") and "changed" in results[0]


async def test_a_gated_call_whose_tool_disappeared_is_denied_after_approval() -> None:
    @tool(effects={"write"}, needs_approval=True)
    async def deploy() -> str:
        """Deploys."""
        return "deployed"

    @tool(effects=set())
    async def secret_admin_tool() -> str:
        """Hidden."""
        return "x"

    store = MemoryStore()
    model = ScriptedModel([call("deploy"), reply("ok")])
    async with Runtime(store) as rt:
        r = await rt.run(Agent(name="a", model=model, tools=[deploy]), "ship", scope=SCOPE)
        assert r.gate is not None
    later = Agent(name="a", model=model, tools=[secret_admin_tool], on_drift="continue")
    async with Runtime(store, agents=[later]) as rt:
        done = await rt.approve(r.gate.ref)
        assert done.status == "completed"
        results = [m.content for m in model.requests[-1].messages if m.role == "tool"]
        assert results[0].startswith("denied") and "no longer available" in results[0]
        assert "secret_admin_tool" not in results[0]


async def test_two_agents_with_one_name_never_advance_each_others_runs() -> None:
    ran: list[str] = []

    def deploy_tool(label: str) -> Any:
        @tool(name="deploy", effects={"write"}, needs_approval=True)
        async def deploy() -> str:
            """Deploys."""
            ran.append(label)
            return label

        return deploy

    a = Agent(
        name="same",
        model=ScriptedModel([call("deploy"), reply("a done")]),
        tools=[deploy_tool("a")],
    )
    b = Agent(name="same", model=ScriptedModel([reply("b")]), tools=[deploy_tool("b")])
    async with Runtime.open(":memory:") as rt:
        blocked = await rt.run(a, "ship", scope=SCOPE)
        assert blocked.gate is not None
        assert (await rt.run(b, "hi", scope=SCOPE)).text == "b"  # b is now the name's agent
        done = await rt.approve(blocked.gate.ref)
        assert done.text == "a done" and ran == ["a"]  # a's run stayed a's
