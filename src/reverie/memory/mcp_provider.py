"""``MCPMemory``: any memory system that speaks the memory-over-MCP contract (docs/memory.md).

Bound by configuration only — a server (``command=[...]`` over stdio, or ``url=...`` over
streamable HTTP), a credential (the *name* of an environment variable), tool names and bounds —
using the official ``mcp`` SDK through :class:`~reverie.capabilities.mcp.MCPToolset`.

The contract it enforces on the server (``docs/memory-over-mcp.md``):

- every call carries the trusted scope fields (``tenant``, ``user``, and ``agent``/``project``
  when set) from the host; the **query is the only model-influenced field**;
- results are **bounded before host budgeting**: at most ``max_rows`` rows are read and their
  text is cut so the total stays under ``max_bytes``;
- every row must carry scope fields **equal to the run's**; a row with missing or different
  fields is dropped and counted as a **security event** (logged without its content, and
  counted in :attr:`MCPMemory.security_events`);
- a transport failure, a timeout, an error result or a malformed response is
  ``Unavailable``, never ``Empty``; nothing raises into the run;
- a server that dies is restarted (the toolset heals, with backoff) and the next call recovers;
  a search whose connection is lost under it is re-run once (a read is safe to repeat), a
  recording is not (the server may have stored it);
- the credential is read from the environment when connecting, passed to the server (in its
  environment for stdio, as ``Authorization: Bearer …`` for HTTP) and never logged.
"""

from __future__ import annotations

import asyncio
import dataclasses
import json
import logging
import math
import os
import time
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any, Final
from urllib.parse import urlsplit

from reverie.core.depth import MAX_DEPTH, nesting_depth
from reverie.core.messages import Message
from reverie.core.scope import Scope
from reverie.errors import CapabilityError, UsageError
from reverie.memory.manifest import MemoryManifest, bundled_manifest
from reverie.memory.provider import (
    EMPTY,
    SESSION_ROLES,
    LaneResult,
    MemorySnippet,
    Snippets,
    Unavailable,
)
from reverie.memory.sanitize import truncate_utf8, utf8_len
from reverie.store.base import Store

if TYPE_CHECKING:
    from reverie.capabilities.mcp import MCPToolset

__all__ = ["MCPMemory", "scope_arguments"]

log = logging.getLogger("reverie.memory")

_MAX_TEXT_RESPONSE_BYTES: Final = 32 * 1024 * 1024
"""A text response larger than this is not even parsed (``Unavailable``)."""
_MAX_RECORD_MESSAGE_BYTES: Final = 16_000
"""Each message sent to ``record_tool`` is cut to this."""


def scope_arguments(scope: Scope) -> dict[str, str]:
    """The trusted scope fields of a call: ``tenant``, ``user``, ``agent``/``project`` if set."""
    args = {"tenant": scope.tenant, "user": scope.user}
    if scope.agent is not None:
        args["agent"] = scope.agent
    if scope.project is not None:
        args["project"] = scope.project
    return args


def _row_scope(row: Mapping[str, Any]) -> Scope | None:
    """The scope a row claims, or ``None`` when it lacks (valid) scope fields."""
    tenant, user = row.get("tenant"), row.get("user")
    agent, project = row.get("agent"), row.get("project")
    if not isinstance(tenant, str) or not isinstance(user, str) or not tenant or not user:
        return None
    if not (agent is None or isinstance(agent, str)):
        return None
    if not (project is None or isinstance(project, str)):
        return None
    return Scope(tenant=tenant, user=user, agent=agent or None, project=project or None)


def _rows_of(result: Any) -> list[Any] | None:
    """The rows of a search result (structured content, else JSON text), or ``None`` when it
    is malformed (not JSON, no rows, or nested deeper than
    :data:`~reverie.core.depth.MAX_DEPTH`)."""
    payload: Any = result.structured_content
    if payload is None:
        texts = [getattr(block, "text", None) for block in result.content]
        text = "".join(t for t in texts if isinstance(t, str))
        if not text.strip():
            return []  # an answer with no content: no rows
        if len(text) > _MAX_TEXT_RESPONSE_BYTES:
            return None
        try:
            payload = json.loads(text)
        except (ValueError, RecursionError):  # RecursionError: JSON nested past the parser
            return None
    if nesting_depth(payload, stop_after=MAX_DEPTH) > MAX_DEPTH:
        return None  # untrusted rows nested past the limit: malformed, never walked
    if isinstance(payload, Mapping):
        payload = payload.get("rows", payload.get("results"))
    return payload if isinstance(payload, list) else None


