"""Unbound turns through the runtime (DESIGN §14): idempotency, gates, limits, no after_turn."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from reverie import Agent, Limits, Runtime, Scope, tool
from reverie.core.exits import Completed, Failed
from reverie.core.messages import Message, ModelRequest, ModelResponse
from reverie.errors import UsageError
from reverie.hooks import AfterTurnContext
from reverie.testing import ScriptedModel, call, reply
from unbound.unbound_support import make_step


async def test_same_idempotency_key_returns_the_same_run_id_and_starts_one_run(
    rt: Runtime, scope: Scope
) -> None:
    model = ScriptedModel([reply("done")])  # a second run would exhaust the script
    first = await rt.unbound.submit(
        system_prompt="Work.", messages=["go"], idempotency_key="job-1", scope=scope, model=model
    )
    r1 = await rt.unbound.result(first)
    again = await rt.unbound.submit(
        system_prompt="Work.", messages=["go"], idempotency_key="job-1", scope=scope, model=model
    )
    r2 = await rt.unbound.result(again)

    assert again == first
    assert r1.status == r2.status == "completed" and r2.text == "done"
    assert len(model.requests) == 1
    runs = await rt.store.list_runs(scope=scope)
    assert [r.run_id for r in runs] == [first]
    assert runs[0].status == "completed"


async def test_concurrent_submits_with_the_same_key_join_one_run(rt: Runtime, scope: Scope) -> None:
    release = asyncio.Event()

    async def slow(request: ModelRequest) -> ModelResponse:
        await release.wait()
        return reply("done")

    model = ScriptedModel(slow)

    async def submit() -> str:
        return await rt.unbound.submit(
            system_prompt="Work.", messages=["go"], idempotency_key="k", scope=scope, model=model
        )

    ids = await asyncio.gather(submit(), submit(), submit())
    release.set()
    results = [await rt.unbound.result(i) for i in ids]

    assert len(set(ids)) == 1
    assert all(r.text == "done" for r in results)
    assert len(model.requests) == 1
    assert len(await rt.store.list_runs(scope=scope)) == 1


async def test_idempotency_keys_are_per_owner_another_owner_gets_its_own_run(
    rt: Runtime, scope: Scope
) -> None:
    first = await rt.unbound.run(
        system_prompt="Work.",
        messages=["go"],
        idempotency_key="k",
        scope=scope,
        model=ScriptedModel([reply("ana's")]),
    )
    bob = Scope(tenant="acme", user="bob")
    other = await rt.unbound.run(
        system_prompt="Work.",
        messages=["go"],
        idempotency_key="k",
        scope=bob,
        model=ScriptedModel([reply("bob's")]),
    )
    assert other.run_id != first.run_id and other.thread_id != first.thread_id
    assert (first.text, other.text) == ("ana's", "bob's")
    again = await rt.unbound.submit(
        system_prompt="Work.",
        messages=["go"],
        idempotency_key="k",
        scope=bob,
        model=ScriptedModel([reply("never")]),
    )
    assert again == other.run_id
    assert [r.run_id for r in await rt.store.list_runs(scope=bob)] == [other.run_id]


async def test_gates_abort_unbound_runs_as_gate_not_supported(rt: Runtime, scope: Scope) -> None:
    sent: list[str] = []

    @tool(effects={"write"}, needs_approval=True)
    def send_email(to: str) -> str:
        """Send an email."""
        sent.append(to)
        return "sent"

    model = ScriptedModel([call("send_email", to="bob@x"), reply("done")])
    r = await rt.unbound.run(
        system_prompt="Mail bob.", messages=["go"], tools=[send_email], scope=scope, model=model
    )

    assert r.status == "failed"
    assert isinstance(r.exit, Failed) and r.exit.kind == "gate_not_supported"
    assert sent == []
    assert await rt.store.list_gates(scope=scope) == []  # nobody is asked to approve


async def test_declared_limits_narrow_the_family_iteration_cap(rt: Runtime, scope: Scope) -> None:
    steps: list[int] = []

    def endless(request: ModelRequest) -> ModelResponse:
        if request.tools is None:  # the finalizer's request
            return reply("summary of the steps")
        return call("step", n=len(steps))

    r = await rt.unbound.run(
        system_prompt="Keep stepping.",
        messages=["go"],
        tools=[make_step(steps)],
        limits=Limits(max_iterations=3),
        scope=scope,
        model=ScriptedModel(endless),
    )

    assert steps == [0, 1, 2]
    assert isinstance(r.exit, Completed) and r.exit.kind == "graceful_summary"
    assert r.exit.reason == "max_iterations"


async def test_unbound_iteration_cap_is_high_when_no_limits_are_declared(
    rt: Runtime, scope: Scope
) -> None:
    steps: list[int] = []
    wanted = Limits().max_iterations + 8  # past the interactive default of 32

    def long_task(request: ModelRequest) -> ModelResponse:
        return call("step", n=len(steps)) if len(steps) < wanted else reply("all done")

    r = await rt.unbound.run(
        system_prompt="Step.",
        messages=["go"],
        tools=[make_step(steps)],
        scope=scope,
        model=ScriptedModel(long_task),
    )

    assert r.status == "completed" and r.text == "all done"
    assert len(steps) == wanted


async def test_unbound_runs_never_fire_after_turn(rt: Runtime, scope: Scope) -> None:
    seen: list[tuple[str, str]] = []

    async def on_turn(ctx: AfterTurnContext) -> None:
        seen.append((ctx.run_id, ctx.profile))

    rt.hooks.register("after_turn", on_turn, name="audit")
    plain = await rt.unbound.run(
        system_prompt="Work.", messages=["go"], scope=scope, model=ScriptedModel([reply("ok")])
    )
    failed = await rt.unbound.run(
        system_prompt="Work.", messages=["go"], scope=scope, model=ScriptedModel([reply(" ")])
    )
    assert plain.status == "completed" and failed.status == "failed"
    assert seen == []

    # The hook itself works: an interactive turn fires it.
    agent = Agent(name="a", model=ScriptedModel([reply("hi")]))
    turn = await rt.run(agent, "hello", scope=scope)
    assert seen == [(turn.run_id, "interactive")]


async def test_unbound_run_has_no_actor_no_conversation_and_the_unbound_family(
    rt: Runtime, scope: Scope
) -> None:
    model = ScriptedModel([reply("ok")])
    run_id = await rt.unbound.submit(
        system_prompt="You tidy things.",
        messages=[Message(role="user", content="first"), "second"],
        scope=scope,
        model=model,
    )
    await rt.unbound.result(run_id)
    run = await rt.store.get_run(run_id)

    assert (run.profile, run.family_id, run.has_actor) == ("unbound", "unbound", False)
    sent = model.requests[0].messages
    assert [(m.role, m.content) for m in sent] == [
        ("system", "You tidy things."),
        ("user", "first"),
        ("user", "second"),
    ]
    # Its own thread: nothing of another conversation.
    items = await rt.store.thread_items(run.thread_id)
    assert {i.run_id for i in items} == {run_id}


async def test_agent_lends_only_its_model_to_an_unbound_turn(rt: Runtime, scope: Scope) -> None:
    steps: list[int] = []
    model = ScriptedModel([reply("from the agent's model")])
    agent = Agent(
        name="helper", model=model, instructions="Agent prompt.", tools=[make_step(steps)]
    )

    r = await rt.unbound.run(
        system_prompt="Pass prompt.", messages=["go"], scope=scope, agent=agent
    )

    assert r.text == "from the agent's model"
    assert model.requests[0].messages[0].content == "Pass prompt."
    assert model.requests[0].tools == ()


async def test_ephemeral_agent_is_forgotten_when_its_run_ends(rt: Runtime, scope: Scope) -> None:
    r = await rt.unbound.run(
        system_prompt="Work.",
        messages=["go"],
        idempotency_key="forget-me",
        scope=scope,
        model=ScriptedModel([reply("ok")]),
    )
    await asyncio.sleep(0)
    assert r.status == "completed"
    assert not [name for name in rt._directory if name.startswith("unbound:")]
    assert (await rt.get_result(r.run_id)).text == "ok"


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({}, "exactly one of model= or agent="),
        ({"model": "x", "agent": Agent(name="a", model="x")}, "exactly one of model= or agent="),
        ({"model": "x", "messages": [Message(role="system", content="s")]}, "system_prompt"),
    ],
)
async def test_submit_refuses_misuse_with_a_clear_error(
    rt: Runtime, scope: Scope, kwargs: dict[str, Any], match: str
) -> None:
    with pytest.raises(UsageError, match=match):
        await rt.unbound.submit(system_prompt="Work.", scope=scope, **kwargs)
