"""The curation hook and passes: memory that tidies itself, under hard bounds (docs/memory.md).

:class:`Curator` is what a runtime holds when its memory provider declares an ``after_turn``
curation pass. With ``curation_interval_turns = N`` it registers the builtin ``after_turn``
hook :data:`~reverie.memory.curation.CURATION_HOOK_NAME`, which

1. counts each owner's (tenant, user) completed interactive turns in a bounded LRU
   (:class:`~reverie.memory.curation.TurnCounter`) — failed, cancelled, blocked turns do not
   count, and the applier never fires ``after_turn`` for unbound, actorless or
   scheduled-trigger runs, so a pass can never count towards (or trigger) another pass;
2. on every Nth submits one unbound structured pass through ``rt.unbound.submit`` and returns
   at once — the user's turn never waits for it. The pass acts as the owner (the triggering
   run's scope), sees only the manifest's declared memory tools (guarded by a
   :class:`~reverie.memory.curation.PassGuard`: one write, conditional on the version read)
   plus ``structured_result``, runs under :func:`~reverie.memory.curation.pass_limits`, uses the
   triggering agent's model unless ``curation_model`` names another, and is keyed by
   ``memory-curation-{tenant}-{user}-{triggering_run_id}``;
3. when the pass ends (in a task the runtime owns), keeps its record and report with
   ``save_memory_pass`` — failed passes too, so every pass is listable.

Failures of the hook and of a pass are logged at debug and never affect the user's turn.
Without an interval the hook is never registered; ``rt.memory.curate(scope)`` still runs a pass
on demand when the provider declares one.

Counts live in this process's bounded LRU. When an owner is not in it (a new process, as with
one-shot ``reverie run`` commands, or an owner evicted earlier), their count is seeded from the
store: their completed interactive turns since their latest pass run, newest first and bounded
— one query per owner newly seen.

A pass survives the process that submitted it: its tools come by name from the first-party
toolset :data:`PASS_TOOLSET` (the guarded memory tools; the guard's state is rebuilt from the
pass's own transcript, so a resume never grants a second write), its model is kept as a spec,
and its record is written by the finisher :data:`PASS_FINISHER` in whichever process ends the
run, just before its terminal status (:func:`record_pass`). ``Runtime.recover()`` in a new
process resumes an interrupted pass, or ends it ``Failed(not_resumable)`` — recorded too.
"""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import Callable, Coroutine, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Final

from reverie.core.exits import Cancelled, Completed, Failed, LoopExit
from reverie.core.ids import new_id
from reverie.core.scope import Scope
from reverie.errors import UsageError
from reverie.hooks import AfterTurnContext, HookRegistry
from reverie.memory.curation import (
    CURATION_HOOK_NAME,
    DEFAULT_MAX_OWNERS,
    PASS_OPENING,
    REPORT_NAME,
    REPORT_SCHEMA,
    PassGuard,
    TurnCounter,
    check_interval,
    curation_op,
    load_pass_prompt,
    pass_id,
    pass_instructions,
    pass_limits,
    pass_prefix,
    pass_report,
)
from reverie.memory.manifest import ScheduledOp
from reverie.memory.native import STANDING_DOCUMENT
from reverie.memory.service import MemoryService
from reverie.models.base import Model
from reverie.runtime.applier import INTERACTIVE_PROFILES
from reverie.runtime.structured import OutputContract
from reverie.runtime.telemetry import PassSpan
from reverie.store.base import RunRecord, Store
from reverie.store.documents import DocumentStore, MemoryPassRecord

if TYPE_CHECKING:
    from reverie.runtime.after_turn import AfterTurnWork
    from reverie.runtime.agent import Agent
    from reverie.runtime.agents import AgentDirectory
    from reverie.runtime.telemetry import Telemetry
    from reverie.runtime.unbound import UnboundTurnService

__all__ = [
    "PASS_FINISHER",
    "PASS_TOOLSET",
    "CurationHost",
    "Curator",
    "curator_for",
    "record_pass",
]

PASS_TOOLSET: Final = "memory_curation"
"""The first-party toolset of a pass: the manifest's memory tools behind a :class:`PassGuard`."""
MAX_SCOPES_PER_PASS: Final = 16
"""Scopes of one owner a due turn curates at most (one pass each)."""
PASS_FINISHER: Final = "memory_curation"
"""The first-party finisher that keeps a pass's record (:func:`record_pass`)."""

log = logging.getLogger("reverie.memory.curation")

