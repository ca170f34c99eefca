"""The graceful finalizer (DESIGN §4.4)."""

from __future__ import annotations

import asyncio
import itertools
from typing import Literal

import pytest

from loop.loop_support import collect_events
from reverie import Agent, Limits, RunHandle, Runtime, Scope, tool
from reverie.core.events import LimitReached
from reverie.core.exits import Completed, Failed
from reverie.core.messages import ModelRequest, ModelResponse
from reverie.errors import RunEndedError
from reverie.testing import ScriptedModel, call, calls, reply

ran: list[str] = []


@tool(effects=set())
def probe(n: int) -> str:
    """Probe something."""
    ran.append(f"probe {n}")
    return f"probed {n}"


@pytest.fixture(autouse=True)
def _clear_ran() -> None:
    ran.clear()


def finalizing_model(final: ModelResponse) -> ScriptedModel:
    """Calls ``probe`` with new arguments until it is asked without tools, then ``final``."""
    counter = itertools.count()

    def answer(request: ModelRequest) -> ModelResponse:
        if request.tools is None:
            return final
        return call("probe", n=next(counter))

    return ScriptedModel(answer)


class HeldModel:
    """A model that answers its first request only when released."""

    def __init__(self, first: ModelResponse, final: ModelResponse) -> None:
        self.release = asyncio.Event()
        self.asked = asyncio.Event()
        self.first = first
        self.final = final
        self.model = ScriptedModel(self.answer)

    async def answer(self, request: ModelRequest) -> ModelResponse:
        if request.tools is None:
            return self.final
        self.asked.set()
        await self.release.wait()
        return self.first

    async def wait_asked(self) -> None:
        """Until the model is answering its first request."""
        async with asyncio.timeout(60):
            await self.asked.wait()


async def start(rt: Runtime, scope: Scope, agent: Agent) -> RunHandle:
    return await rt.start(agent, "go", scope=scope)


async def test_finalizer_makes_exactly_one_request_without_tools(rt: Runtime, scope: Scope) -> None:
    model = finalizing_model(reply("summary"))
    agent = Agent(name="f", model=model, tools=[probe], limits=Limits(max_iterations=2))
    r = await rt.run(agent, "go", scope=scope)

    assert isinstance(r.exit, Completed)
    assert r.exit.kind == "graceful_summary"
    finals = [req for req in model.requests if req.tools is None]
    assert len(finals) == 1
    assert model.requests[-1] is finals[0]


async def test_calls_admitted_before_a_host_stop_all_finish(rt: Runtime, scope: Scope) -> None:
    first_running = asyncio.Event()
    release = asyncio.Event()
    finished: list[int] = []

    @tool(effects={"write"})  # exclusive: the wave runs one call after another
    async def step(n: int) -> str:
        """A step with a side effect."""
        if n == 1:
            first_running.set()
            await release.wait()
        finished.append(n)
        return f"step {n} done"

    model = ScriptedModel(
        [calls(("step", {"n": 1}), ("step", {"n": 2}), ("step", {"n": 3})), reply("wrapped up")]
    )
    h = await start(rt, scope, Agent(name="f", model=model, tools=[step]))
    async with asyncio.timeout(60):
        await first_running.wait()
    await h.request_graceful_stop("host")
    release.set()
    r = await h.result()

    assert finished == [1, 2, 3]
    assert isinstance(r.exit, Completed)
    assert r.exit.kind == "graceful_summary"
    assert r.exit.reason == "host"
    assert r.text == "wrapped up"
    assert [req.tools is None for req in model.requests] == [False, True]


async def test_no_call_from_a_later_wave_starts_after_a_host_stop(
    rt: Runtime, scope: Scope
) -> None:
    held = HeldModel(
        calls(("probe", {"n": 1}), ("probe", {"n": 2}), ("probe", {"n": 3})), reply("stopped")
    )
    h = await start(rt, scope, Agent(name="f", model=held.model, tools=[probe]))
    await held.wait_asked()
    # The stop arrives while the model is still answering with calls.
    await h.request_graceful_stop("host")
    held.release.set()
    r = await h.result()

    assert ran == []
    assert isinstance(r.exit, Completed)
    assert r.exit.reason == "host"
    assert [req.tools is None for req in held.model.requests] == [False, True]
    not_run = [m.content for m in held.model.requests[1].messages if m.role == "tool"]
    assert len(not_run) == 3
    assert all("not run" in text for text in not_run)


