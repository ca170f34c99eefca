"""Plumbing shared by the SDK-backed providers: error classification, safe messages, credentials.

Every provider maps its SDK's failures onto the five model error classes of docs/loop.md::

    transient          429, 408, 409, 5xx (incl. Anthropic's 529), timeouts, overload/server
                       errors, a connection dropped or a stream cut mid-reply
    context_overflow   a 400/413 whose code or message says the prompt is too long (also
                       when it arrives inside a stream)
    content_filtered   a content-filter code, ``finish_reason="content_filter"``, a refusal
    authentication     401/403: a bad or missing key, no permission (never retried)
    unavailable        404 (no such model), exhausted quota, no connection
    images_unsupported a 400/404/422 to a request with images whose message says the model
                       does not take images (no vision)
    internal           anything else: an unexpected 4xx, a 5xx whose body names a validation
                       error (the request is at fault, so a retry fails the same way), a
                       malformed response

Messages are *safe*: they never contain an API key (every message is passed through
:func:`redact`), the server's text is shortened and stripped of filesystem paths
(:func:`detail`), and authentication failures name the environment variable to fix instead of
echoing the server's text, which often quotes the key.
"""

from __future__ import annotations

import asyncio
import contextlib
import importlib
import os
import re
from collections.abc import AsyncIterator, Awaitable, Callable, Iterable
from typing import Generic, TypeVar

from reverie.core.redact import redact as redact_all, scrub
from reverie.errors import ModelError, ModelErrorKind

__all__ = [
    "ClientHolder",
    "auth_failed",
    "classify_api_error",
    "detail",
    "dropped",
    "key_source",
    "missing_key",
    "redact",
    "resolve_api_key",
    "text_or_none",
    "transport_errors",
]

_CONTEXT_MARKERS = (
    "context_length_exceeded",
    "context length",
    "context_length",
    "context window",
    "maximum context",
    "prompt is too long",
    "too many tokens",
    "reduce the length",
    "input is too long",
)
_FILTER_MARKERS = (
    "content_filter",
    "content_policy",
    "content management policy",
    "content filter",
    "safety system",
)
_TRANSIENT_TYPES = frozenset(
    {
        "overloaded_error",
        "rate_limit_error",
        "api_error",
        "server_error",
        "timeout_error",
        "rate_limit_exceeded",
        "requests",
        "tokens",
    }
)
_MAX_DETAIL = 200
_VALIDATION = re.compile(
    r"validation error|validationerror|field required|input should be|unprocessable"
    r"|extra inputs are not permitted|is not valid under any of the given schemas",
    re.IGNORECASE,
)
"""What a server says when the request's shape is wrong (pydantic, FastAPI, jsonschema): a 500
that says so is the request's fault, and the same request fails the same way again."""
_NO_VISION = re.compile(
    r"image.{0,60}\b(not|n't|only) (be )?supported|(not|n't|only) supports? .{0,40}image"
    r"|does(n't| not) support (image|vision)|no vision|vision is not"
)
"""What providers say when a model takes no images: OpenAI "image_url is only supported by
certain models", Ollama and compatible servers "this model does not support image input"."""


def classify_api_error(
    status: int | None,
    *,
    code: str | None,
    type_: str | None,
    message: str | None,
    images: bool = False,
) -> ModelErrorKind:
    """Classify a provider error by HTTP status, error code/type and message.

    ``status`` is ``None`` for errors that arrived inside a stream (no HTTP status of their own).
    The context/content checks come first because providers report both as a plain 400. A
    field that is not a string (a broken server's error body) is ignored. ``images``: the
    request carried images, so a refusal that says the model takes none is
    ``images_unsupported``.
    """
    code, type_, message = text_or_none(code), text_or_none(type_), text_or_none(message)
    markers = " ".join(part for part in (code, type_, message) if part).lower()
    if images and status in (None, 400, 404, 422) and _NO_VISION.search(markers):
        return "images_unsupported"
    if status in (None, 400, 413) and any(m in markers for m in _CONTEXT_MARKERS):
        return "context_overflow"
    if status == 413:
        # A request too large to accept is the same problem as too many tokens: shrink it.
        return "context_overflow"
    if status in (None, 400) and any(m in markers for m in _FILTER_MARKERS):
        return "content_filtered"
    if status in (401, 403):
        return "authentication"
    if status == 404 or code == "insufficient_quota":
        # No such model, no credit: retrying cannot help.
        return "unavailable"
    if status is not None and status >= 500 and _VALIDATION.search(markers):
        # llama-cpp-python answers a request it cannot validate with a 500: not transient.
        return "internal"
    if status is not None and (status in (408, 409, 425, 429) or status >= 500):
        return "transient"
    if status is None and (type_ in _TRANSIENT_TYPES or code in _TRANSIENT_TYPES):
        return "transient"
    return "internal"


def redact(text: str, secret: str | None) -> str:
    """Return ``text`` with every occurrence of ``secret`` replaced by ``***``."""
    if secret and len(secret) >= 4:
        return text.replace(secret, "***")
    return text


def text_or_none(value: object) -> str | None:
    """``value`` if it is a string, else ``None``: error bodies come from the server, untyped."""
    return value if isinstance(value, str) else None