REPORT_CONTRACT = OutputContract.json_schema(REPORT_NAME, REPORT_SCHEMA)
"""The output contract of every pass."""


@dataclass(frozen=True, slots=True)
class CurationHost:
    """What curation uses of its runtime, and nothing else."""

    store: Store
    unbound: UnboundTurnService
    """Runs the passes (unbound structured turns)."""
    agents: AgentDirectory
    """The agent whose turn made a pass due lends its model."""
    telemetry: Telemetry
    after_turn: AfterTurnWork
    """Drained before waiting for passes: a turn's hook may still be submitting one."""
    spawn: Callable[[Coroutine[Any, Any, None]], asyncio.Task[None]]
    """The runtime's task spawner (it owns and awaits the task on close)."""


class Curator:
    """Curation for one runtime: the after-turn counter and the passes it submits.

    Build it with :func:`curator_for`; the runtime calls :meth:`open` once it is open.

    Args:
        host: What curation uses of its runtime (its unbound service runs the passes).
        service: The runtime's memory service (provider and memory tools).
        op: The provider's ``after_turn`` scheduled op.
        interval: Every Nth completed turn of an owner (``None``: no hook, on demand only).
        model: The model of every pass (``curation_model``); ``None`` uses the model of the
            agent whose turn made the pass due.
        max_owners: Owners whose counts are kept (the counter's bound).
    """

    def __init__(
        self,
        host: CurationHost,
        service: MemoryService,
        op: ScheduledOp,
        *,
        interval: int | None,
        model: Model | str | None = None,
        max_owners: int = DEFAULT_MAX_OWNERS,
    ) -> None:
        self._host = host
        self._service = service
        self.op = op
        self.interval = interval
        self.model = model
        self.counter = TurnCounter(interval or op.interval_turns, max_owners=max_owners)
        """Completed turns per owner since their last pass."""
        self._prompt: str | None = None
        if interval is not None:
            self._load_prompt()  # enabled: a missing prompt is a start-up error, not a pass error
        self._inflight: dict[str, asyncio.Future[MemoryPassRecord]] = {}
        # Enough rows to find N turns among some failed, unbound and scheduled runs.
        self._history_rows = min(4 * self.counter.interval + 16, 1_000)
        host.unbound.register_toolset(PASS_TOOLSET, self._pass_tools)

    async def _pass_tools(self, run: RunRecord, names: Sequence[str]) -> list[Any]:
        """The guarded tools of one pass run (in any process, on every segment)."""
        store = self._host.store

        async def transcript() -> list[Any]:
            return [r for r in await store.thread_items(run.thread_id) if r.run_id == run.run_id]

        return self._service.pass_tools(names, PassGuard(load=transcript))

    def _load_prompt(self) -> str:
        if self._prompt is None:
            manifest = self._service.provider.manifest
            self._prompt = load_pass_prompt(
                self.op, provider=manifest.name, base_dir=manifest.base_dir
            )
        return self._prompt

    def open(self, hooks: HookRegistry) -> None:
        """Register the builtin ``after_turn`` hook (only when an interval is set)."""
        if self.interval is not None and CURATION_HOOK_NAME not in hooks:
            # Telemetry phase, after the recording hook: it observes, it never decides.
            hooks.register_builtin(
                "after_turn",
                self.after_turn,
                name=CURATION_HOOK_NAME,
                phase="telemetry",
                priority=10,
            )

    # ------------------------------------------------------------------------------ the hook
    async def after_turn(self, ctx: AfterTurnContext) -> None:
        """Count a completed interactive turn; on every Nth, submit a pass. Never raises."""
        try:
            # The applier fires after_turn only for interactive turns with a human actor;
            # checked again here so nothing but a user's completed turn is ever counted.
            if not ctx.completed or ctx.profile not in INTERACTIVE_PROFILES:
                return
            if not await self._due(ctx):
                return
            store = self._host.store
            # The turn's own scope, and every other scope of the owner (another agent or
            # project) whose MEMORY.md changed since that scope's last pass.
            scopes = [ctx.scope]
            if isinstance(store, DocumentStore):
                changed = await store.changed_scopes(
                    Scope(tenant=ctx.scope.tenant, user=ctx.scope.user),
                    STANDING_DOCUMENT,
                    limit=MAX_SCOPES_PER_PASS,
                )
                scopes += [s for s in changed if s != ctx.scope][: MAX_SCOPES_PER_PASS - 1]
            agent: Agent | None = None
            if self.model is None:
                run = await self._host.store.get_run(ctx.run_id)
                agent = self._host.agents.named(run.agent_name)
                if agent is None:
                    log.debug("curation: agent of run %s is not registered; no pass", ctx.run_id)
                    return
            for scope in scopes:
                await self.submit(scope, trigger=ctx.run_id, agent=agent)
        except Exception as exc:
            log.debug(
                "curation: submitting a pass after run %s failed (%s); the turn is unaffected",
                ctx.run_id,
                type(exc).__name__,
            )

    async def _due(self, ctx: AfterTurnContext) -> bool:
        """Count the turn; whether a pass is due. In the store when it keeps memory (one
        atomic increment: exact across processes and workers), else in this process."""
        store = self._host.store
        owner = Scope(tenant=ctx.scope.tenant, user=ctx.scope.user)
        if isinstance(store, DocumentStore):
            return await store.count_turn(owner, self.counter.interval)
        key = (owner.tenant, owner.user)
        if key not in self.counter:
            seeded = await self._turns_since_last_pass(ctx)
            if key not in self.counter:  # another turn of theirs may have seeded it
                self.counter.seed(key, seeded)
        return self.counter.count(key)

    async def _turns_since_last_pass(self, ctx: AfterTurnContext) -> int:
        """The owner's completed interactive turns before this one since their last pass,
        from the store (newest first, bounded), for an owner this process has not counted."""
        owner = Scope(tenant=ctx.scope.tenant, user=ctx.scope.user)
        prefix = pass_prefix(owner)
        runs = await self._host.store.list_runs(scope=owner, limit=self._history_rows)
        turns = 0
        for run in runs:
            if (run.idempotency_key or "").startswith(prefix):
                break  # the owner's latest pass: counting starts after it
            if (
                run.run_id != ctx.run_id
                and run.status == "completed"
                and run.profile in INTERACTIVE_PROFILES
                and run.has_actor
            ):
                turns += 1
        return turns

    # ------------------------------------------------------------------------------ passes
    async def submit(
        self,
        scope: Scope,
        *,
        trigger: str,
        agent: Agent | None = None,
        model: Model | str | None = None,
    ) -> asyncio.Future[MemoryPassRecord]:
        """Submit one pass for ``scope`` and return a future of its record at once.

        Args:
            scope: The owner the pass acts for.
            trigger: What made it due (the triggering run id): names the pass.
            agent: Use this agent's model (when no ``curation_model`` is set).
            model: Use this model (over ``curation_model`` and ``agent``).

        Raises:
            UsageError: No model to run the pass with.
        """
        key = pass_id(scope, trigger)
        inflight = self._inflight.get(key)
        if inflight is not None:
            return inflight
        chosen = model if model is not None else self.model
        if chosen is None and agent is None:
            raise UsageError(
                "a curation pass needs a model: pass model=..., or set curation_model "
                "(Runtime.open(..., curation_model=...) or [memory] curation_model)"
            )
        # In flight from here on, so a repeated submit joins this pass even while it starts.
        done: asyncio.Future[MemoryPassRecord] = asyncio.get_running_loop().create_future()
        # Read by wait()/run_now() or by nobody: never "exception was never retrieved".
        done.add_done_callback(lambda f: None if f.cancelled() else f.exception())
        self._inflight[key] = done
        spec = self.op.pass_
        span = self._host.telemetry.curation_pass(key)
        try:
            with span.current():  # the pass's run is the span's child
                run_id = await self._host.unbound.submit(
                    system_prompt=pass_instructions(self._load_prompt(), spec),
                    messages=[PASS_OPENING],
                    tools=list(spec.tools),
                    toolset=PASS_TOOLSET,
                    finisher=PASS_FINISHER,
                    output_contract=REPORT_CONTRACT,
                    limits=pass_limits(spec),
                    idempotency_key=key,
                    scope=scope,
                    model=chosen,
                    agent=agent if chosen is None else None,
                )
        except BaseException as exc:
            del self._inflight[key]
            span.end(error=exc)
            if isinstance(exc, Exception):
                done.set_exception(exc)
            else:
                done.cancel()
            raise
        self._host.spawn(self._finish(key, run_id, done, span))
        return done

    async def _finish(
        self, key: str, run_id: str, done: asyncio.Future[MemoryPassRecord], span: PassSpan
    ) -> None:
        """Wait for the pass's run and hand its record (kept by the finisher) to waiters."""
        try:
            result = await self._host.unbound.result(run_id)
            run = await self._host.store.get_run(run_id)
            record = await record_pass(self._host.store, run, result.exit)
            log.debug("curation: pass %s ended %s", key, result.status)
            span.end(status=result.status)
            if not done.done():
                if record is None:
                    record = MemoryPassRecord(pass_id=key, scope=run.scope, run_id=run_id)
                done.set_result(record)
        except Exception as exc:
            span.end(error=exc)
            log.debug("curation: pass %s failed (%s)", key, type(exc).__name__)
            if not done.done():
                done.set_exception(exc)
        except BaseException as exc:
            span.end(error=exc)
            done.cancel()  # cancelled, or the process is going down: the run is recoverable
            raise
        finally:
            if self._inflight.get(key) is done:
                del self._inflight[key]

    async def run_now(self, scope: Scope, *, model: Any = None) -> MemoryPassRecord:
        """Run one pass for ``scope`` now (``reverie memory curate --now``) and wait for it.

        Args:
            scope: The owner.
            model: A model or spec; default ``curation_model``.

        Raises:
            UsageError: No model was given and no ``curation_model`` is set.
        """
        done = await self.submit(scope, trigger=new_id("now"), model=model)
        return await asyncio.shield(done)

    async def wait(self) -> list[MemoryPassRecord]:
        """Wait for the passes in flight; the records kept for those that ended.

        Cancelling the wait (e.g. ``asyncio.timeout``) never cancels a pass: ``asyncio.wait``
        leaves what it waits for alone.
        """
        await self._host.after_turn.drain()  # a turn's hook may still be submitting a pass
        pending = list(self._inflight.values())
        if not pending:
            return []
        await asyncio.wait(pending)
        return [f.result() for f in pending if not f.cancelled() and f.exception() is None]


