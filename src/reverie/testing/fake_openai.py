"""A real local HTTP server that speaks the OpenAI Chat Completions wire format, for tests.

It lets a test drive the real ``openai`` SDK path (HTTP, SSE parsing, tool-call deltas, status
errors, timeouts) without a network::

    async with FakeOpenAIServer(["Hello!", FakeError(429)]) as srv:
        model = OpenAIChatModel("gpt-test", base_url=srv.base_url, api_key="sk-test")
        ...
        srv.requests  # the JSON bodies received, in order

A *script* is a list of steps, one per ``POST /v1/chat/completions`` (or a function from the
request body to a step). A step is:

- a ``str``: a text reply, streamed a word at a time;
- a :class:`~reverie.core.messages.ModelResponse` (e.g. from ``reverie.testing.reply/call``;
  a ``raw_call`` is sent with malformed argument JSON);
- a :class:`~reverie.errors.ModelError` (e.g. from ``reverie.testing.error(kind)``): the HTTP
  error a provider sends for that class (``transient`` → 503, ``authentication`` → 401,
  ``unavailable`` → 404, ``context_overflow`` / ``content_filtered`` / ``internal`` → a 400
  saying so);
- a :class:`FakeReply`: text and/or tool calls, with usage, finish reason and chunking control;
  a :class:`FakeToolCall` may carry raw (malformed) argument text;
- a :class:`FakeError`: an HTTP error status with an OpenAI-style error body (or, with
  ``mid_stream=True``, an error event inside a 200 stream);
- a :class:`FakeHang`: no answer for a while (longer than the client's timeout), then ``then``;
- a :class:`FakeMalformed`: a 200 response whose body (or SSE data) is not JSON;
- a :class:`FakeRawStream`: a 200 stream of exactly the events given (malformed chunk shapes,
  ``"choices": null``, unknown event types), to test how a client copes with a broken server;
- a :class:`FakeCutStream`: a stream that never finishes: HTTP 200 and nothing (how
  llama-cpp-python fails after its headers), some text and then the end without a
  ``finish_reason``, or (``drop=True``) the connection dropped mid-stream.

The OpenAI server also reproduces real servers' deviations, each a switch of its constructor
(all off by default, as OpenAI behaves):

- ``null_content=False``: an assistant message with ``"content": null`` is answered with HTTP
  500 and a validation-error body quoting an install path (llama-cpp-python 0.3.x);
- ``usage_in_streams=False``: streamed replies carry no usage, even with
  ``stream_options.include_usage`` (llama-cpp-python, LM Studio);
- ``structured_output="json_object"``: ``response_format`` of type ``json_schema`` is answered
  with HTTP 500 and a validation error (llama-cpp-python takes only ``json_object``);
- ``streaming_tool_calls=False``: a streamed request that offers tools is answered with HTTP
  200 and nothing (llama-cpp-python's "automatic streaming tool choice" failure after its
  headers).

Like OpenAI, the server caches prompt prefixes (:mod:`reverie.testing.prompt_cache`): a reply
whose usage is not scripted reports ``prompt_tokens_details.cached_tokens``, the part of its
prompt an earlier request began with (from 1,024 tokens on, in 128-token steps).
``prompt_cache=False`` reports no cached tokens (a server without a prompt cache).

A request past the end of a list script gets a 400 naming the script, which the providers
classify as ``internal``. The server runs uvicorn on ``127.0.0.1`` on a free port, in a
background thread with its own event loop, so it serves async and sync clients alike.

By default (``strict=True``) the servers enforce the providers' conversation rules
(:mod:`reverie.testing.conversation_rules`): a request whose ``messages`` leave a tool call
unanswered, carry an orphan or repeated tool result, repeat a call id or hold an empty assistant
message — or whose ``tool_choice`` or ``response_format`` the API would refuse
(:mod:`reverie.testing.request_rules`) — is answered, as the real API answers it, with HTTP 400
and an ``invalid_request_error`` body naming the rule, the message index and the call ids; the
SDK raises ``BadRequestError`` and reverie fails the run with a ``model_error``. Such a request
is recorded in ``requests`` (and its violations in ``violations``) but uses no script step.
``strict=False`` answers every request from the script, for tests that send a malformed
conversation on purpose.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import re
import socket
import threading
import time
from collections.abc import AsyncIterator, Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal, Self

try:
    import uvicorn
    from starlette.applications import Starlette
    from starlette.requests import Request
    from starlette.responses import JSONResponse, Response, StreamingResponse
    from starlette.routing import Route
except ImportError as exc:  # pragma: no cover - exercised only without the extra installed
    raise ImportError(
        "the fake model servers need starlette and uvicorn: pip install 'reverie[serve]'"
    ) from exc

from reverie.core.messages import ModelResponse
from reverie.errors import ModelError
from reverie.testing.conversation_rules import Violation, check_chat_completions, describe
from reverie.testing.image_rules import ImageRefusal, check_chat_images
from reverie.testing.prompt_cache import OpenAIPromptCache
from reverie.testing.request_rules import check_openai_request

__all__ = [
    "FakeCutStream",
    "FakeError",
    "FakeHang",
    "FakeMalformed",
    "FakeModelServer",
    "FakeOpenAIServer",
    "FakeRawStream",
    "FakeReply",
    "FakeStep",
    "FakeToolCall",
    "Script",
]

_WORDS = re.compile(r"\s*\S+\s*|\s+")


@dataclass(frozen=True, slots=True)
class FakeToolCall:
    """A tool call the fake server answers with."""

    name: str
    arguments: Mapping[str, Any] | str = field(default_factory=dict)
    """A mapping (sent as JSON), or raw text sent as is — to script malformed arguments."""
    id: str | None = None
    """The call id; default ``call_<n>`` (OpenAI) or ``toolu_<n>`` (Anthropic)."""

    def arguments_json(self) -> str:
        """The arguments as the wire carries them."""
        if isinstance(self.arguments, str):
            return self.arguments
        return json.dumps(dict(self.arguments))


@dataclass(frozen=True, slots=True)
class FakeReply:
    """A successful answer: text and/or tool calls."""

    text: str = ""
    tool_calls: tuple[FakeToolCall, ...] = ()
    input_tokens: int | None = None
    """Reported prompt tokens; default a rough count of the request's characters / 4."""
    output_tokens: int | None = None
    """Reported completion tokens; default one per text piece plus 10 per call."""
    finish_reason: str | None = None
    """Default ``stop``/``tool_calls`` (OpenAI) or ``end_turn``/``tool_use`` (Anthropic)."""
    chunk_size: int | None = None
    """Characters per streamed text delta; ``None`` streams a word (with its space) at a time."""

    def text_pieces(self) -> list[str]:
        """The text split into the deltas a stream sends."""
        if not self.text:
            return []
        if self.chunk_size:
            n = self.chunk_size
            return [self.text[i : i + n] for i in range(0, len(self.text), n)]
        return _WORDS.findall(self.text)


