"""``event`` hooks see every typed run event of every run (DESIGN §11, §17): run_started,
checkpoint and run_finished included, for interactive and unbound runs — so a background run's
end is visible to a hook."""

from __future__ import annotations

from collections import defaultdict
from typing import get_args

from reverie import Agent, Runtime, Scope, tool
from reverie.core.events import RunEvent
from reverie.hooks import EventHookContext
from reverie.memory import NativeMemory
from reverie.runtime import OutputContract
from reverie.testing import ScriptedModel, call, reply

SCOPE = Scope(tenant="acme", user="ana")
ALL_KINDS = frozenset(cls.__dataclass_fields__["kind"].default for cls in get_args(RunEvent))
REPORT = OutputContract.json_schema(
    "report",
    {"type": "object", "properties": {"ok": {"type": "boolean"}}, "required": ["ok"]},
)


@tool(effects=set())
def add(a: int, b: int) -> int:
    """Add."""
    return a + b


async def test_every_typed_run_event_reaches_event_hooks_for_interactive_and_unbound_runs() -> None:
    seen: dict[str, list[str]] = defaultdict(list)

    async def watch(ctx: EventHookContext) -> None:
        seen[ctx.run_id].append(ctx.event.kind)

    agent = Agent(
        name="adder", model=ScriptedModel([call("add", a=1, b=2), reply("3")]), tools=[add]
    )
    async with Runtime.open(":memory:") as rt:
        rt.hooks.register("event", watch, name="watch-all", event_kinds=set(ALL_KINDS))
        handle = await rt.start(agent, "1+2", scope=SCOPE)
        streamed = [e.kind async for e in handle.events()]
        await handle.result()
        unbound = await rt.unbound.submit(
            system_prompt="Report.",
            messages=["Go."],
            output_contract=REPORT,
            scope=SCOPE,
            model=ScriptedModel([call("structured_result", ok=True)]),
        )
        assert (await rt.unbound.result(unbound)).status == "completed"
    interactive = seen[handle.run_id]
    assert interactive == streamed  # exactly what the run's event stream carried, in order
    for kind in ("run_started", "model_request", "checkpoint", "tool_started", "tool_finished"):
        assert kind in interactive, kind
    assert interactive[0] == "run_started" and interactive[-1] == "run_finished"
    background = seen[unbound]
    assert background[0] == "run_started" and background[-1] == "run_finished"
    assert "checkpoint" in background


async def test_an_event_hook_filtered_on_run_finished_sees_a_curation_pass_end() -> None:
    finished: list[tuple[str, str]] = []

    async def on_finish(ctx: EventHookContext) -> None:
        finished.append((ctx.run_id, getattr(ctx.event, "status", "")))

    curator = ScriptedModel(
        lambda request: call("structured_result", changed=False, summary="nothing to do")
    )
    user = Agent(name="user", model=ScriptedModel(lambda request: reply("ok")))
    async with Runtime.open(
        ":memory:", memory=NativeMemory(), curation_interval_turns=2, curation_model=curator
    ) as rt:
        rt.hooks.register("event", on_finish, name="ends", event_kinds={"run_finished"})
        turns = [await rt.run(user, f"turn {i}", scope=SCOPE) for i in range(2)]
        (record,) = await rt.memory.wait_for_passes()
    assert {(t.run_id, "completed") for t in turns} <= set(finished)
    assert (record.run_id, "completed") in finished  # the background pass's end
    assert len(finished) == 3


async def test_an_event_hook_registered_while_a_run_is_going_sees_the_events_after_it() -> None:
    seen: list[str] = []

    async def watch(ctx: EventHookContext) -> None:
        seen.append(ctx.event.kind)

    async with Runtime.open(":memory:") as rt:

        @tool(effects=set())
        def register() -> str:
            """Register the watcher mid-run."""
            rt.hooks.register("event", watch, name="late", event_kinds={"tool_finished"})
            return "ok"

        agent = Agent(
            name="late",
            model=ScriptedModel([call("register"), call("register_again"), reply("done")]),
            tools=[register],
        )
        result = await rt.run(agent, "go", scope=SCOPE)
        assert result.status == "completed"
    # The call that registered it finished after it was bound, and so did the unknown tool's.
    assert seen == ["tool_finished", "tool_finished"]
