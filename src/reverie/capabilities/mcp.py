"""MCP servers as toolsets (DESIGN §9.4), on the official ``mcp`` SDK.

``MCPToolset(command=[...])`` starts a server over stdio; ``MCPToolset(url=...)`` connects over
streamable HTTP. Inside ``async with``, :meth:`MCPToolset.tools` returns one :class:`MCPTool` per
server tool: a :class:`~reverie.capabilities.tool.Capability` like any ``@tool``.

Contracts:

* names are ``f"{prefix}_{name}"`` when a prefix is given (characters a model API would refuse
  become ``_``); ``allow_tools``/``deny_tools`` pick which of the server's tools are offered;
* ``annotations.readOnlyHint=true`` → effects ``{"read"}`` (safe for parallel) and idempotent
  (a read is safe to repeat, per the MCP spec); anything else → effects undeclared
  (exclusive); ``idempotentHint=true`` → idempotent;
* server failures never raise into the loop: a lost connection or a timeout is an
  ``unavailable`` outcome, an ``isError`` result a ``permanent`` one, rejected parameters
  ``input_invalid`` (a JSON-RPC ``-32602`` error, or an ``isError`` result carrying one, as
  TypeScript servers send). Failing to *connect* raises :class:`~reverie.errors.CapabilityError`
  (kind ``unavailable``) from ``__aenter__``, within ``connect_timeout_s``;
* connecting (start-up, handshake, tool listing) is bounded by ``connect_timeout_s``, each call
  by ``timeout_s``;
* the toolset heals: a lost session (a stdio server that exits, a call that finds the
  connection closed) makes :attr:`MCPToolset.connected` false at once and restarts the server
  in the background, with exponential backoff while it keeps failing. A call made during a
  restart attempt waits for it; a call made while backing off is ``unavailable`` at once. A
  call to an idempotent tool whose connection is lost under it is re-run once on the new
  session; any other such call is ``unavailable`` (the server may have acted on it).

The SDK's client lives in one background task per session, owned by the toolset. Its anyio task
groups and cancel scopes are bound to that task, so tool calls may come from any task (a
parallel wave) and a dying server cannot cancel the caller.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import logging
import os
import re
import sys
import time
from collections.abc import AsyncIterator, Callable, Collection, Mapping
from types import TracebackType
from typing import Any, Final, Self, TextIO
from urllib.parse import urlsplit

from reverie.capabilities.context import ToolContext
from reverie.capabilities.output import DEFAULT_MAX_OUTPUT_BYTES, cap_output, serialize_output
from reverie.capabilities.schema import find_non_finite
from reverie.capabilities.tool import TOOL_NAME_PATTERN
from reverie.core.capability import CallCompleted, CallFailed, CallOutcome, CapabilityDescriptor
from reverie.core.redact import redact, url_secrets
from reverie.errors import CapabilityError, MissingExtraError, UsageError

try:
    import anyio
    import httpx2
    import mcp_types
    from mcp import Client, StdioServerParameters
    from mcp.client import Transport
    from mcp.client.stdio import stdio_client
    from mcp.client.streamable_http import streamable_http_client
    from mcp.shared.exceptions import MCPError
except ImportError as exc:  # the tests simulate the extra's absence
    raise MissingExtraError("mcp", "MCP (toolsets and the mcp memory provider)") from exc

__all__ = ["MCPTool", "MCPToolset", "is_connection_lost"]

logger = logging.getLogger(__name__)

_PREFIX_RE = re.compile(r"^[a-zA-Z0-9_-]{1,48}$")
_INVALID_NAME_CHARS = re.compile(r"[^a-zA-Z0-9_-]")
_MAX_LIST_PAGES = 100
"""A server whose tools/list never ends cannot hang the connect."""
_INVALID_PARAMS_TEXT: Final = re.compile(
    rf"^\s*(MCP error {mcp_types.INVALID_PARAMS}\b|Input validation error\b)"
)
"""How TypeScript servers report rejected arguments: an ``isError`` result whose text is
``"MCP error -32602: Input validation error: …"`` instead of a JSON-RPC error."""
_TRANSPORT_ERRORS: Final = (
    OSError,
    anyio.ClosedResourceError,
    anyio.BrokenResourceError,
    httpx2.TransportError,
)
"""Exceptions of a call that mean the connection itself is gone (besides ``CONNECTION_CLOSED``)."""


class MCPTool:
    """One tool of an MCP server, as a capability."""

    def __init__(
        self, toolset: MCPToolset, remote_name: str, descriptor: CapabilityDescriptor
    ) -> None:
        self._toolset = toolset
        self._remote_name = remote_name
        self._descriptor = descriptor

    @property
    def descriptor(self) -> CapabilityDescriptor:
        """What the loop and the model know about this tool."""
        return self._descriptor

    @property
    def remote_name(self) -> str:
        """The tool's name on the server (before prefixing)."""
        return self._remote_name

    @property
    def server(self) -> str:
        """The credential-free name of the MCP server the tool is on."""
        return self._toolset.name

    @property
    def server_connected(self) -> bool:
        """Whether the tool's server has a session up now (the console's health column)."""
        return self._toolset.connected

    def __repr__(self) -> str:
        return f"MCPTool(name={self._descriptor.name!r}, server={self._toolset.name!r})"

    async def invoke(self, arguments: Mapping[str, Any], ctx: ToolContext) -> CallOutcome:
        """Call the tool on the server. Failures are outcomes; only cancellation propagates."""
        return await self._toolset.call_tool(
            self._remote_name, arguments, idempotent=self._descriptor.idempotent
        )


