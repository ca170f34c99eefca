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
    "StreamedError",
    "field",
    "optional",
    "read_chunk",
    "read_completion",
    "read_tokens",
]

T = TypeVar("T")


class MalformedPayload(ValueError):
    """A provider payload does not have the shape its API documents."""


class StreamedError(Exception):
    """An error object sent as a stream's data instead of a chunk (vLLM's ``"object": "error"``
    form; the SDKs raise their own error for the ``{"error": {...}}`` form)."""

    def __init__(self, message: str | None, type_: str | None, code: str | None) -> None:
        super().__init__(message or "an error occurred during streaming")
        self.message = message
        self.type = type_
        self.code = code


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
    if field(chunk, "object", "the chunk") == "error":
        code = field(chunk, "code", "an error")
        raise StreamedError(
            _text(field(chunk, "message", "an error")),
            _text(field(chunk, "type", "an error")),
            str(code) if isinstance(code, str | int) and not isinstance(code, bool) else None,
        )
    model = optional(field(chunk, "model", "the chunk"), str, "the chunk's model")
    usage = _usage(field(chunk, "usage", "the chunk"))
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
        calls.extend(_calls(field(delta, "tool_calls", "a delta")))
    return ChunkView(
        model=model,
        usage=usage,
        content=content,
        tool_calls=tuple(calls),
        finish_reason=finish_reason,
    )


def read_completion(completion: object) -> ChunkView:
    """Check and read a whole (not streamed) ``chat.completion``: choice 0's message as one view.

    Raises:
        MalformedPayload: a field has the wrong type, or there is no choice 0.
    """
    model = optional(field(completion, "model", "the completion"), str, "the completion's model")
    usage = _usage(field(completion, "usage", "the completion"))
    choices = optional(field(completion, "choices", "the completion"), list, "its choices") or []
    for choice in choices:
        index = optional(field(choice, "index", "a choice"), int, "a choice's index")
        if index not in (0, None):
            continue
        finish_reason = optional(
            field(choice, "finish_reason", "a choice"), str, "a choice's finish_reason"
        )
        message = field(choice, "message", "a choice")
        if message is None:
            raise MalformedPayload("a choice has no message")
        calls = _calls(field(message, "tool_calls", "a message"))
        return ChunkView(
            model=model,
            usage=usage,
            content=optional(field(message, "content", "a message"), str, "a message's content"),
            # One whole call per entry: number them, so none is merged into another.
            tool_calls=tuple(
                DeltaCall(index=i, id=c.id, name=c.name, arguments=c.arguments)
                for i, c in enumerate(calls)
            ),
            finish_reason=finish_reason,
        )
    raise MalformedPayload("the completion has no choice")


def _usage(raw_usage: object) -> TokenUsage | None:
    if raw_usage is None:
        return None
    input_tokens = read_tokens(field(raw_usage, "prompt_tokens", "usage"), "prompt_tokens")
    cached = 0
    details = field(raw_usage, "prompt_tokens_details", "usage")
    if details is not None:
        # The part of prompt_tokens served from the provider's prompt cache (never more).
        cached = read_tokens(field(details, "cached_tokens", "prompt_tokens_details"), "cached")
    return TokenUsage(
        input_tokens=input_tokens,
        output_tokens=read_tokens(
            field(raw_usage, "completion_tokens", "usage"), "completion_tokens"
        ),
        cache_read_tokens=min(cached, input_tokens),
    )


def _calls(value: object) -> list[DeltaCall]:
    raw_calls = optional(value, list, "a message's tool_calls")
    calls: list[DeltaCall] = []
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
    return calls


def _text(value: object) -> str | None:
    return value if isinstance(value, str) else None