@dataclass(frozen=True, slots=True)
class FakeError:
    """An HTTP error answer with a provider-style error body."""

    status: int
    message: str | None = None
    """Error message; ``{api_key}`` is replaced by the key the client sent (to test redaction)."""
    type: str | None = None
    """Error type; default from the status, e.g. ``rate_limit_error``."""
    code: str | None = None
    """OpenAI error code, e.g. ``context_length_exceeded``."""
    param: str | None = None
    """OpenAI's ``param`` field: the request field at fault, e.g. ``messages.[3].role``."""
    headers: Mapping[str, str] = field(default_factory=dict)
    mid_stream: bool = False
    """For a streaming request: answer 200, stream ``text``, then send the error as an event
    (how providers report overload after a stream has begun). ``status`` then only picks the
    default type and message."""
    text: str = ""
    """Text streamed before a ``mid_stream`` error."""


@dataclass(frozen=True, slots=True)
class FakeHang:
    """Answer nothing for ``seconds`` (or until the server stops), then answer ``then``."""

    seconds: float = 30.0
    then: FakeStep | None = None
    """What to answer after the wait; default an empty reply."""


@dataclass(frozen=True, slots=True)
class FakeMalformed:
    """A 200 answer whose body — or, when streaming, whose SSE data — is not valid JSON."""

    body: str = '{"choices": [ this is not json'


