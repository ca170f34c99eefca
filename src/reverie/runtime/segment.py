"""The segment runner: one segment of a run, from taking its lease to applying its exit.

A segment leases the run, loads its state (the checkpoint, or the thread's head for a new run),
builds the :class:`~reverie.runtime.host.RunHost` (prompt, models, tools, transcript,
checkpoints, inputs, events), runs the loop under a renewed lease and applies the exit the loop
returned. :class:`~reverie.runtime.runtime.Runtime` launches segments; this module holds what
one of them does.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable, Coroutine, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from reverie.core.events import ResumeDrifted, RunStarted
from reverie.core.exits import Cancelled, Failed
from reverie.core.fastcopy import replace
from reverie.core.transcript import NewItem
from reverie.core.vocabulary import is_unbound_profile
from reverie.errors import LeaseLost, TranscriptConflict, UnknownFamilyError, UsageError
from reverie.hooks import HookDispatcher, HookRegistry
from reverie.loop.control import CancelToken
from reverie.loop.executor import LoopConfig, run_loop
from reverie.loop.family import LoopFamilyRegistry
from reverie.loop.state import LoopExecutionState, encode_checkpoint
from reverie.memory.service import MemoryService, RunMemory
from reverie.runtime import subagents
from reverie.runtime.agent import Agent
from reverie.runtime.agents import AgentDirectory
from reverie.runtime.applier import ExitApplier
from reverie.runtime.cancelling import end_cancelled
from reverie.runtime.compaction import run_policy
from reverie.runtime.drift import DRIFTS_KEY, ResumeDrift, decide, definition_of, drift_between
from reverie.runtime.event_hooks import EventHookTap
from reverie.runtime.event_log import EventRecorder
from reverie.runtime.events import EventBus
from reverie.runtime.host import (
    BusEvents,
    RunContext,
    RunHost,
    StoreCheckpoints,
    StoreInputs,
    StorePrompt,
    StoreTranscript,
    StreamingModel,
    ToolPort,
    surface_of,
)
from reverie.runtime.leases import Leases
from reverie.runtime.output import family_for, typed_model, typed_tools
from reverie.runtime.result import RunResult
from reverie.runtime.resume import crash_resume, load_state
from reverie.runtime.telemetry import Telemetry
from reverie.runtime.window import MIN_CAPACITY
from reverie.store.base import TERMINAL_STATUSES, RunRecord, SegmentStart, SegmentStarts, Store

if TYPE_CHECKING:
    from reverie.models.pricing import PriceTable
    from reverie.runtime.ports import Runner
    from reverie.runtime.unbound import UnboundTurnService

__all__ = ["ActiveSegment", "SegmentRunner"]

log = logging.getLogger("reverie.runtime")


@dataclass(slots=True, kw_only=True)
class ActiveSegment:
    """A segment this runtime advances now: its cancel token, events and result."""

    token: CancelToken
    bus: EventBus
    done: asyncio.Future[RunResult]
    task: asyncio.Task[None] | None = None
    thread_id: str = ""
    begun: SegmentStart | None = None
    """The segment the run's start began (its lease and a slot held), until it advances."""


