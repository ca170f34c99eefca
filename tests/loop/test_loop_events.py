"""Typed run events (DESIGN §17): what a run emits, in a sensible order."""

from __future__ import annotations

from loop.loop_support import collect_events
from reverie import Agent, Runtime, Scope, tool
from reverie.core.events import (
    AssistantMessage,
    CheckpointEvent,
    ModelRequested,
    RunEvent,
    RunFinished,
    TextDeltaEvent,
    ToolFinished,
    ToolStarted,
)
from reverie.testing import ScriptedModel, calls, reply


@tool(effects=set())
def add(a: int, b: int) -> int:
    """Add two integers."""
    return a + b


def first(events: list[RunEvent], kind: str, **match: object) -> int:
    """Index of the first event of ``kind`` whose attributes match."""
    for i, event in enumerate(events):
        if event.kind == kind and all(getattr(event, k) == v for k, v in match.items()):
            return i
    raise AssertionError(f"no {kind} event matching {match}")


async def test_run_emits_its_events_in_order(rt: Runtime, scope: Scope) -> None:
    model = ScriptedModel(
        [calls(("add", {"a": 1, "b": 2}), text="Let me add."), reply("The sum is 3.")]
    )
    h = await rt.start(Agent(name="e", model=model, tools=[add]), "1+2?", scope=scope)
    events = await collect_events(h)
    r = await h.result()
    assert r.status == "completed"

    kinds = [e.kind for e in events]
    assert kinds[0] == "run_started"
    assert kinds[-1] == "run_finished"
    finished = events[-1]
    assert isinstance(finished, RunFinished)
    assert finished.status == "completed"
    for kind in (
        "model_request",
        "text_delta",
        "assistant_message",
        "tool_started",
        "tool_finished",
        "checkpoint",
    ):
        assert kind in kinds, kind

    # Tick 0: checkpoint, request, streamed text, the committed message, then the tool.
    before_model = first(events, "checkpoint", checkpoint_kind="BeforeModel")
    request = first(events, "model_request")
    delta = first(events, "text_delta")
    progress = first(events, "assistant_message")
    before_side_effect = first(events, "checkpoint", checkpoint_kind="BeforeSideEffect")
    started = first(events, "tool_started")
    done = first(events, "tool_finished")
    assert before_model < request < delta < progress < before_side_effect < started < done

    # Tick 1: the reply, then the Final checkpoint, then the end. The pure wave replays
    # harmlessly from its BeforeSideEffect checkpoint: no BeforeModel checkpoint of its own.
    requests = [i for i, e in enumerate(events) if isinstance(e, ModelRequested)]
    assert len(requests) == 2
    assert done < requests[1]
    checkpoints = [e.checkpoint_kind for e in events if isinstance(e, CheckpointEvent)]
    assert checkpoints == ["BeforeModel", "BeforeSideEffect", "Final"]
    replies = [e for e in events if isinstance(e, AssistantMessage)]
    assert [(m.text, m.tool_calls) for m in replies] == [
        ("Let me add.", ("add",)),
        ("The sum is 3.", ()),
    ]
    final = first(events, "checkpoint", checkpoint_kind="Final")
    assert events.index(replies[-1]) < final < len(events) - 1

    streamed = "".join(e.text for e in events if isinstance(e, TextDeltaEvent))
    assert streamed == "Let me add.The sum is 3."
    tool_started = events[started]
    tool_finished = events[done]
    assert isinstance(tool_started, ToolStarted)
    assert isinstance(tool_finished, ToolFinished)
    assert (tool_started.tool, tool_started.call_id) == ("add", tool_finished.call_id)
    assert tool_finished.outcome == "completed"
    assert all(isinstance(e, CheckpointEvent) for e in events if e.kind == "checkpoint")
    assert {e.run_id for e in events} == {h.run_id}


async def test_a_wave_that_must_not_repeat_settles_with_a_checkpoint_of_its_own(
    rt: Runtime, scope: Scope
) -> None:
    @tool(effects={"write"})
    def save(a: int) -> int:
        """Save a number (not safe to repeat)."""
        return a

    model = ScriptedModel([calls(("save", {"a": 1})), reply("saved")])
    h = await rt.start(Agent(name="e", model=model, tools=[save]), "save 1", scope=scope)
    events = await collect_events(h)
    assert (await h.result()).status == "completed"
    checkpoints = [e.checkpoint_kind for e in events if isinstance(e, CheckpointEvent)]
    assert checkpoints == ["BeforeModel", "BeforeSideEffect", "BeforeModel", "Final"]
    done = first(events, "tool_finished")
    settled = [
        i
        for i, e in enumerate(events)
        if isinstance(e, CheckpointEvent) and e.checkpoint_kind == "BeforeModel"
    ][1]
    second_request = [i for i, e in enumerate(events) if isinstance(e, ModelRequested)][1]
    assert done < settled < second_request


async def test_late_subscriber_replays_the_whole_run(rt: Runtime, scope: Scope) -> None:
    model = ScriptedModel([reply("hi")])
    h = await rt.start(Agent(name="e", model=model), "hello", scope=scope)
    await h.result()
    kinds = [e.kind for e in await collect_events(h)]

    assert kinds[0] == "run_started"
    assert kinds[-1] == "run_finished"
    assert "assistant_message" in kinds
