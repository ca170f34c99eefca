"""``UnboundTurnService``: runs no person waits on (docs/unbound.md).

An unbound turn has no conversation and no reply target: a system prompt, opening messages,
the tools it may use, an :class:`~reverie.runtime.structured.OutputContract` and its limits.
It runs through the ordinary start path as an ephemeral agent with profile ``unbound`` (or
``unbound_structured`` for a structured contract), ``has_actor=False``:

* its family aborts gates as ``Failed(gate_not_supported)``: nobody can approve;
* its iteration cap is the family's (high); the declared ``Limits`` narrow it;
* it never fires ``after_turn`` (the applier fires that for interactive turns only);
* the idempotency key names the run: submitting it again returns the same run id and never
  starts a second run (nor a second segment of a finished one).

Every unbound run keeps an :class:`~reverie.runtime.unbound_spec.UnboundSpec` with its row
(prompt, contract, limits, model spec, tools by name and their first-party toolset, finisher),
and every segment of the run is built from it (:meth:`UnboundTurnService.agent_for`). So
``Runtime.recover()``/``resume()`` in any process continue it — with its own limits, never the
next caller's — or end it ``Failed(not_resumable)`` when what it needs only existed in the
process that submitted it (a ``Model`` instance, tool objects). A run's finisher (e.g. the
record of a curation pass) runs wherever the run ends, just before its terminal status is
written.

Curation passes (docs/memory.md) are built on this service.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from reverie.capabilities.tool import tools_by_name
from reverie.core.canonical import digest
from reverie.core.exits import Failed, LoopExit
from reverie.core.ids import new_id
from reverie.core.limits import Limits
from reverie.core.messages import Message
from reverie.core.scope import Scope
from reverie.errors import ConfigError, UsageError
from reverie.loop.finish import STRUCTURED_RESULT_TOOL
from reverie.runtime.agent import Agent
from reverie.runtime.result import RunResult
from reverie.runtime.structured import ContractModel, OutputContract, StructuredResultTool
from reverie.runtime.unbound_spec import META_KEY, UnboundSpec
from reverie.store.base import TERMINAL_STATUSES, RunRecord

if TYPE_CHECKING:
    from reverie.loop.family import LoopFamilyRegistry
    from reverie.models.base import Model
    from reverie.runtime.agents import AgentDirectory
    from reverie.runtime.ports import Runner
    from reverie.runtime.segment import ActiveSegment

log = logging.getLogger("reverie.runtime.unbound")

Toolset = Callable[[RunRecord, Sequence[str]], Awaitable[list[Any]]]
"""Builds a run's tools from their names (first-party: registered by the runtime itself)."""

Finisher = Callable[[RunRecord, LoopExit], Awaitable[None]]
"""Records what an unbound run came to; called before its terminal status is written."""


@dataclass(slots=True)
class _Live:
    """What only the submitting process has: a model instance, tool objects, lender hooks."""

    model: tuple[Model, ...]
    """The model and its fallbacks."""
    tools: list[Any]
    hooks: tuple[Any, ...]


_FAMILY_CAP_PROBE = 1 << 30
"""Asked of a family's budget strategy to learn its own iteration cap."""


