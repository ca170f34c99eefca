"""The OpenAI Responses API: ``POST /v1/responses`` and ``GET /v1/responses/{id}``.

``model`` names a served agent. Each request is one **unbound turn** of that agent, as a chat
completion is (:mod:`reverie.serve.chat`): the agent's instructions, then the request's
``instructions`` (and ``system``/``developer`` input messages), as the system prompt; its tools
run on the server and the output is the turn's final message; its limits bound the turn;
``text.format`` becomes the turn's :class:`~reverie.runtime.OutputContract`.

A response is a run: its id is ``resp_<run id>`` (``x-reverie-run-id`` has the run id), and
``previous_response_id`` continues that run's **thread**: the new turn sees the conversation so
far (instructions are not carried over, as OpenAI's are not). Only the latest response of a
conversation can be continued: a thread is one line of turns, not a tree.

Refused with 400 rather than ignored: request-side ``tools``, ``background``, ``conversation``,
input items other than messages, and non-text content. Sampling settings are ignored: the agent's
model settings apply.
"""

from __future__ import annotations

import contextlib
import json
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import Any

import anyio
from pydantic import BaseModel, ConfigDict, Field
from sse_starlette import ServerSentEvent
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from reverie.core.content import ContentPart, Text, parse_data_url, render_text
from reverie.core.messages import Message
from reverie.core.scope import Scope
from reverie.core.vocabulary import is_unbound_profile
from reverie.errors import NotFoundError, ReverieError, UsageError
from reverie.runtime.agent import Agent
from reverie.runtime.result import RunResult
from reverie.runtime.structured import OutputContract
from reverie.runtime.unbound import SERVED_AGENT_META
from reverie.serve.auth import owner_of
from reverie.serve.bodies import parse_body
from reverie.serve.chat import ResponseFormatType, turn_text
from reverie.serve.context import ServeContext
from reverie.serve.errors import APIError, failure_error, from_reverie_error
from reverie.serve.idempotency import Idempotency, idempotency_of
from reverie.serve.views import settled
from reverie.store.base import TERMINAL_STATUSES, RunRecord

__all__ = ["ResponseBody", "ResponseRoutes"]

_PREFIX = "resp_"


# ---------------------------------------------------------------------------------- bodies
class _Lenient(BaseModel):
    # Clients send fields reverie does not use (store, metadata, include, …): ignore those.
    model_config = ConfigDict(extra="ignore", frozen=True)


class TextFormatBody(_Lenient):
    """``text.format``."""

    type: ResponseFormatType
    name: str | None = None
    json_schema: dict[str, Any] | None = Field(default=None, alias="schema")
    strict: bool | None = None


class TextBody(_Lenient):
    """``text``."""

    format: TextFormatBody | None = None


class ResponseBody(_Lenient):
    """``POST /v1/responses`` (the fields reverie reads)."""

    model: str = Field(min_length=1)
    input: str | list[dict[str, Any]] = Field(min_length=1)
    instructions: str | None = None
    previous_response_id: str | None = Field(default=None, min_length=1)
    stream: bool = False
    text: TextBody | None = None
    tools: list[dict[str, Any]] | None = None
    background: bool | None = None
    conversation: Any = None


# ---------------------------------------------------------------------------------- mapping
@dataclass(frozen=True, slots=True, kw_only=True)
class _Turn:
    system_prompt: str
    messages: list[Message]
    contract: OutputContract
    text_format: dict[str, Any] = field(default_factory=lambda: {"type": "text"})


def _refuse(message: str, param: str, code: str = "unsupported_parameter") -> APIError:
    return APIError(400, message, code=code, param=param)


def _content(content: Any, param: str) -> str:
    if isinstance(content, str):
        return content
    if not isinstance(content, list):
        raise _refuse(f"{param}: send a string or a list of text parts", param, "invalid_request")
    pieces: list[str] = []
    for index, part in enumerate(content):
        kind = part.get("type") if isinstance(part, dict) else None
        text = part.get("text") if isinstance(part, dict) else None
        if kind not in ("input_text", "output_text", "text") or not isinstance(text, str):
            raise _refuse(
                f"{param}[{index}]: content parts of type {str(kind)[:40]!r} are not supported; "
                "send text",
                f"{param}[{index}]",
                "unsupported_content",
            )
        pieces.append(text)
    return "".join(pieces)


