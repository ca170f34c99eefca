"""The OpenAI-compatible surface: ``POST /v1/chat/completions`` and ``GET /v1/models``.

``model`` names a served agent. Each request is one **unbound turn** (docs/unbound.md) of the agent:
its instructions (then the request's ``system``/``developer`` messages) as the system prompt, the
request's other messages as the conversation, the agent's tools run on the server, its limits
bound the turn, and ``response_format`` becomes the turn's
:class:`~reverie.runtime.OutputContract`. The run is durable and belongs to the caller's scope,
so ``GET /v1/runs/{id}`` shows it too (its id is in the ``x-reverie-run-id`` header).

Not supported, and refused with 400 rather than ignored: request-side ``tools`` (the agent's
tools are the server's), ``n`` other than 1, non-text content parts. Sampling settings
(``temperature``, ``max_tokens``, …) are accepted and ignored: the agent's model settings apply.
"""

from __future__ import annotations

import contextlib
import json
import logging
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Any, Literal

import anyio
from pydantic import BaseModel, ConfigDict, Field
from sse_starlette import ServerSentEvent
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from reverie.core.content import ContentPart, Image, Text, has_images, parse_data_url, render_text
from reverie.core.events import AssistantMessage, TextDeltaEvent
from reverie.core.messages import Message, ToolCall
from reverie.errors import ReverieError, UsageError
from reverie.runtime.agent import Agent
from reverie.runtime.result import RunResult
from reverie.runtime.structured import OutputContract
from reverie.serve.auth import owner_of
from reverie.serve.bodies import parse_body
from reverie.serve.context import ServeContext
from reverie.serve.errors import APIError, error_body, failure_error, from_reverie_error
from reverie.serve.idempotency import idempotency_of
from reverie.serve.limits import check_depth

__all__ = ["ChatCompletionBody", "ChatRoutes", "to_turn", "turn_text"]

log = logging.getLogger("reverie.serve")


# ---------------------------------------------------------------------------------- bodies
ResponseFormatType = Literal["text", "json_object", "json_schema"]
"""The ``type`` of a ``response_format`` (chat completions) or ``text.format`` (responses)."""


class _Lenient(BaseModel):
    # OpenAI clients send fields we do not use (user, seed, metadata, …): ignore those.
    model_config = ConfigDict(extra="ignore", frozen=True)


class FunctionBody(_Lenient):
    """``tool_calls[].function`` of an assistant message."""

    name: str = Field(min_length=1)
    arguments: str = "{}"
    """The arguments as a JSON text, as OpenAI sends them."""


class ToolCallBody(_Lenient):
    """One tool call an earlier assistant message made."""

    id: str = Field(min_length=1)
    type: Literal["function"] = "function"
    function: FunctionBody


class ChatMessageBody(_Lenient):
    """One message of ``messages``."""

    role: Literal["system", "developer", "user", "assistant", "tool"]
    content: str | list[dict[str, Any]] | None = None
    """Text, or a list of content parts (only ``{"type": "text"}`` parts are supported)."""
    name: str | None = None
    tool_calls: list[ToolCallBody] | None = None
    tool_call_id: str | None = None


class JsonSchemaBody(_Lenient):
    """``response_format.json_schema``."""

    name: str = Field(min_length=1)
    json_schema: dict[str, Any] = Field(alias="schema")
    description: str | None = None
    strict: bool | None = None


class ResponseFormatBody(_Lenient):
    """``response_format``."""

    type: ResponseFormatType
    json_schema: JsonSchemaBody | None = None


class StreamOptionsBody(_Lenient):
    """``stream_options``."""

    include_usage: bool = False


class ChatCompletionBody(_Lenient):
    """``POST /v1/chat/completions`` (the fields reverie reads)."""

    model: str = Field(min_length=1)
    messages: list[ChatMessageBody] = Field(min_length=1)
    stream: bool = False
    stream_options: StreamOptionsBody | None = None
    response_format: ResponseFormatBody | None = None
    tools: list[dict[str, Any]] | None = None
    n: int | None = None


# ---------------------------------------------------------------------------------- mapping
@dataclass(frozen=True, slots=True, kw_only=True)
class Turn:
    """What one chat completion runs: the unbound turn's prompt, messages and contract."""

    system_prompt: str
    messages: list[Message]
    contract: OutputContract


def _text(content: str | list[dict[str, Any]] | None, param: str) -> str:
    if content is None or isinstance(content, str):
        return content or ""
    pieces: list[str] = []
    for index, part in enumerate(content):
        kind = part.get("type")
        if kind != "text" or not isinstance(part.get("text"), str):
            raise APIError(
                400,
                f"{param}[{index}]: content parts of type {str(kind)[:40]!r} are not supported; "
                "send text",
                code="unsupported_content",
                param=f"{param}[{index}]",
            )
        pieces.append(part["text"])
    return "".join(pieces)


