"""OpenAI Chat Completions provider, for OpenAI and any OpenAI-compatible server.

Always streams (``stream=True`` with ``stream_options.include_usage``), assembles tool-call deltas
by index, and maps SDK failures onto the model error classes (see :mod:`reverie.models.errors`).
The SDK's own retries are off (``max_retries=0``): the loop's recovery strategy owns retrying
(docs/loop.md).
"""

from __future__ import annotations

import json
import re
import uuid
from collections.abc import AsyncIterator, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, cast

from reverie.core.content import ContentPart, Text, has_images
from reverie.core.messages import (
    TOOL_CHOICE_MODES,
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
    key_source,
    text_or_none,
)
from reverie.models.payloads import DeltaCall, MalformedPayload, read_chunk
from reverie.models.sdk_model import SDKModel

if TYPE_CHECKING:
    # The SDK is imported where a call needs it: naming an OpenAI model (which every command
    # does for a configured agent) costs nothing until the model is called.
    import openai
    from openai.types.chat import ChatCompletionChunk

__all__ = ["OpenAIChatModel", "loads_strict", "parse_tool_arguments"]

_NO_KEY_PLACEHOLDER = "sk-no-key-required"
_SCHEMA_NAME = re.compile(r"[^a-zA-Z0-9_-]+")


def _reject_constant(name: str) -> Any:
    raise ValueError(f"{name} is not valid JSON")


def loads_strict(text: str) -> Any:
    """``json.loads`` that rejects ``NaN``/``Infinity`` (not JSON; they break RFC 8785 hashing)."""
    return json.loads(text, parse_constant=_reject_constant)


def parse_tool_arguments(raw: str) -> tuple[dict[str, Any], str | None]:
    """Parse a tool call's raw JSON arguments; never raises.

    Returns ``(arguments, None)`` on success and ``({}, reason)`` when the text is not JSON or not
    a JSON object. Empty text means "no arguments". The reason describes the problem without
    quoting the arguments (they may hold user data); the model reads it and can try again.
    """
    if not raw.strip():
        return {}, None
    try:
        value = loads_strict(raw)
    except RecursionError:
        return {}, "tool arguments are nested too deeply"
    except ValueError as exc:
        where = (
            f" (line {exc.lineno}, column {exc.colno})"
            if isinstance(exc, json.JSONDecodeError)
            else ""
        )
        reason = exc.msg if isinstance(exc, json.JSONDecodeError) else str(exc)
        return {}, f"tool arguments are not valid JSON: {reason}{where}; send a JSON object"
    if not isinstance(value, dict):
        return {}, f"tool arguments must be a JSON object, got {_json_type(value)}"
    return value, None


def _json_type(value: object) -> str:
    if isinstance(value, list):
        return "an array"
    if isinstance(value, str):
        return "a string"
    if isinstance(value, bool):
        return "a boolean"
    if isinstance(value, int | float):
        return "a number"
    return "null"


@dataclass(slots=True)
class _CallAccumulator:
    """A tool call being assembled from stream deltas."""

    id: str = ""
    name: str = ""
    arguments: str = ""


