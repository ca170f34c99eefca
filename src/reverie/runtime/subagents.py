"""Subagents: an agent offered to another agent as a tool (docs/subagents.md).

``Agent(tools=[helper.as_tool(name=..., description=...)])`` gives the model a tool that takes
one ``input`` string. Each call starts a **child run** of ``helper``: a run of its own, on a
thread of its own (its own transcript), owned by the parent's scope and linked to the parent in
its :attr:`~reverie.store.base.RunRecord.meta` (``parent_run_id``, ``parent_call``). The
runtime binds the tool to the calling run when it builds the run's tools (:func:`bind`); a
:class:`SubagentTool` outside a runtime cannot run.

What the child inherits from its parent:

* **Budgets.** The child's limits are the tighter of its agent's own and what the parent has
  left (:func:`child_limits`: model calls, tool calls, tokens, spend, wall clock), stored with
  the child so every segment of it, in any process, runs under the same ones. What the child
  spends is charged to the parent's ledger when the call settles (the outcome carries it:
  :attr:`CallCompleted.usage`), so the parent's next boundary sees it.
* **Cancellation.** Cancelling the parent cancels its active children
  (:func:`cancel_children`), and a parent cancelled while it waits on a child cancels that
  child on its way out.
* **Gates.** A child that blocks makes the call ``CallGated`` with the child's gate
  (``CallGated.ref``): the parent blocks on that gate instead of opening one, so the parent's
  :attr:`RunResult.gate` names it. Approving (or denying) it resumes the *root* run
  (:func:`root_of`), whose replayed call resumes the child; the parent then continues with the
  child's result.
* **Durability.** The child is named by an idempotency key made of the parent run and the call's
  stable key, and the descriptor is ``idempotent``: a parent resumed after a crash (with the
  call's journal row still ``started``) invokes the call again, which finds the same child and
  waits for it or resumes it — never a second child, and the child's own journal keeps its tools'
  side effects to one run. ``recover()`` leaves children whose parent is still active to that
  parent (:func:`driven_by_parent`).
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import json
import logging
from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

from reverie.capabilities.context import ToolContext
from reverie.capabilities.output import DEFAULT_MAX_OUTPUT_BYTES, cap_output
from reverie.capabilities.tool import validate_tool_name
from reverie.core.canonical import digest
from reverie.core.capability import (
    CallCompleted,
    CallFailed,
    CallGated,
    CallOutcome,
    CapabilityDescriptor,
    outcome_from_dict,
)
from reverie.core.exits import Cancelled, Failed, Usage
from reverie.core.limits import Limits
from reverie.core.vocabulary import as_gate_kind
from reverie.errors import NotFoundError, UsageError
from reverie.loop.state import BudgetLedger, state_from_dict
from reverie.store.base import (
    ACTIVE_STATUSES,
    TERMINAL_STATUSES,
    JournalWrite,
    RunRecord,
    Store,
)

if TYPE_CHECKING:
    from reverie.runtime.agent import Agent
    from reverie.runtime.ports import Runner
    from reverie.runtime.result import RunResult

Unpriced = Callable[["Agent"], Sequence[str]]
"""The models of an agent with no price (what a spend limit cannot measure)."""
Staged = Callable[[Sequence[str]], Mapping[str, JournalWrite]]
"""The calling segment's journal records not written yet (they wait for its next step commit),
by call key: a wave's earlier subagent calls are there until the wave settles."""


def _nothing_staged(keys: Sequence[str]) -> Mapping[str, JournalWrite]:
    return {}


log = logging.getLogger("reverie.runtime.subagents")

PARENT_RUN_KEY = "parent_run_id"
"""``RunRecord.meta`` key of a child run: the run whose call started it."""
PARENT_CALL_KEY = "parent_call"
"""``RunRecord.meta`` key of a child run: the stable key of the parent's call."""
LIMITS_KEY = "subagent_limits"
"""``RunRecord.meta`` key of a child run: its limits, fixed when it started."""
DEPTH_KEY = "subagent_depth"
"""``RunRecord.meta`` key of a child run: 1 for a child, 2 for a grandchild, …"""
MAX_DEPTH = 8
"""Deepest nesting of subagent runs: an agent that delegates to itself cannot recurse forever
(every level holds a concurrency slot while it waits on the next)."""
_MAX_LINKS = 64
"""Bound on walking parent links (a cycle cannot happen; a corrupt row must not hang us)."""
_LIST_LIMIT = 10_000