def _user_message(content: Any, param: str) -> Message:
    """A user message: text, or ``input_text`` and ``input_image`` parts (a URL or data URL)."""
    if not isinstance(content, list) or not any(
        isinstance(p, dict) and p.get("type") == "input_image" for p in content
    ):
        return Message(role="user", content=_content(content, param))
    parts: list[ContentPart] = []
    for index, part in enumerate(content):
        where = f"{param}[{index}]"
        if isinstance(part, dict) and part.get("type") == "input_image":
            url = part.get("image_url")
            if not isinstance(url, str):
                raise _refuse(
                    f"{where}.image_url: required (a URL or a data URL; file_id is not supported)",
                    f"{where}.image_url",
                    "invalid_image",
                )
            try:
                parts.append(parse_data_url(url))
            except UsageError as exc:
                raise _refuse(f"{where}.image_url: {exc}", where, "invalid_image") from None
        else:
            parts.append(Text(_content([part], where)))
    return Message(role="user", content=render_text(parts), parts=tuple(parts))


def _contract(body: ResponseBody) -> tuple[OutputContract, dict[str, Any]]:
    fmt = body.text.format if body.text is not None else None
    if fmt is None or fmt.type == "text":
        return OutputContract.assistant_message(), {"type": "text"}
    if fmt.type == "json_object":
        return OutputContract.json_object(), {"type": "json_object"}
    if not fmt.name or fmt.json_schema is None:
        raise _refuse(
            "text.format: name and schema are required when type is 'json_schema'",
            "text.format",
            "invalid_request",
        )
    try:
        contract = OutputContract.json_schema(fmt.name, fmt.json_schema)
    except UsageError as exc:
        raise _refuse(str(exc), "text.format.schema", "invalid_schema") from None
    shown = {"type": "json_schema", "name": fmt.name, "schema": fmt.json_schema}
    return contract, {**shown, "strict": bool(fmt.strict)}


def to_turn(body: ResponseBody, agent: Agent) -> _Turn:
    """Map a Responses request onto an unbound turn of ``agent``.

    Raises:
        APIError: 400 for what the mapping cannot represent.
    """
    if body.tools:
        raise _refuse(
            "request-side tools are not supported: the agent's own tools run on the server",
            "tools",
        )
    if body.background:
        raise _refuse("background responses are not supported", "background")
    if body.conversation is not None:
        raise _refuse(
            "conversation is not supported: continue with previous_response_id", "conversation"
        )
    system: list[str] = [agent.instructions] if agent.instructions.strip() else []
    if body.instructions and body.instructions.strip():
        system.append(body.instructions)
    messages: list[Message] = []
    items = [{"role": "user", "content": body.input}] if isinstance(body.input, str) else body.input
    for index, item in enumerate(items):
        param = f"input[{index}]"
        kind = item.get("type", "message")
        role = item.get("role")
        if kind != "message" or role not in ("user", "assistant", "system", "developer"):
            raise _refuse(
                f"{param}: input items of type {str(kind)[:40]!r} are not supported; send "
                "messages (the agent's tools run on the server)",
                param,
                "unsupported_input_item",
            )
        if role == "user":
            messages.append(_user_message(item.get("content"), f"{param}.content"))
            continue
        text = _content(item.get("content"), f"{param}.content")
        if role in ("system", "developer"):
            if text.strip():
                system.append(text)
        else:
            messages.append(Message(role=role, content=text))
    if not messages:
        raise _refuse(
            "input: at least one user message is needed besides system messages",
            "input",
            "invalid_request",
        )
    contract, text_format = _contract(body)
    return _Turn(
        system_prompt="\n\n".join(system),
        messages=messages,
        contract=contract,
        text_format=text_format,
    )


# ---------------------------------------------------------------------------------- objects
def _usage(result: RunResult) -> dict[str, Any]:
    given, taken = result.usage.input_tokens, result.usage.output_tokens
    usage: dict[str, Any] = {
        "input_tokens": given,
        "input_tokens_details": {"cached_tokens": 0},
        "output_tokens": taken,
        "output_tokens_details": {"reasoning_tokens": 0},
        "total_tokens": given + taken,
    }
    if result.usage.estimated:
        usage["estimated"] = True  # the endpoint reported none: reverie's local estimate
    return usage


def _part(text: str) -> dict[str, Any]:
    return {"type": "output_text", "text": text, "annotations": [], "logprobs": []}


def _message(run_id: str, text: str | None, status: str) -> dict[str, Any]:
    return {
        "type": "message",
        "id": f"msg_{run_id}",
        "status": status,
        "role": "assistant",
        "content": [] if text is None else [_part(text)],
    }