@dataclass(frozen=True, slots=True)
class FakeRawStream:
    """A 200 event stream of exactly these events, whatever the request asked for.

    Each event is its data (a ``str`` is sent as is, anything else as JSON) or a pair
    ``(event_name, data)`` for a named event (Anthropic streams name theirs). With ``done``, a
    final ``data: [DONE]`` follows, as OpenAI streams end.
    """

    events: Sequence[Any]
    done: bool = True

    def body(self) -> Iterator[bytes]:
        """The events as server-sent-event bytes."""
        for item in self.events:
            if isinstance(item, tuple) and len(item) == 2 and isinstance(item[0], str):
                name, data = item
            else:
                name, data = None, item
            yield sse(data if isinstance(data, str) else json.dumps(data), name)
        if self.done:
            yield sse("[DONE]")


@dataclass(frozen=True, slots=True)
class FakeCutStream:
    """A streamed answer that never finishes: no ``finish_reason``, no usage, no ``[DONE]``.

    With no ``text``, the server answers HTTP 200 and ends the stream at once (200 then
    nothing). With ``text``, it streams the text and then ends. With ``drop``, it then drops
    the connection instead of ending the stream (the client sees an incomplete body).
    """

    text: str = ""
    drop: bool = False


FakeStep = (
    str
    | FakeCutStream
    | ModelResponse
    | ModelError
    | FakeReply
    | FakeError
    | FakeHang
    | FakeMalformed
    | FakeRawStream
)
"""One scripted answer."""

Script = Sequence[FakeStep] | Callable[[dict[str, Any]], FakeStep]
"""A list of answers, one per request, or a function from the request body to an answer."""


def as_reply(step: str | ModelResponse | FakeReply) -> FakeReply:
    """Normalise a text or ``ModelResponse`` step to a :class:`FakeReply`."""
    if isinstance(step, FakeReply):
        return step
    if isinstance(step, str):
        return FakeReply(text=step)
    calls = tuple(
        FakeToolCall(
            c.name,
            _MALFORMED_ARGUMENTS if c.arguments_error else dict(c.arguments),
            id=c.id or None,
        )
        for c in step.tool_calls
    )
    usage = step.usage
    return FakeReply(
        text=step.text,
        tool_calls=calls,
        input_tokens=usage.input_tokens or None,
        output_tokens=usage.output_tokens or None,
        finish_reason=step.finish_reason,
    )


_MALFORMED_ARGUMENTS = '{"arguments": '

_ERROR_FOR_KIND = {
    "transient": FakeError(503, "The server is overloaded."),
    "unavailable": FakeError(404),
    "authentication": FakeError(401),
    "context_overflow": FakeError(
        400,
        "This model's maximum context length is 8192 tokens; your messages resulted in 9000.",
        code="context_length_exceeded",
    ),
    "content_filtered": FakeError(
        400, "The response was filtered by the content filter policy.", code="content_filter"
    ),
    "internal": FakeError(400, "Invalid request."),
}


def as_error(error: ModelError) -> FakeError:
    """The HTTP error a provider sends for a model error of ``error.kind``."""
    return _ERROR_FOR_KIND.get(error.kind, _ERROR_FOR_KIND["internal"])


