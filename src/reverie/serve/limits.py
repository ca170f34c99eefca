"""Request-body limits, enforced before anything buffers the body.

:class:`BodyLimit` answers **413** for a request whose ``Content-Length`` is above the limit
before any of the body is read, and stops a body sent without a length (chunked) as soon as the
bytes received pass the limit. :func:`check_depth` refuses JSON nested deeper than
:data:`MAX_JSON_DEPTH`, which no request of this API needs and which would otherwise exhaust
the recursion of the validators (a 500).
"""

from __future__ import annotations

from typing import Any

from starlette.datastructures import Headers
from starlette.types import ASGIApp, Message, Receive, Scope as ASGIScope, Send

from reverie.serve.errors import APIError, error_response

__all__ = ["DEFAULT_MAX_BODY_BYTES", "MAX_JSON_DEPTH", "BodyLimit", "check_depth"]

DEFAULT_MAX_BODY_BYTES = 4 * 1024 * 1024
"""``[serve] max_body_bytes`` when unset: 4 MiB, far above any conversation a turn needs."""

MAX_JSON_DEPTH = 64
"""Deepest nesting of arrays and objects a request body may have."""


def _too_large(limit: int) -> APIError:
    return APIError(
        413,
        f"the request body is larger than this server accepts ({limit} bytes)",
        code="request_too_large",
    )


class BodyLimit:
    """ASGI middleware: 413 for a request body above ``max_bytes``."""

    def __init__(self, app: ASGIApp, *, max_bytes: int) -> None:
        self.app = app
        self.max_bytes = max_bytes

    async def __call__(self, scope: ASGIScope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        length = Headers(scope=scope).get("content-length")
        if length is not None and (not length.isascii() or not length.isdigit()):
            response = error_response(
                APIError(400, "Content-Length is not a number", code="invalid_request")
            )
            await response(scope, receive, send)
            return
        if length is not None and int(length) > self.max_bytes:
            # Answered before a byte of the body is read.
            await error_response(_too_large(self.max_bytes))(scope, receive, send)
            return
        received = 0

        async def limited() -> Message:
            nonlocal received
            message = await receive()
            if message["type"] == "http.request":
                received += len(message.get("body", b""))
                if received > self.max_bytes:
                    # Raised inside the route that reads the body: the handlers answer 413.
                    raise _too_large(self.max_bytes)
            return message

        await self.app(scope, limited, send)


def check_depth(value: Any) -> None:
    """Refuse JSON nested deeper than :data:`MAX_JSON_DEPTH` (walked without recursion).

    Raises:
        APIError: 400 ``invalid_json``.
    """
    stack: list[tuple[Any, int]] = [(value, 1)]
    while stack:
        node, depth = stack.pop()
        if depth > MAX_JSON_DEPTH:
            raise APIError(
                400,
                f"the request body is nested more than {MAX_JSON_DEPTH} levels deep",
                code="invalid_json",
            )
        children = node.values() if isinstance(node, dict) else node
        stack.extend((child, depth + 1) for child in children if isinstance(child, dict | list))