INPUT_SCHEMA: Mapping[str, Any] = {
    "type": "object",
    "properties": {
        "input": {
            "type": "string",
            "description": "The task or question for the agent, with everything it needs.",
        }
    },
    "required": ["input"],
    "additionalProperties": False,
}
"""The arguments of every subagent tool: one ``input`` string, the child's user message."""


class SubagentTool:
    """An agent as a capability of another agent. Build it with :meth:`Agent.as_tool`.

    It is pure description: the runtime binds it to the calling run (:func:`bind`), and a call
    starts a durable child run of :attr:`agent` with the call's ``input`` as its message.
    """

    def __init__(
        self,
        agent: Agent,
        *,
        name: str | None = None,
        description: str | None = None,
        max_output_bytes: int = DEFAULT_MAX_OUTPUT_BYTES,
    ) -> None:
        """See :meth:`Agent.as_tool`.

        Raises:
            UsageError: the name is not a valid tool name (an agent's name may not be one:
                pass ``name=``), or ``max_output_bytes`` is not positive.
        """
        tool_name = validate_tool_name(name if name is not None else agent.name)
        if max_output_bytes <= 0:
            raise UsageError(f"subagent tool {tool_name!r}: max_output_bytes must be positive")
        self._agent = agent
        self.max_output_bytes = max_output_bytes
        """Cap on the child's answer as the parent's model sees it, in UTF-8 bytes."""
        self._descriptor = CapabilityDescriptor(
            name=tool_name,
            description=description
            if description is not None
            else f"Hand a task to the {agent.name!r} agent and get its answer.",
            parameters=INPUT_SCHEMA,
            # Exclusive: a wave runs its subagent calls one at a time, so each child's budget
            # is what the earlier ones left.
            effects=frozenset({"spawn"}),
            # A second invoke of the same call joins the child run the first one started (the
            # child is the durable record), so a crash never leaves it "outcome unknown".
            idempotent=True,
            timeout_s=None,  # the child's own wall clock limit bounds it
        )

    @property
    def agent(self) -> Agent:
        """The agent each call runs."""
        return self._agent

    @property
    def descriptor(self) -> CapabilityDescriptor:
        """Name, description, the ``input`` schema; effects ``{"spawn"}``."""
        return self._descriptor

    def __repr__(self) -> str:
        return f"SubagentTool(name={self._descriptor.name!r}, agent={self._agent.name!r})"

    async def invoke(self, arguments: Mapping[str, Any], ctx: ToolContext) -> CallOutcome:
        """Unbound: a subagent tool runs only as a tool of a run of a :class:`Runtime`."""
        return CallFailed(
            error_kind="internal",
            message=f"the subagent tool {self._descriptor.name!r} runs only inside a Runtime",
        )


class _BoundSubagent:
    """A :class:`SubagentTool` bound to one run of a runtime: its calls start child runs."""

    def __init__(
        self,
        runtime: Runner,
        unpriced: Unpriced,
        tool: SubagentTool,
        parent: RunRecord,
        parent_limits: Limits,
        staged: Staged,
    ) -> None:
        self._rt = runtime
        self._unpriced = unpriced
        self._tool = tool
        self._parent = parent
        self._parent_limits = parent_limits
        self._staged = staged

    @property
    def descriptor(self) -> CapabilityDescriptor:
        return self._tool.descriptor

    async def invoke(self, arguments: Mapping[str, Any], ctx: ToolContext) -> CallOutcome:
        name = self._tool.descriptor.name
        text = arguments.get("input")
        extra = sorted(set(arguments) - {"input"})
        if not isinstance(text, str) or not text.strip() or extra:
            return CallFailed(
                error_kind="input_invalid",
                message=f"tool {name!r} takes one argument, 'input': a non-empty string"
                + (f" (unexpected: {', '.join(extra)})" if extra else ""),
            )
        return await _run_child(
            self._rt,
            self._unpriced,
            self._tool,
            self._parent,
            self._parent_limits,
            text,
            ctx.call_id,
            self._staged,
        )


