"""Reading provider payloads defensively: every wrong shape is a :class:`MalformedPayload`.

The SDKs build their response objects without validating them (``construct``), so a server that
sends ``"choices": null``, a number where text belongs or an array where an object belongs
yields objects whose fields hold anything. These readers check each field a provider uses and
raise :class:`MalformedPayload` — which the providers turn into a typed
:class:`~reverie.errors.ModelError` — instead of letting a ``TypeError`` or ``AttributeError``
escape from deep inside a stream. Messages name the field, never its content.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, TypeVar

from pydantic import BaseModel

from reverie.core.messages import TokenUsage

__all__ = [
    "ChunkView",
    "DeltaCall",
    "MalformedPayload",
    "field",
    "optional",
    "read_chunk",
    "read_tokens",
]

T = TypeVar("T")


class MalformedPayload(ValueError):
    """A provider payload does not have the shape its API documents."""


def field(obj: object, name: str, where: str) -> Any:
    """Field ``name`` of a payload object (an SDK model or a plain mapping); ``None`` if absent.

    Raises:
        MalformedPayload: ``obj`` is not an object at all (a list, a string, a number, null).
    """
    if isinstance(obj, Mapping):
        return obj.get(name)
    if isinstance(obj, BaseModel):
        return getattr(obj, name, None)
    raise MalformedPayload(f"{where} is not an object")


def optional(value: object, kind: type[T], where: str) -> T | None:
    """``value`` when it is ``None`` or a ``kind`` (a ``bool`` is not an ``int``), else an error.

    Raises:
        MalformedPayload: ``value`` has another type.
    """
    if value is None:
        return None
    if isinstance(value, kind) and not (kind is int and isinstance(value, bool)):
        return value
    raise MalformedPayload(f"{where} is not {_article(kind)}")


def read_tokens(value: object, where: str) -> int:
    """A token count: a non-negative integer, or ``None``/absent meaning 0."""
    count = optional(value, int, where)
    if count is None:
        return 0
    if count < 0:
        raise MalformedPayload(f"{where} is negative")
    return count


def _article(kind: type) -> str:
    return {str: "a string", int: "an integer", list: "a list"}.get(kind, kind.__name__)


@dataclass(frozen=True, slots=True)
class DeltaCall:
    """One tool-call delta of a Chat Completions chunk."""

    index: int | None
    id: str | None
    name: str | None
    arguments: str | None


@dataclass(frozen=True, slots=True)
class ChunkView:
    """What reverie reads from one Chat Completions chunk (choice 0 only)."""

    model: str | None
    usage: TokenUsage | None
    content: str | None
    tool_calls: tuple[DeltaCall, ...]
    finish_reason: str | None


def read_chunk(chunk: object) -> ChunkView:
    """Check and read one streamed ``chat.completion.chunk``.

    ``"choices": null`` (some compatible servers send it on usage-only chunks) reads as no
    choices; any other wrong shape raises.

    Raises:
        MalformedPayload: a field has the wrong type.
    """
    model = optional(field(chunk, "model", "the chunk"), str, "the chunk's model")
    raw_usage = field(chunk, "usage", "the chunk")
    usage = None
    if raw_usage is not None:
        usage = TokenUsage(
            input_tokens=read_tokens(field(raw_usage, "prompt_tokens", "usage"), "prompt_tokens"),
            output_tokens=read_tokens(
                field(raw_usage, "completion_tokens", "usage"), "completion_tokens"
            ),
        )
    choices = optional(field(chunk, "choices", "the chunk"), list, "the chunk's choices") or []
    content: str | None = None
    calls: list[DeltaCall] = []
    finish_reason: str | None = None
    for choice in choices:
        index = optional(field(choice, "index", "a choice"), int, "a choice's index")
        if index != 0:
            continue
        finish_reason = optional(
            field(choice, "finish_reason", "a choice"), str, "a choice's finish_reason"
        )
        delta = field(choice, "delta", "a choice")
        if delta is None:
            continue
        content = optional(field(delta, "content", "a delta"), str, "a delta's content")
        raw_calls = optional(field(delta, "tool_calls", "a delta"), list, "a delta's tool_calls")
        for raw in raw_calls or ():
            function = field(raw, "function", "a tool call")
            name = arguments = None
            if function is not None:
                name = optional(field(function, "name", "a function"), str, "a function's name")
                arguments = optional(
                    field(function, "arguments", "a function"), str, "a function's arguments"
                )
            calls.append(
                DeltaCall(
                    index=optional(field(raw, "index", "a tool call"), int, "a tool call's index"),
                    id=optional(field(raw, "id", "a tool call"), str, "a tool call's id"),
                    name=name,
                    arguments=arguments,
                )
            )
    return ChunkView(
        model=model,
        usage=usage,
        content=content,
        tool_calls=tuple(calls),
        finish_reason=finish_reason,
    )