class OpenAIChatModel(SDKModel["openai.AsyncOpenAI"]):
    """A chat model behind the Chat Completions API, via the official ``openai`` SDK.

    Example::

        model = OpenAIChatModel("gpt-4.1-mini")
        model = OpenAIChatModel("llama3.1", base_url="http://localhost:11434/v1", api_key_env=None)

    The key is read at the first call, not at construction: ``api_key`` if given, else the
    environment variable ``api_key_env``. ``api_key_env=None`` means the server needs no key (a
    placeholder is sent).

    Inside ``async with model:`` the model keeps one SDK client, and its connections, until the
    block exits; used without it, each request gets its own client, closed when the request
    ends, so a model nobody closes leaks nothing.
    """

    _placeholder_key = _NO_KEY_PLACEHOLDER
    _prefix = "openai"

    def __init__(
        self,
        model: str,
        *,
        base_url: str | None = None,
        api_key_env: str | None = "OPENAI_API_KEY",
        api_key: str | None = None,
        timeout_s: float = 60,
        name: str | None = None,
    ) -> None:
        """Configure the model; nothing is connected or read from the environment yet.

        Args:
            model: The provider's model id, e.g. ``gpt-4.1-mini``.
            base_url: An OpenAI-compatible endpoint ending in ``/v1``; ``None`` for OpenAI.
            api_key_env: The environment variable that holds the key; ``None`` for no key.
            api_key: An explicit key, used instead of the environment variable.
            timeout_s: Connect/read/write timeout of each request, in seconds.
            name: The label for telemetry and price lookup; default ``openai:<model>``.
        """
        super().__init__(
            model,
            base_url=base_url,
            api_key_env=api_key_env,
            api_key=api_key,
            timeout_s=timeout_s,
            name=name,
        )

    def _make_client(self, key: str) -> openai.AsyncOpenAI:
        import openai

        return openai.AsyncOpenAI(
            api_key=key,
            base_url=self._client_url,
            default_headers=self._client_headers,
            timeout=self._timeout_s,
            max_retries=0,
        )

    def _api_error(self) -> type[Exception]:
        import openai

        return openai.APIError

    async def stream(self, request: ModelRequest) -> AsyncIterator[ModelEvent]:
        """Stream one response: text deltas, then exactly one ``ResponseComplete``.

        Raises:
            ModelError: classified per docs/loop.md; the SDK error is kept in ``__cause__``.
        """
        import openai

        params = self._params(request)
        text: list[str] = []
        calls: dict[int, _CallAccumulator] = {}
        usage = TokenUsage()
        finish_reason: str | None = None
        model_name: str | None = None
        try:
            async with self._clients.lease() as client:
                # Built as a dict (the SDK's overloads cannot type a conditional set of options).
                stream = cast(
                    "openai.AsyncStream[ChatCompletionChunk]",
                    await client.chat.completions.create(**params),
                )
                async with stream:
                    async for raw_chunk in stream:
                        chunk = read_chunk(raw_chunk)
                        model_name = chunk.model or model_name
                        if chunk.usage is not None:
                            usage = chunk.usage
                        if chunk.content:
                            text.append(chunk.content)
                            yield TextDelta(text=chunk.content)
                        for position, tc in enumerate(chunk.tool_calls):
                            _accumulate(calls, tc, position)
                        if chunk.finish_reason:
                            finish_reason = chunk.finish_reason
        except openai.APIError as exc:
            raise self._map_error(exc, images=_has_images(request)) from exc
        except MalformedPayload as exc:
            # A chunk of the wrong shape: the server is broken, not busy. Never the content.
            raise ModelError(
                "internal", f"{self._name}: malformed response from the server: {exc}"
            ) from exc
        except ValueError as exc:
            # A body that is not JSON or not a chunk: the server is broken, not busy.
            raise ModelError(
                "internal",
                f"{self._name}: malformed response from the server ({type(exc).__name__})",
            ) from exc
        if finish_reason == "content_filter":
            raise ModelError("content_filtered", f"{self._name}: the response was content-filtered")
        parts: list[ResponsePart] = []
        if text:
            parts.append(TextPart(text="".join(text)))
        parts.extend(ToolCallPart(call=_finish_call(calls[i])) for i in sorted(calls))
        yield ResponseComplete(
            response=ModelResponse(
                parts=tuple(parts),
                usage=usage,
                finish_reason=finish_reason,
                model_name=model_name or self._model,
            )
        )

    def _params(self, request: ModelRequest) -> dict[str, Any]:
        params: dict[str, Any] = {
            "model": self._model,
            "messages": [_message_param(m) for m in request.messages],
            "stream": True,
            "stream_options": {"include_usage": True},
        }
        if request.tools:  # None or (): send no tools and no tool_choice (the API rejects [])
            params["tools"] = [
                {
                    "type": "function",
                    "function": {
                        "name": t.name,
                        "description": t.description,
                        "parameters": dict(t.parameters),
                    },
                }
                for t in request.tools
            ]
            params["tool_choice"] = _tool_choice(request.tool_choice)
        if request.output_schema is not None:
            params["response_format"] = _response_format(request.output_schema)
        settings = request.settings
        if settings.temperature is not None:
            params["temperature"] = settings.temperature
        if settings.max_tokens is not None:
            # OpenAI's reasoning models refuse ``max_tokens``; compatible servers mostly know only
            # ``max_tokens``.
            key = "max_completion_tokens" if self._is_openai() else "max_tokens"
            params[key] = settings.max_tokens
        if settings.extra:
            params["extra_body"] = dict(settings.extra)
        return params

    def _is_openai(self) -> bool:
        return self._base_url is None or "api.openai.com" in self._base_url

    def _map_error(self, exc: openai.APIError, *, images: bool = False) -> ModelError:
        import openai

        name = self._name
        if isinstance(exc, openai.APITimeoutError):
            return ModelError("transient", f"{name}: request timed out after {self._timeout_s:g}s")
        if isinstance(exc, openai.APIConnectionError):
            return connection_failure(exc, name, self._shown_url or "the OpenAI API")
        status = exc.status_code if isinstance(exc, openai.APIStatusError) else None
        if status in (401, 403):
            return auth_failed(name, status, key_source(self._api_key, self._api_key_env))
        error_code, error_type = text_or_none(exc.code), text_or_none(exc.type)
        kind = classify_api_error(
            status, code=error_code, type_=error_type, message=_body_message(exc), images=images
        )
        what = f"HTTP {status}" if status is not None else "error in stream"
        text = detail(_body_message(exc), self._sent_key, self._url_secrets)
        code = f" [{error_code}]" if error_code else ""
        return ModelError(kind, f"{name}: {what}{code}" + (f": {text}" if text else ""))


