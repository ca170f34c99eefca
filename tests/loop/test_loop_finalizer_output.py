"""The finalizer's answer (DESIGN §4.4, issue 10): validated before any of it is shown, with its
own deadline and output cap, priced with the model that answered it."""

from __future__ import annotations

import asyncio
import itertools
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import pytest

from loop.loop_support import FakeHost, collect_events
from reverie import Agent, Limits, Runtime, Scope, tool
from reverie.core.events import AssistantMessage, ModelRequested, TextDeltaEvent
from reverie.core.exits import Completed, Failed
from reverie.core.messages import ModelRequest, ModelResponse
from reverie.loop.executor import LoopConfig, run_loop
from reverie.loop.family import LoopFamily
from reverie.loop.state import LoopExecutionState
from reverie.testing import ScriptedModel, call, reply


@tool(effects=set())
def probe(n: int) -> str:
    """Probe something."""
    return f"probed {n}"


def finalizing_model(final: ModelResponse) -> ScriptedModel:
    """Calls ``probe`` until it is asked without tools, then answers ``final``."""
    counter = itertools.count()

    def answer(request: ModelRequest) -> ModelResponse:
        if request.tools is None:
            return final
        return call("probe", n=next(counter))

    return ScriptedModel(answer, stream_chunk=4)


@pytest.mark.parametrize(
    "answer",
    [
        reply(""),
        reply('<tool_call>{"name": "probe", "arguments": {"n": 1}}</tool_call>'),
        reply('Here you go: {"tool_calls": []} ```tool\nprobe(n=1)\n```'),
        call("probe", n=99),
        reply("far too long " * 3000),
    ],
    ids=["empty", "tool-call-tag", "fenced-tool", "native-tool-call", "over-the-output-cap"],
)
async def test_rejected_finalizer_answer_never_reaches_text_delta_events(
    rt: Runtime, scope: Scope, answer: ModelResponse
) -> None:
    model = finalizing_model(answer)
    agent = Agent(name="f", model=model, tools=[probe], limits=Limits(max_iterations=1))
    h = await rt.start(agent, "go", scope=scope)
    events = await collect_events(h)
    r = await h.result()

    assert isinstance(r.exit, Failed)
    assert r.exit.kind == "iteration_limit"
    assert [e for e in events if isinstance(e, TextDeltaEvent)] == []
    assert [req.tools is None for req in model.requests] == [False, True]


async def test_accepted_finalizer_answer_is_emitted_once_after_validation(
    rt: Runtime, scope: Scope
) -> None:
    summary = "Probed once; the rest is unfinished."
    model = finalizing_model(reply(summary))
    agent = Agent(name="f", model=model, tools=[probe], limits=Limits(max_iterations=1))
    h = await rt.start(agent, "go", scope=scope)
    events = await collect_events(h)
    r = await h.result()

    assert isinstance(r.exit, Completed) and r.text == summary
    # The model streamed it in 4-character pieces; the run shows it whole, once accepted,
    # after the finalizer's request and before the committed assistant message.
    deltas = [i for i, e in enumerate(events) if isinstance(e, TextDeltaEvent)]
    assert [events[i] for i in deltas] == [TextDeltaEvent(run_id=r.run_id, text=summary)]
    final_request = max(
        i for i, e in enumerate(events) if isinstance(e, ModelRequested) and e.tools == 0
    )
    message = max(i for i, e in enumerate(events) if isinstance(e, AssistantMessage))
    assert final_request < deltas[0] < message


async def test_finalizer_request_carries_its_own_output_cap(rt: Runtime, scope: Scope) -> None:
    model = finalizing_model(reply("summary"))
    agent = Agent(name="f", model=model, tools=[probe], limits=Limits(max_iterations=1))
    await rt.run(agent, "go", scope=scope)

    final = model.requests[-1]
    assert final.tools is None
    assert final.settings.max_tokens == LoopConfig().finalizer_max_tokens


FAMILY = LoopFamily(id="default")


def at_the_cap() -> LoopExecutionState:
    """A resume sitting at the iteration cap: the next step is the finalizer."""
    return LoopExecutionState(iteration=1)


async def test_finalizer_call_has_its_own_deadline() -> None:
    never = asyncio.Event()

    async def hang(host: FakeHost) -> ModelResponse:
        await never.wait()
        return reply("too late")

    host = FakeHost([hang])
    config = LoopConfig(limits=Limits(max_iterations=1), finalizer_timeout_s=0.2)
    exit_, _ = await run_loop(host, FAMILY, at_the_cap(), config)

    assert isinstance(exit_, Failed)
    assert exit_.kind == "iteration_limit"
    assert "did not finish within 0.2s" in exit_.safe_summary
    assert host.log[-1] == "model final"


@dataclass(frozen=True, slots=True)
class FallbackModel:
    """A model strategy that always picks the second model."""

    def select(self, state: LoopExecutionState) -> int:
        return 1

    def fall_back(
        self, state: LoopExecutionState, error_kind: str, models: int
    ) -> Mapping[str, Any] | None:
        return None

    def failed_kinds(self, state: LoopExecutionState) -> tuple[str, ...]:
        return ()

    def describe(self) -> Mapping[str, Any]:
        return {"index": 1}


async def test_finalizer_is_priced_with_the_model_that_answered() -> None:
    host = FakeHost([reply("summary")], prices={0: 100.0, 1: 0.25})
    host.model_names = ("primary", "fallback")
    family = LoopFamily(id="fallback", model=FallbackModel())
    config = LoopConfig(limits=Limits(max_iterations=1))
    exit_, _ = await run_loop(host, family, at_the_cap(), config)

    assert isinstance(exit_, Completed)
    assert exit_.kind == "graceful_summary"
    assert host.model_calls[-1]["model_index"] == 1
    assert exit_.usage.usd == pytest.approx(0.25)


async def test_finalizer_text_is_held_back_by_the_model_port() -> None:
    host = FakeHost([reply("summary")])
    config = LoopConfig(limits=Limits(max_iterations=1))
    await run_loop(host, FAMILY, at_the_cap(), config)

    assert host.model_calls[-1]["emit_text"] is False
    texts = [e for e in host.events_seen if isinstance(e, TextDeltaEvent)]
    assert [e.text for e in texts] == ["summary"]