class MCPToolset:
    """The tools of one MCP server. Use as ``async with MCPToolset(...) as ts: ts.tools()``."""

    def __init__(
        self,
        command: list[str] | None = None,
        url: str | None = None,
        *,
        prefix: str | None = None,
        env: Mapping[str, str] | None = None,
        cwd: str | os.PathLike[str] | None = None,
        timeout_s: float = 30.0,
        connect_timeout_s: float = 60.0,
        headers: Mapping[str, str] | None = None,
        allow_tools: Collection[str] | None = None,
        deny_tools: Collection[str] = (),
        restart_backoff_s: float = 0.5,
        max_restart_backoff_s: float = 30.0,
        label: str | None = None,
    ) -> None:
        """Describe the server; nothing starts until ``__aenter__``.

        Args:
            command: The server's command line, run over stdio (``[sys.executable, "srv.py"]``).
            url: A streamable-HTTP endpoint (``http://host/mcp``). Exactly one of ``command``
                and ``url``.
            prefix: Prepended to every tool name as ``f"{prefix}_{name}"``.
            env: Extra environment for a ``command`` server, over the SDK's safe defaults
                (PATH, HOME, …); the rest of this process's environment is not passed on.
            cwd: The working directory of a ``command`` server (default: this process's).
            timeout_s: Bound on each call.
            connect_timeout_s: Bound on connecting: starting the server, the handshake and the
                tool listing (generous: a ``npx`` server may download itself first).
            headers: Extra HTTP headers for a ``url`` server (e.g. ``Authorization``). They may
                carry credentials: they are sent, never logged or shown.
            allow_tools: Offer only the server tools of these (remote) names; ``None``: all.
            deny_tools: Never offer the server tools of these (remote) names.
            restart_backoff_s: Wait before the second restart attempt in a row; doubled for each
                further failure, up to ``max_restart_backoff_s``. (The first restart after a
                loss is immediate.)
            max_restart_backoff_s: The longest wait between restart attempts.
            label: A credential-free name for messages (default: the prefix, command or host).

        Raises:
            UsageError: the options do not describe one server.
        """
        if (command is None) == (url is None):
            raise UsageError(
                "MCPToolset needs exactly one of command=[...] (stdio) or url='...' (HTTP)"
            )
        if command is not None and (isinstance(command, str) or not command):
            raise UsageError("MCPToolset command must be a non-empty list, e.g. ['uvx', 'srv']")
        if env is not None and command is None:
            raise UsageError("MCPToolset env= applies to command= servers only")
        if cwd is not None and command is None:
            raise UsageError("MCPToolset cwd= applies to command= servers only")
        if headers is not None and url is None:
            raise UsageError("MCPToolset headers= applies to url= servers only")
        if prefix is not None and not _PREFIX_RE.fullmatch(prefix):
            raise UsageError(f"invalid MCP tool prefix {prefix!r}: use a-z, A-Z, 0-9, '_', '-'")
        if not timeout_s > 0 or not connect_timeout_s > 0:
            raise UsageError("MCPToolset timeout_s and connect_timeout_s must be positive")
        if not restart_backoff_s >= 0 or not max_restart_backoff_s >= restart_backoff_s:
            raise UsageError(
                "MCPToolset restart_backoff_s must be >= 0 and <= max_restart_backoff_s"
            )
        if isinstance(allow_tools, str) or isinstance(deny_tools, str):
            raise UsageError("MCPToolset allow_tools and deny_tools are collections of names")
        self._command = list(command) if command is not None else None
        self._url = url
        self._prefix = prefix
        self._env = dict(env) if env is not None else None
        self._cwd = os.fspath(cwd) if cwd is not None else None
        self._headers = dict(headers) if headers is not None else None
        # Configured credentials, masked in any text that came from the server (it may quote
        # them back in an error) before that text is logged, shown to the model or stored.
        self._secrets = _credential_values(self._env, self._headers, url)
        self._timeout_s = timeout_s
        self._connect_timeout_s = connect_timeout_s
        self._allow = frozenset(allow_tools) if allow_tools is not None else None
        self._deny = frozenset(deny_tools)
        self._backoff_s = restart_backoff_s
        self._max_backoff_s = max_restart_backoff_s
        self._label = label
        self._max_output_bytes = DEFAULT_MAX_OUTPUT_BYTES
        self._tools: tuple[MCPTool, ...] = ()
        self._listed: tuple[str, ...] = ()
        self._entered = False
        self._closing = asyncio.Event()
        # The live session: its client, the task holding it, the event that ends it.
        self._client: Client | None = None
        self._session: asyncio.Task[None] | None = None
        self._wake: asyncio.Event | None = None
        # Healing: the restart task, the attempt in progress, when the next one is due.
        self._restart: asyncio.Task[None] | None = None
        self._attempt: asyncio.Future[None] | None = None
        self._next_attempt_at: float | None = None
        self._failures = 0
        self._restarts = 0

    @property
    def name(self) -> str:
        """A short, credential-free label for messages: the label, prefix, command or host."""
        if self._label:
            return self._label
        if self._prefix:
            return self._prefix
        if self._command:
            return os.path.basename(self._command[0])
        return urlsplit(self._url or "").hostname or "mcp"

    @property
    def timeout_s(self) -> float:
        """The bound on each call."""
        return self._timeout_s

    @property
    def connect_timeout_s(self) -> float:
        """The bound on connecting (start-up, handshake and tool listing)."""
        return self._connect_timeout_s

    def tools(self) -> list[MCPTool]:
        """The server's tools (after ``allow_tools``/``deny_tools``), as listed on entering.

        Raises:
            UsageError: the toolset has not been entered.
        """
        if not self._entered:
            raise UsageError("enter the toolset first: async with MCPToolset(...) as ts")
        return list(self._tools)

    @property
    def listed_tools(self) -> tuple[str, ...]:
        """Every tool name the server listed on entering (remote names, before filtering)."""
        return self._listed

    @property
    def connected(self) -> bool:
        """Whether a session with the server is up (entered, and not lost or closed)."""
        return self._client is not None

    @property
    def restarts(self) -> int:
        """How many times the toolset reconnected after losing its session."""
        return self._restarts

    async def __aenter__(self) -> Self:
        """Start (or connect to) the server and list its tools.

        Raises:
            CapabilityError: kind ``unavailable``, when the server cannot be started or reached,
                or does not answer the handshake and tool listing within ``connect_timeout_s``.
            UsageError: the toolset was already entered.
        """
        if self._entered:
            raise UsageError("an MCPToolset can be entered only once")
        self._entered = True
        try:
            listing = await self._open_session()
        except BaseException:
            self._closing.set()
            raise
        self._listed = tuple(tool.name for tool in listing)
        self._tools = self._wrap_tools(listing)
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.aclose()

    async def aclose(self) -> None:
        """Stop healing, close the session and stop the server process. Idempotent."""
        self._closing.set()
        # Shielded: the SDK's shutdown (close stdin, wait, then kill the process tree) must
        # finish even if our caller is cancelled, or the server process would leak.
        await asyncio.shield(self._shutdown())

    async def _shutdown(self) -> None:
        restart = self._restart
        if restart is not None and not restart.done():
            restart.cancel()
            await asyncio.wait([restart])
        self._client = None
        if self._wake is not None:
            self._wake.set()
        session = self._session
        if session is not None and not session.done():
            await asyncio.wait([session])
        self._resolve_attempt()

    async def call_raw(self, name: str, arguments: Mapping[str, Any]) -> mcp_types.CallToolResult:
        """Call the server tool ``name`` and return the SDK's result, unclassified.

        For callers that read the result themselves (the MCP memory provider). Waits for a
        restart in progress; a lost connection is noticed here and starts a restart.

        Raises:
            CapabilityError: kind ``unavailable`` when not connected (closed, or restarting).
            MCPError, TimeoutError, Exception: whatever the SDK raises for a failed call.
        """
        client, wake = await self._live_client()
        try:
            result = await client.call_tool(
                name, dict(arguments), read_timeout_seconds=self._timeout_s
            )
        except Exception as exc:
            if is_connection_lost(exc):
                self._lost(wake, _describe(exc))
            raise
        self._failures = 0  # the server answers: a later loss restarts without waiting
        return result

    def redact(self, text: str) -> str:
        """``text`` (from the server) with this toolset's configured credentials masked."""
        return redact(text, self._secrets)

    async def call_tool(
        self, name: str, arguments: Mapping[str, Any], *, idempotent: bool = False
    ) -> CallOutcome:
        """Call the server tool ``name`` (its remote name) and classify the result.

        Server text in the outcome has the configured credentials masked.

        Args:
            name: The tool's name on the server.
            arguments: The call's arguments (a JSON object).
            idempotent: The call is safe to repeat: when the connection is lost under it, it is
                re-run once on the restarted session instead of failing.
        """
        outcome = await self._call_tool(name, arguments, idempotent=idempotent)
        if isinstance(outcome, CallFailed):
            return dataclasses.replace(outcome, message=self.redact(outcome.message))
        if isinstance(outcome, CallCompleted):
            return dataclasses.replace(outcome, output=self.redact(outcome.output))
        return outcome

    async def _call_tool(
        self, name: str, arguments: Mapping[str, Any], *, idempotent: bool
    ) -> CallOutcome:
        where = f"MCP server {self.name!r}, tool {name!r}"
        if not isinstance(arguments, Mapping):
            return CallFailed(
                error_kind="input_invalid",
                message=f"{where}: arguments must be a JSON object, got {type(arguments).__name__}",
            )
        bad = find_non_finite(arguments)
        if bad is not None:
            return CallFailed(
                error_kind="input_invalid",
                message=f"{where}: argument {bad!r}: NaN and Infinity are not valid JSON numbers",
            )
        tries = 2 if idempotent else 1
        for attempt in range(1, tries + 1):
            try:
                result = await self.call_raw(name, arguments)
            except CapabilityError as exc:
                return CallFailed(error_kind=exc.kind, message=f"{where}: {exc}")
            except Exception as exc:
                if is_connection_lost(exc) and attempt < tries:
                    logger.info("%s: connection lost mid-call; re-running it (idempotent)", where)
                    continue
                if isinstance(exc, MCPError):
                    return _failed_call(where, exc, self._timeout_s)
                if isinstance(exc, TimeoutError):
                    return CallFailed(
                        error_kind="unavailable",
                        message=f"{where}: timed out after {self._timeout_s}s",
                    )
                # Transport errors, malformed results: the server's fault.
                return CallFailed(error_kind="unavailable", message=f"{where}: {_describe(exc)}")
            return _classified(where, result, self._max_output_bytes)
        raise AssertionError("unreachable: the last attempt always returns")  # pragma: no cover

    # ------------------------------------------------------------------ sessions

    async def _live_client(self) -> tuple[Client, asyncio.Event]:
        """The current session's client, waiting for a restart attempt in progress.

        Raises:
            CapabilityError: kind ``unavailable``: closed, never entered, or the server is down
                and the next restart attempt is not due yet.
        """
        client, wake = self._client, self._wake
        if client is not None and wake is not None:
            return client, wake
        if not self._entered or self._closing.is_set():
            raise CapabilityError("unavailable", "not connected")
        attempt = self._attempt
        if attempt is not None:
            await asyncio.shield(attempt)
            client, wake = self._client, self._wake
            if client is not None and wake is not None:
                return client, wake
        due = self._next_attempt_at
        if due is not None:
            wait = max(0.0, due - time.monotonic())
            raise CapabilityError(
                "unavailable", f"the server is down; the next restart attempt is in {wait:.1f}s"
            )
        raise CapabilityError("unavailable", "not connected (restarting)")

    async def _open_session(self) -> list[mcp_types.Tool]:
        """Start one session; its task holds it until it is lost or the toolset closes.

        Raises:
            CapabilityError: kind ``unavailable``: the server cannot be started or reached.
        """
        ready: asyncio.Future[list[mcp_types.Tool]] = asyncio.get_running_loop().create_future()
        wake = asyncio.Event()
        task = asyncio.create_task(
            self._hold_connection(ready, wake), name=f"reverie-mcp-{self.name}"
        )
        try:
            listing = await ready
        except BaseException:
            if ready.cancelled() and not task.done():
                task.cancel()  # we were cancelled: do not wait out the handshake
            wake.set()
            await asyncio.shield(asyncio.wait([task]))
            raise
        self._session = task
        return listing

    async def _hold_connection(
        self, ready: asyncio.Future[list[mcp_types.Tool]], wake: asyncio.Event
    ) -> None:
        """Own the SDK client from connect to close; report the tool listing via ``ready``."""
        live = False
        try:
            async with contextlib.AsyncExitStack() as stack:
                async with asyncio.timeout(self._connect_timeout_s):
                    client = await stack.enter_async_context(
                        await self._make_client(stack, lambda: self._lost(wake, "it exited"))
                    )
                    listing = await _list_all_tools(client)
                if ready.done():  # the opener gave up meanwhile
                    return
                self._client, self._wake, live = client, wake, True
                ready.set_result(listing)
                await wake.wait()
        except Exception as exc:
            if not ready.done():
                described = _describe(exc)
                shown = self.redact(described)
                error = CapabilityError(
                    "unavailable",
                    f"could not connect to MCP server {self.name!r}: "
                    + (
                        f"no answer within {self._connect_timeout_s}s"
                        if isinstance(exc, TimeoutError)
                        else shown
                    ),
                )
                # The cause keeps the server's raw text: dropped when it quoted a credential.
                error.__cause__ = exc if shown == described else None
                error.__suppress_context__ = shown != described
                ready.set_exception(error)
            else:
                logger.warning(
                    "MCP server %r: session ended with %s", self.name, self.redact(_describe(exc))
                )
        finally:
            if live:
                self._lost(wake, "its session ended")
            if not ready.done():
                ready.cancel()

    def _lost(self, wake: asyncio.Event, why: str) -> None:
        """The session ``wake`` ends is gone: drop it and restart (unless closing or stale)."""
        wake.set()
        if self._wake is not wake or self._client is None or self._closing.is_set():
            return  # an old session, one already handled, or our own shutdown
        self._client = None
        self._failures += 1
        logger.warning(
            "MCP server %r: connection lost (%s); restarting it", self.name, self.redact(why)
        )
        self._attempt = asyncio.get_running_loop().create_future()
        self._restart = asyncio.create_task(
            self._restart_loop(self._session), name=f"reverie-mcp-restart-{self.name}"
        )

    async def _restart_loop(self, old: asyncio.Task[None] | None) -> None:
        """Reconnect until it works or the toolset closes, backing off while it fails."""
        try:
            if old is not None:
                await asyncio.wait([old])  # the old process is stopped before a new one starts
            while not self._closing.is_set():
                delay = self._delay()
                if delay > 0:
                    self._resolve_attempt()
                    self._next_attempt_at = time.monotonic() + delay
                    with contextlib.suppress(TimeoutError):
                        async with asyncio.timeout(delay):
                            await self._closing.wait()
                    self._next_attempt_at = None
                    if self._closing.is_set():
                        break
                    self._attempt = asyncio.get_running_loop().create_future()
                try:
                    listing = await self._open_session()
                except CapabilityError as exc:
                    self._failures += 1
                    logger.warning("MCP server %r: restart failed: %s", self.name, exc)
                    continue
                self._restarts += 1
                names = tuple(tool.name for tool in listing)
                if set(names) != set(self._listed):
                    logger.warning(
                        "MCP server %r lists other tools since its restart; keeping the tools "
                        "listed at start-up",
                        self.name,
                    )
                logger.info("MCP server %r: restarted", self.name)
                return
        finally:
            self._next_attempt_at = None
            self._resolve_attempt()

    def _delay(self) -> float:
        """The wait before the next attempt: none after one failure, then doubling."""
        if self._failures <= 1:
            return 0.0
        return float(min(self._backoff_s * 2 ** (self._failures - 2), self._max_backoff_s))

    def _resolve_attempt(self) -> None:
        attempt, self._attempt = self._attempt, None
        if attempt is not None and not attempt.done():
            attempt.set_result(None)

    async def _make_client(
        self, stack: contextlib.AsyncExitStack, on_end: Callable[[], None]
    ) -> Client:
        transport: Transport
        if self._command is not None:
            transport = stdio_client(
                StdioServerParameters(
                    command=self._command[0], args=self._command[1:], env=self._env, cwd=self._cwd
                ),
                errlog=_server_errlog(),
            )
        else:
            assert self._url is not None
            http: httpx2.AsyncClient | None = None
            if self._headers is not None:
                # Our own HTTP client, to carry the headers; closed with the session.
                http = await stack.enter_async_context(
                    httpx2.AsyncClient(
                        headers=self._headers,
                        timeout=httpx2.Timeout(30.0, read=300.0),
                    )
                )
            transport = streamable_http_client(self._url, http_client=http)
        return Client(_watched(transport, on_end), read_timeout_seconds=self._timeout_s)

    def _wrap_tools(self, listing: list[mcp_types.Tool]) -> tuple[MCPTool, ...]:
        wrapped: dict[str, MCPTool] = {}
        offered = {tool.name for tool in listing}
        for missing in sorted((self._allow or frozenset()) - offered):
            logger.warning(
                "MCP server %r has no tool %r (named in allow_tools)", self.name, missing
            )
        for remote in listing:
            if (self._allow is not None and remote.name not in self._allow) or (
                remote.name in self._deny
            ):
                continue
            local = _INVALID_NAME_CHARS.sub("_", remote.name)
            if self._prefix:
                local = f"{self._prefix}_{local}"
            if not TOOL_NAME_PATTERN.fullmatch(local) or local in wrapped:
                logger.warning(
                    "MCP server %r: skipping tool %r (name %r is too long, empty or taken)",
                    self.name,
                    remote.name,
                    local,
                )
                continue
            annotations = remote.annotations
            read_only = bool(annotations is not None and annotations.read_only_hint)
            descriptor = CapabilityDescriptor(
                name=local,
                description=remote.description or remote.title or "",
                parameters=_object_schema(remote.input_schema),
                effects=frozenset({"read"}) if read_only else None,
                # A read is safe to repeat (MCP spec: idempotentHint is meaningful only when
                # readOnlyHint is false), so read-only tools are idempotent.
                idempotent=read_only
                or bool(annotations is not None and annotations.idempotent_hint),
                timeout_s=self._timeout_s,
            )
            wrapped[local] = MCPTool(self, remote.name, descriptor)
        return tuple(wrapped.values())