def _user_message(content: str | list[dict[str, Any]] | None, param: str) -> Message:
    """A user message: text, or ``text`` and ``image_url`` parts (a URL or a data URL)."""
    if content is None or isinstance(content, str):
        return Message(role="user", content=content or "")
    parts: list[ContentPart] = []
    for index, part in enumerate(content):
        where = f"{param}[{index}]"
        kind = part.get("type")
        if kind == "image_url":
            parts.append(_image(part.get("image_url"), f"{where}.image_url"))
        elif kind == "text" and isinstance(part.get("text"), str):
            parts.append(Text(part["text"]))
        else:
            raise APIError(
                400,
                f"{where}: content parts of type {str(kind)[:40]!r} are not supported; "
                "send text or image_url",
                code="unsupported_content",
                param=where,
            )
    if not has_images(parts):
        return Message(role="user", content="".join(p.text for p in parts if isinstance(p, Text)))
    return Message(role="user", content=render_text(parts), parts=tuple(parts))


def _image(value: object, param: str) -> Image:
    url = value.get("url") if isinstance(value, dict) else None
    if not isinstance(url, str):
        raise APIError(
            400, f"{param}.url: required (a URL or a data URL)", code="invalid_image", param=param
        )
    try:
        return parse_data_url(url)
    except UsageError as exc:
        raise APIError(400, f"{param}.url: {exc}", code="invalid_image", param=param) from None


def _arguments(call: ToolCallBody, param: str) -> dict[str, Any]:
    try:
        value = json.loads(call.function.arguments or "{}")
    except RecursionError:
        # JSON text inside the body: the body's own depth check never saw into it.
        raise APIError(
            400,
            f"{param}: function.arguments is nested too deeply",
            code="invalid_json",
            param=param,
        ) from None
    except json.JSONDecodeError:
        value = None
    check_depth(value, what=f"{param}.function.arguments", param=param)
    if not isinstance(value, dict):
        raise APIError(
            400,
            f"{param}: function.arguments must be a JSON object encoded as a string",
            code="invalid_request",
            param=param,
        )
    return value


def _contract(body: ChatCompletionBody) -> OutputContract:
    fmt = body.response_format
    if fmt is None or fmt.type == "text":
        return OutputContract.assistant_message()
    if fmt.type == "json_object":
        return OutputContract.json_object()
    if fmt.json_schema is None:
        raise APIError(
            400,
            "response_format.json_schema: required when type is 'json_schema'",
            code="invalid_request",
            param="response_format.json_schema",
        )
    try:
        return OutputContract.json_schema(fmt.json_schema.name, fmt.json_schema.json_schema)
    except UsageError as exc:
        raise APIError(
            400, str(exc), code="invalid_schema", param="response_format.json_schema.schema"
        ) from None


def to_turn(body: ChatCompletionBody, agent: Agent) -> Turn:
    """Map a chat completion request onto an unbound turn of ``agent``.

    The agent's instructions come first in the system prompt; the request's ``system`` and
    ``developer`` messages follow them (they add to the operator's instructions, never replace
    them).

    Raises:
        APIError: 400 for what the mapping cannot represent.
    """
    if body.tools:
        raise APIError(
            400,
            "request-side tools are not supported: the agent's own tools run on the server",
            code="unsupported_parameter",
            param="tools",
        )
    if body.n not in (None, 1):
        raise APIError(400, "only n=1 is supported", code="unsupported_parameter", param="n")
    system: list[str] = [agent.instructions] if agent.instructions.strip() else []
    messages: list[Message] = []
    call_names: dict[str, str] = {}
    for index, item in enumerate(body.messages):
        param = f"messages[{index}]"
        if item.role == "user":
            messages.append(_user_message(item.content, f"{param}.content"))
            continue
        text = _text(item.content, f"{param}.content")
        if item.role in ("system", "developer"):
            if text.strip():
                system.append(text)
        elif item.role == "assistant":
            calls = tuple(
                ToolCall(
                    id=c.id,
                    name=c.function.name,
                    arguments=_arguments(c, f"{param}.tool_calls[{i}]"),
                )
                for i, c in enumerate(item.tool_calls or ())
            )
            call_names.update({c.id: c.name for c in calls})
            messages.append(Message(role="assistant", content=text, tool_calls=calls))
        else:
            if not item.tool_call_id:
                raise APIError(
                    400,
                    f"{param}.tool_call_id: required for role 'tool'",
                    code="invalid_request",
                    param=f"{param}.tool_call_id",
                )
            messages.append(
                Message(
                    role="tool",
                    content=text,
                    tool_call_id=item.tool_call_id,
                    name=call_names.get(item.tool_call_id, item.name),
                )
            )
    if not messages:
        raise APIError(
            400,
            "messages: at least one user message is needed besides system messages",
            code="invalid_request",
            param="messages",
        )
    _check_tool_pairing(messages)
    return Turn(system_prompt="\n\n".join(system), messages=messages, contract=_contract(body))


