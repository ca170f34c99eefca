"""Cancellation (DESIGN §5): durable, prompt, cancellation-first, and a clean exit."""

from __future__ import annotations

import asyncio
import dataclasses
from collections.abc import AsyncIterator

import pytest

from reverie import Agent, Limits, RunHandle, Runtime, Scope, tool
from reverie.core.exits import Cancelled as CancelledExit
from reverie.core.messages import ModelRequest, ModelResponse
from reverie.errors import CapabilityError
from reverie.loop.control import Cancelled, CancelToken, race_cancellation
from reverie.loop.family import default_families
from reverie.loop.strategies import DefaultRecovery
from reverie.testing import ScriptedModel, call, calls, error, reply

SCOPE = Scope(tenant="acme", user="ana")
GUARD_S = 60.0
"""A hang guard for waits on events: generous, so a loaded machine never trips it."""
BACKOFF_S = 3600.0
"""A retry backoff far beyond ``GUARD_S``: "promptly" means the run did not wait it out."""
SLOW_RETRIES = dataclasses.replace(
    default_families()[0],
    recovery=DefaultRecovery(base_backoff_s=BACKOFF_S, max_backoff_s=BACKOFF_S),
)
"""Retries that back off for an hour: a run that waited one out would hit ``GUARD_S``."""


@pytest.fixture
async def rt() -> AsyncIterator[Runtime]:
    async with Runtime.open(":memory:") as runtime:
        yield runtime


@pytest.fixture
async def slow_rt() -> AsyncIterator[Runtime]:
    async with Runtime.open(":memory:", families=[SLOW_RETRIES]) as runtime:
        yield runtime


async def test_cancellation_wins_when_the_answer_is_ready_at_the_same_time() -> None:
    token = CancelToken()

    async def answer() -> str:
        token.cancel("user left")  # cancellation and the answer land in the same step
        return "the answer"

    with pytest.raises(Cancelled, match="user left"):
        await race_cancellation(answer(), token)


async def test_model_answer_ready_with_cancellation_is_not_committed(rt: Runtime) -> None:
    handles: list[RunHandle] = []

    async def answer(request: ModelRequest) -> ModelResponse:
        await handles[0].cancel()
        return reply("the secret answer")

    model = ScriptedModel(answer)
    h = await rt.start(Agent(name="c", model=model), "hi", scope=SCOPE)
    handles.append(h)
    events = [e async for e in h.events()]
    r = await h.result()

    assert r.status == "cancelled"
    assert isinstance(r.exit, CancelledExit)
    assert r.text is None
    items = await rt.store.thread_items(h.thread_id)
    assert [(i.role, i.content) for i in items] == [("user", "hi")]
    kinds = [e.kind for e in events]
    assert "assistant_message" not in kinds
    assert "text_delta" not in kinds
    assert kinds[-1] == "run_finished"


async def test_text_from_a_cancelled_model_call_never_reaches_the_next_prompt(
    rt: Runtime,
) -> None:
    handles: list[RunHandle] = []

    async def answer(request: ModelRequest) -> ModelResponse:
        if not handles[0].done() and len(model.requests) == 1:
            await handles[0].cancel()
            return reply("half-finished thought")
        return reply("fresh answer")

    model = ScriptedModel(answer)
    agent = Agent(name="c", model=model)
    h = await rt.start(agent, "first", scope=SCOPE)
    handles.append(h)
    assert (await h.result()).status == "cancelled"

    r = await rt.run(agent, "second", scope=SCOPE, thread_id=h.thread_id)

    assert r.status == "completed"
    prompt = model.requests[-1].messages
    assert [(m.role, m.content) for m in prompt] == [("user", "first"), ("user", "second")]


