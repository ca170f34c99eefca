"""Bearer tokens → scopes, checked on every request before any route runs.

A request without ``Authorization: Bearer <token>``, or with a token the server does not know,
is answered 401 with an OpenAI-style error body (so SDKs raise ``AuthenticationError``); the
route is never reached, so unauthenticated callers learn nothing about which routes or runs
exist. A known token's :class:`~reverie.Scope` is the only identity the routes use: it is set by
the server's configuration, never by the request body.

``reverie mcp-memory`` over HTTP guards its MCP endpoint with :class:`SharedTokenAuth`: one
token, no scope of its own, but the same header parsing, the same digest comparison and the
same 401 as ``reverie serve``.
"""

from __future__ import annotations

import hashlib
import hmac
from collections.abc import Mapping

from starlette.datastructures import Headers
from starlette.requests import Request
from starlette.types import ASGIApp, Receive, Scope as ASGIScope, Send

from reverie.core.scope import Scope
from reverie.errors import UsageError
from reverie.serve.errors import APIError, error_response

__all__ = ["BearerAuth", "SharedTokenAuth", "TokenTable", "bearer_token", "owner_of"]

_OWNER_KEY = "reverie.owner"
"""Where the middleware puts the caller's :class:`Scope` in the ASGI scope."""


def _digest(token: str) -> bytes:
    return hashlib.sha256(token.encode("utf-8")).digest()


def _checked(token: object) -> str:
    if not isinstance(token, str) or not token.strip():
        raise UsageError("a bearer token must be a non-empty string")
    if token != token.strip() or any(c.isspace() for c in token):
        raise UsageError("a bearer token cannot contain whitespace")
    return token


def bearer_token(authorization: str | None) -> str | None:
    """The token of an ``Authorization: Bearer <token>`` value (``None``: no bearer token)."""
    if not authorization:
        return None
    scheme, _, token = authorization.strip().partition(" ")
    if scheme.lower() != "bearer" or not token.strip():
        return None
    return token.strip()


async def _refuse(headers: Headers, scope: ASGIScope, receive: Receive, send: Send) -> None:
    """The one 401 of every bearer check: an OpenAI-style body, ``WWW-Authenticate: Bearer``."""
    message = (
        "invalid bearer token"
        if headers.get("authorization")
        else "missing bearer token: send 'Authorization: Bearer <token>'"
    )
    response = error_response(
        APIError(
            401,
            message,
            code="invalid_api_key",
            headers={"www-authenticate": 'Bearer realm="reverie"'},
        )
    )
    await response(scope, receive, send)


class TokenTable:
    """Tokens mapped to scopes. Holds digests only: the tokens themselves are not kept.

    Looking a token up by its SHA-256 digest means the comparison never runs over the secret's
    characters, so response timing says nothing about how much of a guess was right.
    """

    def __init__(self, tokens: Mapping[str, Scope]) -> None:
        self._scopes: dict[bytes, Scope] = {}
        for token, scope in tokens.items():
            if not isinstance(scope, Scope):
                raise UsageError("each token must map to a reverie.Scope")
            self._scopes[_digest(_checked(token))] = scope

    def __len__(self) -> int:
        return len(self._scopes)

    def scope_for(self, authorization: str | None) -> Scope | None:
        """The scope of an ``Authorization`` header value, or ``None`` if not a known token."""
        token = bearer_token(authorization)
        return None if token is None else self._scopes.get(_digest(token))


class BearerAuth:
    """ASGI middleware: 401 unless the request carries a known bearer token."""

    def __init__(
        self, app: ASGIApp, *, tokens: TokenTable, signed_prefixes: tuple[str, ...] = ()
    ) -> None:
        self.app = app
        self.tokens = tokens
        self.signed_prefixes = signed_prefixes
        """Paths whose routes authenticate each request by its signature instead (inbound
        webhooks: ``/v1/triggers/``); they get no owner, so no scoped route can serve them."""

    async def __call__(self, scope: ASGIScope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        if self.signed_prefixes and str(scope.get("path", "")).startswith(self.signed_prefixes):
            await self.app(scope, receive, send)
            return
        headers = Headers(scope=scope)
        owner = self.tokens.scope_for(headers.get("authorization"))
        if owner is None:
            await _refuse(headers, scope, receive, send)
            return
        scope[_OWNER_KEY] = owner
        await self.app(scope, receive, send)


class SharedTokenAuth:
    """ASGI middleware: 401 unless the request carries the one token the server was given.

    For a server whose callers share a credential and name their own scope (``reverie
    mcp-memory``): the check and the 401 of :class:`BearerAuth`, without a scope to set. The
    token is kept as its digest only, compared in constant time.
    """

    def __init__(self, app: ASGIApp, *, token: str) -> None:
        self.app = app
        self._digest = _digest(_checked(token))

    async def __call__(self, scope: ASGIScope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        headers = Headers(scope=scope)
        token = bearer_token(headers.get("authorization"))
        if token is None or not hmac.compare_digest(_digest(token), self._digest):
            await _refuse(headers, scope, receive, send)
            return
        await self.app(scope, receive, send)


def owner_of(request: Request) -> Scope:
    """The caller's scope, set by :class:`BearerAuth`."""
    owner = request.scope.get(_OWNER_KEY)
    if not isinstance(owner, Scope):  # only reachable if the middleware was left out
        raise APIError(401, "missing bearer token", code="invalid_api_key")
    return owner