def estimate_input_tokens(body: Mapping[str, Any]) -> int:
    """A rough, deterministic prompt-token count for a request body."""
    return max(1, len(json.dumps(body.get("messages", []))) // 4)


def default_output_tokens(reply: FakeReply) -> int:
    """The completion-token count reported when a reply does not set one."""
    return len(reply.text_pieces()) + 10 * len(reply.tool_calls)


def sse(data: Mapping[str, Any] | str, event: str | None = None) -> bytes:
    """One server-sent event."""
    payload = data if isinstance(data, str) else json.dumps(data)
    prefix = f"event: {event}\n" if event else ""
    return f"{prefix}data: {payload}\n\n".encode()


class _QuickServer(uvicorn.Server):
    """uvicorn's server, stopping in milliseconds rather than ~0.2 s.

    Stock uvicorn polls for exit every 0.1 s and sleeps 0.1 s while shutting down; a test suite
    starts hundreds of these servers, so both waits are replaced by an event and short polls.
    """

    stop_event: asyncio.Event | None = None

    async def main_loop(self) -> None:
        await self.on_tick(0)  # sets the default response headers, as the stock loop does
        while not self.should_exit:
            if self.stop_event is None:
                await asyncio.sleep(0.05)
                continue
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(0.5):  # also honour should_exit, set from any thread
                    await self.stop_event.wait()
            if self.stop_event.is_set():
                return

    async def shutdown(self, sockets: list[socket.socket] | None = None) -> None:
        for server in self.servers:
            server.close()
        for connection in list(self.server_state.connections):
            connection.shutdown()
        deadline = time.monotonic() + 2.0
        # uvicorn offers no event for "all connections drained": poll briefly.
        while self.server_state.connections or self.server_state.tasks:
            if time.monotonic() > deadline:
                break
            await asyncio.sleep(0.002)
        for task in list(self.server_state.tasks):
            task.cancel()
        for server in self.servers:
            await server.wait_closed()


class FakeModelServer:
    """Base of the fake provider servers: the script, the uvicorn thread, the request log.

    Subclasses provide :meth:`routes` and the wire format. Use as ``async with`` (or ``with``);
    :attr:`base_url` is valid between enter and exit.
    """

    _startup_timeout_s = 10.0

    def __init__(
        self,
        script: Script = (),
        *,
        models: Sequence[str] = ("fake-model",),
        strict: bool = True,
        vision: bool = True,
    ) -> None:
        """Args:
        script: the answers (see the module docstring).
        models: the ids ``GET /v1/models`` lists.
        strict: answer a request that breaks the provider's conversation rules with HTTP 400
            naming the rule, as the real API does; ``False`` answers it from the script.
        vision: the served model takes images; ``False`` answers every request with an image
            with the 400 a model without vision sends (:mod:`reverie.testing.image_rules`).
            Malformed images are refused either way.
        """
        self._script = script
        self.strict = strict
        self.vision = vision
        self.violations: list[Violation] = []
        """The conversation rules the refused requests broke, in order (strict mode only)."""
        self._position = 0
        self._lock = threading.Lock()
        self.models = tuple(models)
        self.requests: list[dict[str, Any]] = []
        """The JSON bodies received (decodable ones), in arrival order."""
        self.headers: list[dict[str, str]] = []
        """The headers of each recorded request (lower-case names), parallel to ``requests``."""
        self.connections: set[tuple[str, int]] = set()
        """The client address (host, port) of every request received: one entry per TCP
        connection the clients opened, so a client that reuses its connections adds few."""
        self.usages: list[dict[str, Any]] = []
        """The usage each successful answer reported, in order (the provider's bill)."""
        self._thread: threading.Thread | None = None
        self._server: _QuickServer | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._closing: asyncio.Event | None = None
        self._port: int | None = None
        self._error: BaseException | None = None

    # -- lifecycle ---------------------------------------------------------------------------

    @property
    def root_url(self) -> str:
        """``http://127.0.0.1:<port>`` (no path)."""
        if self._port is None:
            raise RuntimeError(f"{type(self).__name__} is not running; use it as a context manager")
        return f"http://127.0.0.1:{self._port}"

    @property
    def base_url(self) -> str:
        """The URL to give the SDK client."""
        return self.root_url

    def start(self) -> None:
        """Start serving in a background thread; returns once the port accepts connections."""
        if self._thread is not None:
            raise RuntimeError(f"{type(self).__name__} is already running")
        # IPPROTO_TCP explicitly: asyncio sets TCP_NODELAY only when the proto says TCP (else
        # Nagle adds ~40 ms to every streamed response).
        sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM, socket.IPPROTO_TCP)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind(("127.0.0.1", 0))
        self._port = sock.getsockname()[1]
        config = uvicorn.Config(
            Starlette(routes=self.routes()),
            log_config=None,
            log_level="warning",
            access_log=False,
            lifespan="off",
            ws="none",
            http="h11",
            timeout_graceful_shutdown=2,
        )
        self._server = _QuickServer(config)
        self._thread = threading.Thread(
            target=self._run, args=(self._server, sock), name=type(self).__name__, daemon=True
        )
        self._thread.start()
        deadline = time.monotonic() + self._startup_timeout_s
        while not self._server.started:
            if not self._thread.is_alive() or time.monotonic() > deadline:
                self.stop()
                raise RuntimeError(f"{type(self).__name__} failed to start") from self._error
            time.sleep(0.005)

    def _run(self, server: _QuickServer, sock: socket.socket) -> None:
        async def serve() -> None:
            self._loop = asyncio.get_running_loop()
            self._closing = server.stop_event = asyncio.Event()
            await server.serve(sockets=[sock])

        try:
            asyncio.run(serve())
        except BaseException as exc:  # reported by start() / stop(), never lost in the thread
            self._error = exc
        finally:
            sock.close()

    def stop(self) -> None:
        """Stop serving: end any hang, close connections, join the thread."""
        server, thread, loop, closing = self._server, self._thread, self._loop, self._closing
        if server is None or thread is None:
            return
        if loop is not None and closing is not None and not loop.is_closed():
            with contextlib.suppress(RuntimeError):  # the loop may close between check and call
                loop.call_soon_threadsafe(closing.set)
        server.should_exit = True
        thread.join(timeout=10)
        self._server = self._thread = None
        self._loop = self._closing = None
        self._port = None

    def __enter__(self) -> Self:
        self.start()
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.stop()

    async def __aenter__(self) -> Self:
        await asyncio.to_thread(self.start)
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await asyncio.to_thread(self.stop)

    # -- scripting ---------------------------------------------------------------------------

    @property
    def remaining(self) -> int | None:
        """Steps not yet used (``None`` for a function script)."""
        if callable(self._script):
            return None
        return len(self._script) - self._position

    def next_step(self, body: dict[str, Any], headers: Mapping[str, str]) -> FakeStep:
        """Record a request and return the step that answers it.

        In strict mode a request that breaks a conversation rule gets a 400 ``FakeError``
        naming the rule, and uses no script step.
        """
        violations = self.check_conversation(body) if self.strict else []
        refusal = self.check_images(body)
        with self._lock:
            self.requests.append(body)
            self.headers.append(dict(headers))
            if refusal is not None:
                return FakeError(
                    400, refusal.message, type="invalid_request_error", param=refusal.param
                )
            if violations:
                self.violations.extend(violations)
                return FakeError(
                    400,
                    f"{type(self).__name__} refused the request: {describe(violations)}",
                    type="invalid_request_error",
                    param=self.error_param(violations[0]),
                )
            if callable(self._script):
                return self._script(body)
            if self._position >= len(self._script):
                return FakeError(
                    400,
                    f"{type(self).__name__} script exhausted: it has {len(self._script)} steps "
                    f"and this is request {len(self.requests)}",
                    type="invalid_request_error",
                    code="script_exhausted",
                )
            step = self._script[self._position]
            self._position += 1
            return step

    async def wait(self, seconds: float) -> None:
        """Sleep ``seconds``, or less if the server is stopping (so a hang never blocks exit)."""
        closing = self._closing
        if closing is None:
            await asyncio.sleep(seconds)
            return
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(seconds):
                await closing.wait()

    async def read_body(self, request: Request) -> dict[str, Any] | None:
        """The request's JSON object body, or ``None`` if it is not one."""
        if request.client is not None:
            with self._lock:
                self.connections.add((request.client.host, request.client.port))
        try:
            body = json.loads(await request.body())
        except ValueError:
            return None
        return body if isinstance(body, dict) else None

    # -- to override -------------------------------------------------------------------------

    def routes(self) -> list[Route]:
        """The Starlette routes of this server."""
        raise NotImplementedError

    def check_conversation(self, body: Mapping[str, Any]) -> list[Violation]:
        """The conversation rules a request body breaks (none by default)."""
        return []

    def error_param(self, violation: Violation) -> str | None:
        """The error's ``param`` for a refused request (OpenAI names the field at fault)."""
        return None

    def check_images(self, body: Mapping[str, Any]) -> ImageRefusal | None:
        """Why the provider would refuse the request's images (``None``: it would not)."""
        return None