class SegmentRunner:
    """Advances one segment of a run (see the module docstring); one per runtime."""

    def __init__(
        self,
        *,
        store: Store,
        hooks: HookRegistry,
        dispatcher: HookDispatcher,
        agents: AgentDirectory,
        unbound: UnboundTurnService,
        families: LoopFamilyRegistry,
        leases: Leases,
        applier: ExitApplier,
        telemetry: Telemetry,
        memory: MemoryService | None,
        prices: PriceTable,
        runner: Runner,
        active: dict[str, ActiveSegment],
        slots: asyncio.Semaphore,
        spawn: Callable[[Coroutine[Any, Any, None]], asyncio.Task[None]],
        recorder: EventRecorder | None = None,
        withhold_injected_output: bool = False,
    ) -> None:
        self._store = store
        self._hooks = hooks
        self._dispatcher = dispatcher
        self._agents = agents
        self._unbound = unbound
        self._families = families
        self._leases = leases
        self._applier = applier
        self._telemetry = telemetry
        self._memory = memory
        self._prices = prices
        self._runner = runner
        """What a subagent call of a segment starts and resumes its child run through."""
        self._active = active
        """Run id → the segment this runtime advances now (shared with the runtime)."""
        self._slots = slots
        """Bounds the segments advancing at once (``max_concurrent_runs``)."""
        self._spawn = spawn
        self._recorder = recorder
        self._withhold_injected = withhold_injected_output
        """Stores the segments' events (any process can replay and follow them)."""
        # Checked once: a runtime-checkable protocol's isinstance costs ~15 us a call.
        self._starts = store if isinstance(store, SegmentStarts) else None
        """The store, when it starts a run with its segment (``SegmentStarts``)."""

    async def start_run(
        self,
        run: RunRecord,
        items: Sequence[NewItem],
        *,
        create_thread: bool,
        here: bool,
    ) -> tuple[RunRecord, SegmentStart | None]:
        """Start ``run`` (``Store.start_run``); the segment begun with it, if any.

        A run this runtime will advance now (``here``, a human or scheduled turn, a slot of
        ``max_concurrent_runs`` free) starts leased and running, its segment begun in the
        same transaction (``SegmentStarts.start_segment``): the segment then makes no
        ``begin_segment``. Otherwise, or when an idempotency key names an existing run (the
        record returned), no segment is begun and nothing is held.
        """
        starts = self._starts
        if starts is None or not here or is_unbound_profile(run.profile) or self._slots.locked():
            return await self._store.start_run(run, items, create_thread=create_thread), None
        await self._slots.acquire()  # free: taken at once, no wait
        try:
            begun = await self._leases.start(
                starts, run, items, create_thread=create_thread, window=MIN_CAPACITY
            )
        except BaseException:
            self._slots.release()
            raise
        if begun.run.run_id != run.run_id:
            self._slots.release()
            return begun.run, None
        return begun.run, begun

    def launch(
        self, run: RunRecord, *, resumed: bool, begun: SegmentStart | None = None
    ) -> ActiveSegment:
        """Advance a segment of ``run`` in a task of its own (or join the one running).

        ``begun``: the segment :meth:`start_run` began (its slot is held already).
        """
        active = self._active.get(run.run_id)
        if active is None:
            loop = asyncio.get_running_loop()
            active = ActiveSegment(
                token=CancelToken(),
                bus=EventBus(),
                done=loop.create_future(),
                thread_id=run.thread_id,
                begun=begun,
            )
            if run.cancel_requested:
                active.token.cancel("cancelled")  # a handle for a cancel-requested run
            self._active[run.run_id] = active
            if self._recorder is not None:
                self._recorder.record(run.run_id, active.bus)
            active.task = self._spawn(self._drive(run, active, resumed=resumed))
        return active

    async def _drive(self, run: RunRecord, active: ActiveSegment, *, resumed: bool) -> None:
        run_id = run.run_id
        try:
            if active.begun is None:  # (a segment begun with its run holds its slot already)
                await self._slots.acquire()
            try:
                result = await self.advance(run, active, resumed=resumed)
                if result.status == "blocked":
                    result = await self._unless_cancelled(run, active, result)
            finally:
                self._slots.release()
            if not active.done.done():
                active.done.set_result(result)
        except BaseException as exc:
            if not active.done.done():
                if isinstance(exc, asyncio.CancelledError):
                    active.done.cancel()
                else:
                    active.done.set_exception(exc)
            if isinstance(exc, asyncio.CancelledError | KeyboardInterrupt | SystemExit):
                raise
        finally:
            if active.begun is not None:  # begun with the run, never advanced: give it up
                await self._give_up(run_id, active)
            active.bus.close()
            if self._recorder is not None:
                self._recorder.finish(run_id)
            if self._active.get(run_id) is active:
                del self._active[run_id]
            done = active.done
            ended = done.done() and not done.cancelled() and done.exception() is None
            if ended and done.result().status in TERMINAL_STATUSES:
                self._agents.forget_run(run_id)  # nothing of it will be resumed

    async def _give_up(self, run_id: str, active: ActiveSegment) -> None:
        begun, active.begun = active.begun, None
        if begun is not None:
            with contextlib.suppress(Exception):
                await asyncio.shield(self._leases.release(run_id, begun.fence))

    async def release_unstarted(self) -> None:
        """Give up the leases of segments begun with their run whose task never ran (the
        runtime closed first): their runs are free to resume at once, as queued runs are."""
        for run_id, active in list(self._active.items()):
            if active.begun is not None:
                await self._give_up(run_id, active)

    async def _unless_cancelled(
        self, run: RunRecord, active: ActiveSegment, result: RunResult
    ) -> RunResult:
        """A run that ended blocked while a cancel was on its way is ended cancelled now.

        A cancel that found this segment (the token) or the run leased by it (the stored
        request, from another process) left the ending to it. Checked last, with no wait
        between the check and the segment leaving ``active``: a later cancel ends the run itself.
        """
        stored = run
        if not active.token.cancelled:
            stored = await self._store.get_run(run.run_id)
        if not (active.token.cancelled or stored.cancel_requested):
            return result
        ended = await end_cancelled(
            self._store, self._leases, self._applier, stored, active.token.reason
        )
        return result if ended is None else ended

    async def advance(self, run: RunRecord, active: ActiveSegment, *, resumed: bool) -> RunResult:
        """Lease the run, load its checkpoint, run the loop, apply the exit.

        ``run`` is the record the caller read: what never changes (its agent, profile, scope,
        thread) is taken from it, and its lease owner tells whether that owner died; the
        segment's first store operation reads the rest again.
        """
        run_id = run.run_id
        if is_unbound_profile(run.profile):
            # Unbound runs are rebuilt from their stored spec (or fail cleanly, below).
            agent: Agent | Failed = await self._unbound.agent_for(run)
        else:
            agent = self._agents.for_run(run)
        # The agent's own hooks apply to its runs only, on top of the runtime's.
        dispatcher = (
            HookDispatcher(self._hooks.extended(agent.hooks))
            if isinstance(agent, Agent) and agent.hooks
            else self._dispatcher
        )
        # Every event of the segment, run_started to run_finished, reaches `event` hooks.
        tap = EventHookTap(dispatcher, scope=run.scope, run_id=run_id, bus=active.bus)
        active.bus.tap(tap)
        try:
            try:
                return await self._leased(run, agent, dispatcher, tap, active, resumed=resumed)
            except TranscriptConflict:
                # Another writer appended to the thread under a step (none of the step was
                # written): resume from the last checkpoint, which reads the thread again.
                log.warning("run %s: the thread moved under a step; resuming", run_id)
                return await self._leased(run, agent, dispatcher, tap, active, resumed=True)
        finally:
            await tap.drain()
            active.bus.untap(tap)

    async def _leased(
        self,
        run: RunRecord,
        agent: Agent | Failed,
        dispatcher: HookDispatcher,
        tap: EventHookTap,
        active: ActiveSegment,
        *,
        resumed: bool,
    ) -> RunResult:
        run_id = run.run_id
        if isinstance(agent, Failed):
            return await self._unrunnable(run, agent, active, resumed=resumed)
        # One transaction: the lease, the run marked running, and the state it loads (for a
        # run just started here, the transaction that started it).
        start, active.begun = active.begun, None
        if start is None:
            start = await self._leases.begin(run, window=MIN_CAPACITY)
        fence = start.fence
        # Set once the exit is applied: its store operation gave the lease up with the status.
        ended: RunResult | None = None
        segment = self._telemetry.segment(run, resumed=resumed)
        try:
            run = start.run
            if not start.started:
                # Another worker finished the run while we waited for the lease.
                return await self._applier.result_of(run)
            # Still "running": the worker that advanced it died mid-segment (a crash resume).
            crashed = resumed and start.prior_status == "running"
            family = self._families.get(run.family_id)
            active.bus.emit(RunStarted(run_id=run_id, resumed=resumed))
            loaded = await load_state(
                self._store, run, family, checkpoint=start.checkpoint, head_seq=start.head_seq
            )
            if not isinstance(loaded.state, LoopExecutionState):
                ended = await self._applier.apply(run, loaded.state, fence=fence, bus=active.bus)
                return ended
            state = loaded.state
            over = await self._ended_ancestor(run)
            if over is not None:
                # A run that is over runs nothing (DESIGN §20): a child whose parent ended
                # (a crash between the two ends) ends with it, whoever resumes it.
                gone = Cancelled(reason=subagents.ended_reason(over), usage=state.budget.usage())
                ended = await self._applier.apply(run, gone, fence=fence, bus=active.bus)
                return ended
            ctx = RunContext(
                run_id=run_id,
                thread_id=run.thread_id,
                scope=run.scope,
                fence=fence,
                store=self._store,
                hooks=dispatcher,
                bus=active.bus,
                token=active.token,
                family_digest=family.identity.digest,
                poisoned=tap.poisoned,
                gated=dict(state.host_state.get("gated_tools", {})),
                withhold_injected=self._withhold_injected,
            )
            tools = self._tools_of(agent, run, ctx)
            definition = definition_of(
                agent.instructions, surface_of(tools), self._selected_family(agent, run)
            )
            ctx.definition = definition.to_dict()
            drifts: list[Mapping[str, Any]] = list(state.host_state.get(DRIFTS_KEY, ()))
            if loaded.definition is not None:
                drift = drift_between(loaded.definition, definition)
                if drift is not None:
                    drift = await decide(agent.on_drift, drift, run_id=run_id)
                    drifts.append(drift.to_dict())
                    self._announce_drift(run_id, drift, active.bus)
                    if drift.action == "refuse":
                        ended = await self._applier.apply(
                            run,
                            Failed(
                                kind="resume_drift",
                                safe_summary="the agent changed since the run's checkpoint: "
                                f"{drift.describe()} (Agent.on_drift refused the resume)",
                                usage=state.budget.usage(),
                            ),
                            fence=fence,
                            bus=active.bus,
                            drifts=drifts,
                        )
                        return ended
                    # Carried by every later checkpoint (the host's slot), so each later exit
                    # of the run still records it.
                    state = replace(state, host_state={**state.host_state, DRIFTS_KEY: drifts})
            if crashed:
                limited = crash_resume(state, agent.limits)
                if not isinstance(limited, LoopExecutionState):
                    ended = await self._applier.apply(
                        run, limited, fence=fence, bus=active.bus, drifts=drifts
                    )
                    return ended
                state = limited
                # Durable at once: a worker that dies again before its next checkpoint must
                # still have used up this resume.
                if start.checkpoint is not None:
                    payload = encode_checkpoint(
                        state, family_digest=family.identity.digest, definition=ctx.definition
                    )
                    await self._store.save_checkpoint(
                        run_id, start.checkpoint.kind, payload, fence=fence
                    )
            # Rows the resume just superseded (this run's, past its checkpoint) are not read.
            rows = [r for r in start.items if r.run_id != run_id or r.seq <= state.transcript_seq]
            ctx.segment.prime(start.head_seq, rows, complete=len(start.items) < MIN_CAPACITY)
            tap.poisoned.update(state.host_state.get("poisoned_hooks", ()))
            models = [typed_model(agent, m) for m in self._agents.model_chain(agent)]
            compaction = run_policy(agent.compaction, models, self._agents.summary_models)
            host = RunHost(
                run_id=run_id,
                token=active.token,
                prompt=StorePrompt(
                    ctx,
                    agent.instructions,
                    self._run_memory(run),
                    agent.settings.model_settings() if agent.settings else None,
                ),
                model=StreamingModel(ctx, models, self._prices),
                capabilities=ToolPort(ctx, tools),
                transcript=StoreTranscript(ctx),
                checkpoints=StoreCheckpoints(ctx),
                inputs=StoreInputs(ctx, primed=start.inputs),
                events=BusEvents(ctx),
            )
            traced = segment.instrument(host, state)
            config = LoopConfig(
                limits=agent.limits,
                on_limit=agent.on_limit,
                compaction=compaction,
                trace_content=self._telemetry.trace_content,
            )
            self._leases.renew(run_id, fence)
            try:
                exit_, _ = await run_loop(traced, family, state, config)
            except (LeaseLost, TranscriptConflict):
                raise
            except Exception as exc:  # a bug below the loop: recorded, never a crash
                log.exception("run %s: unexpected error in the loop", run_id)
                exit_ = Failed(
                    kind="driver_bug",
                    safe_summary=f"unexpected {type(exc).__name__} while advancing the run",
                )
            finally:
                self._leases.stop_renewing(run_id, fence)
            await ctx.drain_observers()
            ended = await self._applier.apply(
                run,
                exit_,
                fence=fence,
                bus=active.bus,
                hooks=dispatcher,
                known=ctx.segment.committed,
                drifts=drifts,
            )
            return segment.finished(ended)
        finally:
            segment.close()
            if ended is None:
                with contextlib.suppress(Exception):
                    await asyncio.shield(self._leases.release(run_id, fence))

    async def _ended_ancestor(self, run: RunRecord) -> RunRecord | None:
        if subagents.parent_of(run) is None:
            return None  # (not a child: no read)
        return await subagents.ended_ancestor(self._store, run)

    async def _unrunnable(
        self, run: RunRecord, failed: Failed, active: ActiveSegment, *, resumed: bool
    ) -> RunResult:
        """End a run whose agent cannot be built (an unbound run's broken spec) under a lease."""
        fence = await self._leases.take(run)
        segment = self._telemetry.segment(run, resumed=resumed)
        released = False
        try:
            # Another worker may have finished the run while we waited for the lease.
            run = await self._store.get_run(run.run_id)
            if run.status in TERMINAL_STATUSES:
                return await self._applier.result_of(run)
            result = await self._applier.apply(run, failed, fence=fence, bus=active.bus)
            released = True  # end_segment gave the lease up with the status
            return result
        finally:
            segment.close()
            if not released:
                with contextlib.suppress(Exception):
                    await asyncio.shield(self._leases.release(run.run_id, fence))

    def _selected_family(self, agent: Agent, run: RunRecord) -> str:
        """``<id>@<digest>`` of the family the agent selects for the run now (an unbound
        run's is its profile's); a family it names that cannot be used is marked so."""
        family_id = run.family_id
        if not is_unbound_profile(run.profile):
            try:
                family_id = family_for(agent, self._families)
            except (UsageError, UnknownFamilyError):
                return f"{agent.family}@unusable"
        return f"{family_id}@{self._families.get(family_id).identity.digest[:16]}"

    @staticmethod
    def _announce_drift(run_id: str, drift: ResumeDrift, bus: EventBus) -> None:
        log.warning(
            "run %s: the agent changed since the checkpoint (%s); resume %s",
            run_id,
            drift.describe(),
            "refused" if drift.action == "refuse" else "continued",
        )
        bus.emit(
            ResumeDrifted(
                run_id=run_id,
                action=drift.action,
                instructions=drift.instructions,
                tools_added=drift.tools_added,
                tools_removed=drift.tools_removed,
                tools_changed=drift.tools_changed,
                family_before=drift.family_before,
                family_now=drift.family_now,
            )
        )

    def _run_memory(self, run: RunRecord) -> RunMemory | None:
        # Unbound turns (curation passes, HTTP turns) get only the context their caller gives.
        if self._memory is None or is_unbound_profile(run.profile):
            return None
        return self._memory.for_run(
            scope=run.scope, thread_id=run.thread_id, run_id=run.run_id, store=self._store
        )

    def _tools_of(self, agent: Agent, run: RunRecord, ctx: RunContext) -> list[Any]:
        tools = subagents.bind(
            self._runner,
            agent,
            run,
            agent.tools,
            unpriced=self._unpriced,
            staged=ctx.segment.staged_journal,
        )
        if self._memory is not None and not is_unbound_profile(run.profile):
            tools += self._memory.tools(tools)
        return tools + typed_tools(agent)

    def _unpriced(self, agent: Agent) -> list[str]:
        return self._agents.unpriced(agent, self._prices)
