"""The canonical tick (DESIGN §3.5), pinned on the executor with a hand-written host."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from loop.loop_support import FakeHost
from reverie import Limits
from reverie.core.capability import CapabilityDescriptor, Surface
from reverie.core.exits import Cancelled, Completed, Failed
from reverie.core.transcript import InputRecord
from reverie.loop.executor import LoopConfig, run_loop
from reverie.loop.family import LoopFamily
from reverie.loop.state import LoopExecutionState
from reverie.testing import call, reply

ADD = CapabilityDescriptor(
    name="add", description="Add.", parameters={"type": "object"}, effects=frozenset()
)
SAVE = CapabilityDescriptor(
    name="save", description="Save.", parameters={"type": "object"}, effects=frozenset({"write"})
)
FAMILY = LoopFamily(id="default")


async def test_tick_order_checkpoints_before_the_model_and_before_side_effects() -> None:
    host = FakeHost([call("save", a=1, b=2), reply("3")], tools=[SAVE])
    exit_, state = await run_loop(host, FAMILY, LoopExecutionState(), LoopConfig())

    assert isinstance(exit_, Completed)
    assert host.log == [
        # tick 0: prompt, BeforeModel, model, assistant row, BeforeSideEffect, the wave
        "build",
        "checkpoint BeforeModel",
        "model",
        "append assistant",
        "checkpoint BeforeSideEffect",
        "invoke save",
        "append tool",
        # tick 1: the reply completes the run
        "build",
        "checkpoint BeforeModel",
        "model",
        "append assistant",
        # one step commit: the Final checkpoint with the seal
        "checkpoint Final",
        "seal",
    ]
    assert state.iteration == 1


async def test_a_harmless_wave_has_no_checkpoint_before_the_next_model_call() -> None:
    host = FakeHost([call("add", a=1, b=2), reply("3")], tools=[ADD])
    exit_, _ = await run_loop(host, FAMILY, LoopExecutionState(), LoopConfig())

    assert isinstance(exit_, Completed)
    assert host.log == [
        "build",
        "checkpoint BeforeModel",
        "model",
        "append assistant",
        "checkpoint BeforeSideEffect",
        "invoke add",
        "append tool",
        # the pure wave resumes from its BeforeSideEffect checkpoint: its row rides the next
        # step commit (here the Final one), after a read of the queue
        "build",
        "model",
        "append assistant",
        "checkpoint Final",
        "seal",
    ]


async def test_resume_sitting_at_the_iteration_limit_exits_at_once() -> None:
    host = FakeHost([reply("never asked")], tools=[ADD])
    config = LoopConfig(limits=Limits(max_iterations=3), on_limit="fail")
    exit_, _ = await run_loop(host, FAMILY, LoopExecutionState(iteration=3), config)

    assert isinstance(exit_, Failed)
    assert exit_.kind == "iteration_limit"
    assert host.log == []


async def test_resume_at_the_limit_with_finalize_goes_straight_to_the_finalizer() -> None:
    host = FakeHost([reply("summary")], tools=[ADD])
    config = LoopConfig(limits=Limits(max_iterations=3), on_limit="finalize")
    exit_, _ = await run_loop(host, FAMILY, LoopExecutionState(iteration=3), config)

    assert isinstance(exit_, Completed)
    assert exit_.reason == "max_iterations"
    # The queue is sealed before the finalizer's one call, with its BeforeModel checkpoint
    # (what was waiting joins its transcript; anything later is refused), not after it.
    assert host.log == [
        "build final",
        "checkpoint BeforeModel",
        "seal",
        "model final",
        "append assistant",
        "checkpoint Final",
    ]


async def test_cancellation_is_checked_before_a_pending_graceful_stop() -> None:
    host = FakeHost([reply("never asked")], tools=[ADD])
    host.token.cancel("user left")
    state = LoopExecutionState(graceful_stop="host")
    exit_, _ = await run_loop(host, FAMILY, state, LoopConfig())

    assert isinstance(exit_, Cancelled)
    assert exit_.reason == "user left"
    assert host.log == ["checkpoint Final"]


async def test_control_input_at_the_head_of_the_queue_is_handled_before_the_model() -> None:
    stop = InputRecord(
        run_id="run-fake",
        cursor=1,
        input_id="stop-1",
        kind="graceful_stop",
        payload={"reason": "host"},
    )
    host = FakeHost([reply("wrapped up")], tools=[ADD], inputs=[stop])
    exit_, _ = await run_loop(host, FAMILY, LoopExecutionState(), LoopConfig())

    assert isinstance(exit_, Completed)
    assert exit_.reason == "host"
    assert "model" not in host.log
    assert host.log.count("model final") == 1


async def test_model_answer_after_cancellation_is_not_committed() -> None:
    def cancel_then_answer(host: FakeHost) -> Any:
        host.token.cancel("late")
        return reply("too late")

    host = FakeHost([cancel_then_answer], tools=[ADD])
    exit_, _ = await run_loop(host, FAMILY, LoopExecutionState(), LoopConfig())

    assert isinstance(exit_, Cancelled)
    assert "append assistant" not in host.log
    assert not any(e.kind == "assistant_message" for e in host.events_seen)
    assert host.log[-1] == "checkpoint Final"


@dataclass(frozen=True, slots=True)
class Widening:
    """A broken capability strategy that adds a tool the host never offered."""

    def filter(self, state: LoopExecutionState, surface: Surface) -> Surface:
        extra = CapabilityDescriptor(name="rm_rf", description="!", parameters={})
        return Surface(descriptors=(*surface.descriptors, extra), version="wider")

    def describe(self) -> Mapping[str, Any]:
        return {}


async def test_capability_strategy_cannot_widen_the_surface() -> None:
    host = FakeHost([reply("never asked")], tools=[ADD])
    family = LoopFamily(id="widening", capabilities=Widening())
    exit_, _ = await run_loop(host, family, LoopExecutionState(), LoopConfig())

    assert isinstance(exit_, Failed)
    assert exit_.kind == "driver_bug"
    assert "model" not in host.log


async def test_model_call_is_charged_before_it_is_sent() -> None:
    host = FakeHost([reply("never asked")], tools=[ADD])
    config = LoopConfig(limits=Limits(max_model_calls=0))
    exit_, _ = await run_loop(host, FAMILY, LoopExecutionState(), config)

    assert isinstance(exit_, Failed)
    assert exit_.kind == "model_call_limit"
    assert "model" not in host.log
