"""OpenAI Chat Completions provider, for OpenAI and any OpenAI-compatible server.

Streams (``stream=True``, with ``stream_options.include_usage`` where the endpoint reports usage
in streams), assembles tool-call deltas by index, and maps SDK failures onto the model error
classes (see :mod:`reverie.models.errors`). The SDK's own retries are off (``max_retries=0``):
the loop's recovery strategy owns retrying (docs/loop.md).

What the endpoint supports is declared (:class:`~reverie.models.compat.EndpointCompat`) and
obeyed: the structured-output mode, null content, streamed tool calls, usage in streams.

A stream is a reply only when it ended properly, with a ``finish_reason``:

- a stream that ends before one (cut, or the connection dropped) is a ``transient`` error;
- an error object sent inside the stream is classified like the same error sent as an HTTP
  status (a context overflow stays ``context_overflow``, so compaction can run);
- a stream that sends nothing at all (HTTP 200, then no data: how llama-cpp-python reports a
  failure after its headers) is asked once more without streaming, so the server's own error
  (or its reply) is what the loop sees.

A reply whose server reported no usage is counted with a conservative local estimate
(:mod:`reverie.models.estimate`), marked ``estimated``; a failed call keeps the usage it had
reached on its :class:`ModelError` (``usage``).
"""

from __future__ import annotations

import json
import re
import uuid
from collections.abc import AsyncIterator, Mapping
from dataclasses import dataclass, field
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
from reverie.models.compat import EndpointCompat, ServerKind, StructuredOutput, compat_for
from reverie.models.errors import (
    auth_failed,
    classify_api_error,
    connection_failure,
    detail,
    dropped,
    key_source,
    resolve_api_key,
    text_or_none,
    transport_errors,
)
from reverie.models.estimate import estimate_usage
from reverie.models.payloads import (
    ChunkView,
    DeltaCall,
    MalformedPayload,
    StreamedError,
    read_chunk,
    read_completion,
)
from reverie.models.sdk_model import SDKModel

if TYPE_CHECKING:
    # The SDK is imported where a call needs it: naming an OpenAI model (which every command
    # does for a configured agent) costs nothing until the model is called.
    import openai
    from openai.types.chat import ChatCompletionChunk