_OPENAI_ERROR_TYPES = {
    400: "invalid_request_error",
    401: "invalid_request_error",
    403: "permission_denied",
    404: "invalid_request_error",
    429: "rate_limit_exceeded",
}
_OPENAI_ERROR_MESSAGES = {
    400: "Invalid request.",
    401: "Incorrect API key provided: {api_key}.",
    403: "You are not allowed to use this model.",
    404: "The model does not exist or you do not have access to it.",
    429: "Rate limit reached. Please try again in 20ms.",
}


class FakeOpenAIServer(FakeModelServer):
    """A fake OpenAI-compatible server: ``POST /v1/chat/completions`` and ``GET /v1/models``.

    ``base_url`` ends in ``/v1``, as the ``openai`` SDK expects. The keyword switches reproduce
    real servers' deviations (see the module docstring).
    """

    def __init__(
        self,
        script: Script = (),
        *,
        models: Sequence[str] = ("fake-model",),
        strict: bool = True,
        vision: bool = True,
        null_content: bool = True,
        usage_in_streams: bool = True,
        structured_output: Literal["json_schema", "json_object"] = "json_schema",
        streaming_tool_calls: bool = True,
        prompt_cache: bool = True,
    ) -> None:
        """Args: as :class:`FakeModelServer`, and the deviations of the module docstring
        (``prompt_cache``: simulate OpenAI's automatic prefix caching)."""
        super().__init__(script, models=models, strict=strict, vision=vision)
        self.prompt_cache: OpenAIPromptCache | None = OpenAIPromptCache() if prompt_cache else None
        self.null_content = null_content
        self.usage_in_streams = usage_in_streams
        self.structured_output = structured_output
        self.streaming_tool_calls = streaming_tool_calls

    @property
    def base_url(self) -> str:
        """``http://127.0.0.1:<port>/v1``."""
        return f"{self.root_url}/v1"

    def quirk_refusal(self, body: Mapping[str, Any]) -> FakeStep | None:
        """The answer of a server with this fake's deviations to ``body``, if it refuses it."""
        streaming = bool(body.get("stream"))
        if not self.null_content:
            nulls = [
                i
                for i, m in enumerate(body.get("messages") or [])
                if isinstance(m, Mapping)
                and m.get("role") == "assistant"
                and m.get("content", "") is None
            ]
            if nulls:
                return _validation_error(
                    [("body", "messages", i, "typed-dict", "content") for i in nulls]
                )
        fmt = body.get("response_format")
        if (
            self.structured_output == "json_object"
            and isinstance(fmt, Mapping)
            and fmt.get("type") not in ("text", "json_object")
        ):
            return _validation_error([("body", "response_format", "type")])
        if not self.streaming_tool_calls and streaming and body.get("tools"):
            return FakeCutStream()
        return None

    def check_conversation(self, body: Mapping[str, Any]) -> list[Violation]:
        """The Chat Completions rules (see :func:`check_chat_completions`), then the
        tool-choice and ``response_format`` rules (:func:`check_openai_request`)."""
        return check_chat_completions(body.get("messages")) + check_openai_request(body)

    def error_param(self, violation: Violation) -> str | None:
        """The field at fault: ``messages.[i].role`` for a message, as the API names it."""
        if violation.param is not None:
            return violation.param
        return f"messages.[{violation.index}].role"

    def check_images(self, body: Mapping[str, Any]) -> ImageRefusal | None:
        """The Chat Completions image rules (see :func:`check_chat_images`)."""
        return check_chat_images(body.get("messages"), vision=self.vision)

    def routes(self) -> list[Route]:
        """Chat completions and the model list."""
        return [
            Route("/v1/chat/completions", self._chat, methods=["POST"]),
            Route("/v1/models", self._models, methods=["GET"]),
        ]

    async def _models(self, request: Request) -> Response:
        return JSONResponse(
            {
                "object": "list",
                "data": [
                    {"id": m, "object": "model", "created": 0, "owned_by": "reverie"}
                    for m in self.models
                ],
            }
        )

    async def _chat(self, request: Request) -> Response:
        body = await self.read_body(request)
        if body is None:
            return _openai_error(FakeError(400, "The request body is not a JSON object."), "")
        step = self.next_step(body, request.headers)
        refusal = self.quirk_refusal(body)
        if refusal is not None and not isinstance(step, FakeError):
            # The server's deviation answers first; the scripted step is used up all the same
            # (the request reached the server), so a script reads like the real exchange.
            step = refusal
        return await self._answer(step, body, bearer_token(request))

    async def _answer(self, step: FakeStep, body: dict[str, Any], api_key: str) -> Response:
        streaming = bool(body.get("stream"))
        if isinstance(step, FakeHang):
            await self.wait(step.seconds)
            return await self._answer(step.then if step.then is not None else "", body, api_key)
        if isinstance(step, ModelError):
            step = as_error(step)
        if isinstance(step, FakeError):
            if step.mid_stream and streaming:
                return StreamingResponse(
                    _openai_stream_error(step, body, len(self.requests), api_key),
                    media_type="text/event-stream",
                )
            return _openai_error(step, api_key)
        if isinstance(step, FakeRawStream):
            return StreamingResponse(step.body(), media_type="text/event-stream")
        if isinstance(step, FakeCutStream):
            return CutStreamResponse(_cut_events(step, body, len(self.requests)), drop=step.drop)
        if isinstance(step, FakeMalformed):
            if streaming:
                return StreamingResponse(iter([sse(step.body)]), media_type="text/event-stream")
            return Response(step.body, media_type="application/json")
        reply = as_reply(step)
        n = len(self.requests)
        cached: int | None = None
        if self.prompt_cache is not None and reply.input_tokens is None:
            cached = self.prompt_cache.cached_tokens(body, estimate_input_tokens(body))
        with self._lock:
            self.usages.append(_usage(reply, body, cached))
        if streaming:
            include_usage = self.usage_in_streams and bool(
                (body.get("stream_options") or {}).get("include_usage")
            )
            return StreamingResponse(
                _openai_chunks(reply, body, n, include_usage, cached=cached),
                media_type="text/event-stream",
            )
        return JSONResponse(_openai_completion(reply, body, n, cached))