def _server_errlog() -> TextIO:
    """Where a stdio server's stderr goes: ours, or the process's real one when ours is not a
    file (a test runner's capture, a notebook), since the child needs a file descriptor."""
    for stream in (sys.stderr, sys.__stderr__):
        try:
            if stream is not None:
                stream.fileno()
                return stream
        except (AttributeError, OSError, ValueError):
            continue
    raise CapabilityError("unavailable", "no stderr to give a stdio MCP server")


def is_connection_lost(exc: BaseException) -> bool:
    """Whether a call failed because the connection itself is gone (not the call)."""
    if isinstance(exc, MCPError):
        return exc.code == mcp_types.CONNECTION_CLOSED
    # A timed-out call (TimeoutError is an OSError) leaves the session up.
    return isinstance(exc, _TRANSPORT_ERRORS) and not isinstance(exc, TimeoutError)


class _WatchedReadStream:
    """A transport's read stream that reports its end (the server went away)."""

    def __init__(self, inner: Any, on_end: Callable[[], None]) -> None:
        self._inner = inner
        self._on_end = on_end

    @property
    def last_context(self) -> Any:
        """The sender's context of the last item, as the SDK's own streams expose it."""
        return getattr(self._inner, "last_context", None)

    async def receive(self) -> Any:
        try:
            return await self._inner.receive()
        except (anyio.EndOfStream, anyio.ClosedResourceError):
            self._on_end()
            raise

    async def aclose(self) -> None:
        await self._inner.aclose()

    def __aiter__(self) -> Self:
        return self

    async def __anext__(self) -> Any:
        try:
            return await self._inner.__anext__()
        except StopAsyncIteration:
            self._on_end()
            raise

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.aclose()


