"""MCP servers as toolsets (DESIGN §9.4), on the official ``mcp`` SDK.

``MCPToolset(command=[...])`` starts a server over stdio; ``MCPToolset(url=...)`` connects over
streamable HTTP. Inside ``async with``, :meth:`MCPToolset.tools` returns one :class:`MCPTool` per
server tool: a :class:`~reverie.capabilities.tool.Capability` like any ``@tool``.

Contracts:

* names are ``f"{prefix}_{name}"`` when a prefix is given (characters a model API would refuse
  become ``_``);
* ``annotations.readOnlyHint=true`` → effects ``{"read"}`` (safe for parallel); anything else
  → effects undeclared (exclusive); ``idempotentHint=true`` → idempotent;
* server failures never raise into the loop: a lost connection or a timeout is an
  ``unavailable`` outcome, an ``isError`` result a ``permanent`` one, rejected parameters
  ``input_invalid``. Failing to *connect* raises :class:`~reverie.errors.CapabilityError`
  (kind ``unavailable``) from ``__aenter__``, within ``timeout_s``.

The SDK's client lives in one background task owned by the toolset, opened in ``__aenter__``
and closed in ``__aexit__``. Its anyio task groups and cancel scopes are bound to that task, so
tool calls may come from any task (a parallel wave) and a dying server cannot cancel the caller.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import re
from collections.abc import Mapping
from types import TracebackType
from typing import Any, Self
from urllib.parse import urlsplit

from reverie.capabilities.context import ToolContext
from reverie.capabilities.output import DEFAULT_MAX_OUTPUT_BYTES, cap_output, serialize_output
from reverie.capabilities.schema import find_non_finite
from reverie.capabilities.tool import TOOL_NAME_PATTERN
from reverie.core.capability import CallCompleted, CallFailed, CallOutcome, CapabilityDescriptor
from reverie.errors import CapabilityError, MissingExtraError, UsageError

try:
    import httpx2
    import mcp_types
    from mcp import Client, StdioServerParameters
    from mcp.client import Transport
    from mcp.client.streamable_http import streamable_http_client
    from mcp.shared.exceptions import MCPError
except ImportError as exc:  # the tests simulate the extra's absence
    raise MissingExtraError("mcp", "MCP (toolsets and the mcp memory provider)") from exc

__all__ = ["MCPTool", "MCPToolset"]

logger = logging.getLogger(__name__)

_PREFIX_RE = re.compile(r"^[a-zA-Z0-9_-]{1,48}$")
_INVALID_NAME_CHARS = re.compile(r"[^a-zA-Z0-9_-]")
_MAX_LIST_PAGES = 100
"""A server whose tools/list never ends cannot hang the connect."""


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

    def __repr__(self) -> str:
        return f"MCPTool(name={self._descriptor.name!r}, server={self._toolset.name!r})"

    async def invoke(self, arguments: Mapping[str, Any], ctx: ToolContext) -> CallOutcome:
        """Call the tool on the server. Failures are outcomes; only cancellation propagates."""
        return await self._toolset.call_tool(self._remote_name, arguments)


class MCPToolset:
    """The tools of one MCP server. Use as ``async with MCPToolset(...) as ts: ts.tools()``."""

    def __init__(
        self,
        command: list[str] | None = None,
        url: str | None = None,
        *,
        prefix: str | None = None,
        env: Mapping[str, str] | None = None,
        timeout_s: float = 30.0,
        headers: Mapping[str, str] | None = None,
    ) -> None:
        """Describe the server; nothing starts until ``__aenter__``.

        Args:
            command: The server's command line, run over stdio (``[sys.executable, "srv.py"]``).
            url: A streamable-HTTP endpoint (``http://host/mcp``). Exactly one of ``command``
                and ``url``.
            prefix: Prepended to every tool name as ``f"{prefix}_{name}"``.
            env: Extra environment for a ``command`` server, over the SDK's safe defaults
                (PATH, HOME, …); the rest of this process's environment is not passed on.
            timeout_s: Bound on connecting (handshake and tool listing) and on each call.
            headers: Extra HTTP headers for a ``url`` server (e.g. ``Authorization``). They may
                carry credentials: they are sent, never logged or shown.

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
        if headers is not None and url is None:
            raise UsageError("MCPToolset headers= applies to url= servers only")
        if prefix is not None and not _PREFIX_RE.fullmatch(prefix):
            raise UsageError(f"invalid MCP tool prefix {prefix!r}: use a-z, A-Z, 0-9, '_', '-'")
        if not timeout_s > 0:
            raise UsageError("MCPToolset timeout_s must be positive")
        self._command = list(command) if command is not None else None
        self._url = url
        self._prefix = prefix
        self._env = dict(env) if env is not None else None
        self._headers = dict(headers) if headers is not None else None
        self._timeout_s = timeout_s
        self._max_output_bytes = DEFAULT_MAX_OUTPUT_BYTES
        self._client: Client | None = None
        self._tools: tuple[MCPTool, ...] = ()
        self._task: asyncio.Task[None] | None = None
        self._closing = asyncio.Event()

    @property
    def name(self) -> str:
        """A short, credential-free label for messages: the prefix, command or host."""
        if self._prefix:
            return self._prefix
        if self._command:
            return os.path.basename(self._command[0])
        return urlsplit(self._url or "").hostname or "mcp"

    def tools(self) -> list[MCPTool]:
        """The server's tools, as listed when the toolset was entered.

        Raises:
            UsageError: the toolset has not been entered.
        """
        if self._task is None:
            raise UsageError("enter the toolset first: async with MCPToolset(...) as ts")
        return list(self._tools)

    async def __aenter__(self) -> Self:
        """Start (or connect to) the server and list its tools.

        Raises:
            CapabilityError: kind ``unavailable``, when the server cannot be started or reached,
                or does not answer the handshake and tool listing within ``timeout_s``.
            UsageError: the toolset was already entered.
        """
        if self._task is not None:
            raise UsageError("an MCPToolset can be entered only once")
        ready: asyncio.Future[list[mcp_types.Tool]] = asyncio.get_running_loop().create_future()
        self._task = asyncio.create_task(
            self._hold_connection(ready), name=f"reverie-mcp-{self.name}"
        )
        try:
            listing = await ready
        except BaseException:
            if ready.cancelled() and not self._task.done():
                self._task.cancel()  # we were cancelled: do not wait out the handshake
            await self.aclose()
            raise
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
        """Close the session and stop the server process. Safe to call more than once."""
        self._closing.set()
        task = self._task
        if task is not None and not task.done():
            # Shielded: the SDK's shutdown (close stdin, wait, then kill the process tree) must
            # finish even if our caller is cancelled, or the server process would leak.
            await asyncio.shield(task)

    @property
    def connected(self) -> bool:
        """Whether the session with the server is up (entered and not lost)."""
        return self._client is not None

    async def call_raw(self, name: str, arguments: Mapping[str, Any]) -> mcp_types.CallToolResult:
        """Call the server tool ``name`` and return the SDK's result, unclassified.

        For callers that read the result themselves (the MCP memory provider).

        Raises:
            CapabilityError: kind ``unavailable`` when not connected.
            MCPError, TimeoutError, Exception: whatever the SDK raises for a failed call.
        """
        client = self._client
        if client is None:
            raise CapabilityError(
                "unavailable", f"MCP server {self.name!r}, tool {name!r}: not connected"
            )
        return await client.call_tool(name, dict(arguments), read_timeout_seconds=self._timeout_s)

    async def call_tool(self, name: str, arguments: Mapping[str, Any]) -> CallOutcome:
        """Call the server tool ``name`` (its remote name) and classify the result."""
        where = f"MCP server {self.name!r}, tool {name!r}"
        if self._client is None:
            return CallFailed(error_kind="unavailable", message=f"{where}: not connected")
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
        try:
            result = await self.call_raw(name, arguments)
        except CapabilityError as exc:
            return CallFailed(error_kind=exc.kind, message=str(exc))
        except MCPError as exc:
            if exc.code == mcp_types.INVALID_PARAMS:
                return CallFailed(error_kind="input_invalid", message=f"{where}: {exc.message}")
            if exc.code == mcp_types.REQUEST_TIMEOUT:
                return CallFailed(
                    error_kind="unavailable", message=f"{where}: timed out after {self._timeout_s}s"
                )
            return CallFailed(error_kind="unavailable", message=f"{where}: {exc.message}")
        except TimeoutError:
            return CallFailed(
                error_kind="unavailable", message=f"{where}: timed out after {self._timeout_s}s"
            )
        except Exception as exc:  # transport errors, malformed results: the server's fault
            return CallFailed(error_kind="unavailable", message=f"{where}: {_describe(exc)}")
        text = cap_output(_render_result(result), self._max_output_bytes)
        if result.is_error:
            return CallFailed(
                error_kind="permanent", message=f"{where}: {text or 'the tool reported an error'}"
            )
        return CallCompleted(output=text)

    # ------------------------------------------------------------------ connection task

    async def _make_client(self, stack: contextlib.AsyncExitStack) -> Client:
        server: StdioServerParameters | str | Transport
        if self._command is not None:
            server = StdioServerParameters(
                command=self._command[0], args=self._command[1:], env=self._env
            )
        else:
            assert self._url is not None
            server = self._url
            if self._headers is not None:
                # Our own HTTP client, to carry the headers; closed with the session.
                http = await stack.enter_async_context(
                    httpx2.AsyncClient(
                        headers=self._headers,
                        timeout=httpx2.Timeout(30.0, read=300.0),
                    )
                )
                server = streamable_http_client(self._url, http_client=http)
        return Client(server, read_timeout_seconds=self._timeout_s)

    async def _hold_connection(self, ready: asyncio.Future[list[mcp_types.Tool]]) -> None:
        """Own the SDK client from connect to close; report the tool listing via ``ready``."""
        try:
            async with contextlib.AsyncExitStack() as stack:
                async with asyncio.timeout(self._timeout_s):
                    client = await stack.enter_async_context(await self._make_client(stack))
                    listing = await _list_all_tools(client)
                if ready.done():  # the opener gave up meanwhile
                    return
                self._client = client
                ready.set_result(listing)
                await self._closing.wait()
        except Exception as exc:
            if not ready.done():
                error = CapabilityError(
                    "unavailable",
                    f"could not connect to MCP server {self.name!r}: "
                    + (
                        f"no answer within {self._timeout_s}s"
                        if isinstance(exc, TimeoutError)
                        else _describe(exc)
                    ),
                )
                error.__cause__ = exc
                ready.set_exception(error)
            else:
                logger.warning("MCP server %r: session ended with %s", self.name, _describe(exc))
        finally:
            self._client = None
            if not ready.done():
                ready.cancel()

    def _wrap_tools(self, listing: list[mcp_types.Tool]) -> tuple[MCPTool, ...]:
        wrapped: dict[str, MCPTool] = {}
        for remote in listing:
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
                idempotent=bool(annotations is not None and annotations.idempotent_hint),
                timeout_s=self._timeout_s,
            )
            wrapped[local] = MCPTool(self, remote.name, descriptor)
        return tuple(wrapped.values())


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


def _describe(exc: BaseException) -> str:
    """``"<Type>: <message>"`` of the first leaf of a (nested) exception group."""
    while isinstance(exc, BaseExceptionGroup) and exc.exceptions:
        exc = exc.exceptions[0]
    if isinstance(exc, MCPError):
        return exc.message
    message = str(exc)
    return f"{type(exc).__name__}: {message}" if message else type(exc).__name__