def bind(
    runtime: Runner,
    agent: Agent,
    run: RunRecord,
    tools: Sequence[Any],
    *,
    unpriced: Unpriced,
    staged: Staged = _nothing_staged,
) -> list[Any]:
    """``tools`` with each :class:`SubagentTool` bound to ``run`` (the others as they are).

    ``unpriced(agent)`` names the agent's models without a price (a child under a spend limit
    is refused when there is one). ``staged(keys)`` gives the calling segment's journal
    records not written yet (a subagent call's outcome waits for the next step commit, like
    any repeatable call's), so a wave's later calls see what its earlier children spent.
    """
    if not any(isinstance(t, SubagentTool) for t in tools):
        return list(tools)
    return [
        _BoundSubagent(runtime, unpriced, t, run, agent.limits, staged)
        if isinstance(t, SubagentTool)
        else t
        for t in tools
    ]


# ---------------------------------------------------------------------------------- the call
async def _run_child(
    rt: Runner,
    unpriced_of: Unpriced,
    tool: SubagentTool,
    parent: RunRecord,
    parent_limits: Limits,
    text: str,
    call: str,
    staged: Staged,
) -> CallOutcome:
    """Start (or find, or resume) the call's child run and wait for what it comes to."""
    agent = tool.agent
    name = tool.descriptor.name
    depth = _depth(parent) + 1
    if depth > MAX_DEPTH:
        return CallFailed(
            error_kind="permanent",
            message=f"the {name} agent was not started: subagent runs nest at most "
            f"{MAX_DEPTH} levels deep; answer with what you have",
        )
    limits = await child_limits(rt.store, parent, parent_limits, agent.limits, call, staged)
    if limits.max_usd is not None:
        unpriced = unpriced_of(agent)
        if unpriced:
            model_name = unpriced[0]
            # The parent's spend limit reaches the child: unmeasurable spend is refused.
            return CallFailed(
                error_kind="permanent",
                message=f"the {name} agent cannot run under a spend limit: no price is "
                f"configured for its model {model_name!r}",
            )
    thread_id = f"thr_sub_{digest([parent.run_id, call])[:32]}"
    await rt.store.create_thread(thread_id, parent.scope)  # an existing thread stays as it is
    child_id: str | None = None
    try:
        handle = await rt.start(
            agent,
            text,
            scope=parent.scope,
            thread_id=thread_id,
            has_actor=False,
            idempotency_key=f"subagent:{parent.run_id}:{call}",
            thread_policy="reject",
            meta={
                PARENT_RUN_KEY: parent.run_id,
                PARENT_CALL_KEY: call,
                LIMITS_KEY: dataclasses.asdict(limits),
                DEPTH_KEY: depth,
            },
        )
        child_id = handle.run_id
        result = await handle.result()
        if result.status == "blocked":
            # An existing child blocked earlier: continue it if its gate was resolved since
            # (a pending gate returns the same blocked result).
            result = await rt.resume(child_id)
    except asyncio.CancelledError:
        await asyncio.shield(_follow_cancel(rt, parent.run_id, thread_id, child_id))
        raise
    return outcome_of(name, result, max_bytes=tool.max_output_bytes)


async def _follow_cancel(rt: Runner, parent_id: str, thread_id: str, child_id: str | None) -> None:
    """The call was cancelled: if its run is being cancelled (not shut down), so is the child."""
    try:
        if not (await rt.store.get_run(parent_id)).cancel_requested:
            return  # a shutdown: the child stays durable and a resume continues it
        if child_id is None:
            active = await rt.store.active_run(thread_id)
            child_id = None if active is None else active.run_id
        if child_id is not None:
            await rt.cancel(child_id, reason="its parent run was cancelled")
    except Exception:  # the parent's cancellation goes on; cancel_children covers the child
        log.exception("run %s: could not cancel its subagent run", parent_id)


def outcome_of(name: str, result: RunResult, *, max_bytes: int) -> CallOutcome:
    """The call's outcome for what the child run came to (its usage rides along)."""
    usage = result.usage
    if result.status == "completed":
        return CallCompleted(output=cap_output(result.text or "", max_bytes), usage=usage)
    if result.status == "blocked" and result.gate is not None:
        gate = result.gate
        return CallGated(
            gate_kind=as_gate_kind(gate.kind),
            reason=f"the {name} agent waits for {gate.kind} of {gate.tool}",
            ref=gate.ref,
        )
    exit_ = result.exit
    if isinstance(exit_, Failed):
        why = f"failed ({exit_.kind}): {exit_.safe_summary}"
    elif isinstance(exit_, Cancelled):
        why = f"was cancelled ({exit_.reason})"
    else:
        why = f"ended {result.status}"
    return CallFailed(error_kind="permanent", message=f"the {name} agent {why}", usage=usage)


