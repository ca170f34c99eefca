"""A real local HTTP server that speaks the Anthropic Messages wire format, for tests.

The same idea and the same script steps as :mod:`reverie.testing.fake_openai` (``str``,
``ModelResponse``, :class:`FakeReply`, :class:`FakeError`, :class:`FakeHang`,
:class:`FakeMalformed`), answered on ``POST /v1/messages``, streaming or not::

    async with FakeAnthropicServer(["Hello!"]) as srv:
        model = AnthropicModel("claude-test", base_url=srv.base_url, api_key="sk-ant-test")

Streams carry ``message_start``, ``content_block_start`` / ``content_block_delta``
(``text_delta``, ``input_json_delta``) / ``content_block_stop``, ``message_delta`` with usage,
and ``message_stop``. :class:`FakeError` answers with ``{"type": "error", "error": {...}}`` and
its status; with ``mid_stream=True`` it starts a 200 stream and then sends an ``error`` event, as
Anthropic does when it is overloaded after a stream has begun.

Strict by default, like the OpenAI fake: a request breaking the Messages API's conversation rules
(the shared ones, plus: the first message is a user message, roles alternate, no empty content,
``tool_result`` blocks first in their message, ``tool_use`` ids unique in the conversation; see
:mod:`reverie.testing.conversation_rules`), or whose ``tool_choice`` or ``output_config.format``
the API would refuse (:mod:`reverie.testing.request_rules`), gets HTTP 400 with an
``invalid_request_error`` body naming the rule. ``FakeAnthropicServer(script, strict=False)``
answers it from the script.
Like Anthropic, the server caches prompt prefixes at ``cache_control`` breakpoints
(:mod:`reverie.testing.prompt_cache`) and reports ``cache_read_input_tokens`` and
``cache_creation_input_tokens`` for a request with a breakpoint (its ``input_tokens`` is then
the rest); ``prompt_cache=False`` reports none.
Default ``tool_use`` ids (``toolu_<n>``) count across the server's answers, so they never repeat
within a conversation, as the API's never do.
:class:`FakeRawStream` sends exactly the ``(event_name, data)`` events given (pass
``done=False``: Anthropic streams end without ``[DONE]``), to script malformed or unknown events.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Iterator, Mapping, Sequence
from dataclasses import asdict, replace
from typing import Any

from starlette.requests import Request
from starlette.responses import JSONResponse, Response, StreamingResponse
from starlette.routing import Route

from reverie.errors import ModelError
from reverie.testing.conversation_rules import Violation, check_anthropic_messages
from reverie.testing.fake_openai import (
    CutStreamResponse,
    FakeCutStream,
    FakeError,
    FakeHang,
    FakeMalformed,
    FakeModelServer,
    FakeRawStream,
    FakeReply,
    FakeStep,
    Script,
    as_error,
    as_reply,
    bearer_token,
    default_output_tokens,
    estimate_input_tokens,
    sse,
)
from reverie.testing.image_rules import ImageRefusal, check_anthropic_images
from reverie.testing.prompt_cache import AnthropicPromptCache
from reverie.testing.request_rules import check_anthropic_request

__all__ = ["FakeAnthropicServer"]


_ERROR_TYPES = {
    400: "invalid_request_error",
    401: "authentication_error",
    402: "billing_error",
    403: "permission_error",
    404: "not_found_error",
    413: "request_too_large",
    429: "rate_limit_error",
    500: "api_error",
    529: "overloaded_error",
}
_ERROR_MESSAGES = {
    400: "Invalid request.",
    401: "invalid x-api-key: {api_key}",
    403: "Your API key does not have permission to use the specified resource.",
    404: "model: not found",
    413: "Request exceeds the maximum allowed number of bytes.",
    429: "Number of request tokens has exceeded your per-minute rate limit.",
    529: "Overloaded",
}


class FakeAnthropicServer(FakeModelServer):
    """A fake Anthropic API: ``POST /v1/messages`` and ``GET /v1/models``.

    ``base_url`` is the server root (no ``/v1``), as the ``anthropic`` SDK expects.
    """

    def __init__(
        self,
        script: Script = (),
        *,
        models: Sequence[str] = ("fake-model",),
        strict: bool = True,
        vision: bool = True,
        prompt_cache: bool = True,
    ) -> None:
        """Args: as :class:`~reverie.testing.fake_openai.FakeModelServer`
        (``prompt_cache``: simulate Anthropic's prompt caching at ``cache_control``
        breakpoints)."""
        super().__init__(script, models=models, strict=strict, vision=vision)
        self.prompt_cache = AnthropicPromptCache() if prompt_cache else None
        self._tool_ids = 0

    def check_conversation(self, body: Mapping[str, Any]) -> list[Violation]:
        """The Messages API rules (see :func:`check_anthropic_messages`), then the
        tool-choice and ``output_config.format`` rules (:func:`check_anthropic_request`)."""
        return check_anthropic_messages(body.get("messages")) + check_anthropic_request(body)

    def check_images(self, body: Mapping[str, Any]) -> ImageRefusal | None:
        """The Messages API image rules (see :func:`check_anthropic_images`)."""
        return check_anthropic_images(body.get("messages"), vision=self.vision)

    def routes(self) -> list[Route]:
        """Messages and the model list."""
        return [
            Route("/v1/messages", self._messages, methods=["POST"]),
            Route("/v1/models", self._models, methods=["GET"]),
        ]

    async def _models(self, request: Request) -> Response:
        return JSONResponse(
            {
                "data": [
                    {
                        "id": m,
                        "type": "model",
                        "display_name": m,
                        "created_at": "2025-01-01T00:00:00Z",
                    }
                    for m in self.models
                ],
                "has_more": False,
                "first_id": self.models[0] if self.models else None,
                "last_id": self.models[-1] if self.models else None,
            }
        )

    def _with_ids(self, reply: FakeReply) -> FakeReply:
        """``reply`` with a server-wide ``toolu_<n>`` id on each call that has none."""
        if all(c.id for c in reply.tool_calls):
            return reply
        calls = []
        with self._lock:
            for c in reply.tool_calls:
                if not c.id:
                    c = replace(c, id=f"toolu_{self._tool_ids}")
                    self._tool_ids += 1
                calls.append(c)
        return replace(reply, tool_calls=tuple(calls))

    async def _messages(self, request: Request) -> Response:
        # The API takes ``x-api-key``; newer SDKs send the key as a bearer token.
        api_key = request.headers.get("x-api-key") or bearer_token(request)
        body = await self.read_body(request)
        if body is None:
            return _error(FakeError(400, "The request body is not a JSON object."), api_key)
        step = self.next_step(body, request.headers)
        return await self._answer(step, body, api_key)

    async def _answer(self, step: FakeStep, body: dict[str, Any], api_key: str) -> Response:
        streaming = bool(body.get("stream"))
        n = len(self.requests)
        if isinstance(step, FakeHang):
            await self.wait(step.seconds)
            return await self._answer(step.then if step.then is not None else "", body, api_key)
        if isinstance(step, ModelError):
            step = as_error(step)
        if isinstance(step, FakeError):
            if step.mid_stream and streaming:
                return StreamingResponse(
                    _stream_error(step, body, n, api_key), media_type="text/event-stream"
                )
            return _error(step, api_key)
        if isinstance(step, FakeRawStream):
            return StreamingResponse(step.body(), media_type="text/event-stream")
        if isinstance(step, FakeCutStream):
            events: list[bytes] = []
            if step.text:
                events = [
                    sse(_message_start(body, n, estimate_input_tokens(body)), "message_start"),
                    sse(
                        {
                            "type": "content_block_start",
                            "index": 0,
                            "content_block": {"type": "text", "text": ""},
                        },
                        "content_block_start",
                    ),
                    sse(
                        {
                            "type": "content_block_delta",
                            "index": 0,
                            "delta": {"type": "text_delta", "text": step.text},
                        },
                        "content_block_delta",
                    ),
                ]
            return CutStreamResponse(events, drop=step.drop)
        if isinstance(step, FakeMalformed):
            if streaming:
                events = [
                    sse(_message_start(body, n, 1), "message_start"),
                    sse(step.body, "content_block_delta"),
                ]
                return StreamingResponse(iter(events), media_type="text/event-stream")
            return Response(step.body, media_type="application/json")
        reply = self._with_ids(as_reply(step))
        usage: dict[str, int] = {"input_tokens": _input_tokens(reply, body)}
        if self.prompt_cache is not None and reply.input_tokens is None:
            cached = self.prompt_cache.usage(body)
            if cached is not None:
                usage = asdict(cached)
        with self._lock:
            self.usages.append({**usage, "output_tokens": _output_tokens(reply)})
        if streaming:
            return StreamingResponse(_events(reply, body, n, usage), media_type="text/event-stream")
        return JSONResponse(_message(reply, body, n, usage))


def _error_body(step: FakeError, api_key: str) -> dict[str, Any]:
    message = step.message or _ERROR_MESSAGES.get(step.status, "Internal server error")
    error_type = step.type or _ERROR_TYPES.get(step.status, "api_error")
    return {
        "type": "error",
        "error": {"type": error_type, "message": message.replace("{api_key}", api_key)},
    }


def _error(step: FakeError, api_key: str) -> Response:
    headers = {"request-id": "req_fake", **step.headers}
    return JSONResponse(_error_body(step, api_key), status_code=step.status, headers=headers)


def _stop_reason(reply: FakeReply) -> str:
    return reply.finish_reason or ("tool_use" if reply.tool_calls else "end_turn")


def _input_tokens(reply: FakeReply, body: Mapping[str, Any]) -> int:
    return reply.input_tokens if reply.input_tokens is not None else estimate_input_tokens(body)


def _output_tokens(reply: FakeReply) -> int:
    return reply.output_tokens if reply.output_tokens is not None else default_output_tokens(reply)


def _content(reply: FakeReply) -> list[dict[str, Any]]:
    blocks: list[dict[str, Any]] = []
    if reply.text:
        blocks.append({"type": "text", "text": reply.text})
    for i, call in enumerate(reply.tool_calls):
        arguments = call.arguments if not isinstance(call.arguments, str) else {}
        blocks.append(
            {
                "type": "tool_use",
                "id": call.id or f"toolu_{i}",
                "name": call.name,
                "input": dict(arguments),
            }
        )
    return blocks


def _message_start(
    body: Mapping[str, Any], n: int, input_tokens: int | Mapping[str, int]
) -> dict[str, Any]:
    usage = {"input_tokens": input_tokens} if isinstance(input_tokens, int) else input_tokens
    return {
        "type": "message_start",
        "message": {
            "id": f"msg_fake_{n}",
            "type": "message",
            "role": "assistant",
            "model": str(body.get("model", "fake-model")),
            "content": [],
            "stop_reason": None,
            "stop_sequence": None,
            "usage": {**usage, "output_tokens": 1},
        },
    }


def _message(
    reply: FakeReply, body: Mapping[str, Any], n: int, usage: Mapping[str, int]
) -> dict[str, Any]:
    return {
        "id": f"msg_fake_{n}",
        "type": "message",
        "role": "assistant",
        "model": str(body.get("model", "fake-model")),
        "content": _content(reply),
        "stop_reason": _stop_reason(reply),
        "stop_sequence": None,
        "usage": {**usage, "output_tokens": _output_tokens(reply)},
    }


def _split(text: str, parts: int) -> list[str]:
    size = max(1, -(-len(text) // parts))
    return [text[i : i + size] for i in range(0, len(text), size)]


def _event_list(
    reply: FakeReply, body: Mapping[str, Any], n: int, usage: Mapping[str, int]
) -> Iterator[bytes]:
    yield sse(_message_start(body, n, usage), "message_start")
    index = 0
    if reply.text:
        yield sse(
            {
                "type": "content_block_start",
                "index": index,
                "content_block": {"type": "text", "text": ""},
            },
            "content_block_start",
        )
        yield sse({"type": "ping"}, "ping")
        for piece in reply.text_pieces():
            yield sse(
                {
                    "type": "content_block_delta",
                    "index": index,
                    "delta": {"type": "text_delta", "text": piece},
                },
                "content_block_delta",
            )
        yield sse({"type": "content_block_stop", "index": index}, "content_block_stop")
        index += 1
    for i, call in enumerate(reply.tool_calls):
        start = {"type": "tool_use", "id": call.id or f"toolu_{i}", "name": call.name, "input": {}}
        yield sse(
            {"type": "content_block_start", "index": index, "content_block": start},
            "content_block_start",
        )
        for piece in _split(call.arguments_json(), 3):
            yield sse(
                {
                    "type": "content_block_delta",
                    "index": index,
                    "delta": {"type": "input_json_delta", "partial_json": piece},
                },
                "content_block_delta",
            )
        yield sse({"type": "content_block_stop", "index": index}, "content_block_stop")
        index += 1
    yield sse(
        {
            "type": "message_delta",
            "delta": {"stop_reason": _stop_reason(reply), "stop_sequence": None},
            "usage": {"output_tokens": _output_tokens(reply)},
        },
        "message_delta",
    )
    yield sse({"type": "message_stop"}, "message_stop")


async def _events(
    reply: FakeReply, body: Mapping[str, Any], n: int, usage: Mapping[str, int]
) -> AsyncIterator[bytes]:
    for event in _event_list(reply, body, n, usage):
        yield event
        await asyncio.sleep(0)


async def _stream_error(
    step: FakeError, body: Mapping[str, Any], n: int, api_key: str
) -> AsyncIterator[bytes]:
    reply = FakeReply(text=step.text)
    usage = {"input_tokens": _input_tokens(reply, body)}
    events = list(_event_list(reply, body, n, usage))
    # Everything up to (not including) the message_delta that would end the message normally.
    for event in events[:-2]:
        yield event
        await asyncio.sleep(0)
    yield sse(_error_body(step, api_key), "error")