def _body_message(exc: openai.APIError) -> str | None:
    body = exc.body
    if isinstance(body, Mapping):
        message = body.get("message")
        if isinstance(message, str):
            return message
    if isinstance(body, str):
        return body
    return None


def _accumulate(calls: dict[int, _CallAccumulator], tc: DeltaCall, position: int) -> None:
    # Some compatible servers omit ``index`` (one whole call per delta): fall back to a new slot.
    index = tc.index
    if index is None:
        index = len(calls) + position
    acc = calls.setdefault(index, _CallAccumulator())
    if tc.id:
        acc.id = tc.id
    if tc.name and tc.name != acc.name:
        # OpenAI sends the name once; some servers repeat the whole name on every delta.
        acc.name += tc.name
    if tc.arguments:
        acc.arguments += tc.arguments


def _finish_call(acc: _CallAccumulator) -> ToolCall:
    arguments, error = parse_tool_arguments(acc.arguments)
    return ToolCall(
        id=acc.id or f"call_{uuid.uuid4().hex[:24]}",
        name=acc.name,
        arguments=arguments,
        arguments_error=error,
    )


def _message_param(message: Message) -> dict[str, Any]:
    if message.role == "tool":
        if not message.tool_call_id:
            raise ModelError("internal", "a tool message has no tool_call_id")
        return {"role": "tool", "tool_call_id": message.tool_call_id, "content": message.content}
    if message.role == "assistant" and message.tool_calls:
        return {
            "role": "assistant",
            "content": message.content or None,
            "tool_calls": [
                {
                    "id": call.id,
                    "type": "function",
                    "function": {"name": call.name, "arguments": json.dumps(dict(call.arguments))},
                }
                for call in message.tool_calls
            ],
        }
    if message.parts:
        parts = [_content_part(p) for p in message.parts if not isinstance(p, Text) or p.text]
        return {"role": message.role, "content": parts}
    return {"role": message.role, "content": message.content}


def _content_part(part: ContentPart) -> dict[str, Any]:
    """A Chat Completions content part: ``text``, or ``image_url`` (a URL or a data URL)."""
    if isinstance(part, Text):
        return {"type": "text", "text": part.text}
    return {"type": "image_url", "image_url": {"url": part.data_url()}}


def _has_images(request: ModelRequest) -> bool:
    return any(has_images(m.parts) for m in request.messages)


def _tool_choice(choice: str) -> str | dict[str, Any]:
    if choice in TOOL_CHOICE_MODES:
        return choice
    return {"type": "function", "function": {"name": choice}}


def _response_format(schema: Mapping[str, Any]) -> dict[str, Any]:
    title = schema.get("title")
    name = _SCHEMA_NAME.sub("_", title)[:64] if isinstance(title, str) and title else "output"
    return {"type": "json_schema", "json_schema": {"name": name, "schema": dict(schema)}}
