"""``Runtime``: the public entry point that starts, resumes, approves and recovers runs."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
import weakref
from collections.abc import Generator, Iterable, Mapping, Sequence
from dataclasses import replace
from types import TracebackType
from typing import Any

from reverie.core.canonical import digest
from reverie.core.content import ContentPart, UserContent
from reverie.core.exits import HOST_STOP_REASONS
from reverie.core.ids import new_id
from reverie.core.messages import Message
from reverie.core.scope import Scope
from reverie.core.transcript import InputKind
from reverie.core.vocabulary import (
    DISPATCH_MODES,
    THREAD_POLICIES,
    DispatchMode,
    GateDecision,
    ThreadPolicy,
    is_unbound_profile,
)
from reverie.errors import (
    ConfigError,
    ConflictError,
    GateResolvedError,
    GuardrailTripped,
    NotFoundError,
    RunBusy,
    RunEndedError,
    ThreadBusy,
    UsageError,
)
from reverie.hooks import AFTER_TURN_CEILING_S, HookDispatcher, HookRegistry
from reverie.loop.compaction import PINNED_META
from reverie.loop.family import LoopFamily, LoopFamilyRegistry, default_families
from reverie.memory.provider import MemoryProvider
from reverie.memory.service import RuntimeMemory, memory_service
from reverie.models.base import Model
from reverie.runtime import subagents
from reverie.runtime.after_turn import AfterTurnWork
from reverie.runtime.agent import Agent, bind_one_turn
from reverie.runtime.agents import AgentDirectory
from reverie.runtime.applier import ExitApplier
from reverie.runtime.cancelling import end_cancelled
from reverie.runtime.curation import CurationHost, curator_for
from reverie.runtime.dispatch import QueueDispatcher, Routing
from reverie.runtime.event_log import EventRecorder
from reverie.runtime.events import EventBus
from reverie.runtime.gate_edits import resolution_for
from reverie.runtime.guardrails import (
    guard_input,
    guard_opening,
    input_events,
    text_of,
    with_text,
)
from reverie.runtime.handle import GracefulStopReason, RunHandle
from reverie.runtime.leases import LEASE_TTL_S, Leases, lease_live, new_owner, owner_gone
from reverie.runtime.output import family_for, typed_result
from reverie.runtime.queries import Gates, Runs
from reverie.runtime.result import RunResult
from reverie.runtime.schedules import Schedules
from reverie.runtime.segment import ActiveSegment, SegmentRunner
from reverie.runtime.tasks import OwnedTasks
from reverie.runtime.telemetry import Telemetry
from reverie.runtime.thread_policy import BusyThreads, checked_policy
from reverie.runtime.unbound import UnboundTurnService
from reverie.runtime.user_input import input_payload, opening_items
from reverie.store import open_store
from reverie.store.base import (
    TERMINAL_STATUSES,
    GateResolution,
    RunRecord,
    SegmentStart,
    Store,
)
from reverie.store.run_events import RunEventLog

log = logging.getLogger("reverie.runtime")


class Runtime:
    """Runs agents durably. Open it with :meth:`Runtime.open`.

    Example::

        async with Runtime.open(":memory:") as rt:
            r = await rt.run(agent, "hi", scope=Scope(tenant="acme", user="ana"))
    """

    def __init__(
        self,
        store: Store,
        *,
        agents: Iterable[Agent] = (),
        max_concurrent_runs: int = 256,
        lease_ttl_s: float = LEASE_TTL_S,
        prices: Any = None,
        families: Iterable[LoopFamily] | None = None,
        memory: MemoryProvider | None = None,
        memory_budget_bytes: int | None = None,
        curation_interval_turns: int | None = None,
        curation_model: str | Model | None = None,
        thread_policy: ThreadPolicy = "reject",
        tracer_provider: Any = None,
        trace_content: bool = False,
        after_turn_ceiling_s: float = AFTER_TURN_CEILING_S,
        withhold_injected_output: bool = False,
    ) -> None:
        self._thread_policy = checked_policy(thread_policy)
        self.store = store
        self.runs = Runs(store)
        """Read stored runs, threads and events: ``await rt.runs.get(run_id, scope=scope)``."""
        self.gates = Gates(store)
        """Read stored approval gates: ``await rt.gates.list(scope=scope)``."""
        self._telemetry = Telemetry(tracer_provider=tracer_provider, trace_content=trace_content)
        self.hooks = HookRegistry()
        """Register hooks here: ``rt.hooks.register("before_capability", fn, name=...)``."""
        self._dispatcher = HookDispatcher(self.hooks)
        self._families = LoopFamilyRegistry(
            families if families is not None else default_families()
        )
        self._directory = AgentDirectory()
        self._active: dict[str, ActiveSegment] = {}
        # The parts below hold the runtime weakly and its tasks keep it alive while they run:
        # a closed runtime is no reference cycle, so dropping it frees its store's rows at once
        # (runtime/tasks.py).
        me: Runtime = weakref.proxy(self)
        self._tasks = OwnedTasks(self)
        self.unbound = UnboundTurnService(
            me, agents=self._directory, families=self._families, active=self._active.get
        )
        """Unbound turns: no conversation, no reply target (DESIGN §14)."""
        self._after_turn = AfterTurnWork(ceiling_s=after_turn_ceiling_s)
        directory, active = self._directory, self._active
        self._applier = ExitApplier(
            store,
            self._dispatcher,
            before_terminal=self.unbound.before_terminal,
            after_turn=self._after_turn,
            output_of=lambda run, value: typed_result(directory.known(run), value),
            after_terminal=lambda run: me._end_children(run),
        )
        for agent in agents:
            self.register(agent)
        self._leases = Leases(store, ttl_s=lease_ttl_s)
        self._recorder = EventRecorder(store) if isinstance(store, RunEventLog) else None
        self._busy = BusyThreads(
            store,
            cancel=lambda run_id, reason: me.cancel(run_id, reason=reason),
            handle_for=lambda run: me._handle_for(run),
            running_here=lambda run_id: getattr(active.get(run_id), "task", None),
            lease_ttl_s=lease_ttl_s,
        )
        from reverie.models.pricing import PriceTable

        # Built-in prices, with the caller's (a PriceTable, or {model: Price | mapping}) on top.
        if isinstance(prices, PriceTable):
            self._prices = prices
        else:
            self._prices = PriceTable.default().merged(prices or {})
        self._opened = False
        self.routing = Routing()
        """Where runs are advanced: here, or as queue jobs (``open(..., dispatch="queue")``)."""
        self._memory = memory_service(memory, budget_bytes=memory_budget_bytes)
        # Checked here, so a bad curation setting fails Runtime.open, not a later turn.
        curation = CurationHost(
            store=store,
            unbound=self.unbound,
            agents=self._directory,
            telemetry=self._telemetry,
            after_turn=self._after_turn,
            spawn=self._tasks.spawn,
        )
        self._curator = curator_for(
            curation, self._memory, interval=curation_interval_turns, model=curation_model
        )
        self.memory = RuntimeMemory(self._memory, store, self._curator)
        """Read, write and search memory: ``await rt.memory.read(scope, "MEMORY.md")``."""
        self.schedules = Schedules(me, store, agents=self._directory)
        """Schedules that start runs on time, once per occurrence (docs/schedules.md)."""
        self._segments = SegmentRunner(
            store=store,
            hooks=self.hooks,
            dispatcher=self._dispatcher,
            agents=self._directory,
            unbound=self.unbound,
            families=self._families,
            leases=self._leases,
            applier=self._applier,
            telemetry=self._telemetry,
            memory=self._memory,
            prices=self._prices,
            runner=me,
            active=self._active,
            slots=asyncio.Semaphore(max_concurrent_runs),
            spawn=self._tasks.spawn,
            recorder=self._recorder,
            withhold_injected_output=withhold_injected_output,
        )

    # ------------------------------------------------------------------------------ lifecycle
    @classmethod
    def open(
        cls,
        url: str | None = None,
        *,
        agents: Iterable[Agent] = (),
        max_concurrent_runs: int = 256,
        lease_ttl_s: float = LEASE_TTL_S,
        prices: Any = None,
        families: Iterable[LoopFamily] | None = None,
        memory: MemoryProvider | None = None,
        memory_budget_bytes: int | None = None,
        curation_interval_turns: int | None = None,
        curation_model: str | Model | None = None,
        dispatch: DispatchMode = "local",
        thread_policy: ThreadPolicy = "reject",
        tracer_provider: Any = None,
        trace_content: bool = False,
        after_turn_ceiling_s: float = AFTER_TURN_CEILING_S,
        withhold_injected_output: bool = False,
    ) -> _Opener:
        """Open a runtime on a store URL (default: SQLite under ``$REVERIE_HOME``).

        Use as ``async with Runtime.open(...) as rt`` or ``rt = await Runtime.open(...)``
        (then ``await rt.aclose()``). URLs: ``":memory:"``, ``"sqlite:///path.db"``,
        ``"postgresql://..."``. ``memory=NativeMemory()`` (or ``MCPMemory(...)``) gives every
        agent memory (DESIGN §12); ``memory_budget_bytes`` bounds recalled text per prompt.

        ``curation_interval_turns=N`` (N >= 2) turns on memory curation (DESIGN §13): after
        every Nth completed turn of an owner a background pass tidies their memory, with the
        triggering agent's model unless ``curation_model`` names another. It needs a provider
        whose manifest declares a curation pass (``NativeMemory`` does).

        ``dispatch="queue"`` (PostgreSQL only) hands runs to ``reverie worker`` processes
        instead of advancing them here: ``start``, ``resume``, ``approve`` and ``deny`` enqueue
        a job (docs/scaling.md); handles poll the store for the result, and their ``events()``
        yield only the final ``run_finished`` (live events need the default local dispatch).

        ``thread_policy`` is the default of :meth:`start`'s: what a run started on a thread
        that already has an active run does (``"reject"``, ``"enqueue"`` or ``"interrupt"``).
        With the ``otel`` extra and a tracer provider (``tracer_provider``, else the global one)
        runs emit OpenTelemetry spans (docs/observability.md); ``trace_content=True`` puts
        message content and tool arguments on them, which is off by default.

        ``after_turn_ceiling_s`` caps one run's ``after_turn`` hooks together (their overall
        deadline is the sum of their own timeouts, at most this; docs/hooks.md).

        ``withhold_injected_output=True`` switches on the built-in prompt-injection marker
        check: a tool's output that carries such markers is withheld from the model (it gets a
        notice instead) and a ``guardrail`` run event records it (docs/hooks.md).

        Raises:
            ConfigError: A bad store URL; ``curation_interval_turns`` below 2, or set while the
                provider declares no curation pass (the message names the provider); queue
                dispatch on a store that is not PostgreSQL.
        """
        from reverie.store import default_store_url

        if dispatch not in DISPATCH_MODES:
            raise UsageError(f"dispatch must be one of {', '.join(DISPATCH_MODES)}")
        url = url or default_store_url()
        queue = QueueDispatcher(url) if dispatch == "queue" else None
        store = open_store(url)
        rt = cls(
            store,
            agents=agents,
            max_concurrent_runs=max_concurrent_runs,
            lease_ttl_s=lease_ttl_s,
            prices=prices,
            families=families,
            memory=memory,
            memory_budget_bytes=memory_budget_bytes,
            curation_interval_turns=curation_interval_turns,
            curation_model=curation_model,
            thread_policy=thread_policy,
            tracer_provider=tracer_provider,
            trace_content=trace_content,
            after_turn_ceiling_s=after_turn_ceiling_s,
            withhold_injected_output=withhold_injected_output,
        )
        rt.routing.queue = queue
        return _Opener(rt)

    async def _start(self) -> None:
        await self.store.open()
        if self._memory is not None:
            try:
                await self._memory.open(self.store, self.hooks)
            except BaseException:
                await self.store.close()
                raise
            if self._curator is not None:
                self._curator.open(self.hooks)
        if (queue := self.routing.queue) is not None:
            try:
                await queue.open()
            except BaseException:
                await self.store.close()
                raise
        self._opened = True
        self._leases.owner = new_owner()

    async def aclose(self) -> None:
        """Stop local work (runs stay durable and can be resumed) and close the store."""
        await self._after_turn.drain()  # bounded by its deadline: a turn still gets recorded
        await self._tasks.stop()
        await self._segments.release_unstarted()
        if self._recorder is not None:
            await self._recorder.drain()  # the events of the segments just stopped too
        if self._opened:
            if self._memory is not None:
                with contextlib.suppress(Exception):
                    await self._memory.aclose()
            if (queue := self.routing.queue) is not None:
                with contextlib.suppress(Exception):
                    await queue.aclose()
            await self.store.close()
            self._opened = False

    async def __aenter__(self) -> Runtime:
        if not self._opened:
            await self._start()
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.aclose()

    # ------------------------------------------------------------------------------ agents
    @property
    def after_turn_deadline_s(self) -> float:
        """The overall bound on one run's ``after_turn`` hooks as registered now: the sum of
        their own timeouts, capped at ``after_turn_ceiling_s`` (0 with none)."""
        return self._dispatcher.after_turn_deadline_s(self._after_turn.ceiling_s)

    def register(self, agent: Agent) -> None:
        """Make an agent known to this process (needed to resume, approve or recover its runs)."""
        self._directory.register(agent)

    def unregister(self, agent: Agent) -> None:
        """Forget ``agent`` (a no-op when its name now belongs to another agent)."""
        self._directory.unregister(agent)

    # ------------------------------------------------------------------------------ runs
    async def run(
        self,
        agent: Agent,
        message: UserContent,
        *,
        scope: Scope,
        thread_id: str | None = None,
        thread_policy: ThreadPolicy | None = None,
        pin: bool = False,
    ) -> RunResult:
        """Run one turn of ``agent`` and wait for its result (``thread_policy``, ``pin``: see
        start).

        ``message`` is text, or ``reverie.Text``/``reverie.Image`` parts (docs/images.md).
        """
        handle = await self.start(
            agent, message, scope=scope, thread_id=thread_id, thread_policy=thread_policy, pin=pin
        )
        return await handle.result()

    async def _handle_for(self, run: RunRecord) -> RunHandle:
        """A handle on an existing run: live if it runs here, else watched through the store."""
        here = self.attach(run.run_id)
        if here is not None:
            return here
        from reverie.runtime.dispatch import watching_handle

        return watching_handle(self, run, self._tasks.spawn)

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
        """Start a turn and return at once with a :class:`RunHandle`.

        ``pin=True`` pins the message: context compaction (docs/compaction.md) never summarises
        it away, so every later prompt of the thread carries it verbatim. (A message that joins
        an active run as its follow-up, ``thread_policy="enqueue"``, is not pinned.)

        ``message`` is the user's message (text, or ``reverie.Text``/``reverie.Image`` parts:
        docs/images.md), or the run's opening messages in order (unbound turns). Images over
        ``Limits.max_image_bytes`` raise :class:`~reverie.errors.ImageTooLarge` before anything
        is written. An ``idempotency_key`` that already names a run of the same owner returns that
        run's handle: it is never started a second time (keys are per owner: another owner's
        same key starts that owner's own run). ``meta`` is stored on the run record as it is
        (an unbound run keeps its spec there).

        A thread has at most one active (queued, running or blocked) run. When ``thread_id``
        has one, ``thread_policy`` (default: the runtime's, ``"reject"`` unless
        ``Runtime.open(..., thread_policy=...)`` says otherwise) decides:

        - ``"reject"``: raise :class:`~reverie.errors.ThreadBusy` naming the active run.
        - ``"enqueue"``: the message becomes a follow-up of the active run (delivered when it
          would otherwise finish, after any approval it waits for); the returned handle is the
          active run's.
        - ``"interrupt"``: cancel the active run (its pending gate is closed), wait for it to
          end, then start this one.
        """
        self._require_open()
        if not isinstance(scope, Scope):
            raise UsageError("scope must be a reverie.Scope set by the host")
        if profile == "interactive" and has_actor:
            await self._after_turn.settle(scope)  # the owner's last turn is recorded first
        if self._directory.named(agent.name) is not agent:
            self.register(agent)
        # Human and scheduled turns run the agent's family; unbound profiles their own.
        family_id = profile if is_unbound_profile(profile) else family_for(agent, self._families)
        budgeted = agent.limits.max_usd is not None
        if budgeted and (unpriced := self._directory.unpriced(agent, self._prices)):
            # A USD budget we cannot measure is no budget at all: refuse to start.
            model_name = unpriced[0]
            raise ConfigError(
                f"agent {agent.name!r} sets Limits(max_usd=...) but no price is "
                f"configured for model {model_name!r}. Fix: add it to [prices] in "
                f"reverie.toml or pass Runtime.open(..., prices={{{model_name!r}: "
                "Price(...)})"
            )
        self._families.get(family_id)  # unknown family: a typed error now, not later
        max_image_bytes = agent.limits.max_image_bytes
        # Guardrails judge the message before anything is stored: a denial starts no run.
        message, rewrites = await guard_opening(self._dispatcher, message, scope=scope)
        items = opening_items(message, max_image_bytes=max_image_bytes)  # checked before writes
        if pin:
            items = [
                replace(i, meta={**i.meta, PINNED_META: True}) if i.role == "user" else i
                for i in items
            ]
        # The store creates the thread when it is missing (none named: a new one) and refuses
        # another owner's as missing, in the transaction that starts the run.
        create_thread = thread_id is None
        if thread_id is None:
            # Keyed runs get a thread named by the key: a repeated start leaves no empty thread.
            # Keys are per owner: another owner's same key names another thread and run.
            keyed = idempotency_key is not None
            owned_key = [scope.tenant, scope.user, idempotency_key]
            thread_id = f"thr_{digest(owned_key)[:32]}" if keyed else new_id("thr")
        minted = new_id("run")
        record = RunRecord(
            run_id=minted,
            thread_id=thread_id,
            scope=scope,
            agent_name=agent.name,
            profile=profile,
            family_id=family_id,
            has_actor=has_actor,
            idempotency_key=idempotency_key,
            meta=dict(meta or {}),
        )
        policy = checked_policy(thread_policy or self._thread_policy)
        here = self.routing.queue_for(record) is None
        while True:
            try:
                run, begun = await self._segments.start_run(
                    record, items, create_thread=create_thread, here=here
                )
                break
            except ThreadBusy as busy:
                # The store refused a second active run on the thread (across processes).
                joined = await self._busy.on_busy(busy, policy, message, max_image_bytes)
                if joined is not None:
                    return joined
        if run.run_id != minted:
            return await self._existing(run, scope)
        self._directory.remember(run.run_id, agent)
        if begun is not None:
            handle = self._launch(run, resumed=False, begun=begun)
        else:
            handle = await self._dispatch(run, resumed=False)
        self._record_inputs(run.run_id, rewrites)
        return handle

    def _record_inputs(self, run_id: str, rewrites: Sequence[tuple[str, str]]) -> None:
        """``guardrail`` events for the rewrites of an input, on the run's live stream (and
        so its event log) when the run advances here."""
        active = self._active.get(run_id)
        if rewrites and active is not None:
            for event in input_events(run_id, rewrites):
                active.bus.emit(event)

    async def _existing(self, run: RunRecord, scope: Scope) -> RunHandle:
        """The handle of the run an idempotency key already names (never a second run)."""
        if (run.scope.tenant, run.scope.user) != (scope.tenant, scope.user):
            raise ConflictError("this idempotency key already names another owner's run")
        if run.run_id in self._active or run.status not in (*TERMINAL_STATUSES, "blocked"):
            # Running here: join it. Queued or running with no live worker: continue it.
            return await self._dispatch(run, resumed=True)
        done: asyncio.Future[RunResult] = asyncio.get_running_loop().create_future()
        done.set_result(await self._applier.result_of(run))
        bus = EventBus()
        bus.close()
        return RunHandle(self, run.run_id, run.thread_id, bus, done)

    async def _dispatch(self, run: RunRecord, *, resumed: bool) -> RunHandle:
        """Advance the run here (local dispatch) or enqueue it for a worker (queue)."""
        queue = self.routing.queue_for(run)
        if queue is None:
            return self._launch(run, resumed=resumed)
        return await queue.dispatch(self, run, self._tasks.spawn, resumed=resumed)

    def _launch(
        self, run: RunRecord, *, resumed: bool, begun: SegmentStart | None = None
    ) -> RunHandle:
        active = self._segments.launch(run, resumed=resumed, begun=begun)
        return RunHandle(self, run.run_id, run.thread_id, active.bus, active.done)

    # ------------------------------------------------------------------------------ inputs
    async def send_input(
        self, run_id: str, kind: InputKind, text: UserContent, *, input_id: str | None = None
    ) -> str:
        """Queue a steering or follow-up message (text or parts); typed error if the run ended.

        Raises:
            ImageTooLarge: the message's images exceed the agent's ``Limits.max_image_bytes``
                (nothing is queued).
        """
        run = await self.store.get_run(run_id)
        if run.status in TERMINAL_STATUSES:
            raise RunEndedError(f"run {run_id} has ended ({run.status}); start a new turn")
        if is_unbound_profile(run.profile):
            # No conversation to steer: refused up front, never accepted and then dropped.
            raise UsageError(f"run {run_id} is an unbound turn: it takes no steering or follow-ups")
        input_id = input_id or new_id("in")
        if kind in ("steering", "follow_up"):
            try:
                checked = await guard_input(
                    self._dispatcher,
                    scope=run.scope,
                    run_id=run_id,
                    kind="steering" if kind == "steering" else "follow_up",
                    text=text_of(text),
                )
            except GuardrailTripped as tripped:
                # Nothing of the message is stored; the run it was for stops, naming it.
                with contextlib.suppress(RunEndedError):
                    await self.cancel(run_id, reason=str(tripped))
                raise
            if checked.decision == "rewrite":
                text = with_text(text, checked.text)
                self._record_inputs(run_id, checked.rewrites)
        payload = input_payload(text, max_image_bytes=self._directory.image_cap(run))
        await self.store.enqueue_input(run_id, kind, payload, input_id=input_id)
        return input_id

    async def request_graceful_stop(self, run_id: str, reason: GracefulStopReason) -> None:
        """Ask a run to finish through the finalizer (one-shot)."""
        if reason not in HOST_STOP_REASONS:
            raise UsageError(f"graceful stop reason must be one of {', '.join(HOST_STOP_REASONS)}")
        run = await self.store.get_run(run_id)
        if run.status in TERMINAL_STATUSES:
            raise RunEndedError(f"run {run_id} has ended ({run.status})")
        await self.store.enqueue_input(
            run_id, "graceful_stop", {"reason": reason}, input_id=new_id("stop")
        )

    async def cancel(self, run_id: str, *, reason: str = "cancelled") -> RunResult | None:
        """Cancel a run: durable request, in-process token, and a clean ``Cancelled`` exit."""
        run = await self.store.request_cancel(run_id)
        if run.status in TERMINAL_STATUSES:
            return None
        await subagents.cancel_children(self, run)
        active = self._active.get(run_id)
        if active is not None:
            active.token.cancel(reason)
        if active is not None or self._advanced_elsewhere(run):
            # The worker advancing it (here: the token fired; elsewhere: it polls its queue at
            # every boundary) ends it cleanly; the durable input survives a crash of either.
            with contextlib.suppress(RunEndedError):
                await self.store.enqueue_input(
                    run_id, "cancel", {"reason": reason}, input_id=new_id("cancel")
                )
            return None
        # Nobody advances it (blocked, queued, or its worker died): end it now under a lease.
        return await end_cancelled(self.store, self._leases, self._applier, run, reason)

    async def _end_children(self, run: RunRecord) -> None:
        """``run`` is over: so are its live subagent runs (DESIGN §20)."""
        if subagents.may_spawn(self._directory.known(run)):
            await subagents.end_children(self, run)

    async def _end_if_orphaned(self, run: RunRecord) -> RunRecord | None:
        """End ``run`` cancelled if an ancestor of it is over (a crash between that end and
        this run's left it live); the ancestor, if so."""
        if subagents.parent_of(run) is None or run.status in TERMINAL_STATUSES:
            return None
        over = await subagents.ended_ancestor(self.store, run)
        if over is not None:
            await self.cancel(run.run_id, reason=subagents.ended_reason(over))
        return over

    def _advanced_elsewhere(self, run: RunRecord) -> bool:
        """Whether a live worker other than this runtime holds the run's lease."""
        return run.status in ("running", "queued") and self._leases.held_elsewhere(run)

    # ------------------------------------------------------------------------------ gates
    async def approve(
        self,
        ref: str,
        *,
        arguments: Mapping[str, Any] | None = None,
        by: str | None = None,
    ) -> RunResult:
        """Approve a pending gate once and resume its run until it next ends or blocks.

        Args:
            ref: The gate.
            arguments: Run the call with these arguments instead of the model's (the same
                tool; docs/tools.md). They are checked against the tool's schema first, the
                ``before_capability`` hooks judge the edited call, and the model's result
                says a person edited the call and how. A secret-named value left as the mask
                the gate showed keeps the model's original value.
            by: Who approves (recorded on the gate).

        Raises:
            GateEditError: the tool forbids editing, or the edited arguments do not fit it;
                the gate stays pending.
            GateResolvedError: the gate was already resolved.
        """
        with self._telemetry.span(
            "resolve_gate", {"reverie.gate.ref": ref, "reverie.gate.status": "approved"}
        ):
            return await self._resolve(ref, "approved", None, arguments=arguments, by=by)

    async def deny(self, ref: str, *, reason: str = "denied", by: str | None = None) -> RunResult:
        """Deny a pending gate once; the model is told and the run continues.

        ``by`` (who denies) is recorded on the gate.
        """
        with self._telemetry.span(
            "resolve_gate", {"reverie.gate.ref": ref, "reverie.gate.status": "denied"}
        ):
            return await self._resolve(ref, "denied", reason, by=by)

    async def _resolve(
        self,
        ref: str,
        status: GateDecision,
        reason: str | None,
        *,
        arguments: Mapping[str, Any] | None = None,
        by: str | None = None,
    ) -> RunResult:
        gate = await self.store.get_gate(ref)
        run = await self.store.get_run(gate.run_id)
        if await self._end_if_orphaned(run) is not None:
            # A run that is over runs nothing: its subagent's gate can no longer be approved.
            raise RunEndedError(f"run {run.run_id} has ended: its parent run is over")
        # A subagent's gate: resuming its root run resumes the child inside the parent's call.
        root = await subagents.root_of(self.store, run)
        self._directory.for_run(root)  # unknown agent: typed error before anything changes
        if gate.status != "pending":
            raise GateResolvedError(f"gate {ref} is already {gate.status}")
        if status == "approved":
            # Checked before anything is stored: a refused edit leaves the gate pending.
            resolution = resolution_for(gate, self._gated_tool(run, gate.tool), arguments, by=by)
        else:
            resolution = GateResolution(resolved_by=by, shown_digest=digest(dict(gate.arguments)))
        # One write: the approval and the edit are stored together, so a crash after it runs
        # the edited call (exactly once: the journal), never the model's.
        await self.store.resolve_gate(
            ref, status, reason=reason, now=time.time(), resolution=resolution
        )
        with contextlib.suppress(RunEndedError):
            await self.store.enqueue_input(
                run.run_id, "gate_resolved", {"gate": ref, "status": status}, input_id=f"g:{ref}"
            )
        return await self.resume(root.run_id)

    def _gated_tool(self, run: RunRecord, name: str) -> Any | None:
        """The tool ``name`` of ``run``'s agent as this process knows it, if it does."""
        agent = self._directory.known(run)
        if agent is None:
            return None
        return next((t for t in agent.tools if t.descriptor.name == name), None)

    # ------------------------------------------------------------------------------ resume
    async def resume(self, run_id: str) -> RunResult:
        """Continue a run from its last checkpoint (after a crash, or after a gate)."""
        self._require_open()
        run = await self.store.get_run(run_id)
        if run.status in TERMINAL_STATUSES:
            await self._end_children(run)  # a crash may have left them live
            return await self._applier.result_of(run)
        if await self._end_if_orphaned(run) is not None:
            run = await self.store.get_run(run_id)
            if run.status in TERMINAL_STATUSES:
                return await self._applier.result_of(run)
            # Advanced elsewhere: its worker ends it at its next boundary (RunBusy below).
        if not self.unbound.knows(run) and not self._directory.started_here(run.run_id):
            self._directory.get(run.agent_name)  # the typed error naming the agent
        # A segment of this run still advancing (or still closing) here: let it finish first,
        # then decide from what it left in the store.
        while (active := self._active.get(run_id)) is not None:
            if active.task is None:
                return await asyncio.shield(active.done)
            await asyncio.wait({active.task})
            run = await self.store.get_run(run_id)
            if run.status in TERMINAL_STATUSES:
                return await self._applier.result_of(run)
        blocked = run.status == "blocked" and not run.cancel_requested
        if blocked and await self._waits_for_a_person(run):
            return await self._applier.result_of(run)  # still waiting for a person
        if self._leases.held_elsewhere(run):
            raise RunBusy(f"run {run_id} is leased by a live worker")
        with self._telemetry.span("resume_run", {"reverie.run.id": run_id}):
            handle = await self._dispatch(run, resumed=True)
            return await handle.result()

    async def recover(self) -> list[RunResult]:
        """Resume every run whose worker died (lease expired or owner gone)."""
        self._require_open()
        results: list[RunResult] = []
        now = time.time()
        candidates = await self.store.expired_leases(now)
        # A queued run too: its worker may die after taking the lease, before marking it running.
        active = await self.store.list_runs(statuses=["running", "queued"], limit=10_000)
        seen = {r.run_id for r in candidates}
        candidates += [r for r in active if r.run_id not in seen and owner_gone(r.lease_owner)]
        # A blocked run whose gate was resolved (or that was cancelled) by a caller that died
        # before resuming it would otherwise stay blocked for good.
        blocked = await self.store.list_runs(statuses=["blocked"], limit=10_000)
        for run in blocked:
            if lease_live(run, now):
                continue
            if run.cancel_requested or not await self._waits_for_a_person(run):
                candidates.append(run)
        # A child whose parent is over (a crash between the two ends) ends now, whatever holds
        # it, a pending gate included: a run that is over runs nothing (DESIGN §20).
        orphans: set[str] = set()
        for run in [*candidates, *active, *blocked]:
            if run.run_id in orphans:
                continue
            try:
                if await self._end_if_orphaned(run) is not None:
                    orphans.add(run.run_id)
            except Exception:
                log.exception("recover: run %s could not be ended with its parent", run.run_id)
        for run in candidates:
            if run.run_id in orphans or run.run_id in self._active or not self.unbound.knows(run):
                continue
            if await subagents.driven_by_parent(self.store, run):
                continue  # its parent's resumed call continues it
            try:
                results.append(await self.resume(run.run_id))
            except Exception:
                log.exception("recover: run %s could not be resumed", run.run_id)
        return results

    async def _waits_for_a_person(self, run: RunRecord) -> bool:
        """Whether a blocked run's gate is still pending (not resolved since it blocked)."""
        ref = (run.exit or {}).get("gate_ref")
        if ref is None:
            return False
        try:
            return (await self.store.get_gate(str(ref))).status == "pending"
        except NotFoundError:
            return False

    def attach(self, run_id: str) -> RunHandle | None:
        """A handle on the segment of ``run_id`` this runtime is advancing now, else ``None``.

        Its :meth:`RunHandle.events` replays the segment's events so far, then follows it live:
        how a caller watches a segment that :meth:`approve`, :meth:`deny` or :meth:`resume`
        started (they return only its result).
        """
        active = self._active.get(run_id)
        if active is None:
            return None
        return RunHandle(self, run_id, active.thread_id, active.bus, active.done)

    async def get_result(self, run_id: str) -> RunResult:
        """The stored result of a run that ended or blocked."""
        return await self._applier.result_of(await self.store.get_run(run_id))

    def _require_open(self) -> None:
        if not self._opened:
            raise UsageError("the runtime is not open: use `async with Runtime.open(...)`")


class _Opener:
    """What :meth:`Runtime.open` returns: an async context manager, or awaitable."""

    def __init__(self, runtime: Runtime) -> None:
        self._runtime = runtime

    async def __aenter__(self) -> Runtime:
        return await self._runtime.__aenter__()

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self._runtime.__aexit__(exc_type, exc, tb)

    def __await__(self) -> Generator[Any, None, Runtime]:
        return self._runtime.__aenter__().__await__()


async def _one_turn(
    agent: Agent,
    message: UserContent,
    scope: Scope | None,
    thread_id: str | None,
    store: str | None,
) -> RunResult:
    """:meth:`Agent.run`: one turn on ``Runtime.open(store)`` in ``scope`` (default
    :meth:`Scope.local`), the runtime closed after it."""
    async with Runtime.open(store, agents=[agent]) as rt:
        return await rt.run(
            agent, message, scope=Scope.local() if scope is None else scope, thread_id=thread_id
        )


bind_one_turn(_one_turn)

__all__ = ["THREAD_POLICIES", "Runtime", "ThreadPolicy"]