@contextlib.asynccontextmanager
async def _watched(transport: Transport, on_end: Callable[[], None]) -> AsyncIterator[Any]:
    """``transport`` with its read stream watched: its end calls ``on_end``."""
    async with transport as (read, write):
        yield _WatchedReadStream(read, on_end), write


def _failed_call(where: str, exc: MCPError, timeout_s: float) -> CallFailed:
    if exc.code == mcp_types.INVALID_PARAMS:
        return CallFailed(error_kind="input_invalid", message=f"{where}: {exc.message}")
    if exc.code == mcp_types.REQUEST_TIMEOUT:
        return CallFailed(
            error_kind="unavailable", message=f"{where}: timed out after {timeout_s}s"
        )
    return CallFailed(error_kind="unavailable", message=f"{where}: {exc.message}")


def _classified(where: str, result: mcp_types.CallToolResult, max_bytes: int) -> CallOutcome:
    text = cap_output(_render_result(result), max_bytes)
    if not result.is_error:
        return CallCompleted(output=text)
    if _INVALID_PARAMS_TEXT.match(text):
        return CallFailed(error_kind="input_invalid", message=f"{where}: {text}")
    return CallFailed(
        error_kind="permanent", message=f"{where}: {text or 'the tool reported an error'}"
    )


async def _list_all_tools(client: Client) -> list[mcp_types.Tool]:
    tools: list[mcp_types.Tool] = []
    cursor: str | None = None
    for _ in range(_MAX_LIST_PAGES):
        page = await client.list_tools(cursor=cursor)
        tools.extend(page.tools)
        cursor = page.next_cursor
        if cursor is None:
            break
    return tools