@pytest.mark.parametrize(
    "answer",
    [
        reply(""),
        reply("   \n\t "),
        reply('<tool_call>{"name": "probe", "arguments": {"n": 1}}</tool_call>'),
        reply('{"tool_calls": [{"name": "probe", "arguments": {"n": 1}}]}'),
        reply('{"function_call": {"name": "probe", "arguments": "{}"}}'),
        reply("```tool\nprobe(n=1)\n```"),
        call("probe", n=99),
    ],
    ids=[
        "empty",
        "whitespace",
        "tool-call-tag",
        "json-tool-calls",
        "json-function-call",
        "fenced-tool",
        "native-tool-call",
    ],
)
async def test_rejected_finalizer_answer_fails_with_the_original_reason(
    rt: Runtime, scope: Scope, answer: ModelResponse
) -> None:
    model = finalizing_model(answer)
    agent = Agent(name="f", model=model, tools=[probe], limits=Limits(max_iterations=1))
    r = await rt.run(agent, "go", scope=scope)

    assert isinstance(r.exit, Failed)
    assert r.exit.kind == "iteration_limit"
    assert ran == ["probe 0"]  # the finalizer's tool call never ran
    assert r.text is None


@pytest.mark.parametrize(
    ("reason", "kind"),
    [
        ("max_iterations", "iteration_limit"),
        ("no_progress", "no_progress_detected"),
        ("host", "host_stop"),
    ],
)
async def test_rejected_finalizer_answer_keeps_each_reasons_failure_kind(
    rt: Runtime, scope: Scope, reason: str, kind: str
) -> None:
    if reason == "max_iterations":
        model = finalizing_model(reply("  "))
        agent = Agent(name="f", model=model, tools=[probe], limits=Limits(max_iterations=1))
        r = await rt.run(agent, "go", scope=scope)
    elif reason == "no_progress":
        model = ScriptedModel([call("probe", n=1)] * 3 + [reply("  ")])
        r = await rt.run(Agent(name="f", model=model, tools=[probe]), "go", scope=scope)
    else:
        held = HeldModel(call("probe", n=1), reply("  "))
        h = await start(rt, scope, Agent(name="f", model=held.model, tools=[probe]))
        await held.wait_asked()
        await h.request_graceful_stop("host")
        held.release.set()
        r = await h.result()

    assert isinstance(r.exit, Failed)
    assert r.exit.kind == kind


async def test_a_graceful_stop_requested_twice_acts_once(rt: Runtime, scope: Scope) -> None:
    held = HeldModel(call("probe", n=1), reply("done early"))
    h = await start(rt, scope, Agent(name="f", model=held.model, tools=[probe]))
    await held.wait_asked()
    await h.request_graceful_stop("host")
    await h.request_graceful_stop("no_progress")
    held.release.set()
    events = await collect_events(h)
    r = await h.result()

    assert isinstance(r.exit, Completed)
    assert r.exit.reason == "host"  # the first request wins
    assert [req.tools is None for req in held.model.requests] == [False, True]
    limits = [(e.reason, e.action) for e in events if isinstance(e, LimitReached)]
    assert limits == [("host", "finalize")]


async def test_a_host_stop_after_a_limit_fired_is_refused_not_applied(
    rt: Runtime, scope: Scope
) -> None:
    holder: list[RunHandle] = []

    async def answer(request: ModelRequest) -> ModelResponse:
        if request.tools is None:
            # No progress already fired; the host asks too, while the finalizer runs: the
            # queue was sealed before the finalizer's call, so the request is refused.
            with pytest.raises(RunEndedError):
                await holder[0].request_graceful_stop("host")
            return reply("summary")
        return call("probe", n=1)

    model = ScriptedModel(answer)
    h = await start(rt, scope, Agent(name="f", model=model, tools=[probe]))
    holder.append(h)
    events = await collect_events(h)
    r = await h.result()

    assert isinstance(r.exit, Completed)
    assert r.exit.reason == "no_progress"
    assert [req.tools is None for req in model.requests] == [False, False, False, True]
    assert [e.reason for e in events if isinstance(e, LimitReached)] == ["no_progress"]


@pytest.mark.parametrize(
    ("reason", "limit", "on_limit"),
    [("max_iterations", Limits(max_iterations=1), "finalize"), ("no_progress", Limits(), "fail")],
)
async def test_limit_reached_event_names_the_reason(
    rt: Runtime,
    scope: Scope,
    reason: str,
    limit: Limits,
    on_limit: Literal["finalize", "fail"],
) -> None:
    if reason == "no_progress":
        model = ScriptedModel([call("probe", n=1)] * 3)
    else:
        model = finalizing_model(reply("summary"))
    agent = Agent(name="f", model=model, tools=[probe], limits=limit, on_limit=on_limit)
    h = await start(rt, scope, agent)
    events = await collect_events(h)
    await h.result()

    assert [(e.reason, e.action) for e in events if isinstance(e, LimitReached)] == [
        (reason, on_limit)
    ]