async def test_cancel_during_a_long_tool_cancels_the_tool_task(rt: Runtime) -> None:
    running = asyncio.Event()
    tool_cancelled = asyncio.Event()

    @tool(effects={"write"})
    async def long_job(n: int) -> str:
        """Runs for a long time."""
        running.set()
        try:
            await asyncio.sleep(30)
        except asyncio.CancelledError:
            tool_cancelled.set()
            raise
        return "finished"

    model = ScriptedModel([call("long_job", n=1), reply("never")])
    h = await rt.start(Agent(name="c", model=model, tools=[long_job]), "go", scope=SCOPE)
    async with asyncio.timeout(GUARD_S):
        await running.wait()
    await h.cancel()
    async with asyncio.timeout(GUARD_S):
        r = await h.result()

    assert r.status == "cancelled"
    assert tool_cancelled.is_set()
    assert len(model.requests) == 1
    # A clean exit: the last checkpoint is Final, and the run row says cancelled.
    checkpoint = await rt.store.load_checkpoint(h.run_id)
    assert checkpoint is not None
    assert checkpoint.kind == "Final"
    assert (await rt.store.get_run(h.run_id)).status == "cancelled"


async def test_cancel_during_a_parallel_wave_cancels_every_tool(rt: Runtime) -> None:
    running = 0
    cancelled = 0
    all_running = asyncio.Event()

    @tool(effects={"read"})
    async def slow_read(n: int) -> str:
        """Reads slowly."""
        nonlocal running, cancelled
        running += 1
        if running == 3:
            all_running.set()
        try:
            await asyncio.sleep(30)
        except asyncio.CancelledError:
            cancelled += 1
            raise
        return "read"

    model = ScriptedModel(
        [
            calls(*[("slow_read", {"n": i}) for i in range(3)]),
            reply("never"),
        ]
    )
    h = await rt.start(Agent(name="c", model=model, tools=[slow_read]), "go", scope=SCOPE)
    async with asyncio.timeout(GUARD_S):
        await all_running.wait()
    await h.cancel()
    async with asyncio.timeout(GUARD_S):
        r = await h.result()

    assert r.status == "cancelled"
    assert cancelled == 3


async def test_handle_for_an_already_cancel_requested_run_starts_cancelled(
    rt: Runtime,
) -> None:
    sent: list[str] = []

    @tool(effects={"write"}, needs_approval=True)
    async def send_email(to: str) -> str:
        """Send an email."""
        sent.append(to)
        return "sent"

    model = ScriptedModel([call("send_email", to="bob"), reply("sent it")])
    blocked = await rt.run(Agent(name="c", model=model, tools=[send_email]), "go", scope=SCOPE)
    assert blocked.status == "blocked"
    assert blocked.gate is not None

    # Another process recorded a cancel request; this one resumes the run on approval.
    await rt.store.request_cancel(blocked.run_id)
    r = await rt.approve(blocked.gate.ref)

    assert r.status == "cancelled"
    assert sent == []
    assert len(model.requests) == 1


async def test_cancel_before_a_model_retry_backoff_ends_the_run_promptly(
    slow_rt: Runtime,
) -> None:
    failed = asyncio.Event()

    async def answer(request: ModelRequest) -> ModelResponse:
        failed.set()
        raise error("transient")

    model = ScriptedModel(answer)
    h = await slow_rt.start(Agent(name="c", model=model), "hi", scope=SCOPE)
    async with asyncio.timeout(GUARD_S):
        await failed.wait()
    await asyncio.sleep(
        0.01
    )  # most likely inside the backoff by now; either way the cancel must win
    await h.cancel()
    async with asyncio.timeout(GUARD_S):
        r = await h.result()

    assert r.status == "cancelled"
    assert len(model.requests) == 1


async def test_cancel_before_a_tool_retry_backoff_ends_the_run_promptly(
    slow_rt: Runtime,
) -> None:
    attempts = 0
    failed = asyncio.Event()

    @tool(effects=set())
    async def flaky(x: int) -> str:
        """Fails transiently."""
        nonlocal attempts
        attempts += 1
        failed.set()
        raise CapabilityError("transient", "busy")

    model = ScriptedModel([call("flaky", x=1), reply("never")])
    h = await slow_rt.start(Agent(name="c", model=model, tools=[flaky]), "go", scope=SCOPE)
    async with asyncio.timeout(GUARD_S):
        await failed.wait()
    await asyncio.sleep(
        0.01
    )  # most likely inside the backoff by now; either way the cancel must win
    await h.cancel()
    async with asyncio.timeout(GUARD_S):
        r = await h.result()

    assert r.status == "cancelled"
    assert attempts == 1


