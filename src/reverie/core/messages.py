"""Conversation messages, model requests and responses.

These are the values that cross the model port. Providers translate them to and from their wire
formats; the loop and the transcript only ever see these.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Final, Literal, TypeGuard, get_args

from reverie.core.content import ContentPart
from reverie.core.depth import MAX_DEPTH, nesting_depth
from reverie.core.fastcopy import fast_frozen, replace

Role = Literal["system", "user", "assistant", "tool"]


@fast_frozen
@dataclass(frozen=True, kw_only=True)
class ToolCall:
    """One call a model asked for."""

    id: str
    """The provider's call id (or one we minted); unique within the response."""
    name: str
    arguments: Mapping[str, Any] = field(default_factory=dict)
    """Parsed arguments; empty when ``arguments_error`` is set."""
    arguments_error: str | None = None
    """Why the raw arguments could not be parsed (malformed JSON, not an object)."""

    def to_dict(self) -> dict[str, Any]:
        """JSON-able form for the transcript."""
        out: dict[str, Any] = {"id": self.id, "name": self.name, "arguments": dict(self.arguments)}
        if self.arguments_error is not None:
            out["arguments_error"] = self.arguments_error
        return out

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> ToolCall:
        """Inverse of :meth:`to_dict`."""
        return cls(
            id=str(data["id"]),
            name=str(data["name"]),
            arguments=dict(data.get("arguments") or {}),
            arguments_error=data.get("arguments_error"),
        )


@fast_frozen
@dataclass(frozen=True, kw_only=True)
class Message:
    """A message as a model sees it."""

    role: Role
    content: str = ""
    tool_calls: tuple[ToolCall, ...] = ()
    """Calls the assistant made in this message (assistant role only)."""
    tool_call_id: str | None = None
    """The call this message answers (tool role only)."""
    name: str | None = None
    """The tool's name (tool role only)."""
    parts: tuple[ContentPart, ...] = ()
    """A user message with images: its text and image parts, in order (providers send these
    instead of ``content``, which then holds the text-only rendering). Empty for text."""


@dataclass(frozen=True, slots=True, kw_only=True)
class ToolSpec:
    """A tool as offered to a model: name, description, JSON Schema of its arguments."""

    name: str
    description: str
    parameters: Mapping[str, Any]


@fast_frozen
@dataclass(frozen=True, kw_only=True)
class ModelSettings:
    """Sampling settings passed through to the provider."""

    temperature: float | None = None
    max_tokens: int | None = None
    """Cap on the reply's tokens (``max_tokens``/``max_completion_tokens`` on the wire)."""
    extra: Mapping[str, Any] = field(default_factory=dict)
    stop: tuple[str, ...] = ()
    """Sequences that end the reply (OpenAI ``stop``, Anthropic ``stop_sequences``)."""
    seed: int | None = None
    top_p: float | None = None


ToolChoiceMode = Literal["auto", "none", "required"]
"""The tool choices that name no tool."""
TOOL_CHOICE_MODES: Final[tuple[ToolChoiceMode, ...]] = get_args(ToolChoiceMode)
ToolChoice = ToolChoiceMode | str
"""``auto``/``none``/``required``, or the name of one tool to force."""


@fast_frozen
@dataclass(frozen=True, kw_only=True)
class ModelRequest:
    """One request to a model."""

    messages: tuple[Message, ...]
    tools: tuple[ToolSpec, ...] | None = None
    """``None`` means no tools at all (the finalizer's request)."""
    tool_choice: ToolChoice = "auto"
    output_schema: Mapping[str, Any] | None = None
    settings: ModelSettings = field(default_factory=ModelSettings)
    stable_messages: int | None = None
    """How many leading ``messages`` are the prompt's stable prefix, which the next request of
    the run repeats byte for byte (all but per-call hook context, the newest rows after it and
    a finalizer's prompt). Providers that take cache markers put the last one there.
    ``None``: all of them."""
    cache_points: tuple[int, ...] = ()
    """Earlier message counts where a prefix is worth caching too: where the run's own part
    starts (its memory context, then its rows), which the next run of the thread repeats."""
    cache_key: str | None = None
    """Requests with the same key share a provider's prompt cache (one per thread; OpenAI
    ``prompt_cache_key``). ``None``: no key is sent."""


