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

Curation passes (docs/memory.md) are built on this service.
"""

from __future__ import annotations

import asyncio
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

from reverie.capabilities.tool import tools_by_name
from reverie.core.canonical import digest
from reverie.core.ids import new_id
from reverie.core.limits import Limits
from reverie.core.messages import Message
from reverie.core.scope import Scope
from reverie.errors import UsageError
from reverie.loop.finish import STRUCTURED_RESULT_TOOL
from reverie.runtime.agent import Agent
from reverie.runtime.result import RunResult
from reverie.runtime.structured import ContractModel, OutputContract, StructuredResultTool
from reverie.store.base import TERMINAL_STATUSES

if TYPE_CHECKING:
    from reverie.models.base import Model
    from reverie.runtime.runtime import Runtime

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

    def __init__(self, runtime: Runtime) -> None:
        self._rt = runtime
        self._models: dict[str, Model] = {}
        self._submitting = asyncio.Lock()
        """Keyed submissions one at a time in this process, so a repeat joins the first."""

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

        Raises:
            UsageError: neither or both of ``model``/``agent``; a system-role message; a tool
                named ``structured_result`` with a structured contract; duplicate tool names.
            NotFoundError: ``thread_id`` is not a thread of ``scope``.
        """
        contract = output_contract or OutputContract.assistant_message()
        if (model is None) == (agent is None):
            raise UsageError("submit needs exactly one of model= or agent=")
        opening = _opening(messages)
        capabilities = list(tools)
        if contract.structured:
            if any(t.descriptor.name == STRUCTURED_RESULT_TOOL for t in capabilities):
                raise UsageError(f"{STRUCTURED_RESULT_TOOL!r} is reserved for the output contract")
            capabilities.append(StructuredResultTool(contract))
        tools_by_name(capabilities)  # invalid or duplicate names: an error now, not mid-run
        rt = self._rt
        profile = contract.profile
        resolved = self._model(agent.model if agent is not None else model)
        cap = rt._families.get(profile).budget.iteration_limit(_FAMILY_CAP_PROBE)
        ephemeral = Agent(
            name=_ephemeral_name(scope, idempotency_key),
            model=ContractModel(resolved, contract) if contract.structured else resolved,
            instructions=system_prompt,
            tools=capabilities,
            limits=Limits(max_iterations=cap).narrow(limits),
            # A structured run's answer is its structured_result: a text summary cannot stand in.
            on_limit="fail" if contract.structured else "finalize",
            family=profile,
            hooks=tuple(agent.hooks) if agent is not None else (),
        )
        # The served agent's name, for listings: the run's own agent is the ephemeral one.
        stored = dict(meta or {})
        if agent is not None:
            stored[SERVED_AGENT_META] = agent.name
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
        self._retire_when_done(handle.run_id, ephemeral)
        return handle.run_id

    async def result(self, run_id: str) -> RunResult:
        """Wait for an unbound run to end and return its result.

        A run left unfinished by a dead worker is continued here, if this process knows its
        ephemeral agent (submit the same key again to re-create it).
        """
        rt = self._rt
        active = rt._active.get(run_id)
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
        )
        return await self.result(run_id)

    # ------------------------------------------------------------------------------ helpers
    def _model(self, spec: str | Model | None) -> Model:
        assert spec is not None
        if not isinstance(spec, str):
            return spec
        cached = self._models.get(spec)
        if cached is None:
            from reverie.models.registry import resolve_model

            cached = self._models[spec] = resolve_model(spec)
        return cached

    def _retire_when_done(self, run_id: str, agent: Agent) -> None:
        """Forget the ephemeral agent once its run segment ends (bounded registry)."""
        rt = self._rt
        active = rt._active.get(run_id)
        if active is None:
            rt.unregister(agent)
            return

        def retire(done: asyncio.Future[RunResult]) -> None:
            rt.unregister(agent)
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