__all__ = ["OpenAIChatModel", "loads_strict", "parse_tool_arguments", "with_v1"]

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
        timeout_s: float | None = None,
        name: str | None = None,
        server: ServerKind | None = None,
        structured_output: StructuredOutput | None = None,
        usage_in_streams: bool | None = None,
        null_content: bool | None = None,
        parallel_tool_calls: bool | None = None,
        streaming_tool_calls: bool | None = None,
        connect_timeout_s: float | None = None,
        compat: EndpointCompat | None = None,
        prompt_cache: bool | None = None,
    ) -> None:
        """Configure the model; nothing is connected or read from the environment yet.

        Args:
            model: The provider's model id, e.g. ``gpt-4.1-mini``.
            base_url: An OpenAI-compatible endpoint (``…/v1``; a root without the ``/v1`` is
                completed); ``None`` for OpenAI.
            api_key_env: The environment variable that holds the key; ``None`` for no key.
            api_key: An explicit key, used instead of the environment variable.
            timeout_s: Read/write timeout of each request, in seconds (default 60).
            name: The label for telemetry and price lookup; default ``openai:<model>``.
            server: The kind of server (:data:`~reverie.models.compat.SERVER_KINDS`), whose
                defaults the other arguments override; default ``openai`` for OpenAI's API,
                else ``generic``.
            structured_output: How typed output is asked for: ``json_schema``,
                ``json_object``, ``tool`` or ``none``.
            usage_in_streams: The server reports usage in streamed replies.
            null_content: The server takes ``"content": null`` beside tool calls.
            parallel_tool_calls: The server takes the ``parallel_tool_calls`` field.
            streaming_tool_calls: The server streams replies to requests with tools.
            connect_timeout_s: Connect timeout of each request, in seconds (default 10).
            compat: A whole declaration instead of ``server`` and the fields above.
            prompt_cache: Send ``prompt_cache_key`` (one per thread); default on for OpenAI's
                API only.
        """
        if compat is None:
            if server is None:
                server = "openai" if _is_openai_url(base_url) else "generic"
            compat = compat_for(
                server,
                structured_output=structured_output,
                usage_in_streams=usage_in_streams,
                null_content=null_content,
                parallel_tool_calls=parallel_tool_calls,
                streaming_tool_calls=streaming_tool_calls,
                timeout_s=timeout_s,
                connect_timeout_s=connect_timeout_s,
                prompt_cache=prompt_cache,
            )
        self.compat: EndpointCompat = compat
        """What this endpoint supports (the adapter obeys it)."""
        super().__init__(
            model,
            base_url=with_v1(base_url),
            api_key_env=api_key_env,
            api_key=api_key,
            timeout_s=compat.timeout_s,
            name=name,
        )

    def probe_target(self) -> tuple[str, dict[str, str]]:
        """The chat completions URL and the headers (key included) a request sends, for
        :mod:`reverie.models.probe`. Never log the headers.

        Raises:
            ModelError: ``unavailable``: the key's environment variable is unset.
        """
        key = resolve_api_key(
            self._name,
            api_key=self._api_key,
            api_key_env=self._api_key_env,
            placeholder=self._placeholder_key,
        )
        headers = {"Authorization": f"Bearer {key}", **(self._client_headers or {})}
        root = (self._client_url or "https://api.openai.com/v1").rstrip("/")
        return f"{root}/chat/completions", headers

    def _make_client(self, key: str) -> openai.AsyncOpenAI:
        import openai

        return openai.AsyncOpenAI(
            api_key=key,
            base_url=self._client_url,
            default_headers=self._client_headers,
            timeout=openai.Timeout(self.compat.timeout_s, connect=self.compat.connect_timeout_s),
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
        if request.tools and not self.compat.streaming_tool_calls:
            # The server cannot stream a reply to a request with tools: ask for it whole.
            response = await self._complete_whole(request)
            if response.text:
                yield TextDelta(text=response.text)
            yield ResponseComplete(response=response)
            return
        import openai

        params = self._params(request)
        reply = _Reply()
        started = False
        try:
            async with self._clients.lease() as client:
                # Built as a dict (the SDK's overloads cannot type a conditional set of options).
                stream = cast(
                    "openai.AsyncStream[ChatCompletionChunk]",
                    await client.chat.completions.create(**params),
                )
                started = True
                async with stream:
                    async for raw_chunk in stream:
                        delta = reply.add(read_chunk(raw_chunk))
                        if delta:
                            yield TextDelta(text=delta)
        except openai.APIError as exc:
            error = self._map_error(exc, images=_has_images(request), started=started)
            if started:  # a request refused with a status consumed nothing
                error.usage = reply.usage_so_far(request)
            raise error from exc
        except StreamedError as exc:
            error = self._classify(None, exc.code, exc.type, exc.message, _has_images(request))
            raise _with_usage(error, reply.usage_so_far(request)) from exc
        except transport_errors() as exc:
            # openai 1.x lets a connection dropped mid-stream escape as the HTTP library's own
            # error; it is the same failure as the newer SDKs' APIConnectionError.
            error = dropped(self._name, exc, timeout_s=self.compat.timeout_s)
            raise _with_usage(error, reply.usage_so_far(request)) from exc
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
        if reply.finish_reason is None:
            if not reply.chunks:
                # HTTP 200 and no data: the server failed after its headers. Asked again
                # without streaming, it answers with its real error (or its reply).
                response = await self._complete_whole(request)
                if response.text:
                    yield TextDelta(text=response.text)
                yield ResponseComplete(response=response)
                return
            raise _with_usage(
                ModelError(
                    "transient",
                    f"{self._name}: the stream ended before the reply finished "
                    "(no finish_reason); the reply is incomplete",
                ),
                reply.usage_so_far(request),
            )
        yield ResponseComplete(response=self._response(request, reply))

    async def _complete_whole(self, request: ModelRequest) -> ModelResponse:
        """One request without streaming, read as a whole completion."""
        import openai

        params = self._params(request, stream=False)
        try:
            async with self._clients.lease() as client:
                completion = await client.chat.completions.create(**params)
                view = read_completion(completion)
        except openai.APIError as exc:
            raise self._map_error(exc, images=_has_images(request)) from exc
        except transport_errors() as exc:
            raise dropped(self._name, exc, timeout_s=self.compat.timeout_s) from exc
        except MalformedPayload as exc:
            raise ModelError(
                "internal", f"{self._name}: malformed response from the server: {exc}"
            ) from exc
        except ValueError as exc:
            raise ModelError(
                "internal",
                f"{self._name}: malformed response from the server ({type(exc).__name__})",
            ) from exc
        reply = _Reply()
        reply.add(view)
        if reply.finish_reason is None:
            # Some servers leave finish_reason out of a whole completion; it is whole anyway.
            reply.finish_reason = "tool_calls" if reply.calls else "stop"
        return self._response(request, reply)

    def _response(self, request: ModelRequest, reply: _Reply) -> ModelResponse:
        """The finished reply as a response (usage estimated when the server sent none)."""
        if reply.finish_reason == "content_filter":
            raise ModelError("content_filtered", f"{self._name}: the response was content-filtered")
        parts: list[ResponsePart] = []
        text = "".join(reply.text)
        if text:
            parts.append(TextPart(text=text))
        calls = [_finish_call(reply.calls[i]) for i in sorted(reply.calls)]
        parts.extend(ToolCallPart(call=c) for c in calls)
        usage = reply.usage
        if usage is None:
            usage = estimate_usage(request, text, calls)
        return ModelResponse(
            parts=tuple(parts),
            usage=usage,
            finish_reason=reply.finish_reason,
            model_name=reply.model_name or self._model,
        )

    def _params(self, request: ModelRequest, *, stream: bool = True) -> dict[str, Any]:
        compat = self.compat
        mode = compat.structured_output if request.output_schema is not None else None
        if mode == "json_schema" and _any_object(request.output_schema):
            # "Any JSON object" is JSON mode (a client's response_format json_object through
            # reverie serve): the same on the wire, where json_schema would say more.
            mode = "json_object"
        messages = [_message_param(m, null_content=compat.null_content) for m in request.messages]
        if request.output_schema is not None and mode in ("json_object", "none"):
            # No schema on the wire: it goes in the instructions, and the runtime validates the
            # reply against it (docs/output.md). JSON mode also needs the word "JSON" there.
            messages = _with_schema_instructions(messages, request.output_schema)
        params: dict[str, Any] = {
            "model": self._model,
            "messages": messages,
            "stream": stream,
        }
        if stream and compat.usage_in_streams:
            params["stream_options"] = {"include_usage": True}
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
        if request.output_schema is not None and mode == "json_schema":
            params["response_format"] = _response_format(request.output_schema)
        elif request.output_schema is not None and mode == "json_object":
            params["response_format"] = {"type": "json_object"}
        settings = request.settings
        if settings.temperature is not None:
            params["temperature"] = settings.temperature
        if settings.max_tokens is not None:
            # OpenAI's reasoning models refuse ``max_tokens``; compatible servers mostly know only
            # ``max_tokens``.
            key = "max_completion_tokens" if self._is_openai() else "max_tokens"
            params[key] = settings.max_tokens
        if settings.stop:
            params["stop"] = list(settings.stop)
        if settings.seed is not None:
            params["seed"] = settings.seed
        if settings.top_p is not None:
            params["top_p"] = settings.top_p
        if compat.prompt_cache and request.cache_key is not None:
            params["prompt_cache_key"] = request.cache_key
        extra = dict(settings.extra)
        if not compat.parallel_tool_calls:
            extra.pop("parallel_tool_calls", None)  # the server refuses the field
        if extra:
            params["extra_body"] = extra
        return params

    def _is_openai(self) -> bool:
        return _is_openai_url(self._base_url)

    def _map_error(
        self, exc: openai.APIError, *, images: bool = False, started: bool = False
    ) -> ModelError:
        import openai

        name = self._name
        if isinstance(exc, openai.APITimeoutError):
            if started:
                return dropped(name, exc, timeout_s=self.compat.timeout_s)
            return ModelError("transient", f"{name}: request timed out after {self._timeout_s:g}s")
        if isinstance(exc, openai.APIConnectionError):
            if started:
                # The reply had begun: the connection dropped, the server is there.
                return dropped(name, exc.__cause__ or exc, timeout_s=self.compat.timeout_s)
            return connection_failure(exc, name, self._shown_url or "the OpenAI API")
        status = exc.status_code if isinstance(exc, openai.APIStatusError) else None
        if status in (401, 403):
            return auth_failed(name, status, key_source(self._api_key, self._api_key_env))
        return self._classify(
            status, text_or_none(exc.code), text_or_none(exc.type), _body_message(exc), images
        )

    def _classify(
        self,
        status: int | None,
        error_code: str | None,
        error_type: str | None,
        message: str | None,
        images: bool,
    ) -> ModelError:
        kind = classify_api_error(
            status, code=error_code, type_=error_type, message=message, images=images
        )
        what = f"HTTP {status}" if status is not None else "error in stream"
        text = detail(message, self._sent_key, self._url_secrets)
        code = f" [{error_code}]" if error_code else ""
        return ModelError(kind, f"{self._name}: {what}{code}" + (f": {text}" if text else ""))


@dataclass(slots=True)
class _Reply:
    """A reply being assembled from chunks (or from one whole completion)."""

    text: list[str] = field(default_factory=list)
    calls: dict[int, _CallAccumulator] = field(default_factory=dict)
    usage: TokenUsage | None = None
    finish_reason: str | None = None
    model_name: str | None = None
    chunks: int = 0

    def add(self, chunk: ChunkView) -> str | None:
        """Take one chunk in; return its text delta, if any."""
        self.chunks += 1
        self.model_name = chunk.model or self.model_name
        if chunk.usage is not None:
            self.usage = chunk.usage
        if chunk.content:
            self.text.append(chunk.content)
        for position, tc in enumerate(chunk.tool_calls):
            _accumulate(self.calls, tc, position)
        if chunk.finish_reason:
            self.finish_reason = chunk.finish_reason
        return chunk.content or None

    def usage_so_far(self, request: ModelRequest) -> TokenUsage:
        """What the failed call consumed: the server's figure, else an estimate."""
        if self.usage is not None:
            return self.usage
        text = "".join(self.text)
        calls = [ToolCall(id="", name=c.name, arguments={}) for c in self.calls.values()]
        return estimate_usage(
            request, text + "".join(c.arguments for c in self.calls.values()), calls
        )


def _with_usage(error: ModelError, usage: TokenUsage) -> ModelError:
    """``error`` carrying the usage the call had reached (kept by the loop's budgets)."""
    error.usage = usage
    return error


def _is_openai_url(base_url: str | None) -> bool:
    return base_url is None or "api.openai.com" in base_url


def with_v1(base_url: str | None) -> str | None:
    """``base_url`` ending in ``/v1`` as the openai SDK expects (``http://host:8080`` too)."""
    if base_url is None:
        return None
    bare = base_url.rstrip("/")
    path = bare.split("://", 1)[-1].partition("/")[2]
    return bare if path else bare + "/v1"


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


def _message_param(message: Message, *, null_content: bool = False) -> dict[str, Any]:
    if message.role == "tool":
        if not message.tool_call_id:
            raise ModelError("internal", "a tool message has no tool_call_id")
        return {"role": "tool", "tool_call_id": message.tool_call_id, "content": message.content}
    if message.role == "assistant" and message.tool_calls:
        return {
            "role": "assistant",
            # Null is what OpenAI sends; llama-cpp-python answers it with HTTP 500 and llama.cpp
            # once crashed on a missing field, while "" works everywhere.
            "content": message.content or (None if null_content else ""),
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


_JSON_INSTRUCTION = "Answer with one JSON object and nothing else."


def _with_schema_instructions(
    messages: list[dict[str, Any]], schema: Mapping[str, Any]
) -> list[dict[str, Any]]:
    """``messages`` with the schema added to the first system message (or a new one first).

    The first system message, not a late one: the prefix stays the same across a run's calls
    (the schema does not change), and many chat templates take a system message only first.
    """
    note = _JSON_INSTRUCTION
    if not _any_object(schema):
        note += " It must match this JSON Schema:\n" + json.dumps(dict(schema), sort_keys=True)
    if (
        messages
        and messages[0].get("role") == "system"
        and isinstance(messages[0].get("content"), str)
    ):
        first = dict(messages[0])
        first["content"] = f"{first['content']}\n\n{note}" if first["content"] else note
        return [first, *messages[1:]]
    return [{"role": "system", "content": note}, *messages]


def _any_object(schema: Mapping[str, Any] | None) -> bool:
    """Whether ``schema`` asks for any JSON object and nothing more."""
    return (
        schema is not None
        and schema.get("type") == "object"
        and set(schema) <= {"type", "title", "description"}
    )


def _response_format(schema: Mapping[str, Any]) -> dict[str, Any]:
    title = schema.get("title")
    name = _SCHEMA_NAME.sub("_", title)[:64] if isinstance(title, str) and title else "output"
    return {"type": "json_schema", "json_schema": {"name": name, "schema": dict(schema)}}