def detail(message: str | None, secret: str | None, also: Iterable[str] = ()) -> str:
    """A short, redacted form of a provider's error message for our own message.

    ``secret`` (the key sent) and ``also`` (say, the endpoint URL's password) are masked, and so
    is the userinfo of any URL the server quoted back.
    """
    message = text_or_none(message)
    if not message:
        return ""
    # Upstream servers quote their install paths and whole validation dumps: a bounded summary.
    return scrub(redact_all(redact(message, secret), also), _MAX_DETAIL)


def transport_errors() -> tuple[type[BaseException], ...]:
    """The HTTP libraries' transport errors (``httpx`` and, if installed, ``httpx2``).

    openai 1.x lets a connection dropped mid-stream escape as a bare ``httpx``
    ``RemoteProtocolError`` (or ``ReadError``); newer SDKs wrap it. Both must end as a typed,
    retryable :class:`ModelError`.
    """
    found: list[type[BaseException]] = []
    for name in ("httpx", "httpx2"):
        try:
            module = importlib.import_module(name)
        except ImportError:
            continue
        error = getattr(module, "TransportError", None)
        if isinstance(error, type) and issubclass(error, BaseException):
            found.append(error)
    return tuple(found)


def dropped(model_name: str, exc: BaseException, *, timeout_s: float) -> ModelError:
    """The error for a connection that failed after the reply began (always ``transient``)."""
    if "timeout" in type(exc).__name__.lower():
        return ModelError(
            "transient", f"{model_name}: the reply stalled for {timeout_s:g}s mid-stream"
        )
    return ModelError(
        "transient",
        f"{model_name}: the connection dropped mid-stream ({type(exc).__name__}); "
        "the reply is incomplete",
    )


def auth_failed(model_name: str, status: int, key_source: str) -> ModelError:
    """The error for a 401/403: names where the key comes from, never the key or server text."""
    what = "authentication failed" if status == 401 else "permission denied"
    return ModelError("authentication", f"{model_name}: {what} (HTTP {status}): check {key_source}")


def missing_key(model_name: str, env_var: str) -> ModelError:
    """The error for a key environment variable that is unset or empty."""
    return ModelError(
        "unavailable", f"{model_name}: no API key: set {env_var} in the environment of this process"
    )


def resolve_api_key(
    model_name: str, *, api_key: str | None, api_key_env: str | None, placeholder: str
) -> str:
    """The key to send: the explicit one, else the env var's value, else ``placeholder``.

    ``api_key_env=None`` means the endpoint needs no key (a local server); the SDKs still want a
    non-empty string, so ``placeholder`` is sent. Called at the first request, not at
    construction, so building an agent never needs credentials.
    """
    if api_key:
        return api_key
    if api_key_env is None:
        return placeholder
    value = os.environ.get(api_key_env, "").strip()
    if not value:
        raise missing_key(model_name, api_key_env)
    return value


def key_source(api_key: str | None, api_key_env: str | None) -> str:
    """Where the key came from, for the 'check …' hint of an authentication failure."""
    if api_key:
        return "the api_key passed to the model" + (f" (or {api_key_env})" if api_key_env else "")
    if api_key_env is None:
        return "the endpoint's api_key_env setting (this endpoint was configured without a key)"
    return api_key_env


ClientT = TypeVar("ClientT")


class ClientHolder(Generic[ClientT]):
    """Owns a provider's SDK client and decides how long each one lives.

    A model that is *entered* (``async with model:``) keeps one client, and its connection pool,
    until it exits or :meth:`aclose` is called: the way to reuse connections. A model that is
    used without being entered gets a fresh client per request, closed when the request ends,
    so a model nobody closes never leaks sockets. A client is also tied to the event loop it was
    made on; a request from another loop (a second ``asyncio.run``) gets a per-request client.
    """

    def __init__(
        self, factory: Callable[[], ClientT], closer: Callable[[ClientT], Awaitable[object]]
    ) -> None:
        self._factory = factory
        self._closer = closer
        self._depth = 0
        self._client: ClientT | None = None
        self._loop: asyncio.AbstractEventLoop | None = None

    def enter(self) -> None:
        """Start keeping a client across requests (nested enters are counted)."""
        self._depth += 1

    async def exit(self) -> None:
        """Undo one :meth:`enter`; the last one closes the kept client."""
        self._depth = max(0, self._depth - 1)
        if self._depth == 0:
            await self.aclose()

    @contextlib.asynccontextmanager
    async def lease(self) -> AsyncIterator[ClientT]:
        """A client for one request (created on first use: this is where the key is read)."""
        loop = asyncio.get_running_loop()
        if self._client is not None and self._loop is loop:
            yield self._client
            return
        client = self._factory()
        if self._depth > 0 and self._client is None:
            self._client, self._loop = client, loop
            yield client
            return
        try:
            yield client
        finally:
            await self._closer(client)

    async def aclose(self) -> None:
        """Close the kept client, if any (one made on another loop is only forgotten)."""
        client, loop = self._client, self._loop
        self._client, self._loop = None, None
        if client is not None and loop is asyncio.get_running_loop():
            await self._closer(client)
