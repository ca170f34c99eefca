"""Request-body limits, enforced before anything buffers the body.

:class:`BodyLimit` answers **413** for a request whose ``Content-Length`` is above the limit
before any of the body is read, and stops a body sent without a length (chunked) as soon as the
bytes received pass the limit. :func:`check_depth` refuses JSON nested deeper than
:data:`MAX_JSON_DEPTH` (the library's one limit for untrusted data,
:data:`reverie.core.depth.MAX_DEPTH`), which no request of this API needs and which would
otherwise exhaust the recursion of the validators (a 500).
"""

from __future__ import annotations

from typing import Any

from starlette.datastructures import Headers
from starlette.types import ASGIApp, Message, Receive, Scope as ASGIScope, Send

from reverie.core.depth import MAX_DEPTH, check_depth as check_nesting
from reverie.errors import NestedTooDeep
from reverie.serve.errors import APIError, error_response

__all__ = ["DEFAULT_MAX_BODY_BYTES", "MAX_JSON_DEPTH", "BodyLimit", "check_depth"]

DEFAULT_MAX_BODY_BYTES = 4 * 1024 * 1024
"""``[serve] max_body_bytes`` when unset: 4 MiB, far above any conversation a turn needs."""

MAX_JSON_DEPTH = MAX_DEPTH
"""Deepest nesting of arrays and objects a request body (or JSON text inside one) may have."""


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


def check_depth(value: Any, *, what: str = "the request body", param: str | None = None) -> None:
    """Refuse JSON nested deeper than :data:`MAX_JSON_DEPTH` (walked without recursion).

    Args:
        value: The parsed JSON.
        what: What it is, for the message.
        param: The field it came from, if not the whole body.

    Raises:
        APIError: 400 ``invalid_json``.
    """
    try:
        check_nesting(value, what=what, limit=MAX_JSON_DEPTH)
    except NestedTooDeep as exc:
        raise APIError(400, str(exc), code="invalid_json", param=param) from None