class MCPMemory:
    """A memory provider on a remote MCP server.

    Args:
        command: The server's command line, run over stdio (e.g. ``["reverie", "mcp-memory"]``).
        url: A streamable-HTTP endpoint (``http://host:port/mcp``). Exactly one of the two.
        credential_env: The name of an environment variable holding the server's credential.
        search_tool: The server's search tool (long-term lane and ``memory_search``).
        record_tool: The server's recording tool (``None``: turns are not recorded).
        timeout_s: Bound on each call.
        connect_timeout_s: Bound on connecting: starting the server, the handshake and the
            tool listing (at start-up and after a restart).
        max_rows: At most this many result rows are read from one search.
        max_bytes: At most this many bytes of row text are kept from one search.
        retry_after_s: After a failed first connection, calls answer ``Unavailable`` at once for
            this long before connecting again (so a dead server does not slow every turn). Once
            connected, a lost server is restarted by the toolset with its own backoff.

    Raises:
        UsageError: The options do not describe one server, or a bound is not positive.
    """

    def __init__(
        self,
        command: Sequence[str] | None = None,
        url: str | None = None,
        *,
        credential_env: str | None = None,
        search_tool: str = "memory_search",
        record_tool: str | None = "memory_add_session",
        timeout_s: float = 5.0,
        connect_timeout_s: float = 30.0,
        max_rows: int = 50,
        max_bytes: int = 64_000,
        retry_after_s: float = 30.0,
    ) -> None:
        if (command is None) == (url is None):
            raise UsageError("MCPMemory needs exactly one of command=[...] or url='...'")
        if command is not None and (isinstance(command, str) or not command):
            raise UsageError(
                "MCPMemory command must be a non-empty list, e.g. ['reverie', 'mcp-memory']"
            )
        if (
            not timeout_s > 0
            or not connect_timeout_s > 0
            or max_rows < 1
            or max_bytes < 1
            or retry_after_s < 0
        ):
            raise UsageError(
                "MCPMemory timeout_s, connect_timeout_s, max_rows and max_bytes must be positive"
            )
        if not search_tool:
            raise UsageError("MCPMemory needs a search_tool name")
        self._command = list(command) if command is not None else None
        self._url = url
        self._credential_env = credential_env
        self.search_tool = search_tool
        """The server's search tool."""
        self.record_tool = record_tool
        """The server's recording tool, if any."""
        self.timeout_s = timeout_s
        self.connect_timeout_s = connect_timeout_s
        self.max_rows = max_rows
        self.max_bytes = max_bytes
        self._retry_after_s = retry_after_s
        base = bundled_manifest("mcp.toml")
        lanes = base.lanes if record_tool else base.lanes - {"record_interaction"}
        self._manifest = dataclasses.replace(base, lanes=lanes)
        self._toolset: MCPToolset | None = None
        self._lock = asyncio.Lock()
        self._failed_at: float | None = None
        self._security_events = 0
        self._closed = False

    def __repr__(self) -> str:
        # Never the credential: only the server's label and the env var's name.
        return f"MCPMemory(server={self.name!r}, credential_env={self._credential_env!r})"

    @property
    def name(self) -> str:
        """A credential-free label of the server: its command or host."""
        if self._command:
            return os.path.basename(self._command[0])
        return urlsplit(self._url or "").hostname or "mcp"

    @property
    def manifest(self) -> MemoryManifest:
        """``manifests/mcp.toml``: long-term and recording lanes, the ``memory_search`` tool."""
        return self._manifest

    @property
    def security_events(self) -> int:
        """Rows dropped so far because their scope fields were missing or not the run's."""
        return self._security_events

    # ---------------------------------------------------------------- lifecycle
    async def bind(self, store: Store) -> None:
        """Connect now if the server answers; otherwise the first call retries (no error)."""
        self._closed = False
        try:
            await self._connected()
        except CapabilityError as exc:
            log.warning("memory provider %s: not connected yet: %s", self.name, exc)

    async def aclose(self) -> None:
        """Close the session and stop a stdio server."""
        async with self._lock:
            self._closed = True
            toolset, self._toolset = self._toolset, None
        if toolset is not None:
            await toolset.aclose()

    async def _connected(self) -> MCPToolset:
        """The toolset, connecting first if it never connected.

        Once connected, the toolset itself restarts a server that died (with backoff), so it is
        kept for the life of the provider.

        Raises:
            CapabilityError: kind ``unavailable``: cannot connect, or backing off after a
                failure, or closed.
        """
        from reverie.capabilities.mcp import MCPToolset

        async with self._lock:
            if self._closed:
                raise CapabilityError("unavailable", "the memory provider is closed")
            if self._toolset is not None:
                return self._toolset
            if (
                self._failed_at is not None
                and time.monotonic() - self._failed_at < self._retry_after_s
            ):
                raise CapabilityError("unavailable", "not connected (retrying later)")
            env: dict[str, str] | None = None
            headers: dict[str, str] | None = None
            if self._credential_env is not None:
                secret = os.environ.get(self._credential_env)
                if not secret:
                    self._failed_at = time.monotonic()
                    raise CapabilityError(
                        "unavailable",
                        f"environment variable {self._credential_env} (the credential) is not set",
                    )
                if self._command is not None:
                    env = {self._credential_env: secret}
                else:
                    headers = {"Authorization": f"Bearer {secret}"}
            toolset = MCPToolset(
                command=self._command,
                url=self._url,
                env=env,
                headers=headers,
                timeout_s=self.timeout_s,
                connect_timeout_s=self.connect_timeout_s,
            )
            try:
                await toolset.__aenter__()
            except CapabilityError:
                self._failed_at = time.monotonic()
                raise
            self._failed_at = None
            names = {t.remote_name for t in toolset.tools()}
            for wanted in (self.search_tool, self.record_tool):
                if wanted and wanted not in names:
                    log.warning("memory provider %s has no tool %r", self.name, wanted)
            self._toolset = toolset
            return toolset

    async def _call(
        self, tool: str, arguments: Mapping[str, Any], *, repeatable: bool = False
    ) -> Any:
        """One call, bounded by ``timeout_s``; any failure is a ``CapabilityError``.

        A ``repeatable`` call whose connection is lost under it is re-run once, on the server
        the toolset restarted (waiting for the restart within ``connect_timeout_s``).
        """
        from reverie.capabilities.mcp import is_connection_lost

        toolset = await self._connected()
        try:
            try:
                result = await self._bounded_call(toolset, tool, arguments)
            except Exception as exc:
                if not (repeatable and is_connection_lost(exc)):
                    raise
                log.info("memory provider %s: connection lost mid-call; re-running", self.name)
                result = await self._bounded_call(toolset, tool, arguments)
        except CapabilityError:
            raise
        except TimeoutError as exc:
            raise CapabilityError(
                "unavailable", f"{tool}: no answer within {self.timeout_s}s"
            ) from exc
        except Exception as exc:
            raw = getattr(exc, "message", None) or type(exc).__name__
            # The server's text may quote the credential back: masked before it goes anywhere.
            detail = toolset.redact(str(raw))
            raise CapabilityError("unavailable", f"{tool}: {detail}") from (
                exc if detail == raw else None
            )
        if getattr(result, "is_error", False):
            raise CapabilityError("unavailable", f"{tool}: the server reported an error")
        return result

    async def _bounded_call(
        self, toolset: MCPToolset, tool: str, arguments: Mapping[str, Any]
    ) -> Any:
        # The SDK bounds the call by timeout_s; this outer bound also covers waiting for a
        # restart attempt the toolset is making.
        async with asyncio.timeout(self.connect_timeout_s + self.timeout_s * 2):
            return await toolset.call_raw(tool, arguments)

    # ---------------------------------------------------------------- lanes
    async def profile_read(self, scope: Scope) -> LaneResult:
        """Not declared (no standing document over MCP)."""
        return EMPTY

    async def read_short_term(self, scope: Scope, thread_id: str) -> LaneResult:
        """Not declared."""
        return EMPTY

    async def read_long_term(self, scope: Scope, query: str, max_snippets: int) -> LaneResult:
        """Call ``search_tool`` with the scope and the query; bounded, scope-checked rows."""
        limit = max(1, min(max_snippets, self.max_rows))
        arguments = {**scope_arguments(scope), "query": query, "limit": limit}
        try:
            result = await self._call(self.search_tool, arguments, repeatable=True)
        except CapabilityError as exc:
            log.info("memory provider %s: search unavailable: %s", self.name, exc)
            return Unavailable(str(exc))
        rows = _rows_of(result)
        if rows is None:
            log.info("memory provider %s: malformed search response", self.name)
            return Unavailable(f"{self.search_tool}: malformed response")
        return self._bounded(rows, scope, limit)

    def _bounded(self, rows: list[Any], scope: Scope, limit: int) -> LaneResult:
        kept: list[MemorySnippet] = []
        used = 0
        foreign = malformed = 0
        for row in rows[: self.max_rows]:
            if not isinstance(row, Mapping) or not isinstance(row.get("text"), str):
                malformed += 1
                continue
            if _row_scope(row) != scope:
                foreign += 1
                continue
            if len(kept) >= limit or used >= self.max_bytes:
                continue  # keep counting foreign rows; keep no more text
            text = truncate_utf8(row["text"], self.max_bytes - used)
            used += utf8_len(text)
            score = row.get("score")
            kept.append(
                MemorySnippet(
                    text=text,
                    scope=scope,
                    source=f"mcp:{self.name}",
                    score=float(score)
                    if isinstance(score, int | float) and math.isfinite(score)
                    else None,
                )
            )
        if foreign:
            self._security_events += foreign
            # A security event: the server answered with rows of another (or no) scope.
            log.warning(
                "memory provider %s: dropped %d row(s) whose scope fields are missing or not "
                "the run's (security event)",
                self.name,
                foreign,
            )
        if malformed:
            log.info("memory provider %s: skipped %d malformed row(s)", self.name, malformed)
        return Snippets(kept) if kept else EMPTY

    async def record_interaction(self, scope: Scope, messages: Sequence[Message]) -> None:
        """Send the turn to ``record_tool`` with the scope.

        Raises:
            CapabilityError: kind ``unavailable`` when the server cannot be reached or fails.
        """
        if not self.record_tool:
            return
        payload = [
            {"role": m.role, "content": truncate_utf8(m.content, _MAX_RECORD_MESSAGE_BYTES)}
            for m in messages
            if m.role in SESSION_ROLES and m.content.strip()
        ]
        if not payload:
            return
        await self._call(self.record_tool, {**scope_arguments(scope), "messages": payload})
