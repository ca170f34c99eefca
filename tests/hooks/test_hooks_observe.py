"""Observer points: isolation, event-kind filtering, poisoning."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from typing import Any

import pytest

from reverie.core.scope import Scope
from reverie.errors import UsageError
from reverie.hooks import (
    CheckpointHookContext,
    EventHookContext,
    HookDispatcher,
    HookRegistry,
    ModelHookContext,
)

NO_POISON: frozenset[str] = frozenset()


@dataclass(frozen=True)
class FakeEvent:
    kind: str


def model_ctx(scope: Scope) -> ModelHookContext:
    return ModelHookContext(scope=scope, run_id="run-1", text="hi", tool_names=())


def event_ctx(scope: Scope, kind: str) -> EventHookContext:
    return EventHookContext(scope=scope, run_id="run-1", event=FakeEvent(kind))


async def test_observer_failure_is_isolated_from_other_observers(
    registry: HookRegistry, dispatcher: HookDispatcher, scope: Scope
) -> None:
    seen: list[str] = []

    def broken(ctx: ModelHookContext) -> None:
        raise RuntimeError("boom")

    async def slow(ctx: ModelHookContext) -> None:
        await asyncio.sleep(1)

    async def fine(ctx: ModelHookContext) -> None:
        seen.append(ctx.text or "")

    registry.register("after_model", broken, name="broken", phase="validation")
    registry.register("after_model", slow, name="slow", timeout_s=0.05)
    registry.register("after_model", fine, name="fine", phase="telemetry")

    result = await dispatcher.observe("after_model", model_ctx(scope), poisoned=NO_POISON)

    assert seen == ["hi"]
    assert result.ran == ("fine",)
    assert sorted((f.hook, f.reason) for f in result.failures) == [
        ("broken", "exception"),
        ("slow", "timeout"),
    ]
    assert result.newly_poisoned == {"broken", "slow"}


async def test_event_hook_receives_only_the_kinds_it_filtered_for(
    registry: HookRegistry, dispatcher: HookDispatcher, scope: Scope
) -> None:
    seen: list[str] = []
    registry.register(
        "event",
        lambda ctx: seen.append(ctx.event.kind),
        name="tools",
        event_kinds={"tool_started", "tool_finished"},
    )

    for kind in ("run_started", "tool_started", "text_delta", "tool_finished"):
        await dispatcher.observe("event", event_ctx(scope, kind), poisoned=NO_POISON)

    assert seen == ["tool_started", "tool_finished"]


async def test_unmatched_event_runs_no_hook(
    registry: HookRegistry, dispatcher: HookDispatcher, scope: Scope
) -> None:
    registry.register("event", lambda ctx: None, name="tools", event_kinds={"tool_started"})

    result = await dispatcher.observe("event", event_ctx(scope, "text_delta"), poisoned=NO_POISON)

    assert (result.ran, result.failures) == ((), ())


async def test_installed_hooks_can_observe(
    registry: HookRegistry, dispatcher: HookDispatcher, scope: Scope
) -> None:
    seen: list[str] = []
    registry.register_installed(
        "after_checkpoint", lambda ctx: seen.append(ctx.checkpoint_kind), name="ext"
    )
    ctx = CheckpointHookContext(scope=scope, run_id="r", checkpoint_kind="BeforeModel", iteration=0)

    result = await dispatcher.observe("after_checkpoint", ctx, poisoned=NO_POISON)

    assert (seen, result.ran) == (["BeforeModel"], ("ext",))


async def test_poisoned_observer_is_skipped(
    registry: HookRegistry, dispatcher: HookDispatcher, scope: Scope
) -> None:
    seen: list[str] = []
    registry.register("after_model", lambda ctx: seen.append("a"), name="a")
    registry.register("after_model", lambda ctx: seen.append("b"), name="b")

    result = await dispatcher.observe("after_model", model_ctx(scope), poisoned={"a"})

    assert (seen, result.ran) == (["b"], ("b",))


async def test_observe_refuses_a_point_that_is_not_an_observer_point(
    dispatcher: HookDispatcher, scope: Scope
) -> None:
    point: Any = "before_capability"
    with pytest.raises(UsageError, match="observer point"):
        await dispatcher.observe(point, model_ctx(scope), poisoned=NO_POISON)


async def test_observe_refuses_the_wrong_context_type(
    dispatcher: HookDispatcher, scope: Scope
) -> None:
    with pytest.raises(UsageError, match="EventHookContext"):
        await dispatcher.observe("event", model_ctx(scope), poisoned=NO_POISON)