def _check_tool_pairing(messages: list[Message]) -> None:
    """OpenAI's rule, at the door: an assistant message's tool calls are each answered by the
    ``tool`` messages right after it, and a ``tool`` message answers one of them (a client's
    ill-formed history is its 400, never a model call that fails as the server's 502).

    ``messages`` holds no system message (those went to the prompt), so indexes can differ
    from the body's; the message names the call id instead.
    """
    open_calls: set[str] = set()
    for message in messages:
        if message.role == "tool":
            if message.tool_call_id not in open_calls:
                raise APIError(
                    400,
                    f"messages: a tool message answers {message.tool_call_id!r}, which is not a "
                    "call of the assistant message right before it (or was answered already)",
                    code="invalid_request",
                    param="messages",
                )
            open_calls.discard(message.tool_call_id)
            continue
        if open_calls:
            break
        if message.role == "assistant":
            open_calls = {c.id for c in message.tool_calls}
    if open_calls:
        raise APIError(
            400,
            f"messages: the tool calls {sorted(open_calls)!r} of an assistant message are not "
            "answered by the tool messages right after it",
            code="invalid_request",
            param="messages",
        )


def _usage(result: RunResult) -> dict[str, Any]:
    prompt, completion = result.usage.input_tokens, result.usage.output_tokens
    usage: dict[str, Any] = {
        "prompt_tokens": prompt,
        "completion_tokens": completion,
        "total_tokens": prompt + completion,
    }
    if result.usage.estimated:
        usage["estimated"] = True  # the endpoint reported none: reverie's local estimate
    return usage


def completion_body(result: RunResult, *, model: str, created: int) -> dict[str, Any]:
    """The ``chat.completion`` object of a completed run."""
    return {
        "id": f"chatcmpl-{result.run_id}",
        "object": "chat.completion",
        "created": created,
        "model": model,
        "system_fingerprint": None,
        "choices": [
            {
                "index": 0,
                "message": {"role": "assistant", "content": result.text or "", "refusal": None},
                "finish_reason": "stop",
                "logprobs": None,
            }
        ],
        "usage": _usage(result),
    }


# ---------------------------------------------------------------------------------- routes
class ChatRoutes:
    """``/v1/chat/completions`` and ``/v1/models``."""

    def __init__(self, ctx: ServeContext) -> None:
        self.ctx = ctx

    def routes(self) -> list[Route]:
        """The routes, for the app's router."""
        return [
            Route("/v1/chat/completions", self.completions, methods=["POST"]),
            Route("/v1/models", self.models, methods=["GET"]),
            Route("/v1/models/{model:path}", self.model, methods=["GET"]),
        ]

    async def models(self, request: Request) -> Response:
        """``GET /v1/models``: the served agents, as OpenAI model objects."""
        owner_of(request)
        return JSONResponse(
            {"object": "list", "data": [_model_object(name) for name in sorted(self.ctx.agents)]}
        )

    async def model(self, request: Request) -> Response:
        """``GET /v1/models/{model}``."""
        owner_of(request)
        name = request.path_params["model"]
        self.ctx.agent(name, param="model")
        return JSONResponse(_model_object(name))

    async def completions(self, request: Request) -> Response:
        """``POST /v1/chat/completions``: run one unbound turn; answer or stream its reply."""
        owner = owner_of(request)
        body = await parse_body(request, ChatCompletionBody, invalid_status=400)
        agent = self.ctx.agent(body.model, param="model")
        turn = to_turn(body, agent)
        keyed = idempotency_of(request, body, route="chat")
        rt = self.ctx.rt
        run_id = await rt.unbound.submit(
            system_prompt=turn.system_prompt,
            messages=turn.messages,
            tools=list(agent.tools),
            output_contract=turn.contract,
            limits=agent.limits,
            idempotency_key=keyed.key if keyed else None,
            scope=owner,
            agent=agent,
            meta=keyed.meta if keyed else None,
        )
        if keyed is not None:
            keyed.check(await rt.runs.get(run_id))
        created = int(time.time())
        headers = {"x-reverie-run-id": run_id}
        if body.stream:
            include_usage = bool(body.stream_options and body.stream_options.include_usage)
            stream = _Stream(
                self.ctx,
                run_id,
                model=body.model,
                created=created,
                structured=turn.contract.structured,
                include_usage=include_usage,
            )
            return self.ctx.event_stream(stream.events(), headers=headers)
        result = await rt.unbound.result(run_id)
        if result.status != "completed":
            raise failure_error(result.exit, run_id)
        return JSONResponse(
            completion_body(result, model=body.model, created=created), headers=headers
        )