# ---------------------------------------------------------------------------------- budgets
async def child_limits(
    store: Store,
    parent: RunRecord,
    parent_limits: Limits,
    own: Limits,
    call: str,
    staged: Staged = _nothing_staged,
) -> Limits:
    """The tighter of ``own`` and what the parent has left when its call ``call`` runs.

    What the parent used: its last checkpoint's ledger (the wave's ``BeforeSideEffect``, which
    counts the call itself among its tool calls) plus what earlier subagent calls of the same
    wave spent (a wave runs them one at a time): their outcomes are journal records, staged by
    the running segment (``staged``) until the wave's step commit, or in the store when an
    earlier segment wrote them (a wave resumed after a gate). Iterations, fan-out, resumes and
    the response cap stay the child's own.
    """
    cp = await store.load_checkpoint(parent.run_id)
    budget = BudgetLedger()
    if cp is not None:
        with contextlib.suppress(ValueError, KeyError, TypeError):
            budget = state_from_dict(json.loads(cp.payload)["state"]).budget
    used = budget.usage()
    ref, _, index = call.rpartition("#")
    if ref and index.isdigit() and int(index) > 0:
        earlier = [f"{ref}#{i}" for i in range(int(index))]
        outcomes = {k: w.outcome for k, w in staged(earlier).items()}
        missing = [k for k in earlier if k not in outcomes]
        if missing:  # written by an earlier segment of the run
            recorded = await store.journal_get(parent.run_id, missing)
            outcomes.update((k, e.outcome) for k, e in recorded.items())
        for outcome in outcomes.values():
            if outcome is None:
                continue
            spent = getattr(outcome_from_dict(outcome), "usage", None)
            if isinstance(spent, Usage):
                used = _plus(used, spent)
    p = parent_limits

    def left(limit: int | None, spent: int) -> int | None:
        return None if limit is None else max(0, limit - spent)

    remaining = dataclasses.replace(
        own,
        max_model_calls=left(p.max_model_calls, used.model_calls),
        max_capability_calls=left(p.max_capability_calls, used.capability_calls),
        max_tokens=left(p.max_tokens, used.input_tokens + used.output_tokens),
        max_usd=None if p.max_usd is None else max(0.0, p.max_usd - used.usd),
        wall_clock_s=None if p.wall_clock_s is None else max(0.0, p.wall_clock_s - budget.active_s),
        finalizer_grace_s=p.finalizer_grace_s,
    )
    return own.narrow(remaining)


def _plus(a: Usage, b: Usage) -> Usage:
    return Usage(
        model_calls=a.model_calls + b.model_calls,
        input_tokens=a.input_tokens + b.input_tokens,
        output_tokens=a.output_tokens + b.output_tokens,
        capability_calls=a.capability_calls + b.capability_calls,
        usd=a.usd + b.usd,
    )


def with_run_limits(agent: Agent, run: RunRecord) -> Agent:
    """``agent`` with the limits a child run was started under (never wider than its own)."""
    raw = run.meta.get(LIMITS_KEY)
    if not isinstance(raw, Mapping):
        return agent
    names = {f.name for f in dataclasses.fields(Limits)}
    try:
        stored = Limits(**{k: v for k, v in raw.items() if k in names})
    except (TypeError, UsageError):
        log.warning("run %s: unreadable subagent limits; using the agent's own", run.run_id)
        return agent
    return dataclasses.replace(agent, limits=agent.limits.narrow(stored))


# ---------------------------------------------------------------------------------- links
def _depth(run: RunRecord) -> int:
    value = run.meta.get(DEPTH_KEY, 0)
    return value if isinstance(value, int) and value >= 0 else 0


def parent_of(run: RunRecord) -> str | None:
    """The id of the run whose call started ``run``, if it is a child run."""
    value = run.meta.get(PARENT_RUN_KEY)
    return value if isinstance(value, str) and value else None


