"""Steering and follow-up inputs through the public runtime API (DESIGN §7)."""

from __future__ import annotations

import asyncio

import pytest

from reverie import Agent, Runtime, Scope, tool
from reverie.core.messages import ModelRequest, ModelResponse
from reverie.errors import RunEndedError
from reverie.testing import ScriptedModel, call, reply

SCOPE = Scope(tenant="acme", user="ana")


def user_texts(request: ModelRequest) -> list[str]:
    return [m.content for m in request.messages if m.role == "user"]


async def test_steering_is_delivered_before_the_next_model_call_after_the_wave() -> None:
    started = asyncio.Event()
    release = asyncio.Event()
    ran: list[str] = []

    @tool(effects={"read"})
    async def slow(x: int) -> str:
        """A slow read."""
        started.set()
        await release.wait()
        ran.append("slow")
        return "slow done"

    model = ScriptedModel([call("slow", x=1), reply("ok")])
    agent = Agent(name="a", model=model, tools=[slow])
    async with Runtime.open(":memory:") as rt:
        h = await rt.start(agent, "start", scope=SCOPE)
        await started.wait()
        await h.steer("also check X")
        release.set()
        r = await h.result()
        assert r.status == "completed"
        assert ran == ["slow"]  # the call already made was not skipped
        assert user_texts(model.requests[0]) == ["start"]
        assert user_texts(model.requests[1]) == ["start", "also check X"]


async def test_follow_up_is_delivered_when_the_run_would_complete_and_the_run_continues() -> None:
    gate = asyncio.Event()
    seen: list[list[str]] = []

    async def script(request: ModelRequest) -> ModelResponse:
        seen.append(user_texts(request))
        if len(seen) == 1:
            await gate.wait()
            return reply("first answer")
        return reply("second answer")

    agent = Agent(name="a", model=ScriptedModel(script))
    async with Runtime.open(":memory:") as rt:
        h = await rt.start(agent, "do X", scope=SCOPE)
        await asyncio.sleep(0)
        await h.follow_up("then do Y")
        gate.set()
        r = await h.result()
        assert r.status == "completed" and r.text == "second answer"
        assert seen == [["do X"], ["do X", "then do Y"]]


async def test_input_to_an_ended_run_is_a_typed_error() -> None:
    agent = Agent(name="a", model=ScriptedModel([reply("hi")]))
    async with Runtime.open(":memory:") as rt:
        h = await rt.start(agent, "hello", scope=SCOPE)
        await h.result()
        with pytest.raises(RunEndedError):
            await h.steer("too late")
        with pytest.raises(RunEndedError):
            await h.follow_up("too late")


async def test_the_same_input_id_is_delivered_once() -> None:
    started = asyncio.Event()
    release = asyncio.Event()

    @tool(effects={"read"})
    async def wait_a_bit() -> str:
        """Wait."""
        started.set()
        await release.wait()
        return "done"

    model = ScriptedModel([call("wait_a_bit"), reply("ok")])
    agent = Agent(name="a", model=model, tools=[wait_a_bit])
    async with Runtime.open(":memory:") as rt:
        h = await rt.start(agent, "go", scope=SCOPE)
        await started.wait()
        await h.steer("once", input_id="msg-1")
        await h.steer("once", input_id="msg-1")  # a client retry
        release.set()
        await h.result()
        assert user_texts(model.requests[1]) == ["go", "once"]
        rows = await rt.store.thread_items(h.thread_id)
        assert [r.content for r in rows if r.role == "user"] == ["go", "once"]


async def test_inputs_are_acked_only_after_the_cursor_is_checkpointed() -> None:
    started = asyncio.Event()
    release = asyncio.Event()

    @tool(effects={"read"})
    async def hold() -> str:
        """Hold."""
        started.set()
        await release.wait()
        return "held"

    model = ScriptedModel([call("hold"), reply("ok")])
    agent = Agent(name="a", model=model, tools=[hold])
    async with Runtime.open(":memory:") as rt:
        h = await rt.start(agent, "go", scope=SCOPE)
        await started.wait()
        await h.steer("note")
        queued = await rt.store.poll_inputs(h.run_id, after_cursor=0)
        assert [q.acked for q in queued] == [False]
        release.set()
        await h.result()
        queued = await rt.store.poll_inputs(h.run_id, after_cursor=0)
        assert [q.acked for q in queued] == [True]
        cp = await rt.store.load_checkpoint(h.run_id)
        assert cp is not None and b'"input_cursor":1' in cp.payload


async def test_a_second_turn_on_the_same_thread_sees_the_conversation() -> None:
    model = ScriptedModel([reply("hello ana"), reply("you said hi")])
    agent = Agent(name="a", model=model)
    async with Runtime.open(":memory:") as rt:
        r1 = await rt.run(agent, "hi", scope=SCOPE)
        r2 = await rt.run(agent, "what did I say?", scope=SCOPE, thread_id=r1.thread_id)
        assert r2.thread_id == r1.thread_id
        roles = [(m.role, m.content) for m in model.requests[1].messages]
        assert roles == [("user", "hi"), ("assistant", "hello ana"), ("user", "what did I say?")]


async def test_another_owner_cannot_continue_a_thread() -> None:
    from reverie.errors import NotFoundError

    agent = Agent(name="a", model=ScriptedModel([reply("hello"), reply("x")]))
    async with Runtime.open(":memory:") as rt:
        r1 = await rt.run(agent, "hi", scope=SCOPE)
        with pytest.raises(NotFoundError):
            await rt.run(
                agent, "hi", scope=Scope(tenant="acme", user="eve"), thread_id=r1.thread_id
            )