def _model_object(name: str) -> dict[str, Any]:
    return {"id": name, "object": "model", "created": 0, "owned_by": "reverie"}


class _Stream:
    """One streamed completion: Chat Completions chunks, then ``data: [DONE]``.

    Text is streamed as the model produces it (every model call of the turn; text written
    alongside server-side tool calls too). A structured turn streams its JSON once, at the end.
    A run that fails mid-stream ends the stream with an ``{"error": …}`` event, as OpenAI does.
    If the client goes away, the run is cancelled.
    """

    def __init__(
        self,
        ctx: ServeContext,
        run_id: str,
        *,
        model: str,
        created: int,
        structured: bool,
        include_usage: bool,
    ) -> None:
        self.ctx = ctx
        self.run_id = run_id
        self.structured = structured
        self.include_usage = include_usage
        self._base = {
            "id": f"chatcmpl-{run_id}",
            "object": "chat.completion.chunk",
            "created": created,
            "model": model,
            "system_fingerprint": None,
        }

    def _chunk(self, delta: dict[str, Any], finish: str | None = None) -> ServerSentEvent:
        data: dict[str, Any] = {
            **self._base,
            "choices": [{"index": 0, "delta": delta, "finish_reason": finish, "logprobs": None}],
        }
        if self.include_usage:
            data["usage"] = None
        return _sse(data)

    def _error(self, error: APIError) -> ServerSentEvent:
        message = self.ctx.redact(error.message)
        return _sse(error_body(error.status, message, code=error.code))

    async def events(self) -> AsyncIterator[ServerSentEvent]:
        """The SSE events of the response."""
        with self.ctx.streaming(self.run_id):
            done = False
            try:
                yield self._chunk({"role": "assistant", "content": ""})
                async for text in turn_text(self.ctx, self.run_id):
                    if not self.structured:
                        yield self._chunk({"content": text})
                result = await self.ctx.rt.unbound.result(self.run_id)
                done = True
                if result.status != "completed":
                    error = failure_error(result.exit, self.run_id)
                    yield self._error(error)
                    return
                if self.structured:
                    yield self._chunk({"content": result.text or ""})
                yield self._chunk({}, "stop")
                if self.include_usage:
                    yield _sse({**self._base, "choices": [], "usage": _usage(result)})
                yield ServerSentEvent(data="[DONE]")
            except ReverieError as exc:
                done = True
                error = from_reverie_error(exc)
                yield self._error(error)
            finally:
                if not done:
                    # The client went away (or the server is stopping): nobody will read the answer.
                    with anyio.CancelScope(shield=True), contextlib.suppress(Exception):
                        await self.ctx.rt.cancel(self.run_id, reason=self.ctx.stop_reason())


async def turn_text(ctx: ServeContext, run_id: str) -> AsyncIterator[str]:
    """An unbound turn's text pieces, live, as the model produces them (every model call of
    the turn; later messages set apart by a blank line). A turn that already ended, or is
    advanced by another process, sends its final text in one piece once it ends."""
    handle = ctx.rt.attach(run_id)
    if handle is None:
        result = await ctx.rt.unbound.result(run_id)
        if result.status == "completed" and result.text:
            yield result.text
        return
    streamed = False  # text deltas seen since the last assistant message
    wrote = False  # any text sent yet (later messages are set apart by a blank line)
    async for event in handle.events():
        text = ""
        if isinstance(event, TextDeltaEvent):
            text = event.text
            if text and not streamed and wrote:
                text = "\n\n" + text
            streamed = streamed or bool(event.text)
        elif isinstance(event, AssistantMessage):
            if not streamed and event.text.strip():  # a model that does not stream
                text = ("\n\n" if wrote else "") + event.text
            streamed = False
        if text:
            wrote = True
            yield text


def _sse(data: dict[str, Any]) -> ServerSentEvent:
    return ServerSentEvent(data=json.dumps(data, ensure_ascii=False, separators=(",", ":")))