@dataclass(slots=True, kw_only=True)
class _Shape:
    """What every response object of one request shows."""

    run_id: str
    model: str
    created: int
    instructions: str | None
    previous: str | None
    text_format: dict[str, Any]

    def response(
        self,
        status: str,
        *,
        result: RunResult | None = None,
        error: dict[str, Any] | None = None,
    ) -> dict[str, Any]:
        text = result.text if result is not None and status == "completed" else None
        return {
            "id": f"{_PREFIX}{self.run_id}",
            "object": "response",
            "created_at": self.created,
            "status": status,
            "model": self.model,
            "output": [] if text is None else [_message(self.run_id, text, "completed")],
            "error": error,
            "incomplete_details": None,
            "instructions": self.instructions,
            "metadata": {},
            "parallel_tool_calls": True,
            "tool_choice": "auto",
            "tools": [],
            "previous_response_id": self.previous,
            "temperature": None,
            "top_p": None,
            "text": {"format": self.text_format},
            "truncation": "disabled",
            "background": False,
            "store": True,
            "usage": _usage(result) if result is not None else None,
        }


def _run_id(response_id: str, param: str) -> str:
    if not response_id.startswith(_PREFIX) or len(response_id) == len(_PREFIX):
        raise APIError(
            404, f"response {response_id[:80]} not found", code="response_not_found", param=param
        )
    return response_id[len(_PREFIX) :]


# ---------------------------------------------------------------------------------- routes
class ResponseRoutes:
    """``/v1/responses``."""

    def __init__(self, ctx: ServeContext) -> None:
        self.ctx = ctx

    def routes(self) -> list[Route]:
        """The routes, for the app's router."""
        return [
            Route("/v1/responses", self.create, methods=["POST"]),
            Route("/v1/responses/{response_id}", self.retrieve, methods=["GET"]),
        ]

    async def _response_run(self, owner: Scope, response_id: str, param: str) -> RunRecord:
        run_id = _run_id(response_id, param)
        try:
            run = await self.ctx.owned_run(owner, run_id)
        except APIError:
            run = None
        if run is None or not is_unbound_profile(run.profile):
            raise APIError(
                404, f"response {response_id} not found", code="response_not_found", param=param
            )
        return run

    async def _thread_to_continue(
        self, owner: Scope, previous: str | None, keyed: Idempotency | None
    ) -> str | None:
        """The thread ``previous_response_id`` continues (``None``: a new conversation).

        A retry of a keyed request that already continued ``previous`` is not a second
        continuation: its key names the response that did, which the submit then returns.
        """
        if previous is None:
            return None
        param = "previous_response_id"
        run = await self._response_run(owner, previous, param)
        if run.status not in TERMINAL_STATUSES:
            raise APIError(
                409,
                f"response {previous} is still in progress; continue it once it has ended",
                code="response_in_progress",
                param=param,
                retryable=True,
            )
        tail = await self.ctx.rt.runs.thread_items(run.thread_id, last=1)
        if tail and tail[-1].run_id != run.run_id and not await self._continued_by(run, keyed):
            raise APIError(
                409,
                f"a later response already continued the conversation of {previous}; continue "
                "from the latest response",
                code="previous_response_superseded",
                param=param,
            )
        return run.thread_id

    async def _continued_by(self, previous: RunRecord, keyed: Idempotency | None) -> bool:
        """Whether the response that continued ``previous`` was started under ``keyed``'s key
        (its first later row on the thread belongs to that response's run)."""
        if keyed is None:
            return False
        rt = self.ctx.rt
        items = await rt.runs.thread_items(previous.thread_id)
        last = max((i.seq for i in items if i.run_id == previous.run_id), default=-1)
        following = next((i.run_id for i in items if i.seq > last), None)
        if following is None:
            return False
        follower = await rt.runs.get(following)
        return follower.idempotency_key == keyed.key and follower.scope == previous.scope

    async def create(self, request: Request) -> Response:
        """``POST /v1/responses``: run one unbound turn; answer or stream its response."""
        owner = owner_of(request)
        body = await parse_body(request, ResponseBody, invalid_status=400)
        agent = self.ctx.agent(body.model, param="model")
        turn = to_turn(body, agent)
        keyed = idempotency_of(request, body, route="responses")
        # The key is looked up before the supersede check: a retry gets its own response back.
        thread_id = await self._thread_to_continue(owner, body.previous_response_id, keyed)
        rt = self.ctx.rt
        try:
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
                thread_id=thread_id,
            )
        except NotFoundError:
            raise APIError(
                404,
                f"response {body.previous_response_id} not found",
                code="response_not_found",
                param="previous_response_id",
            ) from None
        if keyed is not None:
            keyed.check(await rt.runs.get(run_id))
        shape = _Shape(
            run_id=run_id,
            model=body.model,
            created=int(time.time()),
            instructions=body.instructions,
            previous=body.previous_response_id,
            text_format=turn.text_format,
        )
        headers = {"x-reverie-run-id": run_id}
        if body.stream:
            stream = _Stream(self.ctx, shape, structured=turn.contract.structured)
            return self.ctx.event_stream(stream.events(), headers=headers)
        result = await rt.unbound.result(run_id)
        if result.status != "completed":
            raise failure_error(result.exit, run_id)
        return JSONResponse(shape.response("completed", result=result), headers=headers)

    async def retrieve(self, request: Request) -> Response:
        """``GET /v1/responses/{id}``: the response as it is now."""
        response_id = request.path_params["response_id"]
        run = await self._response_run(owner_of(request), response_id, "response_id")
        shape = _Shape(
            run_id=run.run_id,
            model=str(run.meta.get(SERVED_AGENT_META, run.agent_name)),
            created=int(run.created_at),
            instructions=None,
            previous=None,
            text_format={"type": "text"},
        )
        if not settled(run):
            return JSONResponse(shape.response("in_progress"))
        result = await self.ctx.rt.get_result(run.run_id)
        if result.status == "completed":
            return JSONResponse(shape.response("completed", result=result))
        failed = _response_error(self.ctx, failure_error(result.exit, run.run_id))
        return JSONResponse(shape.response("failed", result=result, error=failed))


