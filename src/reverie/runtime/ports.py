"""What the runtime's sub-services may ask of it: narrow interfaces instead of the Runtime.

Subagent calls, unbound turns, curation passes, queue dispatch and run handles start, resume and
cancel runs through :class:`Runner` (the public methods :class:`~reverie.runtime.Runtime` has), and
a handle steers its run through :class:`RunControl`. Anything else a service needs (the agent
directory, the loop families, the task spawner) it is given on its own when it is built.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any, Protocol

from reverie.core.vocabulary import ThreadPolicy

if TYPE_CHECKING:
    from reverie.core.content import ContentPart, UserContent
    from reverie.core.messages import Message
    from reverie.core.scope import Scope
    from reverie.core.transcript import InputKind
    from reverie.runtime.agent import Agent
    from reverie.runtime.handle import GracefulStopReason, RunHandle
    from reverie.runtime.result import RunResult
    from reverie.store.base import Store

__all__ = ["RunControl", "Runner", "ThreadPolicy"]


class RunControl(Protocol):
    """Steering, stopping and cancelling a run (what a :class:`RunHandle` does)."""

    async def send_input(
        self, run_id: str, kind: InputKind, text: UserContent, *, input_id: str | None = None
    ) -> str:
        """Queue a steering or follow-up message."""
        ...

    async def request_graceful_stop(self, run_id: str, reason: GracefulStopReason) -> None:
        """Ask a run to finish through the finalizer."""
        ...

    async def cancel(self, run_id: str, *, reason: str = "cancelled") -> RunResult | None:
        """Cancel a run."""
        ...


class Runner(RunControl, Protocol):
    """Starting, resuming and reading runs, and the store they live in."""

    @property
    def store(self) -> Store:
        """The runtime's store."""
        ...

    async def start(
        self,
        agent: Agent,
        message: str | Sequence[ContentPart | Message],
        *,
        scope: Scope,
        thread_id: str | None = None,
        profile: str = "interactive",
        has_actor: bool = True,
        idempotency_key: str | None = None,
        thread_policy: ThreadPolicy | None = None,
        meta: Mapping[str, Any] | None = None,
        pin: bool = False,
    ) -> RunHandle:
        """Start a turn; a handle at once."""
        ...

    async def resume(self, run_id: str) -> RunResult:
        """Continue a run from its last checkpoint."""
        ...

    async def recover(self) -> list[RunResult]:
        """Resume every run whose worker died."""
        ...

    async def get_result(self, run_id: str) -> RunResult:
        """The stored result of a run that ended or blocked."""
        ...
