"""Anthropic Messages API provider, via the official ``anthropic`` SDK (an optional extra).

Streams every request, splits system messages out into ``system``, sends tool results as
``tool_result`` blocks in a user message (consecutive results merged into one message), and maps
SDK failures onto the model error classes (see :mod:`reverie.models.errors`). The SDK's own
retries are off (``max_retries=0``): the loop's recovery strategy owns retrying (docs/loop.md).
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Mapping
from dataclasses import dataclass
from typing import Any, Final, cast

from reverie.errors import MissingExtraError

try:
    import anthropic
    from anthropic.types import RawMessageStreamEvent
except ImportError as exc:  # the tests simulate the extra's absence
    raise MissingExtraError("anthropic", "the Anthropic provider") from exc

from reverie.core.content import ContentPart, Text, has_images
from reverie.core.messages import (
    Message,
    ModelEvent,
    ModelRequest,
    ModelResponse,
    ResponseComplete,
    ResponsePart,
    TextDelta,
    TextPart,
    TokenUsage,
    ToolCall,
    ToolCallPart,
)
from reverie.errors import ModelError
from reverie.models.errors import (
    auth_failed,
    classify_api_error,
    connection_failure,
    detail,
    dropped,
    key_source,
    text_or_none,
    transport_errors,
)
from reverie.models.estimate import CHARS_PER_TOKEN, estimate_usage
from reverie.models.openai import parse_tool_arguments
from reverie.models.payloads import MalformedPayload, field, optional, read_tokens
from reverie.models.sdk_model import SDKModel

__all__ = ["AnthropicModel", "without_v1"]

_NO_KEY_PLACEHOLDER = "no-key-required"
_STOP_REASONS = {
    "end_turn": "stop",
    "stop_sequence": "stop",
    "tool_use": "tool_calls",
    "max_tokens": "length",
}
"""Anthropic stop reasons in the OpenAI vocabulary ``ModelResponse.finish_reason`` uses."""


@dataclass(slots=True)
class _Block:
    """A content block being assembled from stream events."""

    kind: str
    text: str = ""
    id: str = ""
    name: str = ""
    input_json: str = ""
    start_input: Mapping[str, Any] | None = None


class AnthropicModel(SDKModel["anthropic.AsyncAnthropic"]):
    """A Claude model behind the Messages API.

    Example::

        model = AnthropicModel("claude-sonnet-4-5")

    The key is read at the first call, not at construction: ``api_key`` if given, else the
    environment variable ``api_key_env``.

    Inside ``async with model:`` the model keeps one SDK client, and its connections, until the
    block exits; used without it, each request gets its own client, closed when the request
    ends, so a model nobody closes leaks nothing.
    """

    _placeholder_key = _NO_KEY_PLACEHOLDER
    _prefix = "anthropic"

    def __init__(
        self,
        model: str,
        *,
        base_url: str | None = None,
        api_key_env: str | None = "ANTHROPIC_API_KEY",
        api_key: str | None = None,
        timeout_s: float = 60,
        max_tokens: int = 4096,
        name: str | None = None,
        connect_timeout_s: float = 10,
        prompt_cache: bool = True,
    ) -> None:
        """Configure the model; nothing is connected or read from the environment yet.

        Args:
            model: The model id, e.g. ``claude-sonnet-4-5``.
            base_url: The API root, with or without ``/v1`` (the SDK adds it: a ``…/v1`` given
                here is taken back, so the SDK never calls ``/v1/v1/messages``); ``None`` for
                Anthropic's.
            api_key_env: The environment variable that holds the key; ``None`` for no key.
            api_key: An explicit key, used instead of the environment variable.
            timeout_s: Read/write timeout of each request, in seconds.
            max_tokens: Output cap when the request's settings set none (the API requires one).
            name: The label for telemetry and price lookup; default ``anthropic:<model>``.
            connect_timeout_s: Connect timeout of each request, in seconds.
            prompt_cache: Mark the stable prefix with ``cache_control`` breakpoints (the tools
                and system prompt, and the last message before the volatile suffix), so
                Anthropic caches it; ``False`` sends no markers.
        """
        super().__init__(
            model,
            base_url=without_v1(base_url),
            api_key_env=api_key_env,
            api_key=api_key,
            timeout_s=timeout_s,
            name=name,
        )
        self._max_tokens = max_tokens
        self._connect_timeout_s = connect_timeout_s
        self.prompt_cache = prompt_cache

    def _make_client(self, key: str) -> anthropic.AsyncAnthropic:
        return anthropic.AsyncAnthropic(
            api_key=key,
            base_url=self._client_url,
            default_headers=self._client_headers,
            timeout=anthropic.Timeout(self._timeout_s, connect=self._connect_timeout_s),
            max_retries=0,
        )

    def _api_error(self) -> type[Exception]:
        return anthropic.APIError

    async def stream(self, request: ModelRequest) -> AsyncIterator[ModelEvent]:
        """Stream one response: text deltas, then exactly one ``ResponseComplete``.

        Raises:
            ModelError: classified per docs/loop.md; the SDK error is kept in ``__cause__``.
        """
        params = self._params(request)
        blocks: dict[int, _Block] = {}
        input_tokens: int | None = None
        cache_read = cache_write = 0
        output_tokens = 0
        stop_reason: str | None = None
        model_name: str | None = None
        started = False

        def so_far() -> TokenUsage:
            # The server's figures once message_start came; else the local estimate.
            text = "".join(b.text + b.input_json for b in blocks.values())
            if input_tokens is None:
                return estimate_usage(request, text)
            return TokenUsage(
                input_tokens=input_tokens,
                output_tokens=output_tokens,
                cache_read_tokens=cache_read,
                cache_write_tokens=cache_write,
            )

        try:
            async with self._clients.lease() as client:
                stream = cast(
                    "anthropic.AsyncStream[RawMessageStreamEvent]",
                    await client.messages.create(**params),
                )
                started = True
                async with stream:
                    async for event in stream:
                        step = _read_event(event, blocks)
                        if step.model_name:
                            model_name = step.model_name
                        if step.input_tokens is not None:
                            input_tokens = step.input_tokens
                            cache_read = step.cache_read_tokens
                            cache_write = step.cache_write_tokens
                        if step.output_tokens:
                            output_tokens = step.output_tokens
                        if step.stop_reason:
                            stop_reason = step.stop_reason
                        if step.text:
                            yield TextDelta(text=step.text)
        except anthropic.APIError as exc:
            images = any(has_images(m.parts) for m in request.messages)
            error = self._map_error(exc, images=images, started=started)
            if started:  # a request refused with a status consumed nothing
                error.usage = so_far()
            raise error from exc
        except transport_errors() as exc:
            # A connection dropped mid-stream, escaping the SDK as the HTTP library's error.
            error = dropped(self._name, exc, timeout_s=self._timeout_s)
            error.usage = so_far()
            raise error from exc
        except anthropic.AnthropicError as exc:
            raise ModelError("internal", f"{self._name}: {type(exc).__name__}") from exc
        except MalformedPayload as exc:
            # An event of the wrong shape: the server is broken, not busy. Never the content.
            raise ModelError(
                "internal", f"{self._name}: malformed response from the server: {exc}"
            ) from exc
        except ValueError as exc:
            # A body that is not JSON or not an event: the server is broken, not busy.
            raise ModelError(
                "internal",
                f"{self._name}: malformed response from the server ({type(exc).__name__})",
            ) from exc
        if stop_reason is None:
            # No message_delta with a stop reason: the stream was cut, not finished (§20).
            raise ModelError(
                "transient",
                f"{self._name}: the stream ended before the reply finished (no stop_reason); "
                "the reply is incomplete",
                usage=so_far(),
            )
        if stop_reason == "refusal":
            raise ModelError("content_filtered", f"{self._name}: the model refused to answer")
        parts: list[ResponsePart] = []
        for index in sorted(blocks):
            block_state = blocks[index]
            if block_state.kind == "text" and block_state.text:
                parts.append(TextPart(text=block_state.text))
            elif block_state.kind == "tool_use":
                parts.append(ToolCallPart(call=_finish_call(block_state)))
        yield ResponseComplete(
            response=ModelResponse(
                parts=tuple(parts),
                usage=so_far(),
                finish_reason=_STOP_REASONS.get(stop_reason, stop_reason) if stop_reason else None,
                model_name=model_name or self._model,
            )
        )

    def _params(self, request: ModelRequest) -> dict[str, Any]:
        marks: set[int] = set()
        caching = self.prompt_cache and _cacheable(request)
        if caching:
            stable = request.stable_messages
            marks = {len(request.messages) if stable is None else stable}
            marks.update(request.cache_points[:2])  # with the system's: at most 4 breakpoints
        system, messages = _split_messages(request.messages, marks=marks)
        settings = request.settings
        params: dict[str, Any] = {
            "model": self._model,
            "messages": messages,
            "max_tokens": settings.max_tokens or self._max_tokens,
            "stream": True,
        }
        if system:
            params["system"] = system
            if caching:
                # A breakpoint after the stable prefix's head: tools, then system, are cached
                # apart from the conversation, which a compaction or a window step replaces.
                params["system"] = [
                    {"type": "text", "text": system, "cache_control": dict(_EPHEMERAL)}
                ]
        if request.tools:
            params["tools"] = [
                {"name": t.name, "description": t.description, "input_schema": dict(t.parameters)}
                for t in request.tools
            ]
            if caching and not system:
                params["tools"][-1]["cache_control"] = dict(_EPHEMERAL)
            params["tool_choice"] = _tool_choice(request.tool_choice)
        if request.output_schema is not None and not _forces_a_tool(request):
            # A forced call carries the schema as its input_schema already; JSON outputs would
            # only constrain text that a forced call never has, and accept only a subset of
            # JSON Schema (objects closed, no numeric or length bounds) that most schemas miss.
            params["output_config"] = {
                "format": {"type": "json_schema", "schema": dict(request.output_schema)}
            }
        if settings.stop:
            params["stop_sequences"] = list(settings.stop)
        extra = dict(settings.extra)
        if settings.temperature is not None:
            # This SDK no longer types ``temperature``; the API field is sent as an extra.
            extra.setdefault("temperature", settings.temperature)
        if settings.top_p is not None:
            extra.setdefault("top_p", settings.top_p)
        # ``seed``: the Messages API has none; it is not sent.
        if extra:
            params["extra_body"] = extra
        return params

    def _map_error(
        self, exc: anthropic.APIError, *, images: bool = False, started: bool = False
    ) -> ModelError:
        name = self._name
        if isinstance(exc, anthropic.APITimeoutError):
            if started:
                return dropped(name, exc, timeout_s=self._timeout_s)
            return ModelError("transient", f"{name}: request timed out after {self._timeout_s:g}s")
        if isinstance(exc, anthropic.APIConnectionError):
            if started:
                # The reply had begun: the connection dropped, the server is there.
                return dropped(name, exc.__cause__ or exc, timeout_s=self._timeout_s)
            return connection_failure(exc, name, self._shown_url or "the Anthropic API")
        status: int | None = None
        error_type: str | None = None
        message: str | None = None
        code: str | None = None
        if isinstance(exc, anthropic.APIStatusError):
            # An ``error`` event inside a 200 stream arrives as a status error with status 200.
            status = exc.status_code if exc.status_code >= 400 else None
            error_type = text_or_none(exc.type)
            message = text_or_none(exc.api_message)
            code = text_or_none(exc.error_code)
        if status in (401, 403):
            return auth_failed(name, status, key_source(self._api_key, self._api_key_env))
        kind = classify_api_error(
            status, code=code, type_=error_type, message=message, images=images
        )
        what = f"HTTP {status}" if status is not None else "error in stream"
        label = f" [{error_type}]" if error_type else ""
        text = detail(message, self._sent_key, self._url_secrets)
        return ModelError(kind, f"{name}: {what}{label}" + (f": {text}" if text else ""))


@dataclass(slots=True)
class _EventStep:
    """What one stream event changed (``None``/empty: nothing)."""

    text: str = ""
    model_name: str | None = None
    input_tokens: int | None = None
    cache_read_tokens: int = 0
    cache_write_tokens: int = 0
    output_tokens: int = 0
    stop_reason: str | None = None


def without_v1(base_url: str | None) -> str | None:
    """``base_url`` without a trailing ``/v1`` (the Anthropic SDK appends ``/v1/messages``)."""
    if base_url is None:
        return None
    bare = base_url.rstrip("/")
    return bare.removesuffix("/v1") if bare.endswith("/v1") else bare


def _read_input(usage: object, where: str, step: _EventStep) -> None:
    # Cache writes and reads are input too: counted in input_tokens, and kept apart for the
    # price (a cache read costs a tenth of an input token, a write a quarter more).
    fresh = read_tokens(field(usage, "input_tokens", where), "input_tokens")
    step.cache_read_tokens = read_tokens(
        field(usage, "cache_read_input_tokens", where), "cache_read_input_tokens"
    )
    step.cache_write_tokens = read_tokens(
        field(usage, "cache_creation_input_tokens", where), "cache_creation_input_tokens"
    )
    step.input_tokens = fresh + step.cache_read_tokens + step.cache_write_tokens


def _read_event(event: object, blocks: dict[int, _Block]) -> _EventStep:
    """Apply one Messages stream event to ``blocks``; every field is checked.

    Event and block types reverie does not surface (``ping``, thinking, server tools, types
    added later) are skipped.

    Raises:
        MalformedPayload: the event has the wrong shape.
    """
    kind = optional(field(event, "type", "an event"), str, "an event's type")
    step = _EventStep()
    if kind == "message_start":
        message = field(event, "message", "message_start")
        step.model_name = optional(field(message, "model", "the message"), str, "its model")
        usage = field(message, "usage", "the message")
        if usage is not None:
            _read_input(usage, "message_start usage", step)
            step.output_tokens = read_tokens(
                field(usage, "output_tokens", "usage"), "output_tokens"
            )
    elif kind == "content_block_start":
        index = _block_index(event)
        block = field(event, "content_block", "content_block_start")
        block_type = optional(field(block, "type", "a content block"), str, "a block's type")
        if block_type == "tool_use":
            start_input = field(block, "input", "a tool_use block")
            blocks[index] = _Block(
                kind="tool_use",
                id=optional(field(block, "id", "a tool_use block"), str, "a tool_use id") or "",
                name=optional(field(block, "name", "a tool_use block"), str, "a tool name") or "",
                start_input=start_input if isinstance(start_input, dict) else None,
            )
        elif block_type == "text":
            text = optional(field(block, "text", "a text block"), str, "a block's text") or ""
            blocks[index] = _Block(kind="text", text=text)
            step.text = text
    elif kind == "content_block_delta":
        current = blocks.get(_block_index(event))
        if current is None:
            return step  # a block kind we do not surface (thinking, server tools)
        delta = field(event, "delta", "content_block_delta")
        delta_type = optional(field(delta, "type", "a delta"), str, "a delta's type")
        if delta_type == "text_delta":
            text = optional(field(delta, "text", "a text_delta"), str, "a delta's text") or ""
            current.text += text
            step.text = text
        elif delta_type == "input_json_delta":
            current.input_json += (
                optional(field(delta, "partial_json", "an input_json_delta"), str, "partial_json")
                or ""
            )
    elif kind == "message_delta":
        delta = field(event, "delta", "message_delta")
        step.stop_reason = optional(
            field(delta, "stop_reason", "a message delta"), str, "stop_reason"
        )
        usage = field(event, "usage", "message_delta")
        if usage is not None:
            step.output_tokens = read_tokens(
                field(usage, "output_tokens", "usage"), "output_tokens"
            )
            if read_tokens(field(usage, "input_tokens", "usage"), "input_tokens"):
                _read_input(usage, "message_delta usage", step)
    return step


def _block_index(event: object) -> int:
    index = optional(field(event, "index", "a block event"), int, "a block event's index")
    if index is None:
        raise MalformedPayload("a block event has no index")
    return index


def _finish_call(block: _Block) -> ToolCall:
    if block.input_json.strip() or block.start_input is None:
        arguments, error = parse_tool_arguments(block.input_json)
    else:
        arguments, error = dict(block.start_input), None
    return ToolCall(id=block.id, name=block.name, arguments=arguments, arguments_error=error)


def _forces_a_tool(request: ModelRequest) -> bool:
    return bool(request.tools) and request.tool_choice not in ("auto", "none")


def _tool_choice(choice: str) -> dict[str, Any]:
    if choice == "auto":
        return {"type": "auto"}
    if choice == "none":
        return {"type": "none"}
    if choice == "required":
        return {"type": "any"}
    return {"type": "tool", "name": choice}


def _split_messages(
    messages: tuple[Message, ...], *, marks: set[int] | None = None
) -> tuple[str, list[dict[str, Any]]]:
    """System text, and the conversation as Messages API turns.

    Tool results become ``tool_result`` blocks of a user turn; consecutive user-side content
    (several results, then perhaps a user message) is merged into one turn, results first, as
    the API requires. ``marks``: for each ``n`` in it, the last block of the first ``n`` messages
    gets a ``cache_control`` breakpoint (the end of a stable prefix).
    """
    system: list[str] = []
    turns: list[dict[str, Any]] = []

    def add(role: str, blocks: list[dict[str, Any]]) -> None:
        if not blocks:
            return
        if turns and turns[-1]["role"] == role:
            turns[-1]["content"].extend(blocks)
        else:
            turns.append({"role": role, "content": blocks})

    for index, message in enumerate(messages):
        if marks and index in marks and turns:
            # The stable prefix ended with the message before: its last block is a breakpoint.
            turns[-1]["content"][-1]["cache_control"] = dict(_EPHEMERAL)
        if message.role == "system":
            if message.content:
                system.append(message.content)
        elif message.role == "tool":
            if not message.tool_call_id:
                raise ModelError("internal", "a tool message has no tool_call_id")
            add(
                "user",
                [
                    {
                        "type": "tool_result",
                        "tool_use_id": message.tool_call_id,
                        "content": message.content,
                    }
                ],
            )
        elif message.role == "assistant":
            blocks: list[dict[str, Any]] = []
            if message.content:
                blocks.append({"type": "text", "text": message.content})
            blocks.extend(
                {"type": "tool_use", "id": c.id, "name": c.name, "input": dict(c.arguments)}
                for c in message.tool_calls
            )
            add("assistant", blocks)
        elif message.parts:
            add("user", [_content_block(p) for p in message.parts if _has_content(p)])
        elif message.content:
            add("user", [{"type": "text", "text": message.content}])
    if marks and max(marks) >= len(messages) and turns:
        turns[-1]["content"][-1]["cache_control"] = dict(_EPHEMERAL)
    return "\n\n".join(system), turns


_MIN_CACHED_TOKENS: Final = 1024
"""The shortest prefix Anthropic caches (2,048 tokens for the Haiku models)."""


def _cacheable(request: ModelRequest) -> bool:
    """Whether the request's stable prefix may be long enough to cache: markers on a shorter
    one would change nothing but the bytes on the wire (a generous count: characters / 3)."""
    stable = request.messages[: request.stable_messages]
    size = sum(len(m.content) for m in stable)
    for tool in request.tools or ():
        size += len(tool.description) + len(json.dumps(dict(tool.parameters), default=str))
    return -(-size // CHARS_PER_TOKEN) >= _MIN_CACHED_TOKENS


_EPHEMERAL: Final = {"type": "ephemeral"}
"""The ``cache_control`` of a breakpoint (Anthropic's five-minute cache)."""


def _has_content(part: ContentPart) -> bool:
    # The Messages API refuses empty text blocks.
    return not isinstance(part, Text) or bool(part.text)


def _content_block(part: ContentPart) -> dict[str, Any]:
    """A Messages API block: ``text``, or ``image`` with a ``url`` or ``base64`` source."""
    if isinstance(part, Text):
        return {"type": "text", "text": part.text}
    if part.url is not None:
        return {"type": "image", "source": {"type": "url", "url": part.url}}
    return {
        "type": "image",
        "source": {"type": "base64", "media_type": part.media_type, "data": part.base64()},
    }