_PYDANTIC_URL = "https://errors.pydantic.dev/2.9/v/string_type"
_SERVER_PATH = "/opt/venv/lib/python3.11/site-packages/llama_cpp/server/app.py"


def _validation_error(locations: Sequence[tuple[Any, ...]]) -> FakeError:
    """llama-cpp-python's answer to a body it cannot validate: HTTP 500, the pydantic dump
    (which quotes where the server is installed) as the message."""
    lines = [
        f"{len(locations)} validation error{'s' if len(locations) != 1 else ''} for "
        "CreateChatCompletionRequest"
    ]
    for loc in locations:
        lines.append(
            f"  {{'type': 'string_type', 'loc': {loc!r}, 'msg': 'Input should be a valid "
            f"string', 'input': None, 'url': '{_PYDANTIC_URL}'}}"
        )
    lines.append(f'  File "{_SERVER_PATH}", line 512, in create_chat_completion')
    return FakeError(500, "\n".join(lines), type="internal_server_error")


class _CutStreamDropped(Exception):
    """Raised inside the fake's response to make the server drop the connection."""


class CutStreamResponse(Response):
    """A 200 event stream of ``events`` that ends (or, with ``drop``, breaks) unfinished."""

    def __init__(self, events: Sequence[bytes], *, drop: bool) -> None:
        super().__init__(media_type="text/event-stream")
        self._events, self._drop = list(events), drop

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        # No content-length: the body is chunked, as a real stream's is.
        headers = [(b"content-type", b"text/event-stream; charset=utf-8")]
        await send({"type": "http.response.start", "status": 200, "headers": headers})
        for event in self._events:
            await send({"type": "http.response.body", "body": event, "more_body": True})
            await asyncio.sleep(0)
        if self._drop:
            # An exception after the headers: the server closes the connection without ending
            # the chunked body, as a crashed or killed upstream does.
            raise _CutStreamDropped("the fake dropped the connection on purpose")
        await send({"type": "http.response.body", "body": b"", "more_body": False})