async def record_pass(store: Store, run: RunRecord, exit_: LoopExit) -> MemoryPassRecord | None:
    """Keep (or update) the record of the pass ``run`` that ends with ``exit_``.

    Everything comes from the store, so any process can write it: the report from the
    ``structured_result`` row, what the pass wrote from its transcript (a :class:`PassGuard`
    replayed), and its status and error from the exit. Written before the run's terminal
    status and again after it (replacing), so a pass is never terminal without a record.

    Returns:
        The record kept, or ``None`` when the store keeps no memory.
    """
    if not isinstance(store, DocumentStore) or run.idempotency_key is None:
        return None
    rows = [r for r in await store.thread_items(run.thread_id) if r.run_id == run.run_id]
    output: Any = None
    error: str | None = None
    if isinstance(exit_, Completed) and exit_.kind == "structured" and exit_.reply_refs:
        items = await store.get_items(exit_.reply_refs)
        output = json.loads("".join(i.content for i in items))
    elif isinstance(exit_, Failed):
        error = f"{exit_.kind}: {exit_.safe_summary}"
    elif isinstance(exit_, Cancelled):
        error = "cancelled"
    report = pass_report(
        output, status=exit_.status, guard=PassGuard.from_transcript(rows), error=error
    )
    record = MemoryPassRecord(
        pass_id=run.idempotency_key, scope=run.scope, run_id=run.run_id, report=report
    )
    return await store.save_memory_pass(record, replace=True)


