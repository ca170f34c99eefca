"""What every route shares: the runtime, the served agents, owned background tasks, and the
scope checks that make another owner's runs and gates look like they do not exist."""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncIterator, Coroutine, Iterator, Mapping
from typing import Any, TypeVar

import anyio
from sse_starlette import EventSourceResponse, ServerSentEvent

from reverie.core.scope import Scope
from reverie.errors import NotFoundError, ReverieError
from reverie.runtime.agent import Agent
from reverie.runtime.runtime import Runtime
from reverie.serve.errors import SHUTDOWN_REASON, APIError, Redactor
from reverie.store.base import GateRecord, RunRecord

__all__ = [
    "DEFAULT_SHUTDOWN_GRACE_S",
    "DISCONNECT_REASON",
    "SHUTDOWN_REASON",
    "SSE_PING_S",
    "STREAM_FAREWELL_S",
    "ServeContext",
    "TaskOwner",
]

log = logging.getLogger("reverie.serve")

SSE_PING_S = 15.0
"""Keep-alive comment interval on streams (proxies drop idle connections)."""

DEFAULT_SHUTDOWN_GRACE_S = 5.0
"""``[serve] shutdown_grace_s`` when unset."""

STREAM_FAREWELL_S = 3.0
"""After the grace, how long a streamed turn's stream has to send its closing error (its run
is cancelled first) before the stream is cut regardless."""

DISCONNECT_REASON = "client disconnected"
"""The cancel reason of a streamed turn whose client went away."""

T = TypeVar("T")


class TaskOwner:
    """Owns the server's background tasks (gate resolutions that resume runs).

    The one place the server creates tasks; :meth:`aclose` cancels and awaits what is left when
    the app shuts down, so no task outlives it.
    """

    def __init__(self) -> None:
        self._tasks: set[asyncio.Task[Any]] = set()

    def spawn(self, work: Coroutine[Any, Any, T], *, name: str) -> asyncio.Task[T]:
        """Run ``work`` in the background; failures are logged, never lost."""
        task = asyncio.get_running_loop().create_task(work, name=name)
        self._tasks.add(task)
        task.add_done_callback(self._finished)
        return task

    def _finished(self, task: asyncio.Task[Any]) -> None:
        self._tasks.discard(task)
        if task.cancelled():
            return
        exc = task.exception()
        if isinstance(exc, ReverieError):
            log.info("%s ended with %s: %s", task.get_name(), type(exc).__name__, exc)
        elif exc is not None:
            log.error("%s failed", task.get_name(), exc_info=exc)

    async def aclose(self) -> None:
        """Cancel the tasks still running and wait for them."""
        tasks = list(self._tasks)
        for task in tasks:
            task.cancel()
        with contextlib.suppress(Exception):
            await asyncio.gather(*tasks, return_exceptions=True)


class ServeContext:
    """The state behind one app created by :func:`reverie.serve.create_app`."""

    def __init__(
        self,
        runtime: Runtime,
        agents: Mapping[str, Agent],
        *,
        redact: Redactor | None = None,
        shutdown_grace_s: float = DEFAULT_SHUTDOWN_GRACE_S,
    ) -> None:
        self.rt = runtime
        self.shutdown_grace_s = shutdown_grace_s
        """How long open streams may go on once the server is stopping."""
        self.stopping = anyio.Event()
        """Set when the server began shutting down (a stream cut then is ``server shutdown``,
        not ``client disconnected``)."""
        self.agents = dict(agents)
        """Served agents by the name clients use (``model`` / ``agent``)."""
        self.tasks = TaskOwner()
        self.redact = redact or Redactor()
        """Masks secrets in every error message that leaves the server."""
        self.resolving = asyncio.Lock()
        """Held while a gate is checked and its resolution launched: a second resolution of the
        same gate in this server then sees it resolved and gets 409."""
        self._streamed: set[str] = set()
        """Runs whose turn is being streamed to a client right now."""
        self._cutter: asyncio.Task[None] | None = None

    @contextlib.contextmanager
    def streaming(self, run_id: str) -> Iterator[None]:
        """Hold ``run_id`` as a streamed turn while its stream is open.

        When the server stops and its streams' grace has passed, every turn still held is
        cancelled as ``server shutdown``: its stream then ends the way a failed turn's does,
        with an error the client's SDK raises (chat) or ``response.failed`` (Responses),
        rather than being cut with no word.
        """
        self._streamed.add(run_id)
        if self._cutter is None:
            self._cutter = self.tasks.spawn(self._cut_at_shutdown(), name="end streams at shutdown")
        try:
            yield
        finally:
            self._streamed.discard(run_id)

    async def _cut_at_shutdown(self) -> None:
        await self.stopping.wait()
        await anyio.sleep(self.shutdown_grace_s)
        for run_id in sorted(self._streamed):
            try:
                await self.rt.cancel(run_id, reason=SHUTDOWN_REASON)
            except ReverieError as exc:  # it ended meanwhile: its stream closes by itself
                log.debug("run %s was not cancelled at shutdown: %s", run_id, exc)

    def event_stream(
        self, events: AsyncIterator[ServerSentEvent], *, headers: Mapping[str, str] | None = None
    ) -> EventSourceResponse:
        """An SSE response that, on shutdown, may go on for the grace (a streamed turn: then its
        closing error, :data:`STREAM_FAREWELL_S` more) before it is cut."""
        return EventSourceResponse(
            events,
            headers=dict(headers or {}),
            ping=SSE_PING_S,
            sep="\n",
            shutdown_event=self.stopping,
            shutdown_grace_period=self.shutdown_grace_s + STREAM_FAREWELL_S,
        )

    def stop_reason(self) -> str:
        """Why a stream that ended early ended: the server stopping, or its client leaving."""
        return SHUTDOWN_REASON if self.stopping.is_set() else DISCONNECT_REASON

    def agent(self, name: str, *, param: str) -> Agent:
        """The served agent called ``name``, else a 404 naming the agents there are."""
        agent = self.agents.get(name)
        if agent is None:
            known = ", ".join(sorted(self.agents)) or "none"
            raise APIError(
                404,
                f"no agent named {name!r} is served here (agents: {known}); GET /v1/models "
                "lists them",
                code="model_not_found",
                param=param,
            )
        return agent

    async def owned_run(self, owner: Scope, run_id: str) -> RunRecord:
        """The run if it belongs to ``owner``; another owner's run is 404, as a missing one."""
        try:
            return await self.rt.runs.get(run_id, scope=owner)
        except NotFoundError:
            raise APIError(404, f"run {run_id} not found", code="run_not_found") from None

    async def owned_gate(self, owner: Scope, ref: str) -> GateRecord:
        """The gate if it belongs to ``owner``; otherwise 404."""
        try:
            return await self.rt.gates.get(ref, scope=owner)
        except NotFoundError:
            raise APIError(404, f"gate {ref} not found", code="gate_not_found") from None
