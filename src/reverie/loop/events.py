"""Small constructors so the executor emits typed events in one line each."""

from __future__ import annotations

from typing import TYPE_CHECKING

from reverie.core.capability import CallFailed, CallOutcome
from reverie.core.events import (
    AssistantMessage,
    CallsDenied,
    GateOpened,
    InputDelivered,
    LimitReached,
    ModelFallback,
    ModelRequested,
    TextDeltaEvent,
    ToolFinished,
    ToolStarted,
)
from reverie.core.fastcopy import maker
from reverie.core.transcript import InputRecord
from reverie.core.vocabulary import OnLimit

if TYPE_CHECKING:
    from reverie.loop.ports import LoopHost

# Plain functions that build the per-step events (a class call with keywords costs more).
_assistant_message = maker(AssistantMessage)
_text_delta = maker(TextDeltaEvent)
_model_requested = maker(ModelRequested)
_tool_started = maker(ToolStarted)
_tool_finished = maker(ToolFinished)


def emit_assistant(host: LoopHost, text: str, tools: tuple[str, ...]) -> None:
    """A committed assistant message."""
    host.events.emit(_assistant_message(run_id=host.run_id, text=text, tool_calls=tools))


def emit_text(host: LoopHost, text: str) -> None:
    """Answer text the loop releases itself (the finalizer's, once validated)."""
    host.events.emit(_text_delta(run_id=host.run_id, text=text))


def emit_input(host: LoopHost, rec: InputRecord) -> None:
    """An input reached the transcript."""
    host.events.emit(InputDelivered(run_id=host.run_id, input_id=rec.input_id, input_kind=rec.kind))


def emit_limit(host: LoopHost, reason: str, action: OnLimit) -> None:
    """A safety net or budget fired; ``reason`` names which one."""
    host.events.emit(LimitReached(run_id=host.run_id, reason=reason, action=action))


def emit_model_request(
    host: LoopHost, iteration: int, tools: int, attempt: int, model: str = ""
) -> None:
    """A model request is about to go out (to ``model``)."""
    host.events.emit(
        _model_requested(
            run_id=host.run_id, iteration=iteration, tools=tools, attempt=attempt, model=model
        )
    )


def emit_model_fallback(host: LoopHost, from_model: str, to_model: str, error_kind: str) -> None:
    """The run goes on with the next model."""
    host.events.emit(
        ModelFallback(
            run_id=host.run_id, from_model=from_model, to_model=to_model, error_kind=error_kind
        )
    )


def emit_denials(
    host: LoopHost, iteration: int, calls: int, denied: list[str], hidden: list[str]
) -> None:
    """A wave had denied calls (``denied``: their tool names, in the model's order)."""
    host.events.emit(
        CallsDenied(
            run_id=host.run_id,
            iteration=iteration,
            calls=calls,
            denied=len(denied),
            tools=tuple(denied),
            hidden=tuple(hidden),
        )
    )


def emit_gate(host: LoopHost, ref: str, tool: str, gate_kind: str) -> None:
    """The run blocked on a gate."""
    host.events.emit(GateOpened(run_id=host.run_id, gate_ref=ref, tool=tool, gate_kind=gate_kind))


def emit_tool_started(host: LoopHost, call_id: str, tool: str, attempt: int) -> None:
    """A tool call started."""
    host.events.emit(_tool_started(run_id=host.run_id, call_id=call_id, tool=tool, attempt=attempt))


def emit_tool_finished(host: LoopHost, call_id: str, tool: str, outcome: CallOutcome) -> None:
    """A tool call ended."""
    host.events.emit(
        _tool_finished(
            run_id=host.run_id,
            call_id=call_id,
            tool=tool,
            outcome=outcome.kind,
            error_kind=outcome.error_kind if isinstance(outcome, CallFailed) else None,
        )
    )