def _object_schema(schema: Mapping[str, Any] | None) -> dict[str, Any]:
    """The server's input schema, made a JSON object schema if it is not one already."""
    out = dict(schema or {})
    out.setdefault("type", "object")
    out.setdefault("properties", {})
    return out


def _render_result(result: mcp_types.CallToolResult) -> str:
    """The text of a tool result: text blocks joined by newlines, placeholders for media."""
    parts: list[str] = []
    for block in result.content:
        if isinstance(block, mcp_types.TextContent):
            parts.append(block.text)
        elif isinstance(block, mcp_types.ImageContent | mcp_types.AudioContent):
            parts.append(f"[{block.type}: {block.mime_type}, {len(block.data)} base64 chars]")
        elif isinstance(block, mcp_types.ResourceLink):
            parts.append(f"[resource link: {block.uri}]")
        elif isinstance(block, mcp_types.EmbeddedResource):
            resource = block.resource
            if isinstance(resource, mcp_types.TextResourceContents):
                parts.append(resource.text)
            else:
                parts.append(f"[resource: {resource.uri} ({resource.mime_type}), binary]")
    if not parts and result.structured_content is not None:
        return serialize_output(result.structured_content)
    return "\n".join(parts)


def _credential_values(
    env: Mapping[str, str] | None, headers: Mapping[str, str] | None, url: str | None
) -> tuple[str, ...]:
    """The secret values a toolset was configured with: env and header values, a bearer
    token without its scheme, and a password in the URL (env values under 8 characters are
    taken for settings, not credentials)."""
    # Short env values are settings ("1", "info"), not credentials: masking them would garble.
    values = [v for v in (env or {}).values() if len(v) >= 8]
    for value in (headers or {}).values():
        values.append(value)
        scheme, _, token = value.partition(" ")
        if token and scheme.lower() in ("bearer", "basic", "token"):
            values.append(token)
    return (*values, *url_secrets(url))


def _describe(exc: BaseException) -> str:
    """``"<Type>: <message>"`` of the first leaf of a (nested) exception group."""
    while isinstance(exc, BaseExceptionGroup) and exc.exceptions:
        exc = exc.exceptions[0]
    if isinstance(exc, MCPError):
        return exc.message
    message = str(exc)
    return f"{type(exc).__name__}: {message}" if message else type(exc).__name__