async def root_of(store: Store, run: RunRecord) -> RunRecord:
    """The run a resume of ``run`` goes through: its topmost ancestor still active.

    A child waits inside its parent's call, so resuming the parent (which resumes the child)
    is what makes the parent continue with the child's result.
    """
    current = run
    for _ in range(_MAX_LINKS):
        parent_id = parent_of(current)
        if parent_id is None:
            return current
        try:
            parent = await store.get_run(parent_id)
        except NotFoundError:
            return current
        if parent.status in TERMINAL_STATUSES:
            return current
        current = parent
    return current


async def gate_of_descendant(store: Store, run: RunRecord, gate_run_id: str) -> bool:
    """Whether the run ``gate_run_id`` is a child (grandchild, …) of ``run``."""
    current = gate_run_id
    for _ in range(_MAX_LINKS):
        try:
            parent_id = parent_of(await store.get_run(current))
        except NotFoundError:
            return False
        if parent_id is None:
            return False
        if parent_id == run.run_id:
            return True
        current = parent_id
    return False


async def driven_by_parent(store: Store, run: RunRecord) -> bool:
    """Whether ``recover()`` leaves ``run`` to its parent: a child whose parent is still active
    (the parent's replayed call continues it), or one that ended since it was listed (its
    parent's call finished it)."""
    parent_id = parent_of(run)
    if parent_id is None:
        return False
    try:
        if (await store.get_run(parent_id)).status not in TERMINAL_STATUSES:
            return True
        return (await store.get_run(run.run_id)).status in TERMINAL_STATUSES
    except NotFoundError:
        return False


async def children_of(
    store: Store, run: RunRecord, *, statuses: Sequence[str] | None = None
) -> list[RunRecord]:
    """The child runs of ``run``, oldest first (they share its owner)."""
    runs = await store.list_runs(scope=run.scope, statuses=statuses, limit=_LIST_LIMIT)
    return sorted(
        (r for r in runs if parent_of(r) == run.run_id), key=lambda r: (r.created_at, r.run_id)
    )


async def cancel_children(
    rt: Runner, run: RunRecord, *, reason: str = "its parent run was cancelled"
) -> None:
    """Cancel every active child of ``run`` (and theirs): cancellation follows the parent."""
    for child in await children_of(rt.store, run, statuses=ACTIVE_STATUSES):
        try:
            await rt.cancel(child.run_id, reason=reason)
        except Exception:  # one child that cannot be cancelled must not keep the parent alive
            log.exception("run %s: could not cancel subagent run %s", run.run_id, child.run_id)


# ---------------------------------------------------------------------------------- run over
def may_spawn(agent: Agent | None) -> bool:
    """Whether runs of ``agent`` can have children (unknown here: assume they can)."""
    return agent is None or any(isinstance(t, SubagentTool) for t in agent.tools)


def ended_reason(run: RunRecord) -> str:
    """The cancel reason of a child whose ancestor ``run`` is over: it names that end."""
    kind = (run.exit or {}).get("kind") if run.status == "failed" else None
    detail = f": {kind}" if isinstance(kind, str) and kind else ""
    return f"its parent run ended ({run.status}{detail})"


async def end_children(rt: Runner, run: RunRecord) -> None:
    """``run`` is over: every active child (and theirs, transitively) ends with it, cancelled
    with a reason naming the end; its pending gates close (DESIGN §20: a run that is over
    runs nothing). Best effort per child: the sweeps (``recover``, a child's next segment, an
    approval of its gate) finish what a crash here leaves."""
    await cancel_children(rt, run, reason=ended_reason(run))


async def ended_ancestor(store: Store, run: RunRecord) -> RunRecord | None:
    """The nearest ancestor of ``run`` that is over, if any (then ``run`` must not go on)."""
    current = run
    for _ in range(_MAX_LINKS):
        parent_id = parent_of(current)
        if parent_id is None:
            return None
        try:
            current = await store.get_run(parent_id)
        except NotFoundError:
            return None
        if current.status in TERMINAL_STATUSES:
            return current
    return None


__all__ = [
    "DEPTH_KEY",
    "INPUT_SCHEMA",
    "LIMITS_KEY",
    "MAX_DEPTH",
    "PARENT_CALL_KEY",
    "PARENT_RUN_KEY",
    "SubagentTool",
    "bind",
    "cancel_children",
    "child_limits",
    "children_of",
    "driven_by_parent",
    "end_children",
    "ended_ancestor",
    "ended_reason",
    "gate_of_descendant",
    "may_spawn",
    "outcome_of",
    "parent_of",
    "root_of",
    "with_run_limits",
]