def curator_for(
    host: CurationHost,
    service: MemoryService | None,
    *,
    interval: object = None,
    model: Model | str | None = None,
) -> Curator | None:
    """The runtime's curation, checked at start-up (``Runtime.open``).

    Returns:
        A :class:`Curator` when the provider declares an ``after_turn`` pass (its hook
        registered only when ``interval`` is set), else ``None``.

    Raises:
        ConfigError: ``interval`` is not a whole number >= 2; it is set while memory is off or
            the provider declares no pass (names the provider); the prompt file is missing;
            ``model`` is not a valid model spec.
    """
    # Any runtime can end a pass another process started (recover): it keeps its record.
    # (The store, not the host: the host holds the finisher's registry, no cycle.)
    store = host.store
    host.unbound.register_finisher(PASS_FINISHER, lambda run, exit_: _finished(store, run, exit_))
    checked = check_interval(interval)
    provider = service.provider if service is not None else None
    op = curation_op(provider, checked)
    if op is None or service is None:
        return None
    if model is not None:
        from reverie.models.registry import resolve_model

        resolve_model(model)  # a bad spec fails Runtime.open; the spec itself is what passes keep
    return Curator(host, service, op, interval=checked, model=model)


async def _finished(store: Store, run: RunRecord, exit_: LoopExit) -> None:
    await record_pass(store, run, exit_)