class UnboundTurnService:
    """Submit unbound turns and read their results. Reach it as ``rt.unbound``.

    Example::

        contract = OutputContract.json_schema("report", {"type": "object", ...})
        run_id = await rt.unbound.submit(
            system_prompt="Tidy the memory document.", messages=["Start."], tools=[...],
            output_contract=contract, limits=Limits(max_model_calls=10),
            idempotency_key="pass-42", scope=scope, model="openai:gpt-4.1-mini",
        )
        result = await rt.unbound.result(run_id)     # result.output: the validated JSON
    """

    def __init__(
        self,
        runtime: Runner,
        *,
        agents: AgentDirectory,
        families: LoopFamilyRegistry,
        active: Callable[[str], ActiveSegment | None],
    ) -> None:
        self._rt = runtime
        self._agents = agents
        self._families = families
        self._active = active
        """The segment of a run this runtime advances now, if any."""
        self._models: dict[str, Model] = {}
        self._submitting = asyncio.Lock()
        """Keyed submissions one at a time in this process, so a repeat joins the first."""
        self._toolsets: dict[str, Toolset] = {}
        self._finishers: dict[str, Finisher] = {}
        self._live: dict[str, _Live] = {}

    def register_toolset(self, name: str, build: Toolset) -> None:
        """Register a first-party toolset: runs submitted with ``toolset=name`` get their
        tools (by name) from ``build``, in whichever process advances them."""
        self._toolsets[name] = build

    def register_finisher(self, name: str, finish: Finisher) -> None:
        """Register a first-party finisher, called when a run submitted with
        ``finisher=name`` ends (before its terminal status is written)."""
        self._finishers[name] = finish

    async def submit(
        self,
        *,
        system_prompt: str,
        messages: Sequence[Message | str] | str = (),
        tools: Sequence[Any] = (),
        output_contract: OutputContract | None = None,
        limits: Limits | None = None,
        idempotency_key: str | None = None,
        scope: Scope,
        model: str | Model | None = None,
        agent: Agent | None = None,
        meta: Mapping[str, Any] | None = None,
        thread_id: str | None = None,
        toolset: str | None = None,
        finisher: str | None = None,
    ) -> str:
        """Start an unbound turn and return its run id at once.

        Args:
            system_prompt: The run's instructions (the system message of every request).
            messages: Opening messages in order; a ``str`` is a user message. No system role:
                that is ``system_prompt``.
            tools: Capabilities the run may use (``@tool`` functions, MCP tools, …). A
                structured contract adds ``structured_result``.
            output_contract: What the run must produce (default: an assistant message).
            limits: Hard budgets. They narrow the family's high iteration cap; ``None`` keeps
                the cap and sets no other budget.
            idempotency_key: Names the run. The same key for the same owner (tenant and user)
                returns the same run id and never starts a second run; another owner's same key
                names that owner's own run.
            scope: Who the run acts for, set by the host.
            model: The model (spec or instance). Exactly one of ``model`` and ``agent``.
            agent: Use this agent's model and its hooks (its policies travel with it), not its
                tools or instructions.
            meta: Stored on the run record (``RunRecord.meta``) as it is.
            thread_id: Continue this thread of ``scope`` (its transcript comes before
                ``messages``); omitted: a new thread.
            toolset: A first-party toolset (:meth:`register_toolset`): ``tools`` are then
                names it builds, in any process, so the run can be resumed anywhere.
            finisher: A first-party finisher (:meth:`register_finisher`) to call when it ends.

        The run is resumable in another process when its model is a spec string (or the
        lending agent's is) and its tools come from a toolset (or it has none).

        Raises:
            UsageError: neither or both of ``model``/``agent``; a system-role message; a tool
                named ``structured_result`` with a structured contract; duplicate tool names;
                an unknown toolset or finisher.
            NotFoundError: ``thread_id`` is not a thread of ``scope``.
        """
        contract = output_contract or OutputContract.assistant_message()
        if (model is None) == (agent is None):
            raise UsageError("submit needs exactly one of model= or agent=")
        if finisher is not None and finisher not in self._finishers:
            raise UsageError(f"unknown unbound finisher {finisher!r}")
        opening = _opening(messages)
        rt = self._rt
        if toolset is not None:
            if toolset not in self._toolsets:
                raise UsageError(f"unknown toolset {toolset!r}")
            if not all(isinstance(t, str) for t in tools):
                raise UsageError("with toolset=..., tools are the names of the toolset's tools")
            names = tuple(str(t) for t in tools)
            capabilities: list[Any] = []
        else:
            capabilities = list(tools)
            names = tuple(t.descriptor.name for t in capabilities)
        if contract.structured and STRUCTURED_RESULT_TOOL in names:
            raise UsageError(f"{STRUCTURED_RESULT_TOOL!r} is reserved for the output contract")
        tools_by_name(capabilities)  # invalid or duplicate names: an error now, not mid-run
        if len(set(names)) != len(names):
            raise UsageError(f"duplicate tool names in {list(names)}")
        profile = contract.profile
        chosen = agent.model if agent is not None else model
        resolved = self._model(chosen)
        cap = self._families.get(profile).budget.iteration_limit(_FAMILY_CAP_PROBE)
        spec = UnboundSpec(
            system_prompt=system_prompt,
            contract=contract,
            limits=Limits(max_iterations=cap).narrow(limits),
            # A structured run's answer is its structured_result: a text summary cannot stand in.
            on_limit="fail" if contract.structured else "finalize",
            model=chosen if isinstance(chosen, str) else None,
            tools=names,
            toolset=toolset,
            lender=agent.name if agent is not None else None,
            lender_hooks=bool(agent is not None and agent.hooks),
            finisher=finisher,
        )
        # Named by the key, so a repeated submit (even in another process) finds the run.
        name = _ephemeral_name(scope, idempotency_key)
        live = _Live(
            model=resolved,
            tools=capabilities,
            hooks=tuple(agent.hooks) if agent is not None else (),
        )
        # The served agent's name, for listings: the run's own agent is the ephemeral one.
        stored = dict(meta or {})
        if agent is not None:
            stored[SERVED_AGENT_META] = agent.name
        self._live.setdefault(name, live)
        ephemeral = self._build(name, spec, resolved, capabilities, live.hooks, profile)
        stored[META_KEY] = spec.to_meta()
        try:
            if idempotency_key is None:
                handle = await rt.start(
                    ephemeral,
                    opening,
                    scope=scope,
                    thread_id=thread_id,
                    profile=profile,
                    has_actor=False,
                    meta=stored,
                )
            else:
                async with self._submitting:
                    handle = await rt.start(
                        ephemeral,
                        opening,
                        scope=scope,
                        thread_id=thread_id,
                        profile=profile,
                        has_actor=False,
                        idempotency_key=idempotency_key,
                        meta=stored,
                    )
        except BaseException:
            if self._live.get(name) is live and name not in self._agents:
                del self._live[name]
            raise
        self._retire_when_done(handle.run_id, ephemeral)
        return handle.run_id

    # ------------------------------------------------------------------------------ resuming
    def knows(self, run: RunRecord) -> bool:
        """Whether this process can advance ``run``: its agent is registered, or it is an
        unbound run that keeps its spec (which any process can rebuild, or fail cleanly)."""
        return run.agent_name in self._agents or UnboundSpec.from_meta(run.meta) is not None

    async def agent_for(self, run: RunRecord) -> Agent | Failed:
        """The agent that advances a segment of ``run``.

        For an unbound run with a spec, the agent is rebuilt from it — its own prompt, limits,
        contract and tools — with this process's model instance and tool objects when it is
        the one that submitted it. What cannot be rebuilt here is a ``Failed(not_resumable)``
        exit, which the caller applies to end the run. Any other run: its registered agent.

        Raises:
            UnknownAgentError: Not an unbound run, and its agent is not registered.
        """
        spec = UnboundSpec.from_meta(run.meta)
        if spec is None:
            return self._agents.get(run.agent_name)
        live = self._live.get(run.agent_name)
        lender = self._agents.named(spec.lender) if spec.lender is not None else None
        if live is not None:
            model: tuple[Model, ...] = live.model
            hooks = live.hooks
        else:
            if spec.lender_hooks and lender is None:
                return _not_resumable(
                    f"the agent {spec.lender!r} that lent it its model and hooks is not "
                    "registered in this process; its policies must travel with the run"
                )
            hooks = tuple(lender.hooks) if lender is not None else ()
            spec_model = spec.model
            if spec_model is None and lender is not None and isinstance(lender.model, str):
                spec_model = lender.model
            if spec_model is None:
                if lender is None:
                    return _not_resumable(
                        "its model was a Model instance of the process that submitted it "
                        "(only a model spec string can be resumed elsewhere)"
                    )
                model = self._model(lender.model)
            else:
                try:
                    model = self._model(spec_model)
                except ConfigError:
                    return _not_resumable(f"its model spec {spec_model!r} cannot be resolved")
        if spec.toolset is not None:
            build = self._toolsets.get(spec.toolset)
            if build is None:
                return _not_resumable(
                    f"its toolset {spec.toolset!r} is not available in this process"
                )
            tools = await build(run, spec.tools)
        elif live is not None:
            tools = list(live.tools)
        elif spec.tools:
            return _not_resumable(
                "its tools were objects of the process that submitted it (submit them through "
                "a first-party toolset to make the run resumable anywhere)"
            )
        else:
            tools = []
        return self._build(run.agent_name, spec, model, tools, hooks, run.family_id)

    async def before_terminal(self, run: RunRecord, exit_: LoopExit) -> None:
        """Run the finisher of an unbound run about to end (never raises for its sake)."""
        spec = UnboundSpec.from_meta(run.meta)
        if spec is None or spec.finisher is None:
            return
        finish = self._finishers.get(spec.finisher)
        if finish is None:
            log.debug("unbound run %s: no finisher %r here", run.run_id, spec.finisher)
            return
        try:
            await finish(run, exit_)
        except Exception as exc:
            log.debug(
                "unbound run %s: finisher %r failed (%s)",
                run.run_id,
                spec.finisher,
                type(exc).__name__,
            )

    def _build(
        self,
        name: str,
        spec: UnboundSpec,
        model: tuple[Model, ...],
        tools: Sequence[Any],
        hooks: Sequence[Any],
        family: str,
    ) -> Agent:
        contract = spec.contract
        capabilities = list(tools)
        if contract.structured:
            capabilities.append(StructuredResultTool(contract))
            model = tuple(ContractModel(m, contract) for m in model)
        return Agent(
            name=name,
            model=model[0] if len(model) == 1 else model,
            instructions=spec.system_prompt,
            tools=capabilities,
            limits=spec.limits,
            on_limit=spec.on_limit,
            family=family,
            hooks=tuple(hooks),
        )

    async def result(self, run_id: str) -> RunResult:
        """Wait for an unbound run to end and return its result.

        A run left unfinished by a dead worker is continued here, if this process knows its
        ephemeral agent (submit the same key again to re-create it).
        """
        rt = self._rt
        active = self._active(run_id)
        if active is not None:
            return await asyncio.shield(active.done)
        run = await rt.store.get_run(run_id)
        if run.status in TERMINAL_STATUSES or run.status == "blocked":
            return await rt.get_result(run_id)
        return await rt.resume(run_id)

    async def run(
        self,
        *,
        system_prompt: str,
        messages: Sequence[Message | str] | str = (),
        tools: Sequence[Any] = (),
        output_contract: OutputContract | None = None,
        limits: Limits | None = None,
        idempotency_key: str | None = None,
        scope: Scope,
        model: str | Model | None = None,
        agent: Agent | None = None,
        meta: Mapping[str, Any] | None = None,
        thread_id: str | None = None,
        toolset: str | None = None,
        finisher: str | None = None,
    ) -> RunResult:
        """:meth:`submit`, then wait for :meth:`result`."""
        run_id = await self.submit(
            system_prompt=system_prompt,
            messages=messages,
            tools=tools,
            output_contract=output_contract,
            limits=limits,
            idempotency_key=idempotency_key,
            scope=scope,
            model=model,
            agent=agent,
            meta=meta,
            thread_id=thread_id,
            toolset=toolset,
            finisher=finisher,
        )
        return await self.result(run_id)

    # ------------------------------------------------------------------------------ helpers
    def _model(self, spec: str | Model | Sequence[str | Model] | None) -> tuple[Model, ...]:
        """The model (or a lending agent's models: the primary and its fallbacks), resolved."""
        assert spec is not None
        if isinstance(spec, list | tuple):
            return tuple(m for entry in spec for m in self._model(entry))
        if not isinstance(spec, str):
            return (spec,)  # type: ignore[return-value]
        cached = self._models.get(spec)
        if cached is None:
            from reverie.models.registry import resolve_model

            cached = self._models[spec] = resolve_model(spec)
        return (cached,)

    def _retire_when_done(self, run_id: str, agent: Agent) -> None:
        """Forget the ephemeral agent and what only this process had, once its run segment
        ends (bounded registry)."""
        active = self._active(run_id)

        def forget() -> None:
            self._agents.unregister(agent)
            if agent.name not in self._agents:
                self._live.pop(agent.name, None)

        if active is None:
            forget()
            return

        def retire(done: asyncio.Future[RunResult]) -> None:
            forget()
            if not done.cancelled():
                done.exception()  # read by result(); never "exception was never retrieved"

        active.done.add_done_callback(retire)


SERVED_AGENT_META = "served_agent"
"""``RunRecord.meta`` key naming the agent an unbound turn ran on behalf of (``agent=``)."""


def _ephemeral_name(scope: Scope, idempotency_key: str | None) -> str:
    """The ephemeral agent's name: fixed by the owner and key, so a repeated submit (even in
    another process) continues the run; per owner, so two owners' runs never share one."""
    if idempotency_key is None:
        return f"unbound:{new_id('unb')}"
    return f"unbound:{digest([scope.tenant, scope.user, idempotency_key])[:32]}"


def _not_resumable(why: str) -> Failed:
    return Failed(kind="not_resumable", safe_summary=f"the unbound run cannot be resumed: {why}")


def _opening(messages: Sequence[Message | str] | str) -> list[Message]:
    items = [messages] if isinstance(messages, str) else list(messages)
    out: list[Message] = []
    for item in items:
        message = Message(role="user", content=item) if isinstance(item, str) else item
        if not isinstance(message, Message):
            raise UsageError("messages must be reverie Message values or strings")
        if message.role == "system":
            raise UsageError("unbound messages cannot have the system role: use system_prompt")
        out.append(message)
    return out


__all__ = ["SERVED_AGENT_META", "UnboundTurnService"]