async def test_cancellation_during_the_finalizer_commits_no_summary(rt: Runtime) -> None:
    handles: list[RunHandle] = []

    async def answer(request: ModelRequest) -> ModelResponse:
        if request.tools is None:
            await handles[0].cancel()
            return reply("a summary nobody should see")
        return call("nothing")

    model = ScriptedModel(answer)
    agent = Agent(name="c", model=model, limits=Limits(max_iterations=1))
    h = await rt.start(agent, "go", scope=SCOPE)
    handles.append(h)
    r = await h.result()

    assert r.status == "cancelled"
    items = await rt.store.thread_items(h.thread_id)
    assert all("summary" not in i.content for i in items)
    assert [req.tools is None for req in model.requests] == [False, True]


async def test_cancel_is_recorded_durably(rt: Runtime) -> None:
    asked = asyncio.Event()
    release = asyncio.Event()

    async def answer(request: ModelRequest) -> ModelResponse:
        asked.set()
        await release.wait()
        return reply("never")

    model = ScriptedModel(answer)
    h = await rt.start(Agent(name="c", model=model), "hi", scope=SCOPE)
    async with asyncio.timeout(GUARD_S):
        await asked.wait()
    await h.cancel()

    assert (await rt.store.get_run(h.run_id)).cancel_requested
    async with asyncio.timeout(GUARD_S):
        r = await h.result()
    assert r.status == "cancelled"


async def test_cancelling_a_blocked_run_keeps_the_usage_it_had(rt: Runtime) -> None:
    @tool(effects={"write"}, needs_approval=True)
    async def send_email(to: str) -> str:
        """Send an email."""
        return "sent"

    model = ScriptedModel([call("send_email", to="bob"), reply("sent it")])
    blocked = await rt.run(Agent(name="c", model=model, tools=[send_email]), "go", scope=SCOPE)
    assert blocked.status == "blocked"
    assert blocked.usage.model_calls == 1

    cancelled = await rt.cancel(blocked.run_id)

    assert cancelled is not None and cancelled.status == "cancelled"
    assert cancelled.usage == blocked.usage
    assert (await rt.get_result(blocked.run_id)).usage == blocked.usage


async def test_cancelling_a_blocked_run_gives_its_lease_up_with_the_status(rt: Runtime) -> None:
    @tool(effects={"write"}, needs_approval=True)
    async def send_email(to: str) -> str:
        """Send an email."""
        return "sent"

    model = ScriptedModel([call("send_email", to="bob"), reply("sent it")])
    blocked = await rt.run(Agent(name="c", model=model, tools=[send_email]), "go", scope=SCOPE)
    assert blocked.status == "blocked"

    await rt.cancel(blocked.run_id)

    run = await rt.runs.get(blocked.run_id)
    assert run.status == "cancelled" and run.lease_owner is None


async def test_a_cancel_whose_status_write_fails_gives_the_lease_up(rt: Runtime) -> None:
    @tool(effects={"write"}, needs_approval=True)
    async def send_email(to: str) -> str:
        """Send an email."""
        return "sent"

    model = ScriptedModel([call("send_email", to="bob"), reply("sent it")])
    blocked = await rt.run(Agent(name="c", model=model, tools=[send_email]), "go", scope=SCOPE)
    store = rt.store
    real = store.end_segment

    async def failing(*args: object, **kwargs: object) -> object:
        raise OSError("disk gone")

    store.end_segment = failing  # type: ignore[method-assign,assignment]
    with pytest.raises(OSError):
        await rt.cancel(blocked.run_id)
    store.end_segment = real  # type: ignore[method-assign]

    run = await rt.runs.get(blocked.run_id)
    assert run.status == "blocked" and run.lease_owner is None  # nothing held for a lease's TTL
    assert (await rt.cancel(blocked.run_id)) is not None  # a second cancel ends it
