"""What the SDK-backed providers share: key handling, client lifetime, naming."""

from __future__ import annotations

import contextlib
from abc import ABC, abstractmethod
from collections.abc import Iterable
from typing import Any, Generic, Self, cast

from reverie.core.redact import mask_url, mask_urls, split_userinfo, url_secrets
from reverie.errors import ModelError
from reverie.models.errors import ClientHolder, ClientT, resolve_api_key


def check_credentials(model: object) -> None:
    """Check that ``model`` (or the model it wraps, as Hermes does) has its API key.

    Models without credentials (scripted, local endpoints) pass.

    Raises:
        ModelError: ``unavailable``: the key's environment variable is unset or empty.
    """
    seen: set[int] = set()
    current: object | None = model
    while current is not None and id(current) not in seen:
        seen.add(id(current))
        check = getattr(current, "check_credentials", None)
        if callable(check):
            check()
            return
        current = getattr(current, "inner", None)


async def keep_clients(stack: contextlib.AsyncExitStack, models: Iterable[object]) -> None:
    """Enter each of ``models`` that is an async context manager on ``stack``, so that until
    the stack closes each keeps one SDK client, with its connection pool, for all its calls.

    A long-running process (``reverie serve``, ``reverie worker``, an app's lifespan) calls it
    for the models it serves. A model that is not entered builds a client per call (an HTTP
    client and a TLS context with the CA bundle loaded, ~1 MB) that lives in reference cycles,
    so only the cyclic garbage collector frees it, and a server's tuned collector runs its
    older generations rarely: memory grew with every turn. Spec strings (resolved elsewhere)
    and models without a context (scripted ones) are skipped; a model entered twice is
    counted, and closed when its last entry exits.
    """
    for model in models:
        if isinstance(model, str):
            continue
        if hasattr(model, "__aenter__") and hasattr(model, "__aexit__"):
            await stack.enter_async_context(
                cast(contextlib.AbstractAsyncContextManager[Any], model)
            )


class SDKModel(ABC, Generic[ClientT]):
    """Base of the providers that wrap an official SDK client.

    Subclasses set ``_placeholder_key`` and implement :meth:`_make_client`; they inherit the
    lifetime rules of :class:`ClientHolder`: entered (``async with model:``) one client is kept
    until exit, otherwise each request gets its own client, closed when the request ends.
    """

    _placeholder_key = "no-key-required"
    _prefix = "model"

    def __init__(
        self,
        model: str,
        *,
        base_url: str | None,
        api_key_env: str | None,
        api_key: str | None,
        timeout_s: float,
        name: str | None,
    ) -> None:
        self._model = model
        self._base_url = base_url
        self._api_key_env = api_key_env
        self._api_key = api_key
        self._timeout_s = timeout_s
        # A password in the endpoint URL never reaches a name, an error, a repr or a span.
        self._name = mask_urls(name or f"{self._prefix}:{model}")
        self._shown_url = mask_url(base_url) if base_url else None
        self._url_secrets = url_secrets(base_url)
        # The SDK client gets the bare URL plus the Basic header userinfo stood for, so the
        # HTTP client's own request log never shows the password.
        self._client_url: str | None = base_url
        basic: str | None = None
        if base_url:
            self._client_url, basic = split_userinfo(base_url)
        self._client_headers = {"Authorization": basic} if basic else None
        self._sent_key: str | None = None
        self._clients: ClientHolder[ClientT] = ClientHolder(self._new_client, self._close_client)

    @property
    def name(self) -> str:
        """A stable label for telemetry and price lookup, e.g. ``openai:gpt-4.1-mini``."""
        return self._name

    @property
    def model(self) -> str:
        """The provider's model id."""
        return self._model

    def __repr__(self) -> str:
        return f"{type(self).__name__}(name={self._name!r}, base_url={self._shown_url!r})"

    async def __aenter__(self) -> Self:
        """Keep one SDK client (and its connections) until exit."""
        self._clients.enter()
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self._clients.exit()

    async def aclose(self) -> None:
        """Close the kept SDK client and its connections (see :meth:`__aenter__`)."""
        await self._clients.aclose()

    def check_credentials(self) -> None:
        """Check, without any request, that the key this model would send is available.

        Raises:
            ModelError: ``unavailable``, naming the environment variable to set (never a value).
        """
        resolve_api_key(
            self._name,
            api_key=self._api_key,
            api_key_env=self._api_key_env,
            placeholder=self._placeholder_key,
        )

    def _new_client(self) -> ClientT:
        key = resolve_api_key(
            self._name,
            api_key=self._api_key,
            api_key_env=self._api_key_env,
            placeholder=self._placeholder_key,
        )
        self._sent_key = key
        return self._make_client(key)

    @staticmethod
    async def _close_client(client: Any) -> None:
        # Both SDKs' async clients have an awaitable close().
        await client.close()

    async def check_endpoint(self) -> None:
        """List the endpoint's models: proves it answers and accepts the key.

        Raises:
            ModelError: classified like a failed request (the key's value never appears).
        """
        try:
            async with self._clients.lease() as client:
                await cast(Any, client).models.list()
        except self._api_error() as exc:
            raise self._map_error(exc) from exc

    @abstractmethod
    def _api_error(self) -> type[Exception]:
        """The SDK's base class of API errors."""

    @abstractmethod
    def _map_error(self, exc: Any) -> ModelError:
        """Classify an SDK error per docs/loop.md (never echoing the key)."""

    @abstractmethod
    def _make_client(self, key: str) -> ClientT:
        """Build the SDK client (with ``max_retries=0``: our recovery strategy retries)."""