def _response_error(ctx: ServeContext, error: APIError) -> dict[str, str]:
    """A response's ``error``: the Responses API has a fixed set of codes, so a failed run is a
    ``server_error`` whose message names reverie's failure kind."""
    return {"code": "server_error", "message": ctx.redact(error.message)}


class _Stream:
    """One streamed response: ``response.created``, ``response.in_progress``, the message item
    with its ``response.output_text.delta`` events, then ``response.completed`` (or
    ``response.failed``). A structured turn sends its JSON in one delta, at the end. If the
    client goes away, the run is cancelled."""

    def __init__(self, ctx: ServeContext, shape: _Shape, *, structured: bool) -> None:
        self.ctx = ctx
        self.shape = shape
        self.structured = structured
        self._sequence = 0
        self._item = f"msg_{shape.run_id}"
        self._text: list[str] = []

    def _event(self, kind: str, **fields: Any) -> ServerSentEvent:
        data = {"type": kind, "sequence_number": self._sequence, **fields}
        self._sequence += 1
        return ServerSentEvent(
            event=kind, data=json.dumps(data, ensure_ascii=False, separators=(",", ":"))
        )

    def _opened(self) -> list[ServerSentEvent]:
        where = {"output_index": 0}
        item = _message(self.shape.run_id, None, "in_progress")
        return [
            self._event("response.output_item.added", item=item, **where),
            self._event(
                "response.content_part.added",
                item_id=self._item,
                content_index=0,
                part=_part(""),
                **where,
            ),
        ]

    def _delta(self, text: str) -> ServerSentEvent:
        self._text.append(text)
        return self._event(
            "response.output_text.delta",
            item_id=self._item,
            output_index=0,
            content_index=0,
            delta=text,
            logprobs=[],
        )

    def _closed(self) -> list[ServerSentEvent]:
        text = "".join(self._text)
        where = {"item_id": self._item, "output_index": 0, "content_index": 0}
        return [
            self._event("response.output_text.done", text=text, logprobs=[], **where),
            self._event("response.content_part.done", part=_part(text), **where),
            self._event(
                "response.output_item.done",
                item=_message(self.shape.run_id, text, "completed"),
                output_index=0,
            ),
        ]

    def _failed(self, error: APIError, result: RunResult | None) -> ServerSentEvent:
        failure = _response_error(self.ctx, error)
        return self._event(
            "response.failed", response=self.shape.response("failed", result=result, error=failure)
        )

    async def events(self) -> AsyncIterator[ServerSentEvent]:
        """The SSE events of the response."""
        done = False
        opened = False
        try:
            yield self._event("response.created", response=self.shape.response("in_progress"))
            yield self._event("response.in_progress", response=self.shape.response("in_progress"))
            async for text in turn_text(self.ctx, self.shape.run_id):
                if self.structured:
                    continue
                if not opened:
                    opened = True
                    for event in self._opened():
                        yield event
                yield self._delta(text)
            result = await self.ctx.rt.unbound.result(self.shape.run_id)
            done = True
            if result.status != "completed":
                yield self._failed(failure_error(result.exit, self.shape.run_id), result)
                return
            if not opened:
                for event in self._opened():
                    yield event
            if self.structured or not self._text:
                yield self._delta(result.text or "")
            for event in self._closed():
                yield event
            yield self._event(
                "response.completed", response=self.shape.response("completed", result=result)
            )
        except ReverieError as exc:
            done = True
            yield self._failed(from_reverie_error(exc), None)
        finally:
            if not done:
                # The client went away (or the server is stopping): nobody will read the answer.
                with anyio.CancelScope(shield=True), contextlib.suppress(Exception):
                    await self.ctx.rt.cancel(self.shape.run_id, reason=self.ctx.stop_reason())