def _cut_events(step: FakeCutStream, body: Mapping[str, Any], n: int) -> list[bytes]:
    """The chunks a :class:`FakeCutStream` sends before its end (none for no ``text``)."""
    if not step.text:
        return []
    base = {
        "id": f"chatcmpl-fake-{n}",
        "object": "chat.completion.chunk",
        "created": int(time.time()),
        "model": str(body.get("model", "fake-model")),
    }
    deltas: list[dict[str, Any]] = [{"role": "assistant", "content": ""}]
    deltas += [{"content": piece} for piece in FakeReply(text=step.text).text_pieces()]
    return [
        sse({**base, "choices": [{"index": 0, "delta": d, "finish_reason": None}]}) for d in deltas
    ]


def bearer_token(request: Request) -> str:
    auth = request.headers.get("authorization", "")
    return auth.removeprefix("Bearer ").strip()


def _openai_error_body(step: FakeError, api_key: str) -> dict[str, Any]:
    message = step.message or _OPENAI_ERROR_MESSAGES.get(step.status, "The server had an error.")
    error_type = step.type or _OPENAI_ERROR_TYPES.get(step.status, "server_error")
    code = step.code
    if code is None and step.status == 401:
        code = "invalid_api_key"
    return {
        "error": {
            "message": message.replace("{api_key}", api_key),
            "type": error_type,
            "param": step.param,
            "code": code,
        }
    }