@dataclass(frozen=True, slots=True, kw_only=True)
class TextPart:
    """Text from the model."""

    kind: Literal["text"] = "text"
    text: str


@dataclass(frozen=True, slots=True, kw_only=True)
class ToolCallPart:
    """A tool call from the model."""

    kind: Literal["tool_call"] = "tool_call"
    call: ToolCall


ResponsePart = TextPart | ToolCallPart


@fast_frozen
@dataclass(frozen=True, kw_only=True)
class TokenUsage:
    """Tokens one model call consumed."""

    input_tokens: int = 0
    """All input tokens of the call, those served from or written to the provider's prompt
    cache included."""
    output_tokens: int = 0
    estimated: bool = False
    """The endpoint reported no usage: the counts are reverie's conservative local estimate
    (:mod:`reverie.models.estimate`), never 0."""
    cache_read_tokens: int = 0
    """The part of ``input_tokens`` the provider read from its prompt cache (OpenAI
    ``prompt_tokens_details.cached_tokens``, Anthropic ``cache_read_input_tokens``)."""
    cache_write_tokens: int = 0
    """The part of ``input_tokens`` the provider wrote to its prompt cache (Anthropic
    ``cache_creation_input_tokens``; OpenAI reports none)."""


@fast_frozen
@dataclass(frozen=True, kw_only=True)
class ModelResponse:
    """A complete model response."""

    parts: tuple[ResponsePart, ...]
    usage: TokenUsage = field(default_factory=TokenUsage)
    finish_reason: str | None = None
    model_name: str | None = None

    # Both are read several times per model call: list comprehensions, not generators.
    @property
    def text(self) -> str:
        """All text parts joined."""
        return "".join([p.text for p in self.parts if isinstance(p, TextPart)])

    @property
    def tool_calls(self) -> tuple[ToolCall, ...]:
        """All tool calls, in the model's order."""
        return tuple([p.call for p in self.parts if isinstance(p, ToolCallPart)])


@fast_frozen
@dataclass(frozen=True, kw_only=True)
class TextDelta:
    """A streamed piece of text."""

    kind: Literal["text_delta"] = "text_delta"
    text: str


@fast_frozen
@dataclass(frozen=True, kw_only=True)
class ResponseComplete:
    """The end of a stream, with the assembled response."""

    kind: Literal["complete"] = "complete"
    response: ModelResponse


ModelEvent = TextDelta | ResponseComplete
"""What ``Model.stream`` yields: any number of deltas, then exactly one ``ResponseComplete``."""


def bounded_calls(response: ModelResponse) -> ModelResponse:
    """``response`` with each tool call whose arguments nest deeper than
    :data:`~reverie.core.depth.MAX_DEPTH` made a call with an ``arguments_error`` (and no
    arguments).

    A model's arguments are untrusted data: past the limit, every later walk of them (call
    signatures, schema validation, masking, the transcript's JSON) would end in
    ``RecursionError``. So the call becomes the same kind of call malformed JSON makes: the
    tool answers ``input_invalid`` naming the limit, the model sees it and the run goes on.
    The same object is returned when no call is too deep (the common case).
    """
    if not any([_too_deep(part) for part in response.parts]):
        return response
    error = f"the arguments are nested more than {MAX_DEPTH} levels deep"
    fixed: list[ResponsePart] = []
    for part in response.parts:
        if _too_deep(part):
            call = part.call
            bounded = ToolCall(id=call.id, name=call.name, arguments={}, arguments_error=error)
            part = ToolCallPart(call=bounded)
        fixed.append(part)
    return replace(response, parts=tuple(fixed))


def _too_deep(part: ResponsePart) -> TypeGuard[ToolCallPart]:
    return (
        isinstance(part, ToolCallPart)
        and nesting_depth(part.call.arguments, stop_after=MAX_DEPTH) > MAX_DEPTH
    )
