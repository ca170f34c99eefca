"""Helpers for the loop tests: read what the model was shown, collect a run's events."""

from __future__ import annotations

import inspect
from collections.abc import Awaitable, Callable, Mapping, Sequence

from reverie import RunHandle
from reverie.core.capability import (
    CallCompleted,
    CallGated,
    CallOutcome,
    CapabilityDescriptor,
    Surface,
)
from reverie.core.events import RunEvent
from reverie.core.messages import Message, ModelRequest, ModelResponse, ToolCall
from reverie.core.transcript import InputRecord, NewItem, TranscriptItem
from reverie.loop.control import CancelToken
from reverie.loop.ports import CheckpointKind, CommitReceipt, PromptBundle
from reverie.loop.state import LoopExecutionState
from reverie.loop.strategies import ContextPlan


def tool_messages(request: ModelRequest) -> list[Message]:
    """The tool-result messages of a request, in prompt order."""
    return [m for m in request.messages if m.role == "tool"]


def last_tool_text(request: ModelRequest) -> str:
    """Content of the last tool-result message of a request."""
    return tool_messages(request)[-1].content


async def collect_events(handle: RunHandle) -> list[RunEvent]:
    """Every event of the run (replayed, then live until the run ends or blocks)."""
    return [event async for event in handle.events()]


# ---------------------------------------------------------------------------------- fake host
# A hand-written LoopHost for tests that pin the executor's own order of work (DESIGN §3.5):
# every port call is logged as one short string.


ModelStep = ModelResponse | Awaitable[ModelResponse]
"""What a scripted step function returns: a response, or an awaitable of one."""


class FakeHost:
    """An in-memory ``LoopHost`` whose ports log what the executor asks of them."""

    def __init__(
        self,
        responses: Sequence[ModelResponse | Callable[[FakeHost], ModelStep]],
        *,
        tools: Sequence[CapabilityDescriptor] = (),
        inputs: Sequence[InputRecord] = (),
        prices: Mapping[int, float] | None = None,
    ) -> None:
        self.run_id = "run-fake"
        self.token = CancelToken()
        self.log: list[str] = []
        self.events_seen: list[RunEvent] = []
        self.items: dict[str, TranscriptItem] = {}
        self.checkpoints_seen: list[tuple[str, LoopExecutionState]] = []
        self._responses = list(responses)
        self._surface = Surface(descriptors=tuple(tools), version="v1")
        self._inputs = list(inputs)
        self.prices = dict(prices or {})
        """USD per response of the model at each index."""
        self.model_calls: list[dict[str, object]] = []
        """The keyword arguments of each model call."""
        self.model_names: tuple[str, ...] = ("fake",)
        """What the model port names its models."""
        self.prompt = self
        self.model = _FakeModel(self)
        self.capabilities = _FakeCapabilities(self)
        self.transcript = _FakeTranscript(self)
        self.checkpoints = _FakeCheckpoints(self)
        self.inputs = _FakeInputs(self)
        self.events = _FakeEvents(self)

    async def build(
        self,
        state: LoopExecutionState,
        plan: ContextPlan,
        surface: Surface | None,
        *,
        finalizer_prompt: str | None = None,
    ) -> PromptBundle:
        self.log.append("build" if surface is not None else "build final")
        tools = None if surface is None else ()
        return PromptBundle(request=ModelRequest(messages=(), tools=tools))


class _FakeModel:
    def __init__(self, host: FakeHost) -> None:
        self.host = host

    @property
    def names(self) -> tuple[str, ...]:
        return self.host.model_names

    async def call(
        self,
        bundle: PromptBundle,
        *,
        model_index: int,
        emit_text: bool = True,
        max_bytes: int | None = None,
    ) -> ModelResponse:
        self.host.log.append("model" if bundle.request.tools is not None else "model final")
        self.host.model_calls.append(
            {"model_index": model_index, "emit_text": emit_text, "max_bytes": max_bytes}
        )
        step = self.host._responses.pop(0)
        if isinstance(step, ModelResponse):
            return step
        answer = step(self.host)
        return await answer if inspect.isawaitable(answer) else answer

    def cost(self, response: ModelResponse, *, model_index: int) -> float:
        return self.host.prices.get(model_index, 0.0)


class _FakeCapabilities:
    def __init__(self, host: FakeHost) -> None:
        self.host = host

    def surface(self) -> Surface:
        return self.host._surface

    async def invoke(
        self,
        call: ToolCall,
        descriptor: CapabilityDescriptor | None,
        *,
        attempt: int,
        key: str,
        replay: bool = True,
    ) -> CallOutcome:
        self.host.log.append(f"invoke {call.name}")
        return CallCompleted(output="ok")

    async def open_gate(self, call: ToolCall, gated: CallGated, *, key: str) -> str:
        self.host.log.append("open_gate")
        return "gate-1"


class _FakeTranscript:
    def __init__(self, host: FakeHost) -> None:
        self.host = host

    async def append(self, items: Sequence[NewItem]) -> list[TranscriptItem]:
        rows = []
        for item in items:
            seq = len(self.host.items) + 1
            row = TranscriptItem(
                ref=f"itm-{seq}",
                seq=seq,
                thread_id="thr-fake",
                run_id=self.host.run_id,
                role=item.role,
                content=item.content,
                tool_calls=item.tool_calls,
                tool_call_id=item.tool_call_id,
                name=item.name,
            )
            self.host.items[row.ref] = row
            rows.append(row)
        self.host.log.append("append " + ",".join(i.role for i in items))
        return rows

    async def get(self, refs: Sequence[str]) -> list[TranscriptItem]:
        return [self.host.items[r] for r in refs]


class _FakeCheckpoints:
    """Step commits with the store's guard: not written while an input past the guard waits."""

    def __init__(self, host: FakeHost) -> None:
        self.host = host
        self.sealed = False

    async def commit(
        self,
        kind: CheckpointKind | None,
        state: LoopExecutionState,
        *,
        guard_cursor: int | None = None,
        ack_cursor: int | None = None,
        seal: bool = False,
    ) -> CommitReceipt:
        waiting = guard_cursor is not None and any(
            r.cursor > guard_cursor for r in self.host._inputs
        )
        if waiting:
            self.host.log.append(f"checkpoint {kind} refused: inputs waiting")
            return CommitReceipt(written=False)
        if kind is not None:
            self.host.log.append(f"checkpoint {kind}")
            self.host.checkpoints_seen.append((kind, state))
        if ack_cursor is not None:
            self.host.log.append(f"ack {ack_cursor}")
        if seal:
            self.host.log.append("seal")
            self.sealed = True
        return CommitReceipt(written=True)


class _FakeInputs:
    def __init__(self, host: FakeHost) -> None:
        self.host = host

    async def poll(self, after_cursor: int) -> list[InputRecord]:
        return [r for r in self.host._inputs if r.cursor > after_cursor]


class _FakeEvents:
    def __init__(self, host: FakeHost) -> None:
        self.host = host

    def emit(self, event: RunEvent) -> None:
        self.host.events_seen.append(event)
