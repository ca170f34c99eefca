"""Runtime rules that held before anything pinned them: where a fresh run's state starts, and
what the finalizer leaves in the thread."""

from __future__ import annotations

import asyncio

from reverie import Agent, Limits, Runtime, Scope, tool
from reverie.core.messages import ModelRequest, ModelResponse
from reverie.hooks import PromptHookContext
from reverie.loop.finalizer import FINALIZER_PROMPTS
from reverie.store.memory import MemoryStore
from reverie.testing import ScriptedModel, call, reply

SCOPE = Scope(tenant="acme", user="ana")
GUARD_S = 60.0


@tool(effects=set())
def add(a: int, b: int) -> int:
    """Add two integers."""
    return a + b


async def test_a_fresh_runs_state_starts_at_the_threads_head() -> None:
    store = MemoryStore()
    building = asyncio.Event()

    async def stall(ctx: PromptHookContext) -> None:
        building.set()
        await asyncio.Event().wait()  # the process "dies" before the run's first checkpoint

    rt = Runtime(store)
    await rt.__aenter__()
    first = await rt.run(
        Agent(name="a", model=ScriptedModel([call("add", a=1, b=2), reply("3")]), tools=[add]),
        "one plus two?",
        scope=SCOPE,
    )
    assert first.status == "completed"
    rt.hooks.register("before_prompt", stall, name="stall", timeout_s=3600)
    handle = await rt.start(
        Agent(name="a", model=ScriptedModel([reply("never")]), tools=[add]),
        "and again?",
        scope=SCOPE,
        thread_id=first.thread_id,
    )
    async with asyncio.timeout(GUARD_S):
        await building.wait()
    await rt.aclose()  # no checkpoint yet: the resume starts from the thread's head

    model = ScriptedModel([reply("still 3")])
    async with Runtime(store, agents=[Agent(name="a", model=model, tools=[add])]) as rt2:
        resumed = await rt2.resume(handle.run_id)
        rows = await rt2.store.thread_items(first.thread_id)
    assert resumed.status == "completed" and resumed.text == "still 3"
    # The earlier turn is intact (nothing superseded) and in the resumed run's prompt.
    assert [(r.role, r.content) for r in rows if not r.superseded] == [
        ("user", "one plus two?"),
        ("assistant", ""),
        ("tool", "3"),
        ("assistant", "3"),
        ("user", "and again?"),
        ("assistant", "still 3"),
    ]
    sent = [(m.role, m.content) for m in model.requests[0].messages if m.role != "system"]
    assert ("user", "one plus two?") in sent and ("assistant", "3") in sent
    assert sent[-1] == ("user", "and again?")


def at_the_limit(final: ModelResponse) -> ScriptedModel:
    """One tool step (the iteration limit of 1 is then reached), then the finalizer's answer."""

    def answer(request: ModelRequest) -> ModelResponse:
        if any(m.content == FINALIZER_PROMPTS["max_iterations"] for m in request.messages):
            return final
        return call("add", a=1, b=2)

    return ScriptedModel(answer)


async def test_a_successful_finalizer_answer_is_stored_as_an_assistant_message() -> None:
    model = at_the_limit(reply("It is 3."))
    agent = Agent(name="a", model=model, tools=[add], limits=Limits(max_iterations=1))
    async with Runtime.open(":memory:") as rt:
        r = await rt.run(agent, "one plus two?", scope=SCOPE)
        rows = await rt.store.thread_items(r.thread_id)
    assert r.status == "completed" and r.text == "It is 3."
    last = rows[-1]
    assert (last.role, last.content) == ("assistant", "It is 3.")
    assert last.meta.get("graceful_summary") == "max_iterations"
    # The finalizer's own instruction is sent, never stored.
    assert all(row.content != FINALIZER_PROMPTS["max_iterations"] for row in rows)


async def test_a_failed_finalizer_stores_neither_its_prompt_nor_its_answer() -> None:
    bad = call("add", a=5, b=5)  # tool calls are not a final answer
    agent = Agent(name="a", model=at_the_limit(bad), tools=[add], limits=Limits(max_iterations=1))
    async with Runtime.open(":memory:") as rt:
        r = await rt.run(agent, "one plus two?", scope=SCOPE)
        rows = await rt.store.thread_items(r.thread_id)
    assert r.status == "failed" and r.exit.kind == "iteration_limit"  # type: ignore[union-attr]
    assert [(row.role, row.content) for row in rows] == [
        ("user", "one plus two?"),
        ("assistant", ""),
        ("tool", "3"),
    ]
    assert not any(row.meta.get("graceful_summary") for row in rows)
