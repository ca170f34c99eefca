"""Host ports: the only way the loop talks to the world (docs/loop.md).

The runtime implements these over the store, the models, the tools, the hooks and memory. Hooks
are middleware around the ports, so the executor cannot tell a hook's deny from a policy deny.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol

from reverie.core.capability import CallGated, CallOutcome, CapabilityDescriptor, Surface
from reverie.core.events import RunEvent
from reverie.core.fastcopy import fast_frozen
from reverie.core.messages import ModelRequest, ModelResponse, ToolCall
from reverie.core.transcript import InputRecord, NewItem, TranscriptItem
from reverie.core.vocabulary import CheckpointKind as CheckpointKind
from reverie.loop.control import CancelToken
from reverie.loop.state import LoopExecutionState
from reverie.loop.strategies import ContextPlan


@fast_frozen
@dataclass(frozen=True, kw_only=True)
class PromptBundle:
    """A built model request, ready for the model port."""

    request: ModelRequest
    rows: tuple[TranscriptItem, ...] = ()
    """The transcript rows the request carries, in order (compaction measures and cuts them)."""


class PromptPort(Protocol):
    """Builds the model request from transcript refs and context."""

    async def build(
        self,
        state: LoopExecutionState,
        plan: ContextPlan,
        surface: Surface | None,
        *,
        finalizer_prompt: str | None = None,
    ) -> PromptBundle:
        """``surface=None`` means no tools at all (the finalizer's request)."""
        ...


class ModelPort(Protocol):
    """Streams one response from the chosen model."""

    @property
    def names(self) -> tuple[str, ...]:
        """The names of the models, by index (0 = primary, then the fallbacks)."""
        ...

    async def call(
        self,
        bundle: PromptBundle,
        *,
        model_index: int,
        emit_text: bool = True,
        max_bytes: int | None = None,
    ) -> ModelResponse:
        """Raise :class:`reverie.errors.ModelError` on failure.

        ``emit_text=False`` keeps the text deltas to the port (the finalizer's answer is
        validated before any of it is shown). Streamed text past ``max_bytes`` ends the call
        with :class:`reverie.errors.ModelOutputTooLarge` without waiting for the rest.
        """
        ...

    def cost(self, response: ModelResponse, *, model_index: int) -> float:
        """USD cost of a response (0.0 when no price is configured)."""
        ...


class CapabilityPort(Protocol):
    """The visible surface and the invocation of single calls."""

    def surface(self) -> Surface:
        """Every capability the run may use (strategies can only narrow it)."""
        ...

    async def invoke(
        self,
        call: ToolCall,
        descriptor: CapabilityDescriptor | None,
        *,
        attempt: int,
        key: str,
        replay: bool = True,
    ) -> CallOutcome:
        """Run one call (gate checks, journal and hooks are the port's business).

        ``key`` identifies the call stably within the run (across crashes and resumes); the
        journal and gates are keyed by it, since provider call ids need not be unique.
        ``replay`` is false for a wave's first pass, when no journal entry or gate can exist
        yet (the port may skip looking them up); true when a resumed wave is replayed.
        """
        ...

    async def open_gate(self, call: ToolCall, gated: CallGated, *, key: str) -> str:
        """Record a pending gate for the call and return its ref."""
        ...


class TranscriptPort(Protocol):
    """Append-only transcript, written at the step commits of :class:`CheckpointPort`."""

    async def append(self, items: Sequence[NewItem]) -> list[TranscriptItem]:
        """Stage rows: they get refs and seqs at once and become durable with the next commit.

        A row the loop has appended is part of every later prompt of the segment; a crash
        before the next commit loses it, and the resume re-makes it from the last checkpoint.
        """
        ...

    async def get(self, refs: Sequence[str]) -> list[TranscriptItem]:
        """Rows by ref (staged ones included)."""
        ...


@dataclass(frozen=True, slots=True, kw_only=True)
class CommitReceipt:
    """What a step commit learned inside its transaction."""

    written: bool
    """The checkpoint (and ack and seal) were written: no input past the guard was waiting."""
    cancel_requested: bool = False
    """The run's durable cancel request is set (perhaps by another process)."""


class CheckpointPort(Protocol):
    """Step commits: one store operation per loop boundary (docs/internals/storage.md)."""

    async def commit(
        self,
        kind: CheckpointKind | None,
        state: LoopExecutionState,
        *,
        guard_cursor: int | None = None,
        ack_cursor: int | None = None,
        seal: bool = False,
    ) -> CommitReceipt:
        """Make a boundary durable in one transaction.

        Staged transcript rows and journal records are always written. The checkpoint of
        ``state`` (none when ``kind`` is ``None``), the ack of inputs up to ``ack_cursor`` and
        the seal of the input queue are *guarded*: with ``guard_cursor`` given, they are written
        only if no input past it is waiting — else the receipt says ``written=False`` and the
        loop polls, delivers, and commits again.
        """
        ...


class InputPort(Protocol):
    """The run's input queue (delivery is acknowledged by the step commit)."""

    async def poll(self, after_cursor: int) -> list[InputRecord]:
        """Inputs past the cursor, in order."""
        ...


class EventPort(Protocol):
    """Typed run events."""

    def emit(self, event: RunEvent) -> None:
        """Publish an event (never blocks)."""
        ...


class LoopHost(Protocol):
    """Everything the executor may touch (read-only members, so any implementation fits)."""

    @property
    def run_id(self) -> str: ...
    @property
    def token(self) -> CancelToken: ...
    @property
    def prompt(self) -> PromptPort: ...
    @property
    def model(self) -> ModelPort: ...
    @property
    def capabilities(self) -> CapabilityPort: ...
    @property
    def transcript(self) -> TranscriptPort: ...
    @property
    def checkpoints(self) -> CheckpointPort: ...
    @property
    def inputs(self) -> InputPort: ...
    @property
    def events(self) -> EventPort: ...