def _openai_error(step: FakeError, api_key: str) -> Response:
    body = _openai_error_body(step, api_key)
    return JSONResponse(body, status_code=step.status, headers=dict(step.headers))


async def _openai_stream_error(
    step: FakeError, body: Mapping[str, Any], n: int, api_key: str
) -> AsyncIterator[bytes]:
    async for event in _openai_chunks(FakeReply(text=step.text), body, n, False, final=False):
        yield event
    yield sse(_openai_error_body(step, api_key))


def _openai_tool_calls(reply: FakeReply) -> list[dict[str, Any]]:
    return [
        {
            "id": call.id or f"call_{i}",
            "type": "function",
            "function": {"name": call.name, "arguments": call.arguments_json()},
        }
        for i, call in enumerate(reply.tool_calls)
    ]


def _finish_reason(reply: FakeReply) -> str:
    return reply.finish_reason or ("tool_calls" if reply.tool_calls else "stop")


def _usage(reply: FakeReply, body: Mapping[str, Any], cached: int | None) -> dict[str, Any]:
    prompt = reply.input_tokens if reply.input_tokens is not None else estimate_input_tokens(body)
    completion = (
        reply.output_tokens if reply.output_tokens is not None else default_output_tokens(reply)
    )
    usage: dict[str, Any] = {
        "prompt_tokens": prompt,
        "completion_tokens": completion,
        "total_tokens": prompt + completion,
    }
    if cached is not None:
        usage["prompt_tokens_details"] = {"cached_tokens": cached}
    return usage


def _openai_completion(
    reply: FakeReply, body: Mapping[str, Any], n: int, cached: int | None = None
) -> dict[str, Any]:
    message: dict[str, Any] = {"role": "assistant", "content": reply.text or None, "refusal": None}
    if reply.tool_calls:
        message["tool_calls"] = _openai_tool_calls(reply)
    return {
        "id": f"chatcmpl-fake-{n}",
        "object": "chat.completion",
        "created": int(time.time()),
        "model": str(body.get("model", "fake-model")),
        "choices": [
            {
                "index": 0,
                "message": message,
                "finish_reason": _finish_reason(reply),
                "logprobs": None,
            }
        ],
        "usage": _usage(reply, body, cached),
    }


def _split(text: str, parts: int) -> list[str]:
    """``text`` in up to ``parts`` pieces (so arguments arrive over several chunks)."""
    if not text:
        return [""]
    size = max(1, -(-len(text) // parts))
    return [text[i : i + size] for i in range(0, len(text), size)]


async def _openai_chunks(
    reply: FakeReply,
    body: Mapping[str, Any],
    n: int,
    include_usage: bool,
    *,
    final: bool = True,
    cached: int | None = None,
) -> AsyncIterator[bytes]:
    base = {
        "id": f"chatcmpl-fake-{n}",
        "object": "chat.completion.chunk",
        "created": int(time.time()),
        "model": str(body.get("model", "fake-model")),
    }

    def chunk(delta: dict[str, Any], finish: str | None = None) -> bytes:
        data: dict[str, Any] = {
            **base,
            "choices": [{"index": 0, "delta": delta, "finish_reason": finish, "logprobs": None}],
        }
        if include_usage:
            data["usage"] = None
        return sse(data)

    for piece in _openai_deltas(reply):
        yield chunk(piece)
        await asyncio.sleep(0)
    if not final:
        return
    yield chunk({}, _finish_reason(reply))
    if include_usage:
        yield sse({**base, "choices": [], "usage": _usage(reply, body, cached)})
    yield sse("[DONE]")


def _openai_deltas(reply: FakeReply) -> Iterator[dict[str, Any]]:
    yield {"role": "assistant", "content": ""}
    for piece in reply.text_pieces():
        yield {"content": piece}
    for index, call in enumerate(_openai_tool_calls(reply)):
        function = call["function"]
        yield {
            "tool_calls": [
                {
                    "index": index,
                    "id": call["id"],
                    "type": "function",
                    "function": {"name": function["name"], "arguments": ""},
                }
            ]
        }
        for piece in _split(function["arguments"], 3):
            if piece:
                yield {"tool_calls": [{"index": index, "function": {"arguments": piece}}]}
